"""torch's dropout vs the cheaper masks, the same tiny ELECTRA run (corpus, seed, data order) on two cores at the same
time: the rule's loss criteria (README, rule 3) and tokens/s. Reads the two kept metrics files; prints a table.

    python experiments/cpu-dropout/compare.py               # torch vs cheap: the rule
    python experiments/cpu-dropout/compare.py old new       # the old defaults (fp32, torch's dropout) vs today's
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load(name: str) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (HERE / f"{name}.metrics.jsonl").open(encoding="utf-8"))}


NAMES = {"torch": "torch dropout", "cheap": "cheaper masks", "old": "fp32, torch dropout", "new": "auto: bf16, cheaper masks"}


def main(first: str = "torch", second: str = "cheap") -> None:
    a, b = load(first), load(second)
    steps = sorted(set(a) & set(b))
    late = [s for s in steps if s > steps[-1] - 100]
    print(f"| | {NAMES[first]} | {NAMES[second]} | {second} / {first} |\n|---|---:|---:|---:|")
    tps = {n: statistics.median(r[s]["tokens_per_s"] for s in steps if s >= 100) for n, r in (("t", a), ("c", b))}
    print(f"| tokens/s (median, steps 100–{steps[-1]}) | {tps['t']:,.0f} | {tps['c']:,.0f} | "
          f"**{tps['c'] / tps['t']:.2f}×** |")
    ok = True
    for k in ("loss", "mlm_loss", "disc_loss"):
        mard = statistics.mean(abs(b[s][k] - a[s][k]) / abs(a[s][k]) for s in steps)
        la, lb = statistics.mean(a[s][k] for s in late), statistics.mean(b[s][k] for s in late)
        print(f"| {k}: mean abs. relative difference, steps 10–{steps[-1]} | | | {mard:.2%} |")
        print(f"| {k}: mean of steps {late[0]}–{late[-1]} | {la:.4f} | {lb:.4f} | {lb / la - 1:+.2%} |")
        if k == "loss":
            ok = mard <= 0.02 and abs(lb / la - 1) <= 0.02
    for k in ("disc_recall", "gen_acc"):
        print(f"| {k} at step {steps[-1]} | {a[steps[-1]][k]:.3f} | {b[steps[-1]][k]:.3f} | |")
    print(f"\nthe loss criteria of rule 3 (mean abs. relative difference ≤ 2 %, last-100-steps mean within 2 %): "
          f"{'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
