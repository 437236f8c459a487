"""Length bucketing inside one micro-batch: one padded batch vs :func:`serve.runtime.length_groups`.

An HTTP micro-batch (or any ``Predictor.logits`` call) holds texts of mixed lengths. Padded as one batch, every text
costs as much as the longest; cut by ``length_groups`` into a few batches of similar length, each is padded only to
its own longest, at the price of one model call per group. This times both, interleaved, on random draws of
``--batch`` texts from a JSONL file, with the bundle's own tokenizer and ONNX session, and prints the ratio for each
per-call cost (in padded-token equivalents; ``CALL_COST_TOKENS`` is the default the runtime uses).

    python bench/bucketing.py --model runs/bench-router/classifier-onnx --backend int8 \\
        --data samples/routing_dev.jsonl --batches 8 32 --threads 1 --repeats 60
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import numpy as np

    from bench.batch_throughput import cpu_lines
    from denki.serve.runtime import CALL_COST_TOKENS, Predictor, length_groups

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="an onnx-classifier bundle")
    ap.add_argument("--backend", default="int8")
    ap.add_argument("--data", required=True, help="JSONL with the texts")
    ap.add_argument("--field", default="text")
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 32], help="texts per micro-batch")
    ap.add_argument("--costs", type=float, nargs="+", default=[0, 8, CALL_COST_TOKENS, 128],
                    help="per-call costs (token equivalents) to try")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    p = Predictor(args.model, backend=args.backend, threads=args.threads)
    tok = p.tokenizer
    texts = [json.loads(line)[args.field] for line in Path(args.data).read_text(encoding="utf-8").splitlines()
             if line.strip()]
    rng = random.Random(args.seed)
    print("\n".join(cpu_lines()))
    print(f"{args.model} ({p.backend}), {args.threads} thread(s), {len(texts)} texts in {args.data}; "
          f"median of {args.repeats} interleaved draws; default CALL_COST_TOKENS = {CALL_COST_TOKENS}")
    for nb in args.batches:
        variants = {"one padded batch": None, **{f"length_groups cost {c:g}": c for c in args.costs}}
        times = {k: [] for k in variants}
        calls = {k: [] for k in variants}
        waste = {k: [] for k in variants}
        for _ in range(args.repeats):
            draw = rng.sample(texts, nb)
            encs = [tok.encode(t, max_length=p.max_length) for t in draw]
            order = np.argsort([len(e) for e in encs], kind="stable")
            lengths = [len(encs[i]) for i in order]
            for name, cost in variants.items():
                groups = [(0, nb)] if cost is None else length_groups(lengths, nb, cost)
                padded = [tok.pad([encs[i] for i in order[a:b]]) for a, b in groups]
                t0 = time.perf_counter()
                for feed in padded:
                    p.run(feed)
                times[name].append(time.perf_counter() - t0)
                calls[name].append(len(groups))
                waste[name].append(1 - sum(lengths) / sum((b - a) * lengths[b - 1] for a, b in groups))
        base = statistics.median(times["one padded batch"])
        print(f"\nmicro-batch of {nb} texts (token counts: median {statistics.median(lengths)}, "
              f"max {max(lengths)} in the last draw)")
        print(f"  {'variant':28s} {'model time':>11s} {'calls':>6s} {'padding':>8s} {'vs one batch':>13s}")
        for name in variants:
            med = statistics.median(times[name])
            print(f"  {name:28s} {med * 1e3:8.3f} ms {statistics.mean(calls[name]):6.1f} "
                  f"{100 * statistics.mean(waste[name]):7.1f}% {med / base:12.2f}×")


if __name__ == "__main__":
    main()
