"""Serving, torch-free: the ONNX runtime — a session (:mod:`.session`: the verified bundle, the variant picked for
this CPU with :mod:`.fastpath`, the provider) plus the bundle's task head from the registry (:mod:`.runtime`,
``from denki import Predictor``) — and what stands on it: batch scoring of CSV/JSONL files (:mod:`.batch`, its
files :mod:`.batch_files`, the stage pipeline :mod:`.pipeline`), ONNX evaluation (:mod:`.evaluate`), the HTTP API
(:mod:`.http` builds the app from :mod:`.http_settings`, :mod:`.http_schemas`, :mod:`.http_routes`,
:mod:`.http_admission`, :mod:`.http_metrics`; micro-batching :mod:`.microbatch`; the human log :mod:`.humanlog`),
``denki serve``'s settings and worker supervision (:mod:`.serve_settings`, :mod:`.workers`), model reloads without
a dropped request (:mod:`.reload`: ``POST /admin/reload``, SIGHUP), Ray Serve / Ray Data
scale-out (:mod:`.ray_setup`, :mod:`.ray_serve`, :mod:`.ray_batch`) and the latency benchmark
(:mod:`.bench_latency`).

May import: ``models/`` (its torch-free modules: :mod:`models.io`, :mod:`models.text`, :mod:`models.bundle`
format and onnx, :mod:`models.task`, :mod:`models.registry`, the task packages' runtime heads and numpy rules).
No module here imports torch at import time (tests/test_layout.py checks every one); only the latency
benchmark's PyTorch baseline row imports torch, inside a function. The ONNX export is
:mod:`models.export` (it needs torch).
"""

if not __name__.startswith("denki."):  # one name per module: `serve.x` and `denki.serve.x` would be two copies
    raise ImportError("import denki.serve, not serve (every denki module lives under the denki namespace)")
