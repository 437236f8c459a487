"""Running ``denki serve`` from its :class:`~serve.serve_settings.ServeSettings`: one process, N uvicorn worker
processes behind one port, or Ray Serve replicas (:func:`run_server`).

    from denki.serve.serve_settings import ServeSettings
    from denki.serve.workers import run_server
    run_server(ServeSettings(classifier="runs/quickstart/classifier-onnx", workers=2))   # blocks until SIGTERM

With several workers uvicorn's supervisor starts them (spawned: each imports :func:`worker_app` by name and
builds the app from the settings, handed over as JSON in :data:`WORKER_SETTINGS_ENV`), restarts one that dies and
passes Ctrl-C / SIGTERM on; each worker loads the models itself, accepts connections only once they are loaded
(its ``/readyz`` then answers with its ``pid``) and finishes its in-flight requests before exiting. On Linux every
worker listens on a socket of its own (SO_REUSEPORT; :func:`bind_reuse_port` says why). The bundles are checked in
the parent before any worker starts, and a worker that still cannot load them stops the server with its reason
(left in :data:`WORKER_STATE_ENV`) instead of being restarted in a loop. prometheus_client runs in multiprocess
mode, in a fresh folder per run, so ``/metrics`` sums the workers.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import sys
import tempfile

from denki.models.io.errors import DenkiError
from denki.serve.reload import WORKER_STATE_ENV, start_paths
from denki.serve.serve_settings import ServeSettings

log = logging.getLogger("denki.serve")

#: environment variables handing the settings to the worker processes (uvicorn starts them with spawn, so they
#: import the app from a string and rebuild it) and naming the folder a failing worker reports into
WORKER_SETTINGS_ENV = "DENKI_SERVE_WORKER_SETTINGS"
STARTUP_FAILURE_FILE = "startup-failure.txt"

#: what :func:`_run_workers` asks uvicorn to import in each worker
WORKER_APP = "denki.serve.workers:worker_app"


def configure_logging(level: str) -> None:
    """The log format of the server and of every worker."""
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# ------------------------------------------------------------------------------------------------ the plan
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


def _plan_workers(settings: ServeSettings) -> tuple[int, ServeSettings]:
    """How many worker processes, and the settings with their onnxruntime threads resolved."""
    from denki.serve.microbatch import usable_cores

    cores = usable_cores()
    if settings.workers == "auto" and (settings.classifier or settings.qa):
        workers = resolve_workers("auto", "cuda" if _cuda_requested(settings.device) else "cpu", cores)
    else:
        workers = resolve_workers(settings.workers, settings.device, cores)
    return workers, dataclasses.replace(settings, threads=resolve_threads(settings.threads, workers, cores))


def _uvicorn_kw(settings: ServeSettings) -> dict:
    """uvicorn's settings for one server or for each worker."""
    return dict(host=settings.host, port=settings.port, log_level=settings.log_level,
                access_log=settings.access_log, limit_concurrency=settings.max_connections,
                timeout_graceful_shutdown=settings.shutdown_timeout, server_header=False,
                http=resolve_http(settings.http))


# ---------------------------------------------------------------------------------------------- the server
def run_server(settings: ServeSettings) -> int:
    """Serve until SIGINT/SIGTERM: on Ray Serve with ``settings.ray``, else one uvicorn process, or several
    worker processes behind one port (``settings.workers``; :func:`resolve_workers`)."""
    import uvicorn

    if settings.ray:
        return _run_on_ray(settings)
    workers, settings = _plan_workers(settings)
    uvicorn_kw = _uvicorn_kw(settings)
    log.info("%d worker%s, onnxruntime threads per model: %s, HTTP parser: %s", workers,
             "s" if workers > 1 else "", settings.threads or "default", uvicorn_kw["http"])
    if workers > 1:
        return serve_workers(settings, workers, uvicorn_kw)
    ignore_hup_until_ready()
    uvicorn.run(build_app(settings), **uvicorn_kw)
    return 0


def _run_on_ray(settings: ServeSettings) -> int:
    """The same app as Ray Serve replicas (:mod:`serve.ray_serve`), on a local Ray instance or a cluster."""
    from denki.serve.ray_serve import build_application, run_ray_serve
    from denki.serve.ray_setup import import_ray

    import_ray()  # a clear error when the extra is missing, before anything is loaded
    server_settings = settings.server_settings()

    def app(generation: int = 0):  # the application; a higher generation makes every replica reload
        return build_application(settings.classifier, settings.qa, server_settings, backend=settings.backend,
                                 device=settings.device, threads=settings.threads,
                                 num_replicas=settings.num_replicas, replica_cpus=settings.replica_cpus,
                                 replica_gpus=settings.replica_gpus, retry=settings.ray_retry, generation=generation)

    return run_ray_serve(app(), host=settings.host, port=settings.port, address=settings.address,
                         temp_dir=settings.ray_temp_dir, detach=settings.detach, rebuild=app)


def ignore_hup_until_ready() -> None:
    """SIGHUP's default action ends the process; while the models load it is ignored, and the app's lifespan then
    makes it a reload (:mod:`serve.reload`)."""
    import signal

    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)


def build_app(settings: ServeSettings):
    """Load the predictors and build the app (separate from uvicorn so tests and benchmarks can reuse it)."""
    from denki.serve.http import create_app
    from denki.serve.runtime import Predictor

    settings.check_models()
    server_settings = settings.server_settings()
    kw = dict(backend=settings.backend, device=settings.device, threads=settings.threads)
    sources = {name: os.path.abspath(path) for name, path in (("classifier", settings.classifier),
                                                                ("qa", settings.qa)) if path}
    paths = start_paths(sources)  # a restarted worker loads what the last reload published
    cls = Predictor(paths["classifier"], **kw) if settings.classifier else None
    qa = Predictor(paths["qa"], **kw) if settings.qa else None
    return create_app(classifier=cls, qa=qa, settings=server_settings, sources=sources, load_kw=kw)


# ---------------------------------------------------------------------------------------- worker processes
def worker_app():
    """The app of one worker process (``uvicorn.run(WORKER_APP, factory=True, workers=N)``): the settings come
    from :data:`WORKER_SETTINGS_ENV`. A worker that cannot load its models exits with uvicorn's startup-failure
    code, so the supervisor stops instead of restarting it in a loop, and leaves the reason for the parent in
    :data:`WORKER_STATE_ENV`."""
    from uvicorn.config import STARTUP_FAILURE

    settings = ServeSettings.from_json(os.environ[WORKER_SETTINGS_ENV])
    configure_logging(settings.log_level)
    ignore_hup_until_ready()
    try:
        return build_app(settings)
    except Exception as exc:  # noqa: BLE001 — reported to the parent, then the worker stops
        log.error("worker %d could not start: %s", os.getpid(), exc)
        state = os.environ.get(WORKER_STATE_ENV)
        if state:
            with open(os.path.join(state, STARTUP_FAILURE_FILE), "a", encoding="utf-8") as f:
                f.write(f"{type(exc).__name__}: {exc}\n")
        raise SystemExit(STARTUP_FAILURE) from None


def _check_bundles(settings: ServeSettings) -> None:
    """Fail in the parent, with one clear error, before any worker starts (a wrong path, a damaged bundle)."""
    from denki.serve.ray_setup import checked_bundle

    settings.check_models()
    if settings.classifier:
        checked_bundle(settings.classifier, "classifier")
    if settings.qa:
        checked_bundle(settings.qa, "qa")
    settings.check_human_log()
    settings.server_settings()  # settings errors too (e.g. a deadline below the batching wait, a log with no folder)


def serve_workers(settings: ServeSettings, workers: int, uvicorn_kw: dict) -> int:
    """Run ``workers`` uvicorn worker processes behind one port (a socket each, SO_REUSEPORT, on Linux), each
    loading the models itself, with prometheus_client in multiprocess mode (a fresh folder per run, removed at
    exit) so /metrics sums them."""
    _check_bundles(settings)
    state_dir = tempfile.mkdtemp(prefix="denki-serve-")
    # set before the workers start (they are spawned: they inherit this environment and import prometheus_client
    # afresh, which picks its multiprocess value store from this variable); restored afterwards
    env = {"PROMETHEUS_MULTIPROC_DIR": state_dir, WORKER_STATE_ENV: state_dir,
           WORKER_SETTINGS_ENV: settings.to_json()}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        _run_workers(WORKER_APP, workers, uvicorn_kw)
        _raise_startup_failure(state_dir)
        return 0
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(state_dir, ignore_errors=True)


def _raise_startup_failure(state_dir: str) -> None:
    """After the supervisor stopped: the reasons the workers could not start, if any of them reported one."""
    failure = os.path.join(state_dir, STARTUP_FAILURE_FILE)
    if os.path.exists(failure):
        with open(failure, encoding="utf-8") as f:
            reasons = list(dict.fromkeys(line.strip() for line in f if line.strip()))  # one line per worker
        raise DenkiError("a worker could not start: " + "; ".join(reasons))


# ------------------------------------------------------------------------------------ a socket per worker
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
    32-connection closed loop landed on one of two workers; docs/serving.md, "A socket per worker"). Linux lets
    only processes of the same user join the group."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, int(port)))
    return sock


def _reuse_port_process_class():
    """uvicorn's worker process, listening on a SO_REUSEPORT socket it binds itself (defined lazily: uvicorn is
    imported only when a server runs)."""
    from uvicorn.supervisors import multiprocess

    class ReusePortProcess(multiprocess.Process):
        def target(self, sockets=None):  # runs in the worker: its own socket, whatever the parent passed
            sock = bind_reuse_port(self.config.host, self.config.port)
            sock.set_inheritable(True)
            return super().target([sock])

    ReusePortProcess.__qualname__ = "ReusePortProcess"  # spawn pickles the bound target: found by name
    return ReusePortProcess


def __getattr__(name: str):
    """``serve.workers.ReusePortProcess`` on demand (a worker unpickling its target looks it up by name), without
    importing uvicorn where no server runs."""
    if name == "ReusePortProcess":
        cls = _reuse_port_process_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _supervisor_class():
    """uvicorn's supervisor with SIGHUP passed to one live worker, which reloads and tells the others through the
    reload board (:mod:`serve.reload`), instead of uvicorn's restart of every worker (a restart would not check
    the new bundle before it takes traffic)."""
    import signal

    from uvicorn.supervisors import multiprocess

    class ReloadingSupervisor(multiprocess.Multiprocess):
        def handle_hup(self) -> None:
            for p in self.processes:
                if p.process.is_alive() and p.pid:
                    log.info("SIGHUP: reloading through worker %d", p.pid)
                    os.kill(p.pid, signal.SIGHUP)
                    return
            log.error("SIGHUP: no live worker to reload")

    return ReloadingSupervisor


def _run_workers(app_ref: str, workers: int, uvicorn_kw: dict) -> None:
    """``uvicorn.run(app_ref, factory=True, workers=N)``, but with a socket per worker (SO_REUSEPORT) where the
    platform has it: uvicorn's supervisor (restarts, signals, health pings) with its worker class swapped for
    :func:`_reuse_port_process_class`'s while it runs. Elsewhere (or port 0) one socket shared by all workers."""
    import uvicorn
    from uvicorn.supervisors import multiprocess

    host, port = uvicorn_kw["host"], uvicorn_kw["port"]
    config = uvicorn.Config(app_ref, factory=True, workers=workers, **uvicorn_kw, **_supervisor_kw())
    supervisor = _supervisor_class()
    if not reuse_port_available(host, port):
        supervisor(config, sockets=[config.bind_socket()]).run()
        return
    try:
        guard = bind_reuse_port(host, port)  # fails here, clearly, when the port is taken; never listens
    except OSError as exc:
        raise DenkiError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None
    log.info("listening on http://%s:%d (a socket per worker, SO_REUSEPORT)", host, port)
    original = multiprocess.Process
    multiprocess.Process = __getattr__("ReusePortProcess")
    try:
        supervisor(config, sockets=[]).run()
    finally:
        multiprocess.Process = original
        guard.close()
