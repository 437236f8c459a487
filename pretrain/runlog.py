"""A pretraining run's log read back: the rows of ``metrics.jsonl``, the newest probe diagnostics in them, and
the metrics a ``pretrained`` bundle's manifest carries. Shared by the training loop (:mod:`pretrain.train`) and
the export from a checkpoint (:mod:`pretrain.export`), which both write bundles."""
from __future__ import annotations

import json
import os
from pathlib import Path

DIAG_KEYS = ("cls_spread", "mean_spread", "disc_auc", "disc_auc_own_t", "probe_recall",
             "probe_replace_rate")


def read_metrics(out: str | os.PathLike) -> list[dict]:
    p = Path(out) / "metrics.jsonl"
    if not p.is_file():
        return []
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]


def bundle_metrics(summary: dict) -> dict:
    final = dict(summary.get("final") or {})
    return {"final": final, "steps": summary["steps"], "tokens": summary["tokens"], "flops": summary["flops"],
            "wall_s": summary["wall_s"], "diagnostics": summary.get("diagnostics")}


def last_diagnostics(rows: list[dict]) -> dict | None:
    """The newest probe values logged in metrics.jsonl (rows that carry ``cls_spread``)."""
    for r in reversed(rows):
        if "cls_spread" in r:
            return {k: r[k] for k in DIAG_KEYS if k in r}
    return None
