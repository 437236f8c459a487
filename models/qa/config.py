"""The settings of ``denki finetune qa`` (torch-free: the command line reads its defaults from here).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from denki.models.bundle.format import PRETRAINED
from denki.models.qa.task import READER


@dataclass
class QAFinetuneConfig:
    """Hyper-parameters of one QA fine-tuning run (all seeds share them); the ``denki finetune qa`` defaults."""
    epochs: float = 2.0
    lr: float | None = None          # None → default_finetune_lr(hidden): 1e-3 tiny, 3e-4 small, 1e-4 base
    batch_size: int = 32             # windows per step
    max_length: int = 384            # tokens per window, question and [CLS]/[SEP] included
    layer_decay: float = 1.0         # layer-wise LR decay (official ELECTRA: 0.8)
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    seeds: list[int] = field(default_factory=lambda: [0])  # the first also draws the --max-*-examples subsets
    device: str = "auto"
    progress: bool = True
    doc_stride: int = 128            # overlap between the windows of a long context, in tokens
    max_answer_length: int = 30      # longest answer, in tokens
    n_best: int = 20                 # start/end candidates per window
    max_steps: int | None = None     # stop each seed after this many steps
    answerable_head: bool | None = None  # None → default_answerable_head(source manifest)
    position_init: str = "keep"      # keep | tile (models.training.positions)
    threads: int | None = None       # torch CPU threads; None → torch's choice
    target_precision: float | None = None  # abstain ("unsure") below the confidence that keeps this precision on dev
    eval_each_epoch: bool = False    # score dev after every whole epoch too (the curve that chooses --epochs)
    precision: str = "fp32"         # autocast of the training step: fp32 | bf16 | auto (models.training.precision)


def default_answerable_head(source_manifest: dict | None) -> bool:
    """Whether ``denki finetune qa`` trains the answerable head (models/qa/heads.py) when neither
    ``--answerable-head`` nor ``--no-answerable-head`` is given: on for a bundle that denki pretrained with
    replaced-token detection (manifest ``source.objective`` "electra"), off otherwise: where it is unmeasured or did
    not help (MLM, random init, imported checkpoints; docs/qa.md). A ``qa`` bundle (a QA model fine-tuned further on
    new pairs) keeps what it was trained with."""
    m = source_manifest or {}
    if m.get("kind") == READER.name:  # fine-tuning a QA model further (e.g. the shipped QA checkpoint): keep its head or none
        return bool(((m.get("source") or {}).get("settings") or {}).get("answerable_head"))
    return m.get("kind") == PRETRAINED and (m.get("source") or {}).get("objective") == "electra"
