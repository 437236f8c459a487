"""What the TF-IDF half of a fused router costs at serving time: the same ONNX bundle, end to end through
``Predictor.classify`` (tokenise + model + routing rule), with its lexical part on and with it switched off (the
encoder alone), interleaved call by call so that both see the same machine state.

Prints batch-1 p50/p99 and batch-N throughput of each, their ratios (fused / encoder), the memory the lexical model
takes once loaded (RSS before/after), and the bundle's file sizes.

    python bench/fusion_latency.py --model runs/fusion/livedoor-title-onnx --data ../shared/data/livedoor_dev.jsonl.gz \\
        --field title --backend int8 --threads 1
"""
from __future__ import annotations

import argparse
import copy
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    from bench.batch_throughput import cpu_lines
    from denki.models.classify.lexical import LexicalModel
    from denki.models.io.records import read_labelled
    from denki.serve.runtime import Predictor

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a fused onnx-classifier bundle (task.json has 'fusion')")
    ap.add_argument("--data", required=True, help="labelled JSONL: the texts to send")
    ap.add_argument("--field", default="text")
    ap.add_argument("--backend", default="int8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=400, help="batch-1 calls per arm")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batch-calls", type=int, default=30, help="batch-N calls per arm")
    args = ap.parse_args()

    fused = Predictor(args.model, backend=args.backend, threads=args.threads)
    if fused.lexical is None:
        sys.exit(f"{args.model}: not a fused router (task.json has no 'fusion')")
    plain = copy.copy(fused)  # same session and tokenizer: the only difference is the lexical part
    plain.task = {k: v for k, v in fused.task.items() if k != "fusion"}
    plain.lexical = None
    texts = read_labelled(args.data, args.field, "label").texts
    rng = random.Random(0)

    def timed(p, batch) -> float:
        t0 = time.perf_counter()
        p.classify(batch, batch_size=args.batch)
        return (time.perf_counter() - t0) * 1e3

    for p in (fused, plain):  # warm-up
        for t in texts[:20]:
            p.classify([t])
    one = {"fused": [], "encoder": []}
    for _ in range(args.calls):
        t = [rng.choice(texts)]
        for name, p in (("fused", fused), ("encoder", plain)):
            one[name].append(timed(p, t))
    many = {"fused": [], "encoder": []}
    for _ in range(args.batch_calls):
        b = [rng.choice(texts) for _ in range(args.batch)]
        for name, p in (("fused", fused), ("encoder", plain)):
            many[name].append(timed(p, b))
    before = _rss_mib()
    extra = LexicalModel.load(fused.dir)
    after = _rss_mib()

    print("\n".join(cpu_lines()))
    print(f"model: {fused.describe()} · threads {args.threads} · {len(texts)} texts from {args.data} ({args.field})")
    for name in ("encoder", "fused"):
        xs = sorted(one[name])
        p50, p99 = statistics.median(xs), xs[int(0.99 * (len(xs) - 1))]
        tput = args.batch * len(many[name]) / (sum(many[name]) / 1e3)
        print(f"{name:8s} batch-1 p50 {p50:6.2f} ms  p99 {p99:6.2f} ms · batch-{args.batch} {tput:7.0f} texts/s")
    r50 = statistics.median(one["fused"]) / statistics.median(one["encoder"])
    rt = sum(many["encoder"]) / sum(many["fused"])
    print(f"fused / encoder: batch-1 p50 {r50:.2f}× · batch-{args.batch} throughput {rt:.2f}×")
    print(f"lexical model in memory: {after - before:+.1f} MiB RSS ({len(extra._codes):,} n-grams, "
          f"{extra.n_labels} labels)")
    sizes = {f.name: f.stat().st_size for f in sorted(Path(fused.dir).iterdir()) if f.is_file()}
    lex = sum(v for k, v in sizes.items() if k.startswith("lexical"))
    model = sizes.get(fused.model_file.name, 0)
    print(f"bundle files: {fused.model_file.name} {model / 2**20:.1f} MiB, lexical part {lex / 2**20:.1f} MiB, "
          f"all {sum(sizes.values()) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
