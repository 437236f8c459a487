"""The settings of ``denki finetune classify`` and the defaults that depend on the data (torch-free: the command
line reads its defaults from here): the epoch schedule for a training set's size and the class weights for its
label counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from denki.models.io.errors import DenkiError


#: ``--class-weights auto`` turns the balanced loss on when the most frequent training label has at least this many
#: times the examples of the rarest: it helped on very skewed labels and not on nearly balanced ones (docs/classify.md,
#: "Class weights"); the threshold between the two measured ratios is a choice, not a measurement.
AUTO_BALANCE_RATIO = 10.0


#: A training set too small for 10 epochs to give the updates the defaults were measured with (10 epochs of the
#: experiment's 2,000 examples at batch 32 = 630 updates) gets more epochs, up to :data:`AUTO_MAX_EPOCHS`, and a
#: patience scaled with them (docs/classify.md, "Learning rate and epochs").
AUTO_MIN_UPDATES = 630
AUTO_MAX_EPOCHS = 40


def default_schedule(n_train: int, batch_size: int) -> tuple[int, int]:
    """``(epochs, patience)`` when ``--epochs`` / ``--patience`` are not given: 10 / 3 from about 2,000 examples
    (batch 32) up, more epochs below so that a run makes ≥ :data:`AUTO_MIN_UPDATES` updates (at most
    :data:`AUTO_MAX_EPOCHS`), and a patience of 30 % of the epochs (≥ 3)."""
    steps_per_epoch = max(1, math.ceil(n_train / batch_size))
    epochs = min(AUTO_MAX_EPOCHS, max(10, math.ceil(AUTO_MIN_UPDATES / steps_per_epoch)))
    return epochs, max(3, math.ceil(0.3 * epochs))


def resolve_class_weights(mode: str, counts) -> tuple[str, float]:
    """``(none|balanced, max/min count ratio)`` for ``--class-weights MODE`` given the training label counts ``(K,)``;
    ``auto`` → balanced when the ratio ≥ :data:`AUTO_BALANCE_RATIO`."""
    counts = np.asarray(counts, dtype=np.float64)
    ratio = float(counts.max() / max(counts.min(), 1.0)) if counts.size else 1.0
    if mode == "auto":
        return ("balanced" if ratio >= AUTO_BALANCE_RATIO else "none"), ratio
    if mode not in ("none", "balanced"):
        raise DenkiError(f"--class-weights {mode!r}: choose none, balanced or auto")
    return mode, ratio


@dataclass
class FinetuneConfig:
    """Hyper-parameters of one fine-tuning run (all seeds share them)."""
    epochs: int | None = None        # None → default_schedule(len(train), batch_size): 10 from ~2,000 examples up
    lr: float | None = None          # None → default_finetune_lr(hidden): 1e-3 tiny, 3e-4 small, 1e-4 base
    batch_size: int = 32
    eval_batch_size: int = 128
    max_length: int = 128
    layer_decay: float | None = None  # None → default_layer_decay(hidden): 1.0 tiny, 0.8 (official ELECTRA) otherwise
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    patience: int | None = None      # epochs without dev macro-F1 gain before stopping; None → default_schedule
    class_weights: str = "auto"      # none | balanced | auto (resolve_class_weights)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    device: str = "auto"
    bf16: bool = True                # autocast on CUDA only
    progress: bool = True
