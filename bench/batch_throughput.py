"""Batch scoring throughput: `denki classify` (ONNX, torch-free, pipelined) vs its sequential schedule vs a
transformers torch pipeline, with peak RSS, the CPU's flags and the int8 model call's achieved GFLOP/s.

Same rows, same model weights, alternating rounds; every engine runs in a child process of its own, so its peak
RSS (``os.wait4``'s ``ru_maxrss``) is its own, and its time is measured inside the child around the call alone
(model load and the input's sha256 included for denki, as the CLI pays them; interpreter start-up excluded).
Ratios are medians of the same run's rounds.

* ``denki`` — ``classify_file`` as ``denki classify`` runs it: ``--workers`` cores (default: all), bucketing
  window 16 × batch size, checkpoints every 2 s.
* ``denki-sequential`` — the previous engine's schedule: one thread, no bucketing (window = batch size),
  checkpoint (fsync + state) after every batch.
* ``transformers`` — what a user would otherwise write: ``pipeline("text-classification", model=<PyTorch
  bundle>)`` over the texts, same batch size, torch threads = ``--workers`` (the same cores as denki;
  ``--torch-threads`` to change).

Then, in this process: the int8 model call alone (the rows tokenised, bucketed as the engine does, 1 thread,
timed in CPU time of the calling thread so that other load on the machine does not count) in GFLOP/s from the
encoder's shape, beside this CPU's int8 peak measured with onnxruntime's own ``MatMulInteger`` (a large
uint8 × int8 product, 1 thread). No nominal peak from the clock: in a VM /proc/cpuinfo shows the base clock, not
the boost one, and the VNNI issue width differs by core generation (on the 2-core development EPYC the measured
GEMM beat a 64-MACs-per-cycle estimate 2.7×). Figures from a loaded machine are not comparable with published
ones: the load is printed, and CPU time per row beside rows/s.

    python bench/batch_throughput.py --model runs/quickstart/classifier-onnx \\
        --data ../shared/data/jaquad_qtype_dev.jsonl.gz --rows 2000 --workers 2
    # flat memory on a 1M-row file (denki engines only):
    python bench/batch_throughput.py --make-rows 1000000 --data ../shared/data/jaquad_qtype_dev.jsonl.gz \\
        --out runs/bench/big.jsonl
    python bench/batch_throughput.py --model runs/quickstart/classifier-onnx --input-file runs/bench/big.jsonl \\
        --engines denki --rounds 1
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

ENGINES = ("denki", "denki-sequential", "transformers")
FLAG_NAMES = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16",
              "amx_tile", "amx_int8", "amx_bf16")


# ------------------------------------------------------------------------------------------- machine
def cpu_lines() -> list[str]:
    """One line per distinct CPU (model name + the SIMD flags that matter for int8/fp32 GEMMs): on a machine
    with two CPU types (or sockets that differ) both are listed. From /proc/cpuinfo (Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return [f"CPU: unknown ({sys.platform}; no /proc/cpuinfo)"]
    seen, out = set(), []
    for block in text.strip().split("\n\n"):
        kv = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        kv = {k.strip(): v.strip() for k, v in kv.items()}
        flags = set(kv.get("flags", "").split())
        key = (kv.get("model name", "?"), " ".join(f for f in FLAG_NAMES if f in flags))
        if key not in seen:
            seen.add(key)
            out.append(f"CPU: {key[0]} · flags: {key[1] or '(none of ' + ', '.join(FLAG_NAMES) + ')'}")
    return out


def cpu_mhz() -> float | None:
    try:
        vals = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("cpu MHz")]
        return max(vals) if vals else None
    except (OSError, ValueError):
        return None


def load_line() -> str:
    try:
        la = os.getloadavg()
    except OSError:
        return "load average: unknown"
    return f"load average {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} (1/5/15 min) on {os.cpu_count()} CPUs"


# ------------------------------------------------------------------------------------------- inputs
def make_rows(data: str, n: int, out: str, field: str) -> int:
    """Write ``n`` JSONL rows to ``out`` (.gz allowed) by cycling through ``data``'s rows with ``field`` text;
    each row gets a unique ``id``. Streams: memory stays flat whatever ``n``."""
    from denki.models.io.records import iter_records

    base = [r[field] for _, r in iter_records(data) if isinstance(r.get(field), str) and r[field].strip()]
    if not base:
        raise SystemExit(f"{data}: no rows with a text in field {field!r}")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(out).with_name("." + Path(out).name + ".partial")
    opener = gzip.open if out.endswith(".gz") else open
    with opener(tmp, "wt", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"r{i}", "text": base[i % len(base)]}, ensure_ascii=False) + "\n")
    os.replace(tmp, out)
    return n


# ------------------------------------------------------------------------------------------- child
CHILD = r"""
import json, os, sys, threading, time
sys.path.insert(0, sys.argv[1])
spec = json.loads(sys.argv[2])
samples = []
def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
done = threading.Event()
def sample():
    while not done.wait(0.25):
        samples.append((time.perf_counter(), rss_mib()))
threading.Thread(target=sample, daemon=True).start()
engine = spec["engine"]
if engine == "transformers":
    import torch
    from transformers import pipeline
    torch.set_num_threads(spec["torch_threads"])
    texts = [json.loads(l)[spec["field"]] for l in open(spec["input"], encoding="utf-8")]
    pipe = pipeline("text-classification", model=spec["torch_model"], tokenizer=spec["torch_model"],
                    truncation=True, max_length=spec["max_length"], device="cpu")
    t0, c0 = time.perf_counter(), time.process_time()
    pipe(texts, batch_size=spec["batch_size"])
    rows, extra = len(texts), {}
else:
    import onnxruntime, numpy  # imported before the clock starts (and before the RSS quarters), as a service has
    from denki.serve.batch import classify_file
    kw = dict(workers=spec["workers"], threads=spec["threads"])
    if engine == "denki-sequential":
        kw = dict(workers=1, threads=1, window=spec["batch_size"], checkpoint_seconds=0)
    t0, c0 = time.perf_counter(), time.process_time()
    r = classify_file(spec["model"], spec["input"], spec["output"], text_field=spec["field"],
                      batch_size=spec["batch_size"], progress=False, **kw)
    rows = r["rows_in"]
    extra = {k: r[k] for k in ("workers", "model_calls", "ort_threads", "window", "stage_seconds", "backend")}
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
done.set()
q = lambda a, b: max((m for t, m in samples if t0 + a * seconds <= t <= t0 + b * seconds), default=None)
quarters = [q(0, .25), q(.25, .5), q(.5, .75), q(.75, 1.01)]
print("RESULT " + json.dumps({"rows": rows, "seconds": seconds, "cpu_seconds": cpu, "rss_quarters_mib": quarters,
                              **extra}))
"""


def run_child_rss(spec: dict) -> dict:
    """Run one engine in a child; its result plus ``peak_rss_mib`` (that child's own ru_maxrss)."""
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(REPO), json.dumps(spec)], stdout=fo, stderr=fe,
                                text=True)
        # wait4: this child's own rusage (RUSAGE_CHILDREN would be the maximum over every child so far)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    if proc.returncode != 0:
        raise SystemExit(f"{spec['engine']} failed (exit {proc.returncode}):\n{err[-3000:]}")
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    res = json.loads(line[len("RESULT "):])
    res["peak_rss_mib"] = usage.ru_maxrss / 1024  # Linux: KiB
    return res


# ------------------------------------------------------------------------------------------- GFLOP/s
def encoder_flops(config: dict, seq: int) -> float:
    """FLOPs (2 per multiply-add) of one sequence of ``seq`` tokens through a BERT/ELECTRA encoder + the
    classification head: per layer Q/K/V/O projections 4·h², feed-forward 2·h·i, attention scores and mixing
    2·seq·h per token; embedding projection e·h when the embedding size differs."""
    h, i, n = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    e = config.get("embedding_size", h)
    per_token = n * (4 * h * h + 2 * h * i + 2 * seq * h) + (e * h if e != h else 0)
    return 2.0 * (seq * per_token + h * h + h * config.get("num_labels", len(config.get("id2label", {})) or 2))


def model_gflops(bundle: Path, texts: list[str], batch_size: int, window: int, rounds: int = 5) -> dict:
    """The int8 model call alone on the engine's batches (bucketed like ``denki classify``), 1 thread."""
    from denki.serve.runtime import Predictor

    p = Predictor(bundle, backend="int8", device="cpu", threads=1)
    cfg = json.loads((p.dir / "config.json").read_text(encoding="utf-8"))
    encs = [p.tokenizer.encode(t, max_length=p.max_length) for t in texts]
    batches = []
    for s in range(0, len(encs), window):
        part = sorted(encs[s:s + window], key=len)
        batches += [p.tokenizer.pad(part[b:b + batch_size]) for b in range(0, len(part), batch_size)]
    flops = sum(encoder_flops(cfg, b["input_ids"].shape[1]) * b["input_ids"].shape[0] for b in batches)
    useful = sum(encoder_flops(cfg, len(e)) for e in encs)
    # CPU time of this thread (a 1-thread onnxruntime call computes on the calling thread), each batch's best of
    # `rounds` calls, summed: time the scheduler gave to other processes on a shared machine does not count
    best = 0.0
    for b in batches:
        times = []
        for _ in range(rounds):
            t0 = time.thread_time()
            p.run(b)
            times.append(time.thread_time() - t0)
        best += min(times)
    return {"seconds": best, "gflops": flops / best / 1e9, "useful_gflops": useful / best / 1e9,
            "padding_share": 1 - useful / flops, "rows_per_s": len(texts) / best}


def int8_gemm_peak(m: int = 1024, k: int = 512, n: int = 512, reps: int = 20) -> float:
    """GOP/s of onnxruntime's MatMulInteger (uint8 × int8, what dynamic quantisation runs) on one thread:
    the practical int8 peak of this CPU for the runtime the model uses."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from denki.models.bundle.onnx import import_ort

    ort = import_ort()
    rng = np.random.default_rng(0)
    b = rng.integers(-127, 127, size=(k, n), dtype=np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "gemm",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
        initializer=[helper.make_tensor("b", TensorProto.INT8, [k, n], b.tobytes(), raw=True)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what opset 13 needs; newer onnx writes an IR version older runtimes refuse
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx.ModelProto.SerializeToString(model), sess_options=so,
                                providers=["CPUExecutionProvider"])
    a = rng.integers(0, 255, size=(m, k), dtype=np.uint8)
    sess.run(None, {"a": a})
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time()  # CPU time, as for the model call
        sess.run(None, {"a": a})
        best = min(best, time.thread_time() - t0)
    return 2.0 * m * k * n / best / 1e9


# ------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="ONNX classifier bundle")
    ap.add_argument("--torch-model", help="PyTorch bundle for the transformers pipeline (default: the export's "
                                          "parent)")
    ap.add_argument("--data", help="JSONL/CSV with the text field: the first --rows rows are scored")
    ap.add_argument("--input-file", help="score this JSONL file as it is instead (e.g. from --make-rows)")
    ap.add_argument("--text-field", default=None, help="default: the bundle's text field")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=None, help="cores for denki and torch (default: all)")
    ap.add_argument("--threads", type=int, default=None, help="denki: onnxruntime threads per model call")
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="torch threads of the transformers pipeline (default: --workers, the same cores as denki; "
                         "on a busy machine torch's OpenMP threads slow down far more than 1 thread does)")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma list of {', '.join(ENGINES)}")
    ap.add_argument("--no-gflops", action="store_true", help="skip the model-call GFLOP/s measurement")
    ap.add_argument("--make-rows", type=int, metavar="N", help="write N synthetic rows (cycling --data) to --out "
                                                              "and exit")
    ap.add_argument("--out", help="with --make-rows: the JSONL file to write (.gz allowed)")
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args()

    if args.make_rows:
        if not (args.data and args.out):
            ap.error("--make-rows needs --data and --out")
        field = args.text_field or "text"
        t0 = time.perf_counter()
        make_rows(args.data, args.make_rows, args.out, field)
        print(f"wrote {args.make_rows:,} rows to {args.out} ({Path(args.out).stat().st_size / 2**20:.0f} MiB, "
              f"{time.perf_counter() - t0:.0f} s)")
        return
    if not args.model or not (args.data or args.input_file):
        ap.error("--model and --data (or --input-file) are required")
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        ap.error(f"unknown engine(s) {bad}; choose from {ENGINES}")

    from denki.models.bundle.format import read_manifest, read_task
    from denki.models.io.records import iter_records
    from denki.serve.batch import default_workers
    from denki.serve.runtime import resolve_onnx_bundle

    bundle = resolve_onnx_bundle(args.model)
    task = read_task(bundle)
    field = args.text_field or task.get("text_field", "text")
    workers = args.workers or default_workers()
    tmp = Path(tempfile.mkdtemp(prefix="denki-bench-"))
    if args.input_file:
        inp, in_field = Path(args.input_file), field
        n_rows = None
    else:
        inp, in_field, n_rows = tmp / "in.jsonl", "text", 0
        with open(inp, "w", encoding="utf-8") as f:
            for _, r in iter_records(args.data):
                if isinstance(r.get(field), str) and r[field].strip():
                    f.write(json.dumps({"text": r[field]}, ensure_ascii=False) + "\n")
                    n_rows += 1
                if n_rows >= args.rows:
                    break
    torch_model = None
    if "transformers" in engines:
        torch_model = args.torch_model or read_manifest(bundle)["source"]["parent"]["path"]

    for line in cpu_lines():
        print(line)
    print(f"before: {load_line()}; workers {workers}" + (f", torch threads {args.torch_threads or workers}"
                                                          if "transformers" in engines else ""))
    results: dict[str, list[dict]] = {e: [] for e in engines}
    for i in range(args.rounds):
        for e in engines:
            spec = {"engine": e, "model": str(bundle), "input": str(inp), "output": str(tmp / f"out-{e}-{i}.jsonl"),
                    "field": in_field, "batch_size": args.batch_size, "workers": workers, "threads": args.threads,
                    "torch_model": torch_model, "max_length": int(task.get("max_length") or 128),
                    "torch_threads": args.torch_threads or workers}
            r = run_child_rss(spec)
            results[e].append(r)
            for f in tmp.glob(f"out-{e}-{i}.jsonl*"):
                f.unlink()
            print(f"  round {i + 1} {e:17s} {r['rows'] / r['seconds']:8.0f} rows/s  "
                  f"{r['cpu_seconds'] / r['rows'] * 1e6:6.0f} µs CPU/row  peak RSS "
                  f"{r['peak_rss_mib']:6.0f} MiB" + (f"  stage busy s {_fmt_busy(r)}" if 'stage_seconds' in r else ""))
    summary = {}
    for e, rs in results.items():
        secs = statistics.median(r["seconds"] for r in rs)
        rows = rs[0]["rows"]
        summary[e] = {"rows": rows, "rows_per_s": rows / secs, "seconds_median": secs,
                      "cpu_us_per_row": statistics.median(r["cpu_seconds"] for r in rs) / rows * 1e6,
                      "peak_rss_mib": max(r["peak_rss_mib"] for r in rs),
                      "rss_quarters_mib": rs[-1]["rss_quarters_mib"],
                      **{k: rs[-1][k] for k in ("workers", "model_calls", "ort_threads", "window", "backend")
                         if k in rs[-1]}}
    print(f"after: {load_line()}")
    print()
    print(f"{summary[engines[0]]['rows']:,} rows, batch {args.batch_size}, workers {workers} "
          f"(medians of {args.rounds} round(s)):")
    print("| engine | rows/s | CPU µs/row (all threads) | peak RSS MiB | RSS by quarter of the run, MiB |")
    print("|---|---:|---:|---:|---|")
    for e in engines:
        s = summary[e]
        # a quarter shorter than the 0.25 s sampling period has no sample: "–"
        qs = " / ".join("–" if q is None else f"{q:.0f}" for q in s["rss_quarters_mib"])
        print(f"| {e} | {s['rows_per_s']:,.0f} | {s['cpu_us_per_row']:,.0f} | {s['peak_rss_mib']:.0f} | {qs} |")
    for e in engines:  # which ONNX variant the engine ran, and why (Predictor.describe())
        if summary[e].get("backend"):
            print(f"{e} backend: {summary[e]['backend']}")
    ratios = {}
    if "denki" in summary and "transformers" in summary:
        ratios["denki_vs_transformers"] = summary["denki"]["rows_per_s"] / summary["transformers"]["rows_per_s"]
    if "denki" in summary and "denki-sequential" in summary:
        ratios["denki_vs_sequential"] = summary["denki"]["rows_per_s"] / summary["denki-sequential"]["rows_per_s"]
    if "denki-sequential" in summary and "transformers" in summary:
        ratios["sequential_vs_transformers"] = (summary["denki-sequential"]["rows_per_s"]
                                                / summary["transformers"]["rows_per_s"])
    for k, v in ratios.items():
        print(f"{k.replace('_', ' ')}: {v:.2f}×" + (" (goal ≥ 5×)" if k == "denki_vs_transformers" else ""))
    # on a shared machine wall-clock ratios follow the other load; CPU time per row does not (much)
    cpu_ratios = {f"{b}/{a}": summary[b]["cpu_us_per_row"] / summary[a]["cpu_us_per_row"]
                  for a, b in (("denki", "transformers"), ("denki", "denki-sequential"))
                  if a in summary and b in summary}
    if cpu_ratios:
        print("CPU time per row, ratio: " + ", ".join(f"{k} {v:.2f}×" for k, v in cpu_ratios.items()))
    ratios.update({f"cpu_{k}": v for k, v in cpu_ratios.items()})

    gf = None
    if not args.no_gflops:
        texts = []
        for _, r in iter_records(inp):
            texts.append(r[in_field])
            if len(texts) >= min(args.rows, 4000):
                break
        gf = model_gflops(bundle, texts, args.batch_size, 16 * args.batch_size)
        peak = int8_gemm_peak()
        gf.update({"gemm_peak_gops_1thread": peak, "cpu_mhz": cpu_mhz()})
        print(f"int8 model call, 1 thread, CPU time, engine's batches ({len(texts)} rows, "
              f"{gf['padding_share']:.0%} padding): "
              f"{gf['gflops']:.1f} GFLOP/s computed ({gf['useful_gflops']:.1f} on real tokens), "
              f"{gf['rows_per_s']:,.0f} rows/s — this CPU's int8 peak, onnxruntime MatMulInteger "
              f"1024×512×512 on 1 thread: {peak:.0f} GOP/s ({gf['gflops'] / peak:.0%} reached)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"cpu": cpu_lines(), "summary": summary, "ratios": ratios,
                                               "rounds": results, "model_call": gf, "batch_size": args.batch_size,
                                               "workers": workers, "rows": n_rows}, indent=2) + "\n",
                                   encoding="utf-8")


def _fmt_busy(r: dict) -> str:
    s = r["stage_seconds"]
    return " ".join(f"{k} {v:.2f}" for k, v in s.items()) + f" of {r['seconds']:.2f}"


if __name__ == "__main__":
    main()
