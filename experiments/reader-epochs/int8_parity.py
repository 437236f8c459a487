"""The int8 variants of a QA bundle behind the quickstart's parity gate (agreement ≥ 0.9, F1 drop ≤ 3 points
against PyTorch), best effort: prints each variant's figures (experiments/reader-epochs/README.md, "int8").

    OMP_NUM_THREADS=1 taskset -c 0 python experiments/reader-epochs/int8_parity.py QA_BUNDLE OUT [PARITY_DATA]
"""
import json
import sys

from denki.models.bundle.format import resolve_bundle
from denki.models.export.onnx import export_bundle, format_parity

if __name__ == "__main__":
    src, out = resolve_bundle(sys.argv[1]), sys.argv[2]
    data = sys.argv[3] if len(sys.argv) > 3 else None
    man = export_bundle(src, out, optimize="O2", quantize=["int8", "int8-channel", "int8-static"],
                        min_agreement=0.9, max_drop=0.03, best_effort=True, parity_data=data)
    print(format_parity(man["metrics"]["parity"]))
    print(json.dumps(man["metrics"].get("left_out", []), ensure_ascii=False))
