"""`denki export`, `denki classify` (batch scoring), `denki bench latency` and `denki bench pick`."""
from __future__ import annotations

import argparse

from models.bundle.onnx import INT8_VARIANTS, MODEL_FILES

#: --backend choices of the commands that load a Predictor (`auto`: the recorded fastest on this CPU, else the
#: default rule; `fastest`: measured at load)
BACKENDS = ["auto", "fastest", *MODEL_FILES]


def register(sub) -> None:
    e = sub.add_parser(
        "export", help="export a fine-tuned bundle to ONNX (fp32/O2/int8/fp16) behind a parity gate",
        description="Export a classifier or QA bundle (the `denki finetune` output dir or its bundle/) to an ONNX "
                    "bundle. fp32 (and O2) must match PyTorch within --atol on the bundle's own dev sample or "
                    "nothing is written; int8/fp16 must reach --min-agreement and lose at most --max-drop.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    e.add_argument("--model", required=True, metavar="DIR", help="fine-tuned bundle (or the run dir holding bundle/)")
    e.add_argument("--out", required=True, metavar="DIR", help="output ONNX bundle directory")
    e.add_argument("--optimize", choices=["O1", "O2", "O3"], nargs="+", default=None, metavar="LEVEL",
                   help="ORT graph optimisation level (→ model.o2.onnx); O2 O3 writes O3 beside it "
                        "(model.o3.onnx) for `denki bench pick` to time")
    e.add_argument("--quantize", choices=list(INT8_VARIANTS), nargs="+", default=None, metavar="VARIANT",
                   help="int8 variants for CPU, each gated on its own: int8 (dynamic, per-tensor), int8-channel "
                        "(dynamic, per-channel weights), int8-static (static QDQ, calibrated on the parity data); "
                        "`denki bench pick` then records which is fastest on a CPU")
    e.add_argument("--fp16", action="store_true", help="also write an fp16 graph for CUDA")
    e.add_argument("--parity-data", metavar="FILE",
                   help="dev data for the parity gate (default: the sample stored in the bundle)")
    e.add_argument("--atol", type=float, default=1e-4, help="fp32 max |logit difference| allowed")
    e.add_argument("--min-agreement", type=float, default=0.95,
                   help="int8/fp16: minimum fraction of predictions equal to PyTorch's")
    e.add_argument("--max-drop", type=float, default=0.02,
                   help="int8/fp16: maximum metric drop (accuracy for classifiers, F1 vs PyTorch for QA)")
    e.set_defaults(func=cmd_export)

    c = sub.add_parser(
        "classify", help="score a CSV/JSONL file with an ONNX classifier (streaming, resumable)",
        description="Batch-score a CSV or JSONL file (.gz allowed) with an ONNX classifier bundle. Each output row "
                    "keeps the input's fields and adds label, score and route (route = label or 'human'). Rows "
                    "that cannot be scored go to the errors file with line number and reason; output rows + "
                    "error rows = input rows, in input order. Interrupted? Re-run with --resume (same --batch-size "
                    "and --window): the result is byte-identical to an uninterrupted run. --workers sets the cores "
                    "(default: all). --engine ray scores many files (a glob) on Ray Data with a pool of actors "
                    "holding the predictor, one output per input in a directory.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    c.add_argument("--model", required=True, metavar="DIR", help="ONNX classifier bundle (`denki export` output)")
    c.add_argument("--input", required=True, metavar="FILE",
                   help="input file; with --engine ray a glob ('data/*.jsonl.gz'), a directory or a file")
    c.add_argument("--output", required=True, metavar="FILE",
                   help=".jsonl or .csv (optionally .gz); with --engine ray a directory (one output per input)")
    c.add_argument("--text-field", default=None, help="field holding the text (default: the one used in training)")
    c.add_argument("--batch-size", type=int, default=64)
    c.add_argument("--errors", default=None, metavar="FILE", help="errors file (default: OUTPUT.errors.jsonl)")
    c.add_argument("--resume", action="store_true", help="continue an interrupted run")
    c.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="auto: the fastest variant `denki bench pick` recorded for this CPU, else int8/o2/fp32")
    c.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    c.add_argument("--workers", type=int, default=None, metavar="N",
                   help="cores to use (default: all this process may run on). Reading/tokenising, the model "
                        "and writing overlap in threads; the model runs up to N batches at once; 1 = one thread, "
                        "stages in turn")
    c.add_argument("--threads", type=int, default=None, metavar="T",
                   help="onnxruntime threads per model call (default 1: N calls side by side; T: N // T calls "
                        "of T threads, for bigger models)")
    c.add_argument("--window", type=int, default=None, metavar="ROWS",
                   help="length bucketing: texts are sorted by token length into batches within windows of this "
                        "many rows, then written back in input order (default: 16 × --batch-size; = --batch-size: "
                        "no bucketing). Bounds memory")
    c.add_argument("--checkpoint-seconds", type=float, default=2.0, metavar="S",
                   help="fsync the outputs and save the --resume state at most this often (0 = after every "
                        "window)")
    r = c.add_argument_group("scale-out on Ray Data (optional extra: pip install -e '.[ray]')")
    r.add_argument("--engine", choices=["local", "ray"], default="local",
                   help="ray: Ray Data map_batches over an actor pool (local Ray instance, or --address)")
    r.add_argument("--actors", type=int, default=None,
                   help="actors holding the predictor (default: as many as the cluster's CPUs/GPUs allow)")
    r.add_argument("--cpus-per-actor", type=float, default=1.0,
                   help="CPUs per actor (fractions allowed; also its onnxruntime threads, ≥1)")
    r.add_argument("--gpus-per-actor", type=float, default=0.0, help="GPUs per actor (implies --device cuda)")
    r.add_argument("--id-field", default="id",
                   help="row id kept in outputs and errors for re-joining (added as FILE:LINE when a record has "
                        "none)")
    r.add_argument("--address", default=None, help="existing Ray cluster (auto, HOST:6379, ray://HOST:10001)")
    r.add_argument("--ray-temp-dir", default=None, metavar="DIR", help="temp dir of the local Ray instance")
    c.set_defaults(func=cmd_classify)

    b = sub.add_parser("bench", help="benchmarks (latency; pick the fastest CPU variant)",
                       description="Benchmark commands.")
    b.set_defaults(_group_parser=b)
    bsub = b.add_subparsers(dest="bench_command", metavar="WHAT")
    lat = bsub.add_parser(
        "latency", help="p50/p95/p99 latency of PyTorch vs ORT fp32/O2/int8 (+CUDA fp16) vs optimum pipeline",
        description="Latency and throughput at batch 1 and 32, short (~32-token) and long (128-token) inputs, for "
                    "PyTorch eager fp32 (same weights), ORT fp32 / O2 / int8, CUDA fp16 when a GPU is usable, and "
                    "optimum's ORTModel + transformers pipeline on the same ONNX file. One process, interleaved, "
                    "warm-up excluded. Writes latency.json / latency.md / latency.png.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    lat.add_argument("--model", required=True, metavar="DIR", help="ONNX classifier bundle")
    lat.add_argument("--texts", metavar="FILE", help="texts (.txt, or .jsonl/.csv with the training text field); "
                                                     "default: the bundle's dev sample")
    lat.add_argument("--torch-model", metavar="DIR", help="PyTorch bundle (default: the export's parent)")
    lat.add_argument("--out", default=None, metavar="DIR", help="output dir (default: MODEL/../bench-latency)")
    lat.add_argument("--iterations", type=int, default=60, help="timed calls per backend at batch 1")
    lat.add_argument("--batch-iterations", type=int, default=12, help="timed calls per backend at batch 32")
    lat.add_argument("--threads", type=int, default=None, help="threads for torch and onnxruntime")
    lat.set_defaults(func=cmd_bench_latency)

    pk = bsub.add_parser(
        "pick", help="time the bundle's CPU variants on this CPU and record the fastest for backend auto",
        description="Time every CPU variant of an ONNX bundle that passed its parity gate (fp32, o2, int8, "
                    "o3, int8-channel, int8-static; with several threads, spinning on and off) on the bundle's parity "
                    "sample, interleaved, at batch 1 and --batch-size, and record the fastest in "
                    "MODEL/fastpath.json under this CPU's fingerprint (model name + int8/SIMD flags) and thread "
                    "count. Predictor(backend='auto') — denki classify and denki serve — then uses it on this CPU. "
                    "The file is not in the manifest, so the bundle's sha256 check is unaffected. Torch-free.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    pk.add_argument("--model", required=True, metavar="DIR", help="ONNX bundle (classifier or QA)")
    pk.add_argument("--threads", type=int, nargs="+", default=[1, 0], metavar="T",
                    help="intra-op thread counts to record, one entry each (0 = onnxruntime's default, what "
                         "`denki serve` uses; 1 = what each `denki classify` model call uses)")
    pk.add_argument("--iterations", type=int, default=20, help="timed batch-1 calls per candidate")
    pk.add_argument("--batch-iterations", type=int, default=5, help="timed batch calls per candidate")
    pk.add_argument("--batch-size", type=int, default=32, help="rows per batch call")
    pk.add_argument("--no-spinning", action="store_true", help="do not time spinning on/off (onnxruntime default)")
    pk.add_argument("--dry-run", action="store_true", help="print the timings, record nothing")
    pk.set_defaults(func=cmd_bench_pick)


def cmd_export(args) -> int:
    from models.export.onnx import export_bundle, format_parity

    man = export_bundle(args.model, args.out, optimize=args.optimize or None, quantize=args.quantize or None, fp16=args.fp16,
                        parity_data=args.parity_data, atol=args.atol, min_agreement=args.min_agreement,
                        max_drop=args.max_drop)
    parity = man["metrics"]["parity"]
    print(f"export: {man['kind']} → {args.out} ({len(man['files'])} files); parity on {parity['n']} dev examples:")
    print(format_parity(parity))
    return 0


def cmd_classify(args) -> int:
    from serve.batch import classify_file

    if args.engine == "ray":
        from models.io.errors import DenkiError
        from serve.ray_batch import classify_files_ray

        if args.resume:
            raise DenkiError("--resume is for --engine local; --engine ray writes each output atomically when its "
                             "file is done, so re-run the command instead")
        if args.errors:
            raise DenkiError("--errors is for --engine local; --engine ray writes OUTPUT_DIR/NAME.errors.jsonl "
                             "beside each output")
        r = classify_files_ray(args.model, args.input, args.output, text_field=args.text_field,
                               id_field=args.id_field, batch_size=args.batch_size, actors=args.actors,
                               cpus_per_actor=args.cpus_per_actor, gpus_per_actor=args.gpus_per_actor,
                               backend=args.backend, device=args.device, threads=args.threads,
                               address=args.address, temp_dir=args.ray_temp_dir)
        print(f"classify (ray): {len(r['files'])} files, {r['rows_in']} rows in → {r['rows_out']} scored, "
              f"{r['rows_err']} errors → {r['output_dir']} (summary.json); {r['rows_per_s']:.0f} rows/s with "
              f"{r['actors']} actors")
        return 0
    r = classify_file(args.model, args.input, args.output, text_field=args.text_field, batch_size=args.batch_size,
                      errors_path=args.errors, resume=args.resume, backend=args.backend, device=args.device,
                      threads=args.threads, workers=args.workers, window=args.window,
                      checkpoint_seconds=args.checkpoint_seconds)
    print(f"classify: {r['rows_in']} rows in → {r['rows_out']} scored ({r['output']}), {r['rows_err']} errors "
          f"({r['errors']}); {r['rows_per_s']:.0f} rows/s with {r['backend']}, {r['workers']} workers "
          f"({r['model_calls']} model calls × {r['ort_threads']} threads)")
    return 0


def cmd_bench_latency(args) -> int:
    from pathlib import Path

    from serve.bench_latency import bench_latency, to_markdown

    out = args.out or str(Path(args.model).resolve().parent / "bench-latency")
    res = bench_latency(args.model, out, texts=args.texts, torch_model=args.torch_model, iterations=args.iterations,
                        batch_iterations=args.batch_iterations, threads=args.threads)
    print(to_markdown(res))
    print(f"bench: wrote {out}/latency.json, latency.md, latency.png")
    return 0


def cmd_bench_pick(args) -> int:
    from models.bundle.format import verify_bundle
    from models.text.tokenizer import JapaneseTokenizer
    from serve.fastpath import cpu_fingerprint, format_entry, measure, record
    from serve.runtime import ONNX_KINDS, resolve_onnx_bundle

    bundle = resolve_onnx_bundle(args.model)
    man = verify_bundle(bundle, kinds=ONNX_KINDS)  # time only files that are the ones the gate passed
    tok = JapaneseTokenizer.load(bundle)
    fp = cpu_fingerprint()
    print(f"bench pick: {bundle} on {fp['key']}")
    for t in dict.fromkeys(args.threads):  # in order, duplicates dropped
        threads = t or None
        entry = measure(bundle, man, tok, threads=threads, iterations=args.iterations,
                        batch_iterations=args.batch_iterations, batch_size=args.batch_size,
                        spinning=not args.no_spinning)
        print(format_entry(entry, threads))
        best = entry["candidates"][0]
        if not args.dry_run:
            path = record(bundle, entry, threads, fp)
            print(f"  → recorded {best['backend']} in {path}")
    if entry.get("load_average"):
        print(f"load average while timing: {entry['load_average']}")
    return 0
