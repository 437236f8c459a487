"""The QA model: a pretrained encoder with a start/end head on every token (``ElectraForQuestionAnswering``, or
``BertForQuestionAnswering`` for a BERT bundle from ``denki import``), with the optional answerable head on [CLS]
(:mod:`models.qa.heads`), and the loss of one training step.

Torch is imported inside the functions.
"""
from __future__ import annotations

from pathlib import Path


def build_model(parent_bundle_dir: str | Path | None, cfg, *, seed: int, vocab_size: int,
                random_size: str | None = None):
    """A fresh QA model for one seed (``cfg``: :class:`models.qa.finetune.QAFinetuneConfig`; ``cfg.answerable_head``
    picks the class).

    From ``parent_bundle_dir`` (a ``pretrained`` bundle, or a ``qa`` bundle to fine-tune further on new
    question/passage pairs) — or, with ``random_size``, an ELECTRA of that size from random init (the control:
    the same architecture, no pretraining). Seeds torch first: the new head's init depends on ``seed``."""
    from transformers.utils import logging as hf_logging

    from denki.models.bundle.pytorch import load_model
    from denki.models.qa.heads import qa_model_class
    from denki.models.training.loop import set_seed

    set_seed(seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "qa_outputs newly initialised" is expected, not news
    try:
        if random_size is not None:
            from denki.models.bundle.presets import electra_config

            return qa_model_class(None, cfg.answerable_head)(electra_config(random_size, vocab_size))
        return load_model(parent_bundle_dir, qa_model_class(parent_bundle_dir, cfg.answerable_head),
                          kinds=("pretrained", "qa"))
    finally:
        hf_logging.set_verbosity(verbosity)


def compute_loss(model, batch: dict):
    """One training step's loss: ``batch`` holds the padded inputs (``input_ids``, ``attention_mask``,
    ``token_type_ids``, each ``(b, seq)``) and the targets ``start_positions`` / ``end_positions`` ``(b,)`` (0 =
    [CLS]: no answer in this window). The mean of the start and end cross-entropy (transformers' head), plus the
    answerable head's binary cross-entropy when the model has it. Returns a scalar tensor."""
    return model(**batch).loss
