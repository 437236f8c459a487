"""`denki serve`: the HTTP API (FastAPI + uvicorn) over ONNX bundles, with micro-batching across requests."""
from __future__ import annotations

import argparse
import sys

from models.bundle.onnx import MODEL_FILES

#: --backend choices of the commands that load a Predictor (`auto`: the recorded fastest on this CPU, else the
#: default rule; `fastest`: measured at load); `denki classify` uses them too
BACKENDS = ["auto", "fastest", *MODEL_FILES]

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def register(sub) -> None:
    p = sub.add_parser(
        "serve", help="HTTP API (classify, answer, metrics) over ONNX bundles; 127.0.0.1 by default",
        description="Serve ONNX bundles over HTTP: POST /v1/classify, /v1/answer, /v1/answer/batch; GET /healthz, "
                    "/readyz, /metrics (Prometheus), /docs and /openapi.json. Concurrent requests are merged into "
                    "micro-batches (bounded queue; 503 + Retry-After when full). Binds 127.0.0.1 unless --host says "
                    "otherwise. Ctrl-C / SIGTERM finishes in-flight requests before exiting. With --ray the same app "
                    "runs as Ray Serve replicas (local Ray instance, or --address of a cluster).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--classifier", metavar="DIR", help="ONNX classifier bundle (`denki export` output)")
    p.add_argument("--qa", metavar="DIR", help="ONNX QA bundle")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 exposes it to the network)")
    p.add_argument("--port", type=int, default=8080, help="TCP port")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="auto: the fastest variant `denki bench pick` recorded for this CPU, else int8/o2/fp32")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads per model")
    g = p.add_argument_group("micro-batching")
    g.add_argument("--no-batching", action="store_true", help="one request = one model call (baseline)")
    g.add_argument("--max-batch", type=int, default=32, help="texts (or QA pairs) per model call")
    g.add_argument("--max-wait-ms", type=float, default=2.0,
                   help="how long the first request of a batch waits for others")
    g.add_argument("--max-queue", type=int, default=512,
                   help="texts/pairs waiting per model before answering 503 with Retry-After")
    lim = p.add_argument_group("limits")
    lim.add_argument("--max-texts", type=int, default=64, help="texts per /v1/classify request")
    lim.add_argument("--max-text-chars", type=int, default=20_000, help="characters per text or question")
    lim.add_argument("--max-pairs", type=int, default=16, help="pairs per /v1/answer/batch request")
    lim.add_argument("--max-context-chars", type=int, default=100_000, help="characters per QA context")
    lim.add_argument("--max-body-bytes", type=int, default=2 * 1024 * 1024, help="request body limit (413)")
    lim.add_argument("--max-connections", type=int, default=1000,
                     help="concurrent connections before uvicorn answers 503")
    lim.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds on 503")
    lim.add_argument("--shutdown-timeout", type=float, default=30.0,
                     help="seconds to finish in-flight requests at shutdown")
    r = p.add_argument_group("scale-out on Ray Serve (optional extra: pip install -e '.[ray]')")
    r.add_argument("--ray", action="store_true",
                   help="deploy the same app through Ray Serve: replicas each hold the ONNX predictors")
    r.add_argument("--num-replicas", type=int, default=1, help="replicas (Ray actors) of the app")
    r.add_argument("--replica-cpus", type=float, default=1.0,
                   help="CPUs reserved per replica (fractions allowed; also its onnxruntime threads, ≥1)")
    r.add_argument("--replica-gpus", type=float, default=0.0,
                   help="GPUs per replica (e.g. 0.5 packs two replicas on one GPU; implies --device cuda)")
    r.add_argument("--address", default=None,
                   help="join an existing Ray cluster (auto, HOST:6379 or ray://HOST:10001) instead of starting a "
                        "private local instance; bundle paths must be readable on every node")
    r.add_argument("--ray-temp-dir", default=None, metavar="DIR",
                   help="temp dir of the local Ray instance (default: a fresh /tmp/denki-ray-*)")
    r.add_argument("--detach", action="store_true",
                   help="with --address: leave the application running on the cluster and return")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--access-log", action="store_true", help="log every request (costs throughput)")
    p.set_defaults(func=cmd_serve)


def _settings(args):
    from serve.http import ServerSettings

    return ServerSettings(batching=not args.no_batching, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                          max_queue=args.max_queue, max_texts=args.max_texts, max_text_chars=args.max_text_chars,
                          max_pairs=args.max_pairs, max_context_chars=args.max_context_chars,
                          max_body_bytes=args.max_body_bytes, retry_after_s=args.retry_after,
                          shutdown_timeout_s=args.shutdown_timeout)


def build_app(args):
    """Load the predictors and build the app (separate from uvicorn so tests and benchmarks can reuse it)."""
    from serve.http import create_app
    from serve.runtime import Predictor

    from models.io.errors import DenkiError

    if not args.classifier and not args.qa:
        raise DenkiError("give --classifier DIR and/or --qa DIR (ONNX bundles from `denki export`)")
    settings = _settings(args)
    kw = dict(backend=args.backend, device=args.device, threads=args.threads)
    cls = Predictor(args.classifier, **kw) if args.classifier else None
    qa = Predictor(args.qa, **kw) if args.qa else None
    return create_app(classifier=cls, qa=qa, settings=settings)


def cmd_serve(args) -> int:
    import logging

    import uvicorn

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.host not in LOOPBACK:
        print(f"denki serve: binding {args.host} — the API has no authentication; put it behind a firewall or a "
              f"reverse proxy (docs/serving.md)", file=sys.stderr)
    if args.ray:
        from serve.ray_serve import build_application, run_ray_serve
        from serve.ray_setup import import_ray

        import_ray()  # a clear error when the extra is missing, before anything is loaded
        app = build_application(args.classifier, args.qa, _settings(args), backend=args.backend, device=args.device,
                                threads=args.threads, num_replicas=args.num_replicas, replica_cpus=args.replica_cpus,
                                replica_gpus=args.replica_gpus)
        return run_ray_serve(app, host=args.host, port=args.port, address=args.address,
                             temp_dir=args.ray_temp_dir, detach=args.detach)
    app = build_app(args)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log,
                limit_concurrency=args.max_connections, timeout_graceful_shutdown=args.shutdown_timeout,
                server_header=False)
    return 0
