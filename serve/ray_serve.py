"""``denki serve --ray``: the same FastAPI app as ``denki serve``, deployed through Ray Serve.

Each replica is a Ray actor that builds the app of :func:`serve.http.create_app` over its own ONNX
:class:`~serve.runtime.Predictor` (``@serve.ingress`` with a builder function, so the predictors are created on the
replica, never pickled). Endpoints, limits, error bodies and the per-replica micro-batching are therefore exactly
those of the single-machine server; Ray Serve's proxy spreads requests over the replicas.

API keys work as on one machine: the settings carry the key file's absolute path (each replica reads and
re-reads that file itself: it must be readable on every node) and whether ``DENKI_API_KEY`` was set; a replica
whose environment lacks the variable then refuses to start rather than serve without keys (a local Ray instance
inherits this process's environment; on a cluster, set it on the nodes or use the file). No key travels in the
settings.

Differences a user sees: ``/metrics`` describes the replica that answered (Ray exports cluster metrics of its own),
and queueing beyond ``max_ongoing_requests`` per replica happens in Ray's proxy before the app's own 503.
"""
from __future__ import annotations

import signal
import sys
import threading

from denki.models.io.errors import DenkiError

APP_NAME = "denki"


def build_application(classifier: str | None, qa: str | None, settings, *, backend: str = "auto",
                      device: str = "auto", threads: int | None = None, num_replicas: int = 1,
                      replica_cpus: float = 1.0, replica_gpus: float = 0.0):
    """A Ray Serve application (``Deployment.bind()``) of the denki HTTP app over the given bundles."""
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

    def build_asgi_app():  # runs on each replica: the predictors live there
        from denki.serve.http import create_app
        from denki.serve.runtime import Predictor

        kw = dict(backend=backend, device=device, threads=ort_threads)
        return create_app(classifier=Predictor(cls_dir, **kw) if cls_dir else None,
                          qa=Predictor(qa_dir, **kw) if qa_dir else None, settings=settings,
                          reloadable=False)  # a reload would reach one replica: Ray rolls them on redeploy

    class DenkiReplica:
        """One replica of the denki HTTP API (its state is the app that ``build_asgi_app`` returns)."""

    ingress = serve.ingress(build_asgi_app)(DenkiReplica)
    deployment = serve.deployment(
        ingress, name="DenkiAPI", num_replicas=int(num_replicas),
        ray_actor_options={"num_cpus": float(replica_cpus), "num_gpus": float(replica_gpus)},
        # the app micro-batches concurrent requests itself: let enough of them reach a replica at once
        max_ongoing_requests=max(8, int(settings.max_queue)),
        graceful_shutdown_timeout_s=float(settings.shutdown_timeout_s),
        health_check_period_s=10.0)
    return deployment.bind()


def run_ray_serve(app, *, host: str = "127.0.0.1", port: int = 8080, address: str | None = None,
                  temp_dir: str | None = None, detach: bool = False, stop: threading.Event | None = None) -> int:
    """Deploy ``app`` (from :func:`build_application`) and block until SIGINT/SIGTERM (or ``stop`` is set),
    then delete it; a local Ray instance started here is shut down too. ``detach`` (only with ``address``)
    leaves the application running on the cluster and returns at once."""
    from denki.serve.ray_setup import connect_ray

    if detach and not address:
        raise DenkiError("--detach needs --address (a cluster that outlives this command)")
    ray, session = connect_ray(address, temp_dir=temp_dir)
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        # installed before deploying: a Ctrl-C during start-up then stops cleanly once the deployment is up
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
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
            stop.wait()
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
