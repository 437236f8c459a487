"""`denki demo`: the Gradio demo (routing, QA, asking a manual, batch, latency) on ONNX bundles."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    d = sub.add_parser(
        "demo", help="Gradio demo: routing, span QA, asking a manual, batch scoring, latency measured per variant "
             "(127.0.0.1 by default)",
        description="Start the Gradio demo on ONNX bundles (no torch needed). Without --classifier/--qa it uses "
                    "the models `denki quickstart` produced (runs/quickstart/classifier-onnx, qa-onnx). Binds "
                    "127.0.0.1 unless --host says otherwise; analytics are off.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d.add_argument("--classifier", metavar="DIR",
                   help="ONNX classifier bundle (`denki export` output); None: runs/quickstart/classifier-onnx")
    d.add_argument("--qa", metavar="DIR", help="ONNX QA bundle; None: runs/quickstart/qa-onnx")
    d.add_argument("--index", metavar="DIR",
                   help="passage index (`denki index build`) that the マニュアルに質問 tab asks; None: "
                        "samples/manual.md, indexed at start")
    d.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 exposes it to the network)")
    d.add_argument("--port", type=int, default=7860, help="port to listen on; change it when 7860 is taken")
    d.add_argument("--backend", default="auto", choices=["auto", "int8", "o2", "fp32", "cuda"],
                   help="variant selected at start (switchable in the UI); auto: CUDA when a GPU is "
                        "usable, else int8, o2 or fp32, the first the bundle has")
    d.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads; None: onnxruntime's default (all "
                   "cores). Lower it on a shared machine")
    d.set_defaults(func=cmd_demo)


def cmd_demo(args) -> int:
    from denki.app.demo import launch

    launch(args.classifier, args.qa, host=args.host, port=args.port, threads=args.threads, prefer=args.backend,
           index=args.index)
    return 0
