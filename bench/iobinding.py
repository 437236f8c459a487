"""CPU IO binding vs plain ``session.run``: does binding inputs/outputs save anything on CPU? (issue 17's fast paths)

The runtime uses IO binding on CUDA only (inputs copied once, outputs left on the device until read). On CPU the
inputs already live in host memory, so the only saving binding could bring is the output allocation and the
feed-dict handling. Measured here on one bundle variant, one intra-op thread, batch 1 and batch N of the bundle's
parity sample, calls interleaved (plain, bound, plain, …), in CPU time of the calling thread (with one intra-op
thread onnxruntime computes in the caller, so other load on the machine counts little). Prints medians and the ratio.

    python bench/iobinding.py --model runs/bench-suite/cls-variants --backend int8 --calls 300
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="ONNX classifier bundle")
    ap.add_argument("--backend", default="int8")
    ap.add_argument("--calls", type=int, default=300, help="timed calls per mode and batch size")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import numpy as np

    from denki.serve.runtime import Predictor

    p = Predictor(args.model, backend=args.backend, device="cpu", threads=1)
    texts = json.loads((p.dir / "parity_sample.json").read_text(encoding="utf-8"))["texts"]
    sess, names = p.session, p.input_names
    out = {}
    for label, batch_texts in (("b1", texts[:1]), (f"b{args.batch_size}", texts[:args.batch_size])):
        enc = p.tokenizer.pad([p.tokenizer.encode(t, max_length=p.max_length) for t in batch_texts])
        feed = {k: np.ascontiguousarray(enc[k]) for k in names}

        def plain():
            return sess.run(p.output_names, feed)

        def bound():
            b = sess.io_binding()
            for k, v in feed.items():
                b.bind_cpu_input(k, v)
            for n in p.output_names:
                b.bind_output(n, "cpu")
            sess.run_with_iobinding(b)
            return b.copy_outputs_to_cpu()

        assert np.allclose(plain()[0], bound()[0], atol=0, rtol=0)  # the same numbers either way
        times = {"plain": [], "bound": []}
        for _ in range(10):
            plain(), bound()
        for _ in range(args.calls):
            for mode, fn in (("plain", plain), ("bound", bound)):
                t = time.thread_time()
                fn()
                times[mode].append(time.thread_time() - t)
        med = {m: statistics.median(v) * 1e3 for m, v in times.items()}
        out[label] = {**{f"{m}_ms": round(v, 4) for m, v in med.items()}, "bound_vs_plain": med["bound"] / med["plain"],
                      "shape": list(feed["input_ids"].shape)}
        print(f"{label} {tuple(feed['input_ids'].shape)}: session.run {med['plain']:.3f} ms, IO binding "
              f"{med['bound']:.3f} ms → {med['bound'] / med['plain']:.3f}× (CPU time, median of {args.calls})")
    print(f"backend: {p.describe()}")
    if args.json:
        from denki.models.io.fileio import atomic_write_json

        atomic_write_json(args.json, {"model": args.model, "backend": args.backend, "results": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
