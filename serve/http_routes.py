"""The routes of the HTTP API over what one app serves (:class:`Served`): the JSON error handlers
(:func:`add_error_handlers`), the operations routes ``/healthz``, ``/readyz``, ``/metrics`` and ``/v1/models``
(:func:`add_ops_routes`) and, for each served model, its task's routes (:func:`add_model_routes`: ``/v1/classify``
for the classifier, ``/v1/answer`` and ``/v1/answer/batch`` for QA, and ``/v1/ask`` when a passage index is served
with it) and the call its micro-batcher makes
(:func:`model_call`). A new task head is one entry in :data:`MODEL_ROUTES` and :data:`MODEL_CALLS`.

No ``from __future__ import annotations`` here: FastAPI reads the route signatures (the request schemas of
:mod:`serve.http_schemas`) at run time.
"""
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from denki.models.io.errors import DenkiError
from denki.serve.http_admission import ARRIVED, refusal
from denki.serve.http_metrics import Metrics
from denki.serve.http_schemas import clean_answer, clean_ask
from denki.serve.humanlog import HumanLog
from denki.serve.microbatch import MicroBatcher, QueueFull, ShuttingDown
from denki.serve.reload import Loaded, ReloadFailed, tag_version, take_version

log = logging.getLogger("denki.http")

#: the model endpoints and the model behind each (admission is checked per model, before the body is read)
MODEL_OF_PATH = {"/v1/classify": "classifier", "/v1/answer": "qa", "/v1/answer/batch": "qa", "/v1/ask": "qa"}


@dataclass
class Served:
    """What the routes of one app share: its settings (:class:`~serve.http.ServerSettings`) and metrics, the
    served models by name (``classifier``, ``qa``: a :class:`~serve.reload.Loaded` each — predictor, version,
    folder — replaced as a whole by a reload), the human log (None: off), a micro-batcher per model
    and what was decided about its batching and why, whether the app is ready (the lifespan sets it) and the
    paths of its routes (the bounded ``endpoint`` label of the metrics; filled once every route is added), the API
    keys (None: off) and the :class:`~serve.reload.Reloader` (None: reloads off, as on Ray)."""
    settings: Any
    metrics: Metrics
    loaded: dict[str, Loaded]
    human_log: HumanLog | None = None
    asker: Any = None  # serve.asker.Asker over the served QA predictor when an index is served (POST /v1/ask)
    batchers: dict[str, MicroBatcher] = field(default_factory=dict)
    batching: dict[str, str] = field(default_factory=dict)  # model → "on (auto: …)" / "off (…)"
    ready: bool = False
    known_paths: set[str] = field(default_factory=set)
    api_keys: Any = None  # serve.http_auth.ApiKeys when keys are required (None: off)
    reloader: Any = None  # serve.reload.Reloader (POST /admin/reload, SIGHUP)
    reload_route: bool = True  # False on Ray: /admin/reload answers 501 (SIGHUP to `denki serve --ray` reloads)

    @property
    def predictors(self) -> dict[str, Any]:
        """model name → the predictor serving it now."""
        return {name: m.predictor for name, m in self.loaded.items()}

    @property
    def versions(self) -> dict[str, str]:
        """model name → the version serving it now (``model_version``)."""
        return {name: m.version for name, m in self.loaded.items()}

    def describe(self) -> dict[str, str]:
        """model name → what is loaded (the predictor's own description: bundle, backend, device; ``index``: the
        passage index /v1/ask asks)."""
        out = {name: p.describe() for name, p in self.predictors.items()}
        if self.asker is not None:
            out["index"] = self.asker.describe()
        return out


# ------------------------------------------------------------------------------------------------------ errors
def error_response(served: Served, request, status: int, code: str, message: str, details=None, headers=None):
    """The JSON error ``{"error": {"code", "message", "details"}}``, counted in ``denki_http_errors_total``."""
    from fastapi.responses import JSONResponse

    served.metrics.observe_error(request.url.path if request.url.path in served.known_paths else "other", code)
    return JSONResponse({"error": {"code": code, "message": message, "details": details}}, status_code=status,
                        headers=headers)


def add_error_handlers(app, served: Served) -> None:
    """Every error as JSON: 422 for invalid input (``too_many_items`` / ``invalid_request``) and for input the
    model refuses (``unprocessable``), 404/405, 503 + Retry-After when admission control refuses, 500 otherwise."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    s = served.settings

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        details = [{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")),
                    "type": str(e.get("type", ""))} for e in exc.errors()]
        too_many = any(d["type"] == "too_long" and d["loc"][-1:] in (["texts"], ["items"]) for d in details)
        code = "too_many_items" if too_many else "invalid_request"
        msg = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in details[:5]) or "invalid request"
        return error_response(served, request, 422, code, msg, details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(served, request, exc.status_code, code, str(exc.detail),
                              headers=getattr(exc, "headers", None))

    @app.exception_handler(QueueFull)
    @app.exception_handler(ShuttingDown)
    async def _refused(request: Request, exc: Exception):
        status, code, message, details = refusal(exc, s.retry_after_s)
        return error_response(served, request, status, code, message, details,
                              headers={"Retry-After": str(s.retry_after_s)})

    @app.exception_handler(DenkiError)
    async def _denki(request: Request, exc: DenkiError):
        return error_response(served, request, 422, "unprocessable", str(exc))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.exception("internal error on %s", request.url.path)
        return error_response(served, request, 500, "internal",
                              f"internal error ({type(exc).__name__}); see the server log")


# ------------------------------------------------------------------------------------------------- operations
def add_ops_routes(app, served: Served, schemas) -> None:
    """``/healthz`` (alive), ``/readyz`` (models loaded, batchers running; which worker answered), ``/metrics``
    (Prometheus text format) and ``/v1/models`` (what is loaded and its version, the settings, the batching
    decisions, how many API keys are accepted)."""
    from fastapi import Request
    from fastapi.responses import PlainTextResponse

    s = served.settings

    @app.get("/healthz", tags=["ops"], summary="Liveness: the process answers")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], summary="Readiness: models loaded and accepting work (503 otherwise)",
             responses={503: {"model": schemas.ErrorResponse}})
    async def readyz(request: Request):
        ok = served.ready and all(b.running for b in served.batchers.values())
        if not ok:
            return error_response(served, request, 503, "not_ready", "starting or shutting down",
                                  headers={"Retry-After": str(s.retry_after_s)})
        return {"status": "ready", "models": served.describe(), "pid": os.getpid()}  # pid: which worker answered

    @app.get("/metrics", tags=["ops"], summary="Prometheus metrics (text exposition format 0.0.4)",
             response_class=PlainTextResponse)
    async def metrics_endpoint():
        return PlainTextResponse(served.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models", tags=["models"], summary="Loaded models, backends and limits")
    async def models() -> dict[str, Any]:
        # the settings hold the key file's path, never a key; api_keys: how many keys are accepted now
        reloader = served.reloader
        return {"models": served.describe(), "model_versions": dict(served.versions), "settings": asdict(s),
                "batching": dict(served.batching), "api_keys": len(served.api_keys or ()), "pid": os.getpid(),
                "reload": None if reloader is None else {"generation": reloader.generation, "last": reloader.last}}

    _add_reload_route(app, served, schemas)


def _add_reload_route(app, served: Served, schemas) -> None:
    """``POST /admin/reload``: load every bundle again from its start path, check it, swap it in, in every worker
    (:class:`~serve.reload.Reloader`); answers once every worker serves it (200), or with the reason (409: refused,
    the old models keep serving; 500: a worker failed after another had swapped). With API keys it needs one
    (the outer layer); without keys only a client on this machine may ask (403 otherwise)."""
    from fastapi import Request

    @app.post("/admin/reload", tags=["ops"], summary="Reload the models from their paths (every worker)",
              responses={403: {"model": schemas.ErrorResponse}, 409: {"model": schemas.ErrorResponse},
                         501: {"model": schemas.ErrorResponse}})
    async def reload(request: Request):
        if served.reloader is None or not served.reload_route:
            return error_response(served, request, 501, "reload_unavailable",
                                  "this server does not reload over HTTP (on Ray a request reaches one replica: "
                                  "send SIGHUP to the `denki serve --ray` process, and every replica reloads)")
        if served.api_keys is None and not _local_client(request):
            return error_response(served, request, 403, "forbidden", "without API keys only a client on this "
                                  "machine may reload; start the server with --api-key-file or DENKI_API_KEY")
        try:
            return await served.reloader.reload()
        except ReloadFailed as exc:
            code = "reload_refused" if exc.status == 409 else "reload_failed"
            return error_response(served, request, exc.status, code, str(exc), exc.details)


def _local_client(request) -> bool:
    """Whether the request comes from this machine (loopback)."""
    import ipaddress

    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host in ("testclient", "localhost")


# ---------------------------------------------------------------------------------------------- model routes
def add_model_routes(app, name: str, served: Served, schemas) -> None:
    """Add the routes of the model served as ``name`` (called once per served model: a server has routes only
    for the models it loaded)."""
    MODEL_ROUTES[name](app, served, schemas)


def model_call(name: str, served: Served, max_batch: int) -> Callable[[list], list]:
    """The function the micro-batcher of the model served as ``name`` runs on one batch of items: on the model
    serving at the moment the batch starts (a reload swaps it between batches, never within one), each result
    marked with that model's version (:func:`~serve.reload.tag_version`)."""

    def call(items: list) -> list:
        m = served.loaded[name]  # one read: the predictor and its version go together
        return tag_version(MODEL_CALLS[name](m.predictor, max_batch)(items), m.version)

    return call


def _classify_call(predictor, max_batch: int):
    """texts → the classifier's results (label, score, scores, route, reason), one per text."""
    return lambda texts: predictor.classify(texts, batch_size=max_batch)


def _answer_call(predictor, max_batch: int):
    """(question, context) pairs → the QA answers as the runtime gives them (the routes shape them for JSON:
    ``/v1/ask`` needs the raw span offsets and scores)."""
    return lambda pairs: predictor.answer_batch(pairs)


def _add_classify_routes(app, served: Served, schemas) -> None:
    """``POST /v1/classify``; with a human log, the texts routed to the human label are appended to it."""
    from fastapi import Request

    ClassifyRequest = schemas.ClassifyRequest  # a plain name: FastAPI reads the annotation below

    @app.post("/v1/classify", tags=["models"], response_model=schemas.ClassifyResponse, responses=schemas.errors,
              summary="Classify / route texts",
              description="Each text gets the most likely label, its probability, all probabilities and the "
                          "route (the label, or the human label when the model is not confident enough).")
    async def classify(req: ClassifyRequest, request: Request):
        results = await served.batchers["classifier"].submit(req.texts, arrived=_arrived(request))
        version = take_version(results, served.versions["classifier"])
        if served.human_log is not None:
            _log_human(served.human_log, served.metrics, req.texts, results, request.headers.get("x-request-id"))
        return {"results": results, "model_version": version}


def _add_answer_routes(app, served: Served, schemas) -> None:
    """``POST /v1/answer`` (one question/context pair) and ``POST /v1/answer/batch`` (several); ``POST /v1/ask``
    too when a passage index is served."""
    from fastapi import Request

    AnswerRequest, AnswerBatchRequest = schemas.AnswerRequest, schemas.AnswerBatchRequest

    @app.post("/v1/answer", tags=["models"], response_model=schemas.AnswerResponse, responses=schemas.errors,
              summary="Answer a question from a passage (extractive)")
    async def answer(req: AnswerRequest, request: Request):
        rs = await served.batchers["qa"].submit([(req.question, req.context)], arrived=_arrived(request))
        version = take_version(rs, served.versions["qa"])
        return {**clean_answer(rs[0]), "model_version": version}

    @app.post("/v1/answer/batch", tags=["models"], response_model=schemas.AnswerBatchResponse,
              responses=schemas.errors, summary="Answer several question/passage pairs")
    async def answer_batch(req: AnswerBatchRequest, request: Request):
        rs = await served.batchers["qa"].submit([(it.question, it.context) for it in req.items],
                                                arrived=_arrived(request))
        version = take_version(rs, served.versions["qa"])
        return {"results": [clean_answer(r) for r in rs], "model_version": version}

    if served.asker is not None:
        _add_ask_route(app, served, schemas)


def _add_ask_route(app, served: Served, schemas) -> None:
    """``POST /v1/ask``: the index finds the k best passages (in the event loop: about a millisecond), the QA
    model's micro-batcher reads them (admission and batching as for /v1/answer), the asker decides."""
    from fastapi import Request

    AskRequest = schemas.AskRequest

    @app.post("/v1/ask", tags=["models"], response_model=schemas.AskResult, responses=schemas.errors,
              summary="Ask the served passage index (retrieval + the extractive reader)",
              description="The k passages that share the most (BM25) with the question are read by the QA model; "
                          "the answer is the span of the passage surest to hold one, or no answer "
                          "(has_answer false, reason no_answer / unsure / no_passage).")
    async def ask(req: AskRequest, request: Request):
        asker = served.asker
        t0 = time.perf_counter()
        hits = asker.search(req.question, k=req.k)
        t1 = time.perf_counter()
        reads = (await served.batchers["qa"].submit(asker.pairs(req.question, hits), arrived=_arrived(request))
                 if hits else [])
        t2 = time.perf_counter()
        version = take_version(reads, served.versions["qa"])
        out = clean_ask(asker.result(hits, reads, retrieval_ms=(t1 - t0) * 1e3, reader_ms=(t2 - t1) * 1e3))
        return {**out, "model_version": version}


#: model name → the function adding its routes, and the function building its micro-batcher's call
MODEL_ROUTES = {"classifier": _add_classify_routes, "qa": _add_answer_routes}
MODEL_CALLS = {"classifier": _classify_call, "qa": _answer_call}


def _log_human(human_log: HumanLog, metrics: Metrics, texts, results, request_id: str | None) -> None:
    """Append a request's human-routed texts to the human log; nothing that goes wrong there fails the request
    (I/O errors are counted by the log itself; anything else is counted here and logged)."""
    try:
        human_log.log(texts, results, request_id)
    except Exception:  # noqa: BLE001 — the user's answer matters more than the log line
        metrics.observe_human_log_error(sum(1 for r in results if r.get("route") == human_log.human) or 1)
        log.exception("human log %s: could not record a request's texts", human_log.path)


def _arrived(request) -> float | None:
    """The request's arrival time (``time.monotonic()``) as the outer ASGI layer noted it."""
    return request.scope.get(ARRIVED)
