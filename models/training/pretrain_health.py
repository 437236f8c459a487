"""Has a pretrained encoder learned anything? One plain-words test shared by ``denki pretrain`` (end of run),
``denki finetune`` (a warning before training) and the quickstart.

The numbers come from ``pretrain.diagnostics`` and are stored in the bundle's manifest under
``metrics.diagnostics``: ``disc_auc`` (ELECTRA only: AUC of the discriminator on fresh replaced tokens, 0.5 =
chance) and ``cls_spread`` / ``mean_spread`` (spread of the encoder's [CLS] / mean-pooled vectors over a fixed
probe batch; ≈ 0 means every input gets the same vector — "collapse"). Torch-free.
"""
from __future__ import annotations

#: an ELECTRA discriminator below this AUC has not learned replaced-token detection
MIN_DISC_AUC = 0.6
#: an encoder whose [CLS] and mean-pooled spreads are both below this maps every input to one vector
MIN_SPREAD = 1e-3


def diagnostics_of(manifest: dict | None) -> dict | None:
    """The ``diagnostics`` a pretrained bundle's manifest carries (None for bundles made before they existed)."""
    if not manifest:
        return None
    return (manifest.get("metrics") or {}).get("diagnostics")


def problems(diag: dict | None) -> list[str]:
    """Plain-words reasons why an encoder has not learned; empty when it looks healthy (or nothing is known)."""
    if not diag:
        return []
    out = []
    # a run trained at --gen-temperature T ≠ 1 is judged on its own task: measured at T = 3 (1e14 FLOPs), the
    # paper's corruption gave AUC 0.596 while the encoder fine-tuned above random init on both routing tasks
    own = diag.get("disc_auc_own_t")
    auc = own if isinstance(own, (int, float)) and own == own else diag.get("disc_auc")
    if isinstance(auc, (int, float)) and auc == auc and auc < MIN_DISC_AUC:
        out.append(f"its discriminator barely tells replaced from original tokens (AUC {auc:.2f}"
                   f"{' on replacements drawn at its --gen-temperature' if auc is own else ''}; chance is "
                   f"0.50, a learning one is above {MIN_DISC_AUC:.2f})")
    cls_s, mean_s = diag.get("cls_spread"), diag.get("mean_spread")
    if isinstance(cls_s, (int, float)) and isinstance(mean_s, (int, float)) and max(cls_s, mean_s) < MIN_SPREAD:
        out.append(f"it maps every input to nearly the same vector (spread [CLS] {cls_s:.4f}, mean-pooled "
                   f"{mean_s:.4f}: collapsed)")
    return out


def verdict(diag: dict | None) -> str | None:
    """One warning sentence when the encoder has not learned, else None."""
    p = problems(diag)
    if not p:
        return None
    return ("this pretrained encoder has not learned: " + "; ".join(p) + ". Expect fine-tuning from it to do "
            "worse than random init (--init-random SIZE); pretrain longer or with the settings in docs/pretrain.md")


def warn_if_unlearned(manifest: dict | None) -> str | None:
    """Print the :func:`verdict` of a ``pretrained`` bundle's manifest to stderr (fine-tuning goes on) and return it."""
    import sys

    if not manifest or manifest.get("kind") != "pretrained":
        return None
    warning = verdict(diagnostics_of(manifest))
    if warning:
        print(f"denki: WARNING: {warning}", file=sys.stderr, flush=True)
    return warning
