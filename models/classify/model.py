"""The router's model: a pretrained encoder with a sequence-classification head
(``ElectraForSequenceClassification``, or ``BertForSequenceClassification`` for a BERT bundle from ``denki import``:
the class follows the bundle's ``config.json``), and the loss of one training step.

Torch is imported inside the functions.
"""
from __future__ import annotations

from pathlib import Path


def build_model(parent_bundle_dir: str | Path | None, cfg, *, seed: int, labels: list[str],
                vocab_size: int | None = None, random_size: str | None = None):
    """A fresh ``…ForSequenceClassification`` for one seed, with one output per label of ``labels``.

    From ``parent_bundle_dir`` (``pretrained`` or ``classifier``; the head is re-initialised when the label count
    differs) — or, with ``random_size``, an ``ElectraForSequenceClassification`` of that size from random init over
    ``vocab_size`` tokens (the control). Seeds torch first: the new head's init depends on ``seed``. ``cfg``
    (:class:`models.classify.config.FinetuneConfig`) is not needed to build the router: the head only needs the
    labels (the argument keeps the shape QA's ``build_model`` has)."""
    from transformers import AutoModelForSequenceClassification, ElectraForSequenceClassification
    from transformers.utils import logging as hf_logging

    from denki.models.bundle.pytorch import load_model
    from denki.models.bundle.presets import electra_config
    from denki.models.training.loop import set_seed

    id2label = dict(enumerate(labels))
    label2id = {lab: i for i, lab in enumerate(labels)}
    set_seed(seed)
    if random_size is not None:
        config = electra_config(random_size, vocab_size, num_labels=len(labels), id2label=id2label,
                                label2id=label2id)
        return ElectraForSequenceClassification(config)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "some weights newly initialised" is expected for the head
    try:
        return load_model(parent_bundle_dir, AutoModelForSequenceClassification, kinds=("pretrained", "classifier"),
                          num_labels=len(labels), id2label=id2label, label2id=label2id, ignore_mismatched_sizes=True)
    finally:
        hf_logging.set_verbosity(verbosity)


def compute_loss(model, batch: dict, *, class_weight=None, bf16: bool = True):
    """One training step's loss: ``batch`` holds the padded inputs (``input_ids``, ``attention_mask``,
    ``token_type_ids``, each ``(b, seq)``) and ``labels`` ``(b,)`` (label indices). Cross-entropy on the fp32
    logits ``(b, K)``, weighted per class by ``class_weight`` ``(K,)`` when given (``--class-weights balanced``);
    the forward pass under bf16 autocast on CUDA when ``bf16``. Returns a scalar tensor."""
    import torch

    from denki.models.classify.predict import autocast

    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with autocast(inputs["input_ids"].device, bf16):
        logits = model(**inputs).logits
    return torch.nn.functional.cross_entropy(logits.float(), batch["labels"], weight=class_weight)
