"""The HTTP API of ``denki serve``: FastAPI over the torch-free ONNX :class:`~serve.runtime.Predictor`.

    from denki.serve.http import ServerSettings, create_app
    app = create_app(classifier=Predictor("runs/quickstart/classifier-onnx"), settings=ServerSettings())
    # uvicorn.run(app, host="127.0.0.1", port=8080)

Endpoints (JSON in and out; errors are ``{"error": {"code", "message", "details"}}``):

- ``POST /v1/classify`` ``{"texts": [...]}`` → ``{"results": [{"label", "score", "scores", "route", "reason"}]}``
- ``POST /v1/answer`` ``{"question", "context"}`` → ``{"answer", "start", "end", "score", "has_answer", ...}``
- ``POST /v1/answer/batch`` ``{"items": [{"question", "context"}, ...]}`` → ``{"results": [...]}``
- ``POST /v1/ask`` ``{"question", "k"?}`` (with ``settings.index``: ``denki serve --index``) → ``{"answer",
  "has_answer", "reason", "document", "passage", "start", "end", "score", "passages": [...], ...}``
- ``GET /v1/models`` (what is loaded), ``GET /healthz`` (alive), ``GET /readyz`` (models loaded, accepting work),
  ``GET /metrics`` (Prometheus text format), ``GET /openapi.json`` and ``/docs``.

Every answer of a model endpoint carries ``"model_version"`` at its top level: the first 12 hex characters of the
sha256 of the served bundle's manifest.json (the QA bundle's for /v1/ask), as ``/v1/models`` and the
``denki_model_info`` metric show it. With API keys (``settings.api_key_file`` and/or ``DENKI_API_KEY``;
:mod:`serve.http_auth`) every path but ``/healthz`` and ``/readyz`` needs ``Authorization: Bearer KEY`` (401
otherwise, checked first, in the outer ASGI layer).

Requests to one model go through a :class:`~serve.microbatch.MicroBatcher`: admission control (a request whose
model call cannot start within ``max_queue_ms`` is answered 503 + ``Retry-After``, refused on arrival when the
measured service rate already says so) and, where it pays, micro-batching (``batching``: ``auto`` / ``on`` /
``off``; :func:`resolve_batching` states the rule and the measurement behind it). A client that disconnects
cancels its request and the model work queued for it. Limits answer with clear JSON: body over
``max_body_bytes`` → 413; too many texts, text too long, empty or malformed input → 422; overloaded or shutting
down → 503 with ``Retry-After``. Routes exist only for the models that are loaded (a classifier-only server has
no ``/v1/answer``). With ``settings.human_log`` (``denki serve --human-log FILE``) every text ``/v1/classify``
routes to the human label is appended to FILE as a JSON line (:mod:`serve.humanlog`; the request's
``X-Request-ID`` header, if any, becomes the record's ``id``).

No torch here. The metrics are ``prometheus_client`` counters, histograms and gauges (:class:`Metrics`), served in
the Prometheus text exposition format; with ``PROMETHEUS_MULTIPROC_DIR`` set (``denki serve --workers N``) every
worker process writes them there and ``/metrics`` reports the sum over the workers, whichever one answers.

This module builds the app (:func:`create_app`, a list of steps); the pieces live beside it: its settings
(:class:`ServerSettings`, :mod:`serve.http_settings`), the request and response schemas (:mod:`serve.http_schemas`),
the metrics (:mod:`serve.http_metrics`), the outer ASGI layer with admission, body limit and disconnects
(:mod:`serve.http_admission`) and the routes (:mod:`serve.http_routes`).
"""
import logging
import os
import signal
from contextlib import asynccontextmanager
from typing import Any

from denki.models.io.errors import DenkiError
from denki.models.registry.tasks import task_for
from denki.serve.http_admission import ObserveAndLimit
from denki.serve.http_auth import ApiKeys
from denki.serve.http_metrics import Metrics
from denki.serve.http_routes import (MODEL_OF_PATH, Served, add_error_handlers, add_model_routes, add_ops_routes,
                                     model_call)
from denki.serve.http_schemas import build_schemas
from denki.serve.http_settings import ServerSettings
from denki.serve.humanlog import HumanLog
from denki.serve.microbatch import MicroBatcher, SharedBacklog, default_wait_ms, resolve_batching
from denki.serve.reload import Loaded, Reloader, board_from_env, loaded

log = logging.getLogger("denki.http")


def create_app(classifier=None, qa=None, *, settings: ServerSettings | None = None, metrics: Metrics | None = None,
               sources: dict[str, str] | None = None, load_kw: dict | None = None, reloadable: bool = True,
               reload_route: bool = True):
    """Build the FastAPI app over loaded predictors (``serve.runtime.Predictor``; at least one).

    Reloads (``POST /admin/reload``, SIGHUP; :mod:`serve.reload`) load each model again from ``sources`` (model →
    the path given at start; default: the loaded bundle's folder) with the predictor settings ``load_kw``
    (backend, device, threads); with ``reloadable`` False there is no reloader; with ``reload_route`` False (Ray
    replicas: a request reaches one replica, so Ray reloads them all through ``reconfigure``) the route answers 501.

    Each model gets a :class:`MicroBatcher` (admission control with ``settings.max_queue_ms``; micro-batching as
    :func:`resolve_batching` decides from the predictor's device and threads; ``app.state.batching`` says what and
    why). The batchers start with the app (ASGI lifespan) and, at shutdown, finish the work already queued."""
    predictors = _check_kinds(classifier, qa)
    s = settings or ServerSettings()
    served = Served(settings=s, metrics=metrics or Metrics(), loaded={n: loaded(p) for n, p in predictors.items()},
                    api_keys=ApiKeys.from_settings(s))
    served.human_log = _open_human_log(served)
    served.asker = _open_asker(served)
    _add_batchers(served)
    served.reload_route = reload_route
    if reloadable:
        served.reloader = Reloader(sources or {n: m.path for n, m in served.loaded.items()}, load_kw or {},
                                   swap=lambda name, m: _swap(served, name, m), versions=lambda: served.versions,
                                   board=board_from_env())
    app = _fastapi_app(served)
    schemas = build_schemas(s)  # the request limits come from the settings
    add_error_handlers(app, served)
    add_ops_routes(app, served, schemas)
    for name in predictors:
        add_model_routes(app, name, served, schemas)
    served.known_paths.update(r.path for r in app.routes if hasattr(r, "path"))
    app.add_middleware(ObserveAndLimit, metrics=served.metrics, max_body_bytes=s.max_body_bytes,
                       known_paths=served.known_paths, admit=_admission(served.batchers),
                       retry_after_s=s.retry_after_s, auth=served.api_keys,
                       shed_delay_s=s.shed_delay_ms / 1e3)
    return app


#: what each served name holds, for errors ("not an ONNX classifier")
ONNX_NOUN = {"classifier": "classifier", "qa": "QA model"}


def _check_kinds(classifier, qa) -> dict[str, Any]:
    """The served predictors by model name (``classifier``, ``qa``), each checked to hold the kind of bundle that
    name serves: the one place that knows which task kinds the server takes."""
    if classifier is None and qa is None:
        raise DenkiError("denki serve needs at least one model: --classifier DIR and/or --qa DIR")
    given = {name: p for name, p in (("classifier", classifier), ("qa", qa)) if p is not None}
    for name, p in given.items():
        if p.kind != task_for(name).onnx_kind:
            raise DenkiError(f"--{name}: {p.dir} is a {p.kind} bundle, not an ONNX {ONNX_NOUN[name]}")
    return given


def _open_human_log(served: Served) -> HumanLog | None:
    """The human log of ``settings.human_log`` (None when off); it records the classifier's human route."""
    s, classifier = served.settings, served.predictors.get("classifier")
    if s.human_log is None:
        return None
    if classifier is None:
        raise DenkiError("--human-log records the classifier's human route: it needs --classifier")
    return HumanLog(s.human_log, model=_model_name(classifier),
                    human=getattr(classifier, "task", {}).get("human_label", "human"),
                    on_error=served.metrics.observe_human_log_error)


def _open_asker(served: Served):
    """The :class:`~serve.asker.Asker` of ``settings.index`` over the served QA predictor (None when off)."""
    s, qa = served.settings, served.predictors.get("qa")
    if s.index is None:
        return None
    if qa is None:
        raise DenkiError("--index is asked with the QA model (POST /v1/ask): it needs --qa")
    from denki.serve.asker import Asker

    return Asker(s.index, qa, k=s.ask_k)


def _add_batchers(served: Served) -> None:
    """A :class:`MicroBatcher` per served model, reporting to the metrics; batching on or off as
    :func:`resolve_batching` decides for the predictor's device and threads (the decision and why in
    ``served.batching``). The models share this process's cores, so admission counts the work queued for all."""
    s, metrics = served.settings, served.metrics
    backlog = SharedBacklog()
    for name, predictor in served.predictors.items():
        device = getattr(predictor, "device", "cpu")
        enabled, why = resolve_batching(s.batching, device, getattr(predictor, "threads", None))
        wait_ms = default_wait_ms(device) if s.max_wait_ms is None else s.max_wait_ms
        served.batchers[name] = MicroBatcher(
            model_call(name, served, s.max_batch), max_batch=s.max_batch, max_wait_ms=wait_ms,
            max_queue=s.max_queue, max_queue_ms=s.max_queue_ms, enabled=enabled, name=name,
            on_batch=lambda st, name=name: metrics.observe_batch(name, st),
            on_shed=lambda reason, name=name: metrics.observe_shed(name, reason),
            on_pending=lambda n, name=name: metrics.set_queue_items(name, n), backlog=backlog)
        served.batching[name] = why
        metrics.add_model(name, served.versions.get(name))


def _swap(served: Served, name: str, new: Loaded) -> None:
    """Put a reloaded model in service: the next micro-batch runs on it (one assignment; a batch already running
    finishes on the old one), the version metric moves, and /v1/ask reads with it."""
    old = served.loaded[name]
    served.loaded[name] = new
    served.metrics.move_model_version(name, old.version, new.version)
    if served.asker is not None and served.asker.reader is old.predictor:  # the reader /v1/ask reads with
        served.asker.reader = new.predictor
    if served.human_log is not None and served.predictors.get("classifier") is new.predictor:
        served.human_log.model = _model_name(new.predictor)  # the log's records name the router that routed


def _admission(batchers: dict[str, MicroBatcher]):
    """Admission control before the body is read (the outer ASGI layer calls it with the path and method):
    raises when the model behind a model endpoint would not start a request within the deadline."""

    def admit(path: str, method: str) -> None:
        b = batchers.get(MODEL_OF_PATH.get(path, ""))
        if b is not None and method == "POST":
            b.check_admission(1)

    return admit


def _lifespan(served: Served):
    """The app's ASGI lifespan: start the batchers, then say ready; at shutdown, say not ready, let the batchers
    finish the work already queued (``shutdown_timeout_s``) and drop this process's live metrics."""
    s = served.settings

    @asynccontextmanager
    async def lifespan(app):
        for b in served.batchers.values():
            await b.start()
        hup = _start_reloader(served)
        served.ready = True
        human_log = served.human_log
        log.info("denki serve ready (pid %d): %s; batching %s; deadline %s; human log %s", os.getpid(),
                 ", ".join(f"{k}={v}" for k, v in served.describe().items()),
                 ", ".join(f"{k} {v}" for k, v in served.batching.items()),
                 "none" if s.max_queue_ms is None else f"{s.max_queue_ms:g} ms",
                 "off" if human_log is None else f"{human_log.path} (texts routed to {human_log.human!r})")
        try:
            yield
        finally:
            served.ready = False
            await _stop_reloader(served, hup)
            for b in served.batchers.values():
                await b.close(timeout=s.shutdown_timeout_s)
            served.metrics.close()

    return lifespan


def _start_reloader(served: Served) -> bool:
    """Start the reloader (in a worker: report to the board and follow it) and make SIGHUP reload; returns whether
    the SIGHUP handler was installed (only in the main thread of a process that owns its signals: not under a
    test client or on a Ray replica)."""
    import asyncio

    if served.reloader is None:
        return False
    served.reloader.start()
    try:
        asyncio.get_running_loop().add_signal_handler(
            signal.SIGHUP, lambda: asyncio.ensure_future(served.reloader.reload_logged()))
        return True
    except (ValueError, RuntimeError, NotImplementedError, AttributeError):
        return False


async def _stop_reloader(served: Served, hup: bool) -> None:
    import asyncio

    if served.reloader is None:
        return
    if hup:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
    await served.reloader.stop()


def _fastapi_app(served: Served):
    """The FastAPI app with its lifespan, no routes yet; ``app.state`` holds the settings, metrics, batchers,
    batching decisions and human log (tests and benchmarks read them)."""
    from fastapi import FastAPI

    app = FastAPI(title="denki", version=_version(), lifespan=_lifespan(served),
                  description="Japanese ELECTRA models behind an HTTP API: text routing (classifier) and "
                              "extractive QA, on ONNX Runtime, with admission control (a request that cannot "
                              "start within the deadline is answered 503 + Retry-After) and micro-batching "
                              "where it pays.")
    app.state.settings = served.settings
    app.state.metrics = served.metrics
    app.state.batchers = served.batchers
    app.state.batching = served.batching
    app.state.human_log = served.human_log
    app.state.api_keys = served.api_keys
    app.state.served = served  # the live view: versions and predictors change with a reload
    return app


def _model_name(predictor) -> str:
    """The name a human-log record gives the served model: its bundle directory's name (a symlink's target: the
    folder of the version that routed, before and after a reload)."""
    from pathlib import Path

    d = getattr(predictor, "dir", None)
    return Path(str(d)).resolve().name if d else "classifier"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("denki")
    except Exception:  # source tree without installation
        return "0"
