"""`denki bench latency` and `denki bench pick` (the fastest CPU variant of an ONNX bundle, for backend auto)."""
from __future__ import annotations

import argparse


def register(sub) -> None:
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
    lat.add_argument("--model", required=True, metavar="DIR", help="ONNX classifier bundle (`denki export` output)")
    lat.add_argument("--texts", metavar="FILE",
                     help="texts to time (.txt, or .jsonl/.csv with the training text field); None: the bundle's "
                          "dev sample. Give your own traffic when its lengths differ from the dev sample's")
    lat.add_argument("--torch-model", metavar="DIR",
                     help="PyTorch bundle for the PyTorch row; None: the export's parent, when it is still there")
    lat.add_argument("--out", default=None, metavar="DIR",
                     help="where latency.json / .md / .png go; None: MODEL/../bench-latency")
    lat.add_argument("--iterations", type=int, default=60,
                     help="timed calls per backend at batch 1; raise it for steadier p95/p99 on a noisy machine")
    lat.add_argument("--batch-iterations", type=int, default=12,
                     help="timed calls per backend at batch 32; raise it for steadier batch figures")
    lat.add_argument("--threads", type=int, default=None,
                     help="threads for torch and onnxruntime; None: each library's default (all cores). Set it to "
                          "the cores your service will have, e.g. 1 for one worker per core")
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
    pk.add_argument("--iterations", type=int, default=20,
                    help="timed batch-1 calls per candidate; raise it when close candidates swap places run to run")
    pk.add_argument("--batch-iterations", type=int, default=5, help="timed batch calls per candidate")
    pk.add_argument("--batch-size", type=int, default=32,
                    help="rows per batch call; set it to the batch size you serve or score with")
    pk.add_argument("--no-spinning", action="store_true",
                    help="do not time spinning on/off (keep onnxruntime's default); faster, for machines where "
                         "busy-waiting threads are unwelcome anyway")
    pk.add_argument("--dry-run", action="store_true", help="print the timings, record nothing (a look before "
                                                             "changing what backend auto picks)")
    pk.set_defaults(func=cmd_bench_pick)


def cmd_bench_latency(args) -> int:
    from pathlib import Path

    from denki.serve.bench_latency import bench_latency, to_markdown

    out = args.out or str(Path(args.model).resolve().parent / "bench-latency")
    res = bench_latency(args.model, out, texts=args.texts, torch_model=args.torch_model, iterations=args.iterations,
                        batch_iterations=args.batch_iterations, threads=args.threads)
    print(to_markdown(res))
    print(f"bench: wrote {out}/latency.json, latency.md, latency.png")
    return 0


def cmd_bench_pick(args) -> int:
    from denki.models.bundle.format import verify_bundle
    from denki.models.text.tokenizer import JapaneseTokenizer
    from denki.serve.fastpath import cpu_fingerprint, format_entry, measure, record
    from denki.models.registry.tasks import onnx_kinds
    from denki.serve.runtime import resolve_onnx_bundle

    bundle = resolve_onnx_bundle(args.model)
    man = verify_bundle(bundle, kinds=onnx_kinds())  # time only files that are the ones the gate passed
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
