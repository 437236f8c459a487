"""Fine-tuning defaults by encoder width, shared by the router (``models.classify``) and QA (``models.qa``).

Each value is the setting measured to work, not a guess; the measurements are in docs/classify.md ("Learning rate
and epochs") and docs/qa.md (the answerable head).
"""
from __future__ import annotations

# A tiny encoder (hidden 128) needs the larger LR: at 3e-4 it is far from converged on a few thousand examples, on
# the router and on QA alike (docs/classify.md, docs/qa.md). ELECTRA-Small keeps the paper's 3e-4 (Table 7), Base 1e-4.
DEFAULT_LR_TINY = 1e-3   # hidden ≤ 128
DEFAULT_LR_SMALL = 3e-4  # ELECTRA-Small (hidden 256)
DEFAULT_LR_BASE = 1e-4   # ELECTRA-Base


def default_finetune_lr(hidden_size: int) -> float:
    """Peak fine-tuning learning rate for an encoder of this hidden width (pretraining has its own:
    ``pretrain.train.default_pretrain_lr``)."""
    if hidden_size <= 128:
        return DEFAULT_LR_TINY
    return DEFAULT_LR_SMALL if hidden_size <= 256 else DEFAULT_LR_BASE


def default_layer_decay(hidden_size: int) -> float:
    """The router's layer-wise LR decay: official ELECTRA decays the LR by 0.8 per layer; on the 4-layer tiny encoder
    that leaves the embeddings at 0.33× the LR, and a tiny pretrained checkpoint fine-tuned worse for it
    (docs/classify.md) — so 1.0 up to hidden 128, 0.8 above."""
    return 1.0 if hidden_size <= 128 else 0.8
