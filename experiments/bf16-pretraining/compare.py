"""fp32 vs bf16 autocast, the same tiny ELECTRA run (same corpus, seed, data order) on two cores at the same time:
tokens/s and the loss curves step by step. Reads the two kept metrics files; writes report.md.

    python experiments/bf16-pretraining/compare.py
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEYS = ("loss", "mlm_loss", "disc_loss", "disc_recall", "gen_acc")


def load(name: str) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (HERE / f"{name}.metrics.jsonl").open(encoding="utf-8"))}


def main() -> None:
    a, b = load("fp32"), load("bf16")
    common = sorted(set(a) & set(b))
    # both processes ran side by side from step 200 on (the fp32 one started first and tokenized the corpus)
    timed = [s for s in common if s >= 200]
    tps = {n: statistics.median(r[s]["tokens_per_s"] for s in timed) for n, r in (("fp32", a), ("bf16", b))}
    rel = {k: max(abs(b[s][k] - a[s][k]) / max(abs(a[s][k]), 1e-9) for s in common) for k in ("loss", "mlm_loss",
                                                                                          "disc_loss")}
    lines = ["| | fp32 | bf16 | bf16 / fp32 |", "|---|---:|---:|---:|",
             f"| tokens/s (median, steps {timed[0]}–{timed[-1]}) | {tps['fp32']:,.0f} | {tps['bf16']:,.0f} | "
             f"**{tps['bf16'] / tps['fp32']:.2f}×** |", "",
             f"Largest relative loss difference over steps {common[0]}–{common[-1]}: "
             + ", ".join(f"{k} {v:.2%}" for k, v in rel.items()), "",
             "| step | " + " | ".join(f"{k} fp32 / bf16" for k in KEYS) + " |",
             "|---:|" + "---|" * len(KEYS)]
    for s in common[::5] + ([common[-1]] if common[-1] not in common[::5] else []):
        lines.append(f"| {s} | " + " | ".join(f"{a[s][k]:.4f} / {b[s][k]:.4f}" for k in KEYS) + " |")
    (HERE / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[:6]))


if __name__ == "__main__":
    main()
