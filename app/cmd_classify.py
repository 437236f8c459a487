"""`denki classify`: batch-score a CSV/JSONL file (or many, on Ray Data) with an ONNX classifier."""
from __future__ import annotations

import argparse

from denki.app.cmd_serve import BACKENDS


def register(sub) -> None:
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
    c.add_argument("--text-field", default=None, help="field holding the text; None: the one the model was trained on (task.json)")
    c.add_argument("--batch-size", type=int, default=64,
                   help="texts per model call; changing it changes the --resume state (rerun with the same value)")
    c.add_argument("--errors", default=None, metavar="FILE", help="errors file (default: OUTPUT.errors.jsonl)")
    c.add_argument("--resume", action="store_true", help="continue an interrupted run")
    c.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="auto: the fastest variant `denki bench pick` recorded for this CPU, else int8/o2/fp32")
    c.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="auto uses a GPU when one is usable; cpu to keep the GPU free for other work")
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
    r = c.add_argument_group("scale-out on Ray Data (optional extra: pip install 'denki[ray]')")
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


def cmd_classify(args) -> int:
    from denki.serve.batch import classify_file

    if args.engine == "ray":
        from denki.models.io.errors import DenkiError
        from denki.serve.ray_batch import classify_files_ray

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
