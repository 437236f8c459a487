"""The int8 variants of a QA bundle when onnxruntime's dynamic quantiser quantises only some operator types
(experiments/reader-epochs/README.md, "Which operators int8 quantises"): prints each variant's parity figures.

    OMP_NUM_THREADS=1 taskset -c 0 python experiments/reader-epochs/int8_ops.py BUNDLE OUT OPS [PARITY_DATA]

OPS: ``all`` (the registry's default), ``no-heads`` (all, but the span and answerable heads kept fp32), or
operator types joined by commas (``MatMul,Attention``).
"""
import logging
import sys

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic

import denki.models.export.onnx as export
from denki.models.bundle.format import resolve_bundle


def quantizer(ops: str):
    def quantize(src_model, dest, per_channel=False):
        graph = onnx.load(str(src_model)).graph
        heads = [n.name for n in graph.node if n.name.startswith(("/qa_outputs", "/answerable"))]
        was = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            quantize_dynamic(str(src_model), str(dest), weight_type=QuantType.QInt8, per_channel=per_channel,
                             nodes_to_exclude=heads if ops == "no-heads" else [],
                             op_types_to_quantize=None if ops in ("all", "no-heads") else ops.split(","),
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        finally:
            logging.disable(was)
    return quantize


if __name__ == "__main__":
    src, out, ops = resolve_bundle(sys.argv[1]), sys.argv[2], sys.argv[3]
    export._quantize_int8 = quantizer(ops)
    man = export.export_bundle(src, out, optimize="O2", quantize=["int8", "int8-channel"], min_agreement=0.9,
                               max_drop=0.03, best_effort=True, progress=False,
                               parity_data=sys.argv[4] if len(sys.argv) > 4 else None)
    print(f"operators: {ops}")
    print(export.format_parity(man["metrics"]["parity"]))
