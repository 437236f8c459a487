"""``denki serve --ray``: the same FastAPI app as ``denki serve``, deployed through Ray Serve.

Each replica is a Ray actor that builds the app of :func:`serve.http.create_app` over its own ONNX
:class:`~serve.runtime.Predictor` (``@serve.ingress`` with a builder function, so the predictors are created on the
replica, never pickled). Endpoints, limits, error bodies and the per-replica micro-batching are therefore exactly
those of the single-machine server. With ``retry`` (``--ray-retry``, the default) the application's HTTP ingress
is a front deployment (:mod:`serve.ray_front`) that relays each request to a replica through a deployment handle
and resends it to another when that replica dies first; without it Ray Serve's proxy sends requests to the
replicas directly (and answers 500 for those a dying replica held).

API keys work as on one machine: the settings carry the key file's absolute path (each replica reads and
re-reads that file itself: it must be readable on every node) and whether ``DENKI_API_KEY`` was set; a replica
whose environment lacks the variable then refuses to start rather than serve without keys (a local Ray instance
inherits this process's environment; on a cluster, set it on the nodes or use the file). No key travels in the
settings.

Differences a user sees: ``/metrics`` describes the replica that answered (Ray exports cluster metrics of its own),
and queueing beyond ``max_ongoing_requests`` per replica happens in Ray's proxy before the app's own 503.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

from denki.models.io.errors import DenkiError

APP_NAME = "denki"


def build_application(classifier: str | None, qa: str | None, settings, *, backend: str = "auto",
                      device: str = "auto", threads: int | None = None, num_replicas: int = 1,
                      replica_cpus: float = 1.0, replica_gpus: float = 0.0, retry: bool = True,
                      generation: int = 0):
    """A Ray Serve application (``Deployment.bind()``) of the denki HTTP app over the given bundles; with ``retry``
    its HTTP ingress is the front of :mod:`serve.ray_front` (as many front replicas as model replicas), else the
    model replicas themselves. ``generation``: the reload generation (``user_config``): deploying the same
    application with a higher one makes every replica reload its bundles in place (:meth:`DenkiReplica.reconfigure`;
    SIGHUP to ``denki serve --ray``, :func:`run_ray_serve`)."""
    from ray import serve

    from denki.serve.ray_setup import checked_bundle

    cls_dir = checked_bundle(classifier, "classifier") if classifier else None
    qa_dir = checked_bundle(qa, "qa") if qa else None
    if cls_dir is None and qa_dir is None:
        raise DenkiError("give --classifier DIR and/or --qa DIR (ONNX bundles from `denki export`)")
    if num_replicas < 1 or replica_cpus < 0 or replica_gpus < 0:
        raise DenkiError("--num-replicas must be ≥ 1 and --replica-cpus/--replica-gpus ≥ 0")
    # onnxruntime threads per replica follow its CPU reservation unless given
    ort_threads = threads or max(1, int(replica_cpus))
    if replica_gpus > 0 and device == "auto":
        device = "cuda"

    # the paths as given (absolute), so that a replica started later, or a reload, follows a repointed symlink
    sources = {name: os.path.abspath(p) for name, p in (("classifier", classifier), ("qa", qa)) if p}

    def build_asgi_app():  # runs on each replica: the predictors live there
        from denki.serve.http import create_app
        from denki.serve.runtime import Predictor

        kw = dict(backend=backend, device=device, threads=ort_threads)
        return create_app(classifier=Predictor(sources["classifier"], **kw) if cls_dir else None,
                          qa=Predictor(sources["qa"], **kw) if qa_dir else None, settings=settings,
                          sources=sources, load_kw=kw, reload_route=False)

    class DenkiReplica:
        """One replica of the denki HTTP API (its state is the app that ``build_asgi_app`` returns; Ray runs the
        app's lifespan). The front hands it requests through :meth:`relay`."""

        _generation = None  # the reload generation this replica serves (None until Ray's first reconfigure)

        async def reconfigure(self, config: dict):
            """Ray calls this on every replica when the application is deployed with a new ``reload_generation``
            (and once at start): reload the bundles in place, checked first; a refused bundle leaves the old
            model serving (logged). At start the app was just built from the paths as they are: nothing to do."""
            import logging

            from denki.serve.reload import ReloadFailed

            g, previous = int((config or {}).get("reload_generation", 0)), self._generation
            self._generation = g if previous is None else max(g, previous)
            if previous is None or g <= previous:
                return
            log = logging.getLogger("denki.ray")
            try:
                r = await self.app.state.served.reloader.reload()
                log.warning("reload generation %d: %s", g, r["model_versions"])
            except ReloadFailed as exc:
                log.error("reload generation %d refused; the old models keep serving: %s", g, exc)

        async def relay(self, method, path, query, headers, body, client):
            from denki.serve.ray_front import asgi_request

            return await asgi_request(self.app, method, path, query, headers, body, client)

    model = serve.deployment(
        serve.ingress(build_asgi_app)(DenkiReplica), name="DenkiAPI", num_replicas=int(num_replicas),
        ray_actor_options={"num_cpus": float(replica_cpus), "num_gpus": float(replica_gpus)},
        # the app micro-batches concurrent requests itself: let enough of them reach a replica at once
        max_ongoing_requests=max(8, int(settings.max_queue)),
        graceful_shutdown_timeout_s=float(settings.shutdown_timeout_s),
        health_check_period_s=10.0, user_config={"reload_generation": int(generation)})
    if not retry:
        return model.bind()
    front = serve.deployment(_front_class(settings), name="DenkiFront", num_replicas=int(num_replicas),
                             ray_actor_options={"num_cpus": 0},  # it waits on the replicas; no CPU of its own
                             max_ongoing_requests=max(8, int(settings.max_queue)),
                             graceful_shutdown_timeout_s=float(settings.shutdown_timeout_s))
    return front.bind(model.bind())


def _front_class(settings):
    """The application's HTTP ingress (:mod:`serve.ray_front`): a request whose replica dies is resent to another
    one instead of Ray's proxy answering it 500; the body limit is checked here, before anything is relayed."""
    max_body, retry_after = int(settings.max_body_bytes), int(settings.retry_after_s)

    class DenkiFront:
        def __init__(self, model):
            self.model = model  # a DeploymentHandle of DenkiAPI

        async def __call__(self, request):
            from starlette.responses import Response

            from denki.serve.ray_front import error_answer, relay_with_retry

            body = await _read_capped(request, max_body)
            if body is None:
                status, headers, content = error_answer(413, "body_too_large",
                                                        f"request body exceeds {max_body:,} bytes")
            else:
                args = (request.method, request.url.path, request.url.query.encode(), list(request.headers.raw),
                        body, (request.client.host, request.client.port) if request.client else None)
                status, headers, content = await relay_with_retry(lambda: self.model.relay.remote(*args),
                                                                  retry_after_s=retry_after, on_retry=_log_retry)
            response = Response(content, status_code=status)
            response.raw_headers = list(headers)  # the replica's own (content-length, retry-after, …)
            return response

    return DenkiFront


def _log_retry(exc: BaseException) -> None:
    import logging

    logging.getLogger("denki.ray").warning("replica gone (%s); resending the request", type(exc).__name__)


async def _read_capped(request, limit: int) -> bytes | None:
    """The request body, or None once it passes ``limit`` bytes (a larger Content-Length is refused unread)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        return None
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def run_ray_serve(app, *, host: str = "127.0.0.1", port: int = 8080, address: str | None = None,
                  temp_dir: str | None = None, detach: bool = False, stop: threading.Event | None = None,
                  rebuild=None) -> int:
    """Deploy ``app`` (from :func:`build_application`) and block until SIGINT/SIGTERM (or ``stop`` is set),
    then delete it; a local Ray instance started here is shut down too. ``detach`` (only with ``address``)
    leaves the application running on the cluster and returns at once. SIGHUP (with ``rebuild``: generation →
    application, which verifies the bundles as it builds it) deploys the next generation: every replica reloads in
    place."""
    from denki.serve.ray_setup import connect_ray

    if detach and not address:
        raise DenkiError("--detach needs --address (a cluster that outlives this command)")
    ray, session = connect_ray(address, temp_dir=temp_dir)
    stop = stop or threading.Event()
    hup = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        # installed before deploying: a Ctrl-C during start-up then stops cleanly once the deployment is up
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
        if rebuild is not None and hasattr(signal, "SIGHUP"):
            previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: hup.set())
    try:
        from ray import serve

        serve.start(http_options={"host": host, "port": int(port)})
        serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
        where = f"http://{host}:{port}"
        print(f"denki serve --ray: ready at {where} (Ray Serve application {APP_NAME!r}; "
              f"{'cluster ' + address if address else 'local Ray instance'})", flush=True)
        if detach:
            print(f"denki serve --ray: detached; remove it with `serve delete {APP_NAME}` or `serve shutdown`",
                  flush=True)
            return 0
        try:
            generation = 0
            while not stop.wait(0.5):
                if hup.is_set():
                    hup.clear()
                    generation = _reload_on_ray(serve, rebuild, generation)
        except KeyboardInterrupt:  # not in the main thread: no handler of ours
            pass
        print("denki serve --ray: stopping (in-flight requests finish first)", file=sys.stderr, flush=True)
        serve.delete(APP_NAME)
        if session.started:
            serve.shutdown()
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if not detach:
            session.close()


def _reload_on_ray(serve, rebuild, generation: int) -> int:
    """SIGHUP: build generation + 1 (:func:`build_application` verifies the bundles where they are now) and deploy
    it (Ray reconfigures every replica in place; each checks and loads its bundles again). Returns the generation
    now deployed."""
    try:
        app = rebuild(generation + 1)
    except DenkiError as exc:
        print(f"denki serve --ray: reload refused, the replicas keep their models: {exc}", file=sys.stderr,
              flush=True)
        return generation
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    print(f"denki serve --ray: reload generation {generation + 1} deployed to every replica", flush=True)
    return generation + 1
