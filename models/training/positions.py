"""Position embeddings a pretraining run never trained, and how fine-tuning initialises them.

`denki pretrain` packs sequences of ``seq_len`` tokens (128 by default), so only rows ``0 … seq_len-1`` of the
absolute position-embedding table ``(max_position_embeddings, hidden)`` ever receive a gradient; rows
``seq_len …`` keep their random init (N(0, 0.02²), norm ≈ 0.02·√hidden). A QA window of 384 tokens puts most of its
context at those untrained positions. ``tile`` copies the trained rows over the untrained ones — row ``i ≥ L`` takes
row ``1 + (i - L) mod (L - 1)`` — as Longformer did to extend RoBERTa's 512 positions (Beltagy et al. 2020, §5:
"copy initialization" instead of random). Row 0 is left out of the copy because in pretraining position 0 always
held [CLS]: tiling it would tell a context token that it is the [CLS] slot.
"""
from __future__ import annotations

POSITION_INITS = ("keep", "tile")


def trained_positions(manifest: dict) -> int | None:
    """How many leading position rows a ``pretrained`` bundle's pretraining trained: its ``source.seq_len``, or
    None when the manifest does not say (an imported checkpoint, a random-init control)."""
    n = (manifest.get("source") or {}).get("seq_len")
    return int(n) if isinstance(n, int) and n > 1 else None


def tile_positions(model, trained: int) -> int:
    """Overwrite rows ``trained …`` of ``model``'s absolute position embeddings ``(max_positions, hidden)`` with
    copies of rows ``1 … trained-1`` (see the module docstring); returns how many rows were overwritten (0 when
    the table has no untrained rows or the model has no absolute position table)."""
    import torch

    emb = getattr(getattr(model, "base_model", model), "embeddings", None)
    table = getattr(emb, "position_embeddings", None)
    if table is None or not (1 < trained < table.weight.shape[0]):
        return 0
    w = table.weight
    rows = torch.arange(trained, w.shape[0])
    src = 1 + (rows - trained) % (trained - 1)
    with torch.no_grad():
        w[rows] = w[src]
    return int(rows.numel())
