"""`denki export`: a fine-tuned PyTorch bundle → an ONNX bundle (fp32 / O2 / int8 / fp16) behind the parity gate."""
from __future__ import annotations

import argparse

from denki.models.bundle.onnx import INT8_VARIANTS


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


def cmd_export(args) -> int:
    from denki.models.export.onnx import export_bundle, format_parity

    man = export_bundle(args.model, args.out, optimize=args.optimize or None, quantize=args.quantize or None, fp16=args.fp16,
                        parity_data=args.parity_data, atol=args.atol, min_agreement=args.min_agreement,
                        max_drop=args.max_drop)
    parity = man["metrics"]["parity"]
    print(f"export: {man['kind']} → {args.out} ({len(man['files'])} files); parity on {parity['n']} dev examples:")
    print(format_parity(parity))
    return 0
