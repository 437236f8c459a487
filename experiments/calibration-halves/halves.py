"""Temperature scaling measured honestly: fit T on one half of dev, score the NLL on the other half.

For each router run (a `denki finetune classify` output folder: ``dev_logits.npz`` + ``report.json``) it takes the
logits the shipped rule sees (the kept seed's encoder logits, fused with the TF-IDF model's where the report shipped
the fusion), splits dev into halves ``--splits`` times (``Random(i)``), and for both directions fits T on one half —
with today's fit (:func:`denki.models.classify.calibration.fit_temperature`, exact NLL) and with the fit before the
fix (the gold probability clipped at 1e-12, kept below for the comparison) — then scores the exact NLL of the other
half at T = 1, the old T and the new T.

    python experiments/calibration-halves/halves.py RUN_DIR [RUN_DIR ...] --splits 20 --out experiments/calibration-halves/result.json
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from denki.models.classify.calibration import fit_temperature, nll_at  # noqa: E402
from denki.models.classify.decision import softmax  # noqa: E402
from denki.models.classify.fusion import fuse  # noqa: E402


def fit_temperature_clipped(logits, gold, lo=0.05, hi=20.0, iters=80):
    """The fit before the fix, verbatim in effect: golden-section search on the NLL with the gold probability
    clipped at 1e-12, falling back to T = 1 when the result is worse than no scaling."""
    z = np.asarray(logits, dtype=np.float64)

    def f(beta):
        p = softmax(z * beta, axis=1)[np.arange(len(gold)), gold]
        return float(-np.log(np.clip(p, 1e-12, 1.0)).mean())

    a, b = 1.0 / hi, 1.0 / lo
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    beta = (a + b) / 2
    return 1.0 / beta if f(beta) <= f(1.0) else 1.0


def shipped_logits(run: Path) -> tuple[np.ndarray, np.ndarray]:
    rep = json.loads((run / "report.json").read_text(encoding="utf-8"))
    arr = np.load(run / "dev_logits.npz")
    enc = arr[f"seed_{rep['seed_summary']['chosen_seed']}"].astype(np.float64)
    f = rep.get("fusion")
    if f and f.get("shipped"):
        enc = fuse(enc, arr["lexical"].astype(np.float64), f["mode"], float(f["weight"]))
    return enc, arr["gold"].astype(np.int64)


def measure(run: Path, splits: int) -> dict:
    z, gold = shipped_logits(run)
    rows = []
    for i in range(splits):
        idx = list(range(len(gold)))
        random.Random(i).shuffle(idx)
        half = len(idx) // 2
        for fit, score in ((idx[:half], idx[half:]), (idx[half:], idx[:half])):
            t_old = fit_temperature_clipped(z[fit], gold[fit])
            t_new = fit_temperature(z[fit], gold[fit])
            rows.append({"t_old": t_old, "t_new": t_new, "nll_t1": nll_at(z[score], gold[score], 1.0),
                         "nll_old": nll_at(z[score], gold[score], 1 / t_old),
                         "nll_new": nll_at(z[score], gold[score], 1 / t_new)})
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    return {"run": str(run), "n_dev": int(len(gold)), "pairs": len(rows), "mean": mean,
            "new_below_t1": sum(r["nll_new"] < r["nll_t1"] for r in rows),
            "old_fell_back": sum(abs(r["t_old"] - 1.0) < 1e-12 for r in rows),
            "t_full_dev": {"old": fit_temperature_clipped(z, gold), "new": fit_temperature(z, gold)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    res = [measure(Path(r), args.splits) for r in args.runs]
    print("| router | dev | T (old / new, full dev) | scoring-half NLL: T = 1 | old T | new T | new < T = 1 | old fell back |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for r in res:
        m = r["mean"]
        print(f"| {r['run']} | {r['n_dev']} | {r['t_full_dev']['old']:.3f} / {r['t_full_dev']['new']:.3f} | "
              f"{m['nll_t1']:.4f} | {m['nll_old']:.4f} | {m['nll_new']:.4f} | {r['new_below_t1']}/{r['pairs']} | "
              f"{r['old_fell_back']}/{r['pairs']} |")
    if args.out:
        Path(args.out).write_text(json.dumps(res, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
