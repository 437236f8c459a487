"""Fine-tuning defaults by encoder width, shared by the router (``models.classify``) and QA (``models.qa``).

Defaults are evidence: each value is the setting measured to work (experiments/), not a guess.
"""
from __future__ import annotations

# Measured (experiments/finetune-recipe): a tiny encoder (hidden 128) at 3e-4 for 5 epochs is far from
# converged on 2,000 examples (livedoor-title dev macro-F1 0.20 from random init, 0.43 from an ELECTRA checkpoint);
# 1e-3 for 10 epochs reaches 0.69 / 0.58. On QA (all of jaquad_train, 1 epoch, the 2e14 ELECTRA encoder) 1e-3 also
# beat 3e-4 (experiments/qa-lr). ELECTRA-Small keeps the paper's 3e-4 (Table 7),
# Base 1e-4.
DEFAULT_LR_TINY = 1e-3   # hidden ≤ 128
DEFAULT_LR_SMALL = 3e-4  # ELECTRA-Small (hidden 256)
DEFAULT_LR_BASE = 1e-4   # ELECTRA-Base


def default_lr(hidden_size: int) -> float:
    """Peak fine-tuning learning rate for an encoder of this hidden width."""
    if hidden_size <= 128:
        return DEFAULT_LR_TINY
    return DEFAULT_LR_SMALL if hidden_size <= 256 else DEFAULT_LR_BASE


def default_layer_decay(hidden_size: int) -> float:
    """Official ELECTRA decays the LR by 0.8 per layer; on the 4-layer tiny encoder that leaves the embeddings at
    0.33× the LR, and a tiny pretrained checkpoint fine-tuned worse for it (livedoor titles, one seed: 0.58 vs 0.64
    at 1.0; random init 0.69 either way; experiments/finetune-recipe)."""
    return 1.0 if hidden_size <= 128 else 0.8


def default_answerable_head(source_manifest: dict | None) -> bool:
    """Whether ``denki finetune qa`` trains the answerable head (models/qa/heads.py) when neither
    ``--answerable-head`` nor ``--no-answerable-head`` is given: on for a bundle that denki pretrained with
    replaced-token detection (manifest ``source.objective`` "electra"), off otherwise.

    Measured on JaQuAD (experiments/anshead): on tiny ELECTRA encoders at 2e14 FLOPs the head moved a QA-fragile
    encoder's median of 3 QA seeds from 38.7 to 47.3 dev F1 and cost the default encoder nothing (48.0 → 49.3). Off
    where it is unmeasured or did not help: MLM (one run, where the plain [CLS] rule won on dev), random init, imported
    checkpoints. A ``qa`` bundle (a QA model fine-tuned further on new pairs) keeps what it was trained with."""
    m = source_manifest or {}
    if m.get("kind") == "qa":  # fine-tuning a QA model further (e.g. the shipped QA checkpoint): keep its head or none
        return bool(((m.get("source") or {}).get("settings") or {}).get("answerable_head"))
    return m.get("kind") == "pretrained" and (m.get("source") or {}).get("objective") == "electra"
