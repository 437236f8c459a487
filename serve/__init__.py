"""Serving, torch-free: the ONNX runtime predictor (:mod:`.runtime`, ``from denki import Predictor``) and
what stands on it — batch scoring of CSV/JSONL files (:mod:`.batch`), ONNX evaluation (:mod:`.evaluate`), the
HTTP API with micro-batching and Prometheus metrics (:mod:`.http`, :mod:`.microbatch`), Ray Serve / Ray Data
scale-out (:mod:`.ray_setup`, :mod:`.ray_serve`, :mod:`.ray_batch`) and the latency benchmark
(:mod:`.bench_latency`).

May import: ``models/`` (its torch-free modules: :mod:`models.io`, :mod:`models.text`, :mod:`models.bundle`
format and onnx, :mod:`models.classify.decision`, :mod:`models.qa.postprocess` / ``metrics`` / ``data``).
No module here imports torch at import time (tests/test_layout.py checks every one); only the latency
benchmark's PyTorch baseline row imports torch, inside a function. The ONNX export is
:mod:`models.export` (it needs torch).
"""

if not __name__.startswith("denki."):  # one name per module: `serve.x` and `denki.serve.x` would be two copies
    raise ImportError("import denki.serve, not serve (every denki module lives under the denki namespace)")
