"""MFU of `denki pretrain` itself: tiny, Small and Base ELECTRA for about a minute each, as a user would run them.

For each size this starts the real command (``denki pretrain --objective electra``, ``--precision auto``,
``--attention auto``, ``--compile`` on CUDA unless ``--no-compile``) on the given corpora, stops it after
``--seconds``, and reads its ``metrics.jsonl``: every logged interval carries tokens/s, counted FLOP/s and MFU
against the device's peak at the run's precision (pretrain/speed.py: a data-sheet table for known GPUs, a measured
matmul on CPUs). The figure reported is the median over the intervals logged after the first third of the run
(compilation and warm-up excluded), with the intervals' min and max beside it.

    python bench/pretrain_mfu.py --corpus C1 C2 --tokenizer TOK --out runs/mfu                   # CUDA machine
    python bench/pretrain_mfu.py --corpus C1 --tokenizer TOK --out runs/mfu-dry --dry-run          # CPU check

Writes ``OUT/mfu.json`` after every size (sizes, batch, command, the figures) and prints a table.
"""
from __future__ import annotations

import argparse
import json
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from denki.models.io.fileio import atomic_write_json  # noqa: E402
from denki.pretrain.runlog import read_metrics  # noqa: E402

#: sequences per step on a GPU: the papers' batches for Small (128) and Base (256) fill an H100 poorly (the H200's
#: Small run at 128 × 128 kept ~1.7 % of the chip busy: experiments/gpu-tier-h200), so the MFU runs use larger ones
GPU_BATCH = {"tiny": 512, "small": 512, "base": 256}
CPU_BATCH = {"tiny": 32, "small": 16, "base": 8}


def summarize(rows: list[dict], skip_fraction: float = 1 / 3) -> dict | None:
    """The median (min, max) of tokens/s, FLOP/s and MFU over the logged intervals after the first
    ``skip_fraction`` of the run's wall time; None if nothing was logged after it."""
    if not rows:
        return None
    t_end = rows[-1]["wall_s"]
    late = [r for r in rows if r["wall_s"] >= skip_fraction * t_end] or rows[-1:]
    out = {"steps": rows[-1]["step"], "wall_s": round(t_end, 1), "intervals": len(late)}
    for k in ("tokens_per_s", "flops_per_s", "mfu"):
        vals = [r[k] for r in late if r.get(k) is not None]
        if vals:
            out[k] = statistics.median(vals)
            out[f"{k}_min"], out[f"{k}_max"] = min(vals), max(vals)
    return out


def run_size(size: str, args, out: Path) -> dict:
    """Run ``denki pretrain`` at ``size`` for ``args.seconds`` and summarise its metrics."""
    run_dir = out / size
    batch = (args.batch or (CPU_BATCH if args.dry_run else GPU_BATCH)[size])
    cmd = [sys.executable, "-m", "denki.app.cli", "pretrain", "--corpus", *args.corpus, "--tokenizer", args.tokenizer,
           "--size", size, "--objective", "electra", "--steps", "1000000", "--batch-size", str(batch),
           "--seq-len", str(args.seq_len), "--device", args.device, "--log-every", str(args.log_every),
           "--save-every", "100000000", "--no-export", "--no-progress", "--cache-dir", str(out / "cache"),
           "--out", str(run_dir)] + ([] if args.no_compile or args.dry_run else ["--compile"])
    print(f"\n$ {shlex.join(cmd)}   # stopped after {args.seconds:.0f} s", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT)
    try:
        proc.wait(timeout=args.seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    rows = read_metrics(run_dir) if (run_dir / "metrics.jsonl").is_file() else []
    res = {"size": size, "batch": batch, "seq_len": args.seq_len, "command": shlex.join(cmd),
           "seconds": round(time.perf_counter() - t0, 1), "summary": summarize(rows)}
    try:
        res["run"] = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("precision")
    except (OSError, json.JSONDecodeError):
        res["run"] = None
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", nargs="+", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default="tiny,small,base")
    ap.add_argument("--seconds", type=float, default=60.0, help="wall time per size, start-up included")
    ap.add_argument("--batch", type=int, default=None, help="sequences per step for every size (default: per size)")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--no-compile", action="store_true", help="eager on CUDA too")
    ap.add_argument("--dry-run", action="store_true", help="CPU-sized batches, no --compile: check the chain")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for size in [s.strip() for s in args.sizes.split(",") if s.strip()]:
        results.append(run_size(size, args, out))
        atomic_write_json(out / "mfu.json", {"results": results, "device": args.device, "dry_run": args.dry_run})
    print(f"\n{'size':6} {'batch':>5} {'steps':>6} {'tokens/s':>10} {'FLOP/s':>9} {'MFU':>6} (min–max)  precision")
    for r in results:
        s = r["summary"] or {}
        mfu = s.get("mfu")
        rng = f"{s['mfu_min']:.1%}–{s['mfu_max']:.1%}" if mfu is not None else "-"
        print(f"{r['size']:6} {r['batch']:5} {s.get('steps', 0):6} {s.get('tokens_per_s', 0):10,.0f} "
              f"{s.get('flops_per_s', 0):9.3g} {(f'{mfu:.1%}' if mfu is not None else '-'):>6} ({rng})  {r['run']}")
    return 0 if all(r["summary"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
