"""The downstream comparison of bf16 and fp32 pretraining at equal FLOPs, and the rule written before the runs.

Reads the routers of ``experiments/bf16-pretraining/downstream.sh`` (runs/general-routers/bf16-downstream-
{fp32,bf16}-BUDGET-{livedoor-title,jaquad-qtype}/report.json) and prints the table and the verdict:
bf16 becomes ``--precision auto``'s CPU choice (on avx512_bf16 / amx_bf16) if, on both tasks, the bf16 encoder's
router median is within the larger of the two arms' fine-tuning seed ranges (max − min) of the fp32 encoder's.

    python experiments/bf16-pretraining/downstream_table.py [BUDGET]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TASKS = ("livedoor-title", "jaquad-qtype")


def summary(precision: str, budget: str, task: str) -> dict:
    f = REPO / "runs" / "general-routers" / f"bf16-downstream-{precision}-{budget}-{task}" / "report.json"
    return json.loads(f.read_text())["seed_summary"]


def main(budget: str = "1e14") -> int:
    print(f"| task | fp32 median (min–max) | bf16 median (min–max) | bf16 − fp32 | allowed (larger seed range) | within |")
    print("|---|---|---|---:|---:|---|")
    ok = True
    for task in TASKS:
        a, b = summary("fp32", budget, task), summary("bf16", budget, task)
        rng = max(a["macro_f1_max"] - a["macro_f1_min"], b["macro_f1_max"] - b["macro_f1_min"])
        diff = b["macro_f1_median"] - a["macro_f1_median"]
        within = abs(diff) <= rng
        ok &= within
        print(f"| {task} | {a['macro_f1_median']:.3f} ({a['macro_f1_min']:.3f}–{a['macro_f1_max']:.3f}) | "
              f"{b['macro_f1_median']:.3f} ({b['macro_f1_min']:.3f}–{b['macro_f1_max']:.3f}) | {diff:+.3f} | "
              f"{rng:.3f} | {'yes' if within else 'no'} |")
    print()
    print("verdict: " + ("bf16 within seed noise on both tasks → --precision auto becomes bf16 on CPUs with "
                         "avx512_bf16 / amx_bf16" if ok else "outside seed noise on a task → auto stays fp32 on CPU"))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
