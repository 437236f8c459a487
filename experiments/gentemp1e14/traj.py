"""Pretraining trajectories of the --gen-temperature runs beside the T = 1 control (issue 15): at each probed step,
generator accuracy, the training-time discriminator recall (on replacements drawn at the run's T), and the probe's
AUC and recall (replacements drawn at T = 1; probe recall exists for the runs made after it was added).
    python experiments/gentemp1e14/traj.py [RUN_OR_METRICS_FILE ...]"""
import json
import sys
from pathlib import Path

DEFAULT = ["experiments/clscontrast1e14/electra-cc1-1e14.metrics.jsonl", "runs/hybrid/electra-cc1-t2-1e14",
           "runs/hybrid/electra-cc1-t3-1e14"]


def rows(src: str) -> list[dict]:
    p = Path(src)
    p = p / "metrics.jsonl" if p.is_dir() else p
    if not p.is_file():  # the kept copy in experiments/gentemp1e14 once runs/ is gone
        p = Path("experiments/gentemp1e14") / (Path(src).name + ".metrics.jsonl")
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.is_file() else []


def fmt(v) -> str:
    return "–" if v is None else f"{v:.3f}"


for src in sys.argv[1:] or DEFAULT:
    rs = [r for r in rows(src) if "cls_spread" in r]
    print(f"\n{src}\n| step | FLOPs | gen acc | disc recall (train) | probe AUC | probe recall |\n|---:|---:|---:|---:|---:|---:|")
    for r in rs[::max(1, len(rs) // 8)] + rs[-1:] * (len(rs) % 8 != 1):
        print(f"| {r['step']} | {r['flops']:.2g} | {fmt(r.get('gen_acc'))} | {fmt(r.get('disc_recall'))} "
              f"| {fmt(r.get('disc_auc'))} | {fmt(r.get('probe_recall'))} |")
