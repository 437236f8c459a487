"""`denki serve`: the HTTP API (FastAPI + uvicorn) over ONNX bundles: admission control, micro-batching where it
pays, one model per worker process on every core."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from denki.models.bundle.onnx import MODEL_FILES

#: --backend choices of the commands that load a Predictor (`auto`: the recorded fastest on this CPU, else the
#: default rule; `fastest`: measured at load); `denki classify` uses them too
BACKENDS = ["auto", "fastest", *MODEL_FILES]

LOOPBACK = ("127.0.0.1", "localhost", "::1")

#: environment variables handing the command line to the worker processes (uvicorn starts them with spawn, so
#: they import the app from a string and rebuild it) and naming the folder a failing worker reports into
WORKER_ARGS_ENV = "DENKI_SERVE_WORKER_ARGS"
WORKER_STATE_ENV = "DENKI_SERVE_STATE_DIR"
STARTUP_FAILURE_FILE = "startup-failure.txt"

#: what a worker needs of the command line (the rest is the parent's business)
WORKER_ARG_KEYS = ("classifier", "qa", "backend", "device", "threads", "batching", "no_batching", "max_batch",
                   "max_wait_ms", "max_queue", "max_queue_ms", "max_texts", "max_text_chars", "max_pairs",
                   "max_context_chars", "max_body_bytes", "retry_after", "shutdown_timeout", "log_level",
                   "human_log")


def register(sub) -> None:
    from denki.serve.microbatch import BATCHING_RULE, DEFAULT_MAX_QUEUE_MS

    p = sub.add_parser(
        "serve", help="HTTP API (classify, answer, metrics) over ONNX bundles; 127.0.0.1 by default",
        description="Serve ONNX bundles over HTTP: POST /v1/classify, /v1/answer, /v1/answer/batch; GET /healthz, "
                    "/readyz, /metrics (Prometheus), /docs and /openapi.json. One model per worker process, a "
                    "worker per core by default, behind one port. Latency is bounded by admission control: a "
                    "request whose model call cannot start within --max-queue-ms is answered 503 + Retry-After "
                    "(refused on arrival when the measured service rate already says so). Concurrent requests are "
                    "merged into micro-batches where that pays (--batching auto). Binds 127.0.0.1 unless --host "
                    "says otherwise. Ctrl-C / SIGTERM finishes in-flight requests before exiting. With --ray the "
                    "same app runs as Ray Serve replicas (local Ray instance, or --address of a cluster).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--classifier", metavar="DIR", help="ONNX classifier bundle (`denki export` output)")
    p.add_argument("--qa", metavar="DIR", help="ONNX QA bundle")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 exposes it to the network)")
    p.add_argument("--port", type=int, default=8080, help="TCP port")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="auto: the fastest variant `denki bench pick` recorded for this CPU, else int8/o2/fp32")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--workers", default="auto", type=_workers_arg, metavar="N|auto",
                   help="worker processes, each with its own copy of the models, behind one port (uvicorn "
                        "workers). auto: one per core this process may use on CPU (the affinity mask), 1 on CUDA; "
                        "to be confirmed by experiments/serve-load (goal: 2 workers ≥ 1.6x one on 2 cores)")
    p.add_argument("--threads", type=int, default=None,
                   help="onnxruntime intra-op threads per model; default: the cores divided among the workers "
                        "(1 each with a worker per core), onnxruntime's own default with one worker")
    g = p.add_argument_group("admission control and micro-batching")
    g.add_argument("--max-queue-ms", type=float, default=DEFAULT_MAX_QUEUE_MS,
                   help="deadline: a request whose model call has not started this many ms after it arrived is "
                        "answered 503 + Retry-After; one that would wait longer by the measured service rate is "
                        "refused on arrival. Bounds p99 of admitted requests by about this plus one model call "
                        "(default to be confirmed by experiments/serve-load)")
    g.add_argument("--batching", default="auto", choices=["auto", "on", "off"],
                   help=f"micro-batching across requests. {BATCHING_RULE}")
    g.add_argument("--no-batching", action="store_true", help="the same as --batching off (kept for old scripts)")
    g.add_argument("--max-batch", type=int, default=32, help="texts (or QA pairs) per model call")
    g.add_argument("--max-wait-ms", type=float, default=None,
                   help="with batching: how long the first request of a batch waits for others (default: 0 on CPU "
                        "— a batch is what queued while the previous call ran —, 2 on CUDA)")
    g.add_argument("--max-queue", type=int, default=2048,
                   help="memory backstop: texts/pairs waiting per model (per worker) before 503; the latency bound "
                        "is --max-queue-ms")
    lim = p.add_argument_group("limits")
    lim.add_argument("--max-texts", type=int, default=64, help="texts per /v1/classify request")
    lim.add_argument("--max-text-chars", type=int, default=20_000, help="characters per text or question")
    lim.add_argument("--max-pairs", type=int, default=16, help="pairs per /v1/answer/batch request")
    lim.add_argument("--max-context-chars", type=int, default=100_000, help="characters per QA context")
    lim.add_argument("--max-body-bytes", type=int, default=2 * 1024 * 1024, help="request body limit (413)")
    lim.add_argument("--max-connections", type=int, default=1000,
                     help="concurrent connections per worker before uvicorn answers 503")
    lim.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds on 503")
    lim.add_argument("--shutdown-timeout", type=float, default=30.0,
                     help="seconds to finish in-flight requests at shutdown")
    r = p.add_argument_group("scale-out on Ray Serve (optional extra: pip install 'denki[ray]')")
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
    p.add_argument("--human-log", metavar="FILE", default=None,
                   help="append every text the classifier routes to the human label (担当者へ: the model was unsure) "
                        "to FILE as one JSON line: time (UTC), model, text, the top 3 labels with their calibrated "
                        "scores, route, and id when the request has an X-Request-ID header. Off by default. Use it "
                        "to close the loop: people add a \"label\" field to these rows and `denki finetune classify "
                        "--train ORIGINAL FILE ...` learns from them (docs/serving.md, \"The weekly retrain\"). "
                        "Safe with several --workers (one O_APPEND write per line); its folder must exist; a failed "
                        "write never fails the request (counted in denki_human_log_errors_total)")
    p.add_argument("--http", default="auto", choices=["auto", "httptools", "h11"],
                   help="uvicorn's HTTP parser. auto: httptools (C; installed with denki) when importable, else h11 "
                        "(pure Python: every request, a 503 too, costs more CPU; experiments/serve-load)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--access-log", action="store_true", help="log every request (costs throughput)")
    p.set_defaults(func=cmd_serve)


def _workers_arg(value: str):
    """``auto`` or a positive integer."""
    if str(value).strip().lower() == "auto":
        return "auto"
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers takes a number or auto, not {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError("--workers must be ≥ 1")
    return n


def _settings(args):
    from denki.serve.http import ServerSettings

    batching = "off" if getattr(args, "no_batching", False) else getattr(args, "batching", "auto")
    return ServerSettings(batching=batching, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                          max_queue=args.max_queue, max_queue_ms=args.max_queue_ms, max_texts=args.max_texts,
                          max_text_chars=args.max_text_chars, max_pairs=args.max_pairs,
                          max_context_chars=args.max_context_chars, max_body_bytes=args.max_body_bytes,
                          retry_after_s=args.retry_after, shutdown_timeout_s=args.shutdown_timeout,
                          human_log=getattr(args, "human_log", None))


def build_app(args):
    """Load the predictors and build the app (separate from uvicorn so tests and benchmarks can reuse it)."""
    from denki.serve.http import create_app
    from denki.serve.runtime import Predictor

    from denki.models.io.errors import DenkiError

    if not args.classifier and not args.qa:
        raise DenkiError("give --classifier DIR and/or --qa DIR (ONNX bundles from `denki export`)")
    settings = _settings(args)
    kw = dict(backend=args.backend, device=args.device, threads=args.threads)
    cls = Predictor(args.classifier, **kw) if args.classifier else None
    qa = Predictor(args.qa, **kw) if args.qa else None
    return create_app(classifier=cls, qa=qa, settings=settings)


# ---------------------------------------------------------------------------------------------- worker processes
def resolve_workers(workers, device: str, cores: int) -> int:
    """``--workers``: a number as given; ``auto``: 1 on CUDA (one GPU is shared best by batching in one process,
    not by several CUDA contexts), else one per core — the Python request path (HTTP, JSON, tokenising) holds one
    interpreter's GIL, so only processes use every core; onnxruntime's threads help a batch, not that path."""
    if workers != "auto":
        return int(workers)
    return 1 if device == "cuda" else max(1, cores)


def resolve_threads(threads: int | None, workers: int, cores: int) -> int | None:
    """onnxruntime intra-op threads per model: as given; with several workers the cores divided among them (so
    the workers do not oversubscribe the machine); with one worker onnxruntime's default (None)."""
    if threads:
        return int(threads)
    return max(1, cores // workers) if workers > 1 else None


def resolve_http(http: str) -> str:
    """uvicorn's ``http`` setting: ``auto`` names httptools when it imports (a C parser; uvicorn's own ``auto``
    does the same, named here so the startup log says which one runs), else h11."""
    import importlib.util

    from denki.models.io.errors import DenkiError

    available = importlib.util.find_spec("httptools") is not None
    if http == "auto":
        return "httptools" if available else "h11"
    if http == "httptools" and not available:
        raise DenkiError("--http httptools: the httptools package is not installed (pip install 'denki[serve]')")
    return http


def _cuda_requested(device: str) -> bool:
    """Whether the models will run on CUDA (``auto``: only if onnxruntime can really run there)."""
    if device != "auto":
        return device == "cuda"
    from denki.serve.runtime import _cuda_usable  # the runtime's own probe, cheap without a GPU

    return _cuda_usable()


def worker_app():
    """The app of one worker process (``uvicorn.run("denki.app.cmd_serve:worker_app", factory=True, workers=N)``): the
    command line comes from :data:`WORKER_ARGS_ENV`. A worker that cannot load its models exits with uvicorn's
    startup-failure code, so the supervisor stops instead of restarting it in a loop, and leaves the reason for
    the parent in :data:`WORKER_STATE_ENV`."""
    import logging

    from uvicorn.config import STARTUP_FAILURE

    args = argparse.Namespace(**json.loads(os.environ[WORKER_ARGS_ENV]))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return build_app(args)
    except Exception as exc:  # noqa: BLE001 — reported to the parent, then the worker stops
        logging.getLogger("denki.serve").error("worker %d could not start: %s", os.getpid(), exc)
        state = os.environ.get(WORKER_STATE_ENV)
        if state:
            with open(os.path.join(state, STARTUP_FAILURE_FILE), "a", encoding="utf-8") as f:
                f.write(f"{type(exc).__name__}: {exc}\n")
        raise SystemExit(STARTUP_FAILURE) from None


def _check_bundles(args) -> None:
    """Fail in the parent, with one clear error, before any worker starts (a wrong path, a damaged bundle)."""
    from denki.serve.ray_setup import checked_bundle

    from denki.models.io.errors import DenkiError

    if not args.classifier and not args.qa:
        raise DenkiError("give --classifier DIR and/or --qa DIR (ONNX bundles from `denki export`)")
    if args.classifier:
        checked_bundle(args.classifier, "onnx-classifier")
    if args.qa:
        checked_bundle(args.qa, "onnx-qa")
    _check_human_log(args)
    _settings(args)  # settings errors too (e.g. a deadline below the batching wait, a human log with no folder)


def _check_human_log(args) -> None:
    """--human-log logs the classifier's human route: without --classifier it would log nothing."""
    from denki.models.io.errors import DenkiError

    if getattr(args, "human_log", None) and not args.classifier:
        raise DenkiError("--human-log records the classifier's human route: it needs --classifier")


def _supervisor_kw() -> dict:
    """uvicorn's supervisor kills a worker that does not answer its health ping in time (5 s by default) and
    starts another; a worker loading a larger model can hold the GIL that long, so it gets a minute (where this
    uvicorn has the setting)."""
    import inspect

    import uvicorn

    if "timeout_worker_healthcheck" in inspect.signature(uvicorn.run).parameters:
        return {"timeout_worker_healthcheck": 60}
    return {}


def reuse_port_available(host: str, port: int) -> bool:
    """Whether the workers can each listen on a socket of their own (Linux SO_REUSEPORT, a fixed TCP port)."""
    import socket

    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT") and int(port) != 0


def bind_reuse_port(host: str, port: int):
    """A TCP socket bound to ``host:port`` with SO_REUSEPORT (not yet listening). Every worker binds one: the
    kernel then spreads new connections over the workers' sockets by a hash of the client address, instead of
    all workers racing for one shared socket, where the first to wake accepts every pending connection (a
    32-connection closed loop landed on one of two workers: 407 req/s instead of 712; experiments/serve-load).
    Linux lets only processes of the same user join the group."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, int(port)))
    return sock


def _reuse_port_process_class():
    """uvicorn's worker process, listening on a SO_REUSEPORT socket it binds itself (defined lazily: uvicorn is
    imported only by `denki serve`)."""
    from uvicorn.supervisors import multiprocess

    class ReusePortProcess(multiprocess.Process):
        def target(self, sockets=None):  # runs in the worker: its own socket, whatever the parent passed
            sock = bind_reuse_port(self.config.host, self.config.port)
            sock.set_inheritable(True)
            return super().target([sock])

    ReusePortProcess.__qualname__ = "ReusePortProcess"  # spawn pickles the bound target: found by name
    return ReusePortProcess


def __getattr__(name: str):
    """``app.cmd_serve.ReusePortProcess`` on demand (a worker unpickling its target looks it up by name), without
    importing uvicorn for every other command."""
    if name == "ReusePortProcess":
        cls = _reuse_port_process_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _run_workers(app_ref: str, workers: int, uvicorn_kw: dict) -> None:
    """``uvicorn.run(app_ref, factory=True, workers=N)``, but with a socket per worker (SO_REUSEPORT) where the
    platform has it: uvicorn's supervisor (restarts, signals, health pings) with its worker class swapped for
    :func:`_reuse_port_process_class`'s while it runs. Elsewhere (or port 0) one socket shared by all workers."""
    import uvicorn
    from uvicorn.supervisors import multiprocess

    host, port = uvicorn_kw["host"], uvicorn_kw["port"]
    if not reuse_port_available(host, port):
        uvicorn.run(app_ref, factory=True, workers=workers, **uvicorn_kw, **_supervisor_kw())
        return
    from denki.models.io.errors import DenkiError

    config = uvicorn.Config(app_ref, factory=True, workers=workers, **uvicorn_kw, **_supervisor_kw())
    try:
        guard = bind_reuse_port(host, port)  # fails here, clearly, when the port is taken; never listens
    except OSError as exc:
        raise DenkiError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None
    import logging

    logging.getLogger("denki.serve").info("listening on http://%s:%d (a socket per worker, SO_REUSEPORT)",
                                          host, port)
    original = multiprocess.Process
    multiprocess.Process = __getattr__("ReusePortProcess")
    try:
        multiprocess.Multiprocess(config, sockets=[]).run()
    finally:
        multiprocess.Process = original
        guard.close()


def _serve_workers(args, workers: int, uvicorn_kw: dict) -> int:
    """Run ``workers`` uvicorn worker processes behind one port (a socket each, SO_REUSEPORT, on Linux), each
    loading the models itself, with prometheus_client in multiprocess mode (a fresh folder per run, removed at
    exit) so /metrics sums them."""
    _check_bundles(args)
    state_dir = tempfile.mkdtemp(prefix="denki-serve-")
    # set before the workers start (they are spawned: they inherit this environment and import prometheus_client
    # afresh, which picks its multiprocess value store from this variable); restored afterwards
    env = {"PROMETHEUS_MULTIPROC_DIR": state_dir, WORKER_STATE_ENV: state_dir,
           WORKER_ARGS_ENV: json.dumps({k: getattr(args, k) for k in WORKER_ARG_KEYS})}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        _run_workers("denki.app.cmd_serve:worker_app", workers, uvicorn_kw)
        failure = os.path.join(state_dir, STARTUP_FAILURE_FILE)
        if os.path.exists(failure):
            from denki.models.io.errors import DenkiError

            with open(failure, encoding="utf-8") as f:
                reasons = list(dict.fromkeys(line.strip() for line in f if line.strip()))  # one line per worker
            raise DenkiError("a worker could not start: " + "; ".join(reasons))
        return 0
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(state_dir, ignore_errors=True)


def cmd_serve(args) -> int:
    import logging

    import uvicorn

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.host not in LOOPBACK:
        print(f"denki serve: binding {args.host} — the API has no authentication; put it behind a firewall or a "
              f"reverse proxy (docs/serving.md)", file=sys.stderr)
    if args.human_log:
        _check_human_log(args)
        settings = _settings(args)  # a clear error now (e.g. the log's folder does not exist), before any load
        args.human_log = settings.human_log  # absolute: every worker (and Ray replica) writes the same file
        print(f"denki serve: human log on: texts routed to the human label are appended to {settings.human_log}"
              + (" (on every node running a replica: the folder must exist there)" if args.ray else ""),
              file=sys.stderr)
    if args.ray:
        from denki.serve.ray_serve import build_application, run_ray_serve
        from denki.serve.ray_setup import import_ray

        import_ray()  # a clear error when the extra is missing, before anything is loaded
        app = build_application(args.classifier, args.qa, _settings(args), backend=args.backend, device=args.device,
                                threads=args.threads, num_replicas=args.num_replicas, replica_cpus=args.replica_cpus,
                                replica_gpus=args.replica_gpus)
        return run_ray_serve(app, host=args.host, port=args.port, address=args.address,
                             temp_dir=args.ray_temp_dir, detach=args.detach)
    from denki.serve.microbatch import usable_cores

    cores = usable_cores()
    if args.workers == "auto" and (args.classifier or args.qa):
        workers = resolve_workers("auto", "cuda" if _cuda_requested(args.device) else "cpu", cores)
    else:
        workers = resolve_workers(args.workers, args.device, cores)
    args.threads = resolve_threads(args.threads, workers, cores)
    uvicorn_kw = dict(host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log,
                      limit_concurrency=args.max_connections, timeout_graceful_shutdown=args.shutdown_timeout,
                      server_header=False, http=resolve_http(args.http))
    logging.getLogger("denki.serve").info("%d worker%s, onnxruntime threads per model: %s, HTTP parser: %s",
                                          workers, "s" if workers > 1 else "", args.threads or "default",
                                          uvicorn_kw["http"])
    if workers > 1:
        return _serve_workers(args, workers, uvicorn_kw)
    app = build_app(args)
    uvicorn.run(app, **uvicorn_kw)
    return 0
