"""Generator sampling cost: inverse-CDF (denki) vs Gumbel-max (official ELECTRA) on one ``(M, V)`` logits batch.

Both draw one token per row from ``softmax(logits)`` (tests/test_pretrain.py checks the distributions); this times
them, interleaved, on the tiny RTD step's shape (≈ 620 masked positions × 8,000 vocabulary) and prints the ratio.

    python bench/sampler.py --rows 620 --vocab 8000 --threads 1 --repeats 20
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    from bench.batch_throughput import cpu_lines
    from denki.pretrain.model import gumbel_sample, inverse_cdf_sample

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=620)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    logits = torch.randn(args.rows, args.vocab) * 2.0
    times = {"inverse_cdf": [], "gumbel": []}
    fns = {"inverse_cdf": inverse_cdf_sample, "gumbel": gumbel_sample}
    for f in fns.values():
        f(logits)  # warm-up
    for _ in range(args.repeats):
        for name, f in fns.items():
            t = time.perf_counter()
            f(logits)
            times[name].append(time.perf_counter() - t)
    print("\n".join(cpu_lines()))
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    print(f"({args.rows}, {args.vocab}) logits, {args.threads} thread(s), median of {args.repeats} interleaved:")
    for k, v in med.items():
        print(f"  {k:12s} {v:7.2f} ms")
    print(f"  gumbel / inverse_cdf: {med['gumbel'] / med['inverse_cdf']:.1f}×")


if __name__ == "__main__":
    main()
