"""The HTTP API of ``denki serve``: FastAPI over the torch-free ONNX :class:`~serve.runtime.Predictor`.

    from denki.serve.http import ServerSettings, create_app
    app = create_app(classifier=Predictor("runs/quickstart/classifier-onnx"), settings=ServerSettings())
    # uvicorn.run(app, host="127.0.0.1", port=8080)

Endpoints (JSON in and out; errors are ``{"error": {"code", "message", "details"}}``):

- ``POST /v1/classify`` ``{"texts": [...]}`` → ``{"results": [{"label", "score", "scores", "route", "reason"}]}``
- ``POST /v1/answer`` ``{"question", "context"}`` → ``{"answer", "start", "end", "score", "has_answer", ...}``
- ``POST /v1/answer/batch`` ``{"items": [{"question", "context"}, ...]}`` → ``{"results": [...]}``
- ``GET /v1/models`` (what is loaded), ``GET /healthz`` (alive), ``GET /readyz`` (models loaded, accepting work),
  ``GET /metrics`` (Prometheus text format), ``GET /openapi.json`` and ``/docs``.

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
"""
import asyncio
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from denki.models.io.errors import DenkiError
from denki.serve.humanlog import HumanLog, check_human_log_path
from denki.serve.microbatch import (DEFAULT_MAX_QUEUE_MS, DEFAULT_WAIT_MS, BatchStats, MicroBatcher, QueueFull,
                              SharedBacklog, ShuttingDown, batching_mode, default_wait_ms, resolve_batching)
from denki.serve.runtime import MAX_CONTEXT_CHARS, MAX_TEXT_CHARS

log = logging.getLogger("denki.http")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
QUEUE_WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0)

#: the model endpoints and the model behind each (admission is checked per model, before the body is read)
MODEL_OF_PATH = {"/v1/classify": "classifier", "/v1/answer": "qa", "/v1/answer/batch": "qa"}

NOT_BLANK = r"[^\s\x1c-\x1f]"  # at least one character that str.strip() keeps


@dataclass
class ServerSettings:
    """Knobs of the HTTP layer (``denki serve --help`` documents each one)."""
    batching: str = "auto"  # micro-batching: auto (serve.microbatch.BATCHING_RULE), on, off (True/False too)
    max_batch: int = 32  # items (texts / question-context pairs) per model call
    max_wait_ms: float | None = None  # how long the first request of a batch waits for company (None: by device)
    max_queue: int = 2048  # memory backstop: items waiting per model before 503 (latency is bounded by max_queue_ms)
    max_queue_ms: float | None = DEFAULT_MAX_QUEUE_MS  # deadline: a model call not started by then → 503 (None: off)
    max_texts: int = 64  # texts per /v1/classify request
    max_text_chars: int = MAX_TEXT_CHARS  # characters per text (and per question)
    max_pairs: int = 16  # question/context pairs per /v1/answer/batch request
    max_context_chars: int = MAX_CONTEXT_CHARS
    max_body_bytes: int = 2 * 1024 * 1024  # request body limit (413 beyond)
    retry_after_s: int = 1  # Retry-After on 503
    shutdown_timeout_s: float = 30.0  # finishing queued work at shutdown
    human_log: str | None = None  # JSONL file the human-routed texts are appended to (serve.humanlog; None: off)

    def __post_init__(self):
        self.batching = batching_mode(self.batching)
        if self.human_log is not None:
            self.human_log = check_human_log_path(self.human_log)  # absolute: workers and replicas agree
        longest_wait = max(DEFAULT_WAIT_MS.values()) if self.max_wait_ms is None else float(self.max_wait_ms)
        if self.max_queue_ms is not None and not float(self.max_queue_ms) > longest_wait:
            raise DenkiError(f"max_queue_ms (the deadline, {self.max_queue_ms} ms) must be larger than max_wait_ms "
                             f"(the batching wait, {longest_wait:g} ms)")
        if self.max_text_chars > MAX_TEXT_CHARS or self.max_context_chars > MAX_CONTEXT_CHARS:
            raise DenkiError(f"character limits cannot exceed the runtime's ({MAX_TEXT_CHARS:,} per text, "
                             f"{MAX_CONTEXT_CHARS:,} per context)")
        for k in ("max_batch", "max_queue", "max_texts", "max_text_chars", "max_pairs", "max_context_chars",
                  "max_body_bytes"):
            if int(getattr(self, k)) < 1:
                raise DenkiError(f"{k} must be ≥ 1")
        if self.max_wait_ms is not None and self.max_wait_ms < 0:
            raise DenkiError("max_wait_ms must be ≥ 0")


# ---------------------------------------------------------------------------------------------------- metrics
class HistogramView:
    """A read-only snapshot of one labelled histogram: ``buckets`` (upper bounds), ``counts`` per bucket (not
    cumulative; the last one is ``+Inf``), ``sum`` and ``count``."""

    def __init__(self, buckets: Sequence[float], cumulative: Sequence[float], total: float):
        self.buckets = tuple(buckets)
        cum = [int(c) for c in cumulative]
        self.counts = [c - p for c, p in zip(cum, [0] + cum[:-1])]
        self.count = cum[-1] if cum else 0
        self.sum = float(total)


class _ByLabel(Mapping):
    """``label value → HistogramView`` over a prometheus_client histogram with one label (read from its samples)."""

    def __init__(self, hist: Histogram, label: str, buckets: Sequence[float]):
        self._hist, self._label, self._buckets = hist, label, tuple(buckets)

    def _views(self) -> dict[str, HistogramView]:
        cum: dict[str, dict[float, float]] = {}
        sums: dict[str, float] = {}
        for family in self._hist.collect():
            for smp in family.samples:
                key = smp.labels.get(self._label)
                if smp.name.endswith("_bucket"):
                    cum.setdefault(key, {})[float(smp.labels["le"])] = smp.value
                elif smp.name.endswith("_sum"):
                    sums[key] = smp.value
        return {k: HistogramView(self._buckets, [v for _, v in sorted(c.items())], sums.get(k, 0.0))
                for k, c in cum.items()}

    def __getitem__(self, key: str) -> HistogramView:
        return self._views()[key]

    def __iter__(self):
        return iter(self._views())

    def __len__(self) -> int:
        return len(self._views())


class _WithoutCreated:
    """The registry as scraped, less the ``*_created`` timestamps prometheus_client adds to counters and
    histograms (``/metrics`` keeps exactly the series it always had)."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry

    def collect(self):
        for family in self.registry.collect():
            family.samples = [smp for smp in family.samples if not smp.name.endswith("_created")]
            yield family


def multiprocess_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR`` when prometheus_client runs in multiprocess mode (``denki serve --workers N``
    sets it before the workers start: prometheus_client picks its value store when it is imported)."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class Metrics:
    """The server's Prometheus metrics, kept by ``prometheus_client`` in a registry of their own (one per app, so
    several apps in one process — tests, Ray Serve replicas — never mix) and rendered in its text exposition
    format (0.0.4):

    - ``denki_http_requests_total{endpoint,method,status}``, ``denki_http_errors_total{endpoint,code}``,
      ``denki_shed_total{model,reason}`` (requests refused by admission control; reasons in
      :data:`serve.microbatch.SHED_REASONS`), ``denki_human_log_errors_total`` (human-routed texts that
      ``--human-log`` could not write) (counters);
    - ``denki_http_request_duration_seconds{endpoint}`` (latency), ``denki_batch_size_items{model}`` and
      ``denki_batch_size_requests{model}`` (per model call), ``denki_inference_duration_seconds{model}``,
      ``denki_queue_wait_seconds{model}`` (arrival to model call, admitted requests) (histograms);
    - ``denki_http_in_flight``, ``denki_queue_items{model}`` (gauges).

    Multiprocess mode (``multiprocess_dir()`` set, i.e. ``denki serve --workers N``): the values live in
    prometheus_client's files in that folder, :meth:`render` sums them over every worker (gauges over the live
    ones) and :meth:`close` drops this process's gauges at shutdown.

    ``latency``, ``batch_items``, ``batch_requests``, ``inference`` and ``queue_wait`` map a label value to a
    :class:`HistogramView` snapshot of this process; ``in_flight`` is this process's gauge value."""

    def __init__(self):
        self.multiprocess = multiprocess_dir()
        self.registry = r = CollectorRegistry()
        self._requests = Counter("denki_http_requests", "HTTP requests by endpoint, method and status code.",
                                 ["endpoint", "method", "status"], registry=r)
        self._errors = Counter("denki_http_errors", "Error responses by endpoint and error code.",
                               ["endpoint", "code"], registry=r)
        self._shed = Counter("denki_shed", "Requests refused by admission control, by model and reason "
                             "(estimate: refused on arrival; deadline: not started in time; queue_full).",
                             ["model", "reason"], registry=r)
        self._human_log_errors = Counter("denki_human_log_errors", "Human-routed texts the human log (denki serve "
                                         "--human-log) could not write (disk full, permission); the requests "
                                         "were answered.", registry=r)
        self._latency = Histogram("denki_http_request_duration_seconds", "Request latency (seconds) by endpoint.",
                                  ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self._batch_items = Histogram("denki_batch_size_items",
                                      "Items (texts or question/context pairs) per model call.", ["model"],
                                      buckets=BATCH_BUCKETS, registry=r)
        self._batch_requests = Histogram("denki_batch_size_requests", "HTTP requests merged into one model call.",
                                         ["model"], buckets=BATCH_BUCKETS, registry=r)
        self._inference = Histogram("denki_inference_duration_seconds",
                                    "Seconds per model call (tokenize + run + decode).", ["model"],
                                    buckets=LATENCY_BUCKETS, registry=r)
        self._queue_wait = Histogram("denki_queue_wait_seconds",
                                     "Seconds from a request's arrival to the start of its model call (admitted "
                                     "requests; bounded by the deadline).", ["model"], buckets=QUEUE_WAIT_BUCKETS,
                                     registry=r)
        # livesum: across workers the live processes' values add up (a finished worker's are dropped by close())
        self._in_flight = Gauge("denki_http_in_flight", "Requests being handled now.", registry=r,
                                multiprocess_mode="livesum")
        self._queue_items = Gauge("denki_queue_items", "Items waiting or running per model.", ["model"],
                                  registry=r, multiprocess_mode="livesum")
        self.latency = _ByLabel(self._latency, "endpoint", LATENCY_BUCKETS)
        self.batch_items = _ByLabel(self._batch_items, "model", BATCH_BUCKETS)
        self.batch_requests = _ByLabel(self._batch_requests, "model", BATCH_BUCKETS)
        self.inference = _ByLabel(self._inference, "model", LATENCY_BUCKETS)
        self.queue_wait = _ByLabel(self._queue_wait, "model", QUEUE_WAIT_BUCKETS)

    @property
    def in_flight(self) -> int:
        return int(next(iter(self._in_flight.collect())).samples[0].value)

    def shed_count(self, model: str, reason: str) -> int:
        """Requests of ``model`` refused for ``reason`` by this process."""
        for family in self._shed.collect():
            for smp in family.samples:
                if smp.name.endswith("_total") and smp.labels == {"model": model, "reason": reason}:
                    return int(smp.value)
        return 0

    def add_model(self, model: str) -> None:
        """Show the model's queue gauge from the start (0), not only after its first request."""
        self._queue_items.labels(model).set(0)

    def request_started(self) -> None:
        self._in_flight.inc()

    def request_finished(self) -> None:
        self._in_flight.dec()

    def observe_request(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        self._requests.labels(endpoint, method, str(status)).inc()
        self._latency.labels(endpoint).observe(seconds)

    def observe_error(self, endpoint: str, code: str) -> None:
        self._errors.labels(endpoint, code).inc()

    def observe_shed(self, model: str, reason: str) -> None:
        self._shed.labels(model, reason).inc()

    def observe_human_log_error(self, records: int = 1) -> None:
        self._human_log_errors.inc(records)

    @property
    def human_log_errors(self) -> int:
        """Human-log records this process failed to write."""
        return int(next(iter(self._human_log_errors.collect())).samples[0].value)

    def set_queue_items(self, model: str, items: int) -> None:
        self._queue_items.labels(model).set(items)

    def observe_batch(self, model: str, stats: BatchStats) -> None:
        self._batch_items.labels(model).observe(stats.items)
        self._batch_requests.labels(model).observe(stats.requests)
        self._inference.labels(model).observe(stats.seconds)
        for w in stats.queue_waits:
            self._queue_wait.labels(model).observe(w)

    def render(self) -> str:
        if self.multiprocess:
            from prometheus_client import multiprocess

            merged = CollectorRegistry()  # a fresh one per scrape, as prometheus_client's docs do it
            multiprocess.MultiProcessCollector(merged, path=self.multiprocess)
            return generate_latest(_WithoutCreated(merged)).decode("utf-8")
        return generate_latest(_WithoutCreated(self.registry)).decode("utf-8")

    def close(self) -> None:
        """At this process's shutdown: in multiprocess mode, drop its live gauges (in flight, queue items) from
        the shared folder, so the surviving workers' sums stay right."""
        if self.multiprocess:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid(), path=self.multiprocess)


# ------------------------------------------------------------------------------------------------ ASGI layers
#: scope key holding ``time.monotonic()`` at the request's arrival (its deadline counts from there)
ARRIVED = "denki.arrived"


def _error_body(status: int, code: str, message: str, details: Any = None) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "details": details}},
                      ensure_ascii=False).encode("utf-8")


def _refusal(exc: Exception, retry_after_s: int) -> tuple[int, str, str, Any]:
    """The 503 answer (status, code, message, details) for a request admission control refused."""
    if isinstance(exc, ShuttingDown):
        return 503, "shutting_down", str(exc), None
    return 503, "overloaded", f"server busy ({exc}); retry after {retry_after_s} s", getattr(exc, "details", None)


async def _disconnected(receive) -> None:
    """Return when the server reports ``http.disconnect`` (the client went away, or the response is complete)."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


class _ObserveAndLimit:
    """Outermost ASGI layer: counts requests/latency/status per endpoint, refuses what admission control refuses
    before reading the body, enforces the body limit, and cancels a request whose client disconnects.

    - *Admission first* (``admit(path, method)``, raising :class:`QueueFull` / :class:`ShuttingDown`): a request
      to an overloaded model is answered 503 before this layer reads its body or the app parses it, so shedding
      stays cheap when it matters most (the server may have buffered the bytes; nothing looks at
      them). The arrival time is stored in the scope (``ARRIVED``): the deadline counts from there.
    - *Body limit*: the body is read here, at most ``max_body_bytes`` of it (a larger Content-Length is refused
      before reading; a chunked body is refused as soon as it passes the limit), so memory per request stays
      bounded, then replayed to the app.
    - *Disconnect*: once the body is read, the server's ``receive`` is watched; an ``http.disconnect`` before the
      response is sent cancels the app's task, which drops the request's queued model work (counted as status
      499, error ``client_closed``)."""

    def __init__(self, app, metrics: Metrics, max_body_bytes: int, known_paths: set[str],
                 admit: Callable[[str, str], None] | None = None, retry_after_s: int = 1):
        self.app, self.metrics, self.max_body, self.known = app, metrics, int(max_body_bytes), known_paths
        self.admit, self.retry_after = admit, int(retry_after_s)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        endpoint = path if path in self.known else "other"  # bounded label set, whatever clients send
        t0 = time.perf_counter()
        scope[ARRIVED] = time.monotonic()
        state = {"code": 500, "started": False}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                state["code"] = message["status"]
                state["started"] = True
            await send(message)

        self.metrics.request_started()
        try:
            refused = self._refused(path, scope.get("method", ""))
            if refused is not None:
                status, code, message, details = refused
                self.metrics.observe_error(endpoint, code)
                await self._send_json(send_wrapper, status, _error_body(status, code, message, details),
                                      [(b"retry-after", str(self.retry_after).encode())])
                return
            receive2 = await self._limited_body(scope, receive)
            if receive2 is None:
                self.metrics.observe_error(endpoint, "body_too_large")
                await self._send_json(send_wrapper, 413, _error_body(
                    413, "body_too_large", f"request body exceeds {self.max_body:,} bytes"))
            elif receive2 is receive:  # GET and friends: nothing was read, nothing to watch
                await self.app(scope, receive, send_wrapper)
            elif await self._run_until_disconnect(scope, receive2, receive, send_wrapper, state):
                state["code"] = 499  # nginx's "client closed request": no response was sent
                self.metrics.observe_error(endpoint, "client_closed")
        finally:
            self.metrics.request_finished()
            self.metrics.observe_request(endpoint, scope.get("method", ""), state["code"], time.perf_counter() - t0)

    def _refused(self, path: str, method: str):
        """(status, code, message, details) when admission control refuses this request now, else None."""
        if self.admit is None:
            return None
        try:
            self.admit(path, method)
        except (QueueFull, ShuttingDown) as exc:
            return _refusal(exc, self.retry_after)
        return None

    async def _run_until_disconnect(self, scope, app_receive, server_receive, send, state) -> bool:
        """Run the app; cancel it if the client disconnects before the response starts. True if cancelled."""
        app_task = asyncio.ensure_future(self.app(scope, app_receive, send))
        watcher = asyncio.ensure_future(_disconnected(server_receive))
        cancelled_by_us = False
        try:
            await asyncio.wait((app_task, watcher), return_when=asyncio.FIRST_COMPLETED)
            # the watcher also returns once the response is complete (the server then reports a disconnect)
            if not app_task.done() and not state["started"]:
                cancelled_by_us = True
                app_task.cancel()
            try:
                await app_task
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not cancelled_by_us or (task is not None and task.cancelling()):
                    raise  # we ourselves are being cancelled (server shutdown): pass it on
            return cancelled_by_us
        finally:
            watcher.cancel()
            if not app_task.done():
                app_task.cancel()

    async def _limited_body(self, scope, receive):
        if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            return receive
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    if int(v) > self.max_body:
                        return None
                except ValueError:
                    pass
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                chunks = None
                disconnect = msg
                break
            body = msg.get("body", b"")
            size += len(body)
            if size > self.max_body:
                return None
            chunks.append(body)
            if not msg.get("more_body", False):
                break
        if chunks is None:
            async def gone():
                return disconnect
            return gone
        data = b"".join(chunks)
        sent = {"done": False}

        async def replay():
            if not sent["done"]:
                sent["done"] = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()  # later reads wait for the disconnect, as the app expects

        return replay

    @staticmethod
    async def _send_json(send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()):
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()), *headers]})
        await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------------------------------------------- the app
def _finite(x):
    """JSON has no inf/nan: a non-finite score becomes null (e.g. null_score_diff when no span exists)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _clean_answer(r: dict) -> dict:
    keys = ("answer", "start", "end", "score", "has_answer", "null_score_diff", "null_threshold", "span_answer",
            "windows")
    return {k: _finite(r.get(k)) for k in keys}


def create_app(classifier=None, qa=None, *, settings: ServerSettings | None = None, metrics: Metrics | None = None):
    """Build the FastAPI app over loaded predictors (``serve.runtime.Predictor``; at least one).

    Each model gets a :class:`MicroBatcher` (admission control with ``settings.max_queue_ms``; micro-batching as
    :func:`resolve_batching` decides from the predictor's device and threads; ``app.state.batching`` says what and
    why). The batchers start with the app (ASGI lifespan) and, at shutdown, finish the work already queued."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse
    from pydantic import BaseModel, ConfigDict, Field, field_validator
    from starlette.exceptions import HTTPException as StarletteHTTPException

    if classifier is None and qa is None:
        raise DenkiError("denki serve needs at least one model: --classifier DIR and/or --qa DIR")
    if classifier is not None and classifier.kind != "onnx-classifier":
        raise DenkiError(f"--classifier: {classifier.dir} is a {classifier.kind} bundle, not an ONNX classifier")
    if qa is not None and qa.kind != "onnx-qa":
        raise DenkiError(f"--qa: {qa.dir} is a {qa.kind} bundle, not an ONNX QA model")
    s = settings or ServerSettings()
    metrics = metrics or Metrics()
    human_log = None
    if s.human_log is not None:
        if classifier is None:
            raise DenkiError("--human-log records the classifier's human route: it needs --classifier")
        human_log = HumanLog(s.human_log, model=_model_name(classifier),
                             human=getattr(classifier, "task", {}).get("human_label", "human"),
                             on_error=metrics.observe_human_log_error)

    def _utf8(v: str) -> str:
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("text is not valid Unicode (lone surrogate)") from None
        return v

    # ------------------------------------------------------------------ schemas (limits come from settings)
    class ErrorDetail(BaseModel):
        code: str = Field(description="machine-readable error code, e.g. too_many_texts, body_too_large")
        message: str
        details: Any = None

    class ErrorResponse(BaseModel):
        error: ErrorDetail

    class ClassifyRequest(BaseModel):
        model_config = ConfigDict(extra="forbid",
                                  json_schema_extra={"examples": [{"texts": ["ログインできません"]}]})
        texts: list[str] = Field(min_length=1, max_length=s.max_texts,
                                 description=f"1–{s.max_texts} texts, each ≤ {s.max_text_chars:,} characters")

        @field_validator("texts")
        @classmethod
        def _check(cls, v: list[str]) -> list[str]:
            for i, t in enumerate(v):
                if len(t) > s.max_text_chars:
                    raise ValueError(f"text {i} is {len(t):,} characters; the limit is {s.max_text_chars:,}")
                _utf8(t)
            return v

    class ClassifyResult(BaseModel):
        label: str = Field(description="most likely label")
        score: float = Field(description="its calibrated probability")
        scores: dict[str, float] = Field(description="probability of every label")
        route: str = Field(description="the label, or the human label when the model abstains")
        reason: str | None = Field(default=None, description="why the text goes to a human: unsure (below the "
                                   "threshold) or out_of_scope (fits no label); null when routed")

    class ClassifyResponse(BaseModel):
        results: list[ClassifyResult]

    class AnswerRequest(BaseModel):
        model_config = ConfigDict(extra="forbid", json_schema_extra={
            "examples": [{"question": "会議は何時から?",
                          "context": "定例会議は毎週月曜の10時から始まる。"}]})
        # "not blank" as Python's str.strip() sees it: U+001C–U+001F count as whitespace there (not in \s)
        question: str = Field(min_length=1, max_length=s.max_text_chars, pattern=NOT_BLANK)
        context: str = Field(min_length=1, max_length=s.max_context_chars, pattern=NOT_BLANK)

        @field_validator("question", "context")
        @classmethod
        def _check(cls, v: str) -> str:
            return _utf8(v)

    class AnswerBatchRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        items: list[AnswerRequest] = Field(min_length=1, max_length=s.max_pairs)

    class AnswerResult(BaseModel):
        answer: str = Field(description="the answer, exactly context[start:end]; empty when has_answer is false")
        start: int | None
        end: int | None
        score: float | None
        has_answer: bool
        null_score_diff: float | None = Field(description="null score − best span score (null: no valid span)")
        null_threshold: float
        span_answer: str = Field(description="the best span even when the model abstains")
        windows: int = Field(description="windows the context was split into")

    class AnswerBatchResponse(BaseModel):
        results: list[AnswerResult]

    errors = {413: {"model": ErrorResponse, "description": "request body too large"},
              422: {"model": ErrorResponse, "description": "invalid input (limits, types, empty text)"},
              503: {"model": ErrorResponse,
                    "description": "overloaded (would not start within the deadline; details.reason says why) or "
                                   "shutting down; see Retry-After"}}

    # ------------------------------------------------------------------ batchers and lifespan
    batchers: dict[str, MicroBatcher] = {}
    batching: dict[str, str] = {}  # model → "on (auto: …)" / "off (…)": what was decided and why
    backlog = SharedBacklog()  # the models share this process's cores: admission counts the work queued for both

    def _mk(name: str, predictor, fn):
        device = getattr(predictor, "device", "cpu")
        enabled, why = resolve_batching(s.batching, device, getattr(predictor, "threads", None))
        wait_ms = default_wait_ms(device) if s.max_wait_ms is None else s.max_wait_ms
        b = MicroBatcher(fn, max_batch=s.max_batch, max_wait_ms=wait_ms, max_queue=s.max_queue,
                         max_queue_ms=s.max_queue_ms, enabled=enabled, name=name,
                         on_batch=lambda st: metrics.observe_batch(name, st),
                         on_shed=lambda reason: metrics.observe_shed(name, reason),
                         on_pending=lambda n: metrics.set_queue_items(name, n), backlog=backlog)
        batchers[name] = b
        batching[name] = why
        metrics.add_model(name)

    if classifier is not None:
        _mk("classifier", classifier, lambda texts: classifier.classify(texts, batch_size=s.max_batch))
    if qa is not None:
        _mk("qa", qa, lambda pairs: [_clean_answer(r) for r in qa.answer_batch(pairs)])

    def admit(path: str, method: str) -> None:
        """Admission control before the body is read (the middleware calls it): raises when the model behind a
        model endpoint would not start a request within the deadline."""
        b = batchers.get(MODEL_OF_PATH.get(path, ""))
        if b is not None and method == "POST":
            b.check_admission(1)

    state = {"ready": False}

    @asynccontextmanager
    async def lifespan(app):
        for b in batchers.values():
            await b.start()
        state["ready"] = True
        log.info("denki serve ready (pid %d): %s; batching %s; deadline %s; human log %s", os.getpid(),
                 ", ".join(f"{k}={v}" for k, v in describe().items()),
                 ", ".join(f"{k} {v}" for k, v in batching.items()),
                 "none" if s.max_queue_ms is None else f"{s.max_queue_ms:g} ms",
                 "off" if human_log is None else f"{human_log.path} (texts routed to {human_log.human!r})")
        try:
            yield
        finally:
            state["ready"] = False
            for b in batchers.values():
                await b.close(timeout=s.shutdown_timeout_s)
            metrics.close()

    def describe() -> dict[str, str]:
        return {name: p.describe() for name, p in (("classifier", classifier), ("qa", qa)) if p is not None}

    app = FastAPI(title="denki", version=_version(), lifespan=lifespan,
                  description="Japanese ELECTRA models behind an HTTP API: text routing (classifier) and "
                              "extractive QA, on ONNX Runtime, with admission control (a request that cannot "
                              "start within the deadline is answered 503 + Retry-After) and micro-batching "
                              "where it pays.")
    app.state.settings = s
    app.state.metrics = metrics
    app.state.batchers = batchers
    app.state.batching = batching
    app.state.human_log = human_log

    # ------------------------------------------------------------------ errors
    def _err(request: Request, status: int, code: str, message: str, details=None, headers=None):
        metrics.observe_error(request.url.path if request.url.path in known else "other", code)
        return JSONResponse({"error": {"code": code, "message": message, "details": details}}, status_code=status,
                            headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        details = [{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")),
                    "type": str(e.get("type", ""))} for e in exc.errors()]
        too_many = any(d["type"] == "too_long" and d["loc"][-1:] in (["texts"], ["items"]) for d in details)
        code = "too_many_items" if too_many else "invalid_request"
        msg = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in details[:5]) or "invalid request"
        return _err(request, 422, code, msg, details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _err(request, exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(QueueFull)
    @app.exception_handler(ShuttingDown)
    async def _refused(request: Request, exc: Exception):
        status, code, message, details = _refusal(exc, s.retry_after_s)
        return _err(request, status, code, message, details, headers={"Retry-After": str(s.retry_after_s)})

    @app.exception_handler(DenkiError)
    async def _denki(request: Request, exc: DenkiError):
        return _err(request, 422, "unprocessable", str(exc))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.exception("internal error on %s", request.url.path)
        return _err(request, 500, "internal", f"internal error ({type(exc).__name__}); see the server log")

    # ------------------------------------------------------------------ routes
    @app.get("/healthz", tags=["ops"], summary="Liveness: the process answers")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], summary="Readiness: models loaded and accepting work (503 otherwise)",
             responses={503: {"model": ErrorResponse}})
    async def readyz(request: Request):
        ok = state["ready"] and all(b.running for b in batchers.values())
        if not ok:
            return _err(request, 503, "not_ready", "starting or shutting down",
                        headers={"Retry-After": str(s.retry_after_s)})
        return {"status": "ready", "models": describe(), "pid": os.getpid()}  # pid: which worker answered

    @app.get("/metrics", tags=["ops"], summary="Prometheus metrics (text exposition format 0.0.4)",
             response_class=PlainTextResponse)
    async def metrics_endpoint():
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models", tags=["models"], summary="Loaded models, backends and limits")
    async def models() -> dict[str, Any]:
        return {"models": describe(), "settings": asdict(s), "batching": dict(batching), "pid": os.getpid()}

    if classifier is not None:
        @app.post("/v1/classify", tags=["models"], response_model=ClassifyResponse, responses=errors,
                  summary="Classify / route texts",
                  description="Each text gets the most likely label, its probability, all probabilities and the "
                              "route (the label, or the human label when the model is not confident enough).")
        async def classify(req: ClassifyRequest, request: Request):
            results = await batchers["classifier"].submit(req.texts, arrived=_arrived(request))
            if human_log is not None:
                _log_human(human_log, metrics, req.texts, results, request.headers.get("x-request-id"))
            return {"results": results}

    if qa is not None:
        @app.post("/v1/answer", tags=["models"], response_model=AnswerResult, responses=errors,
                  summary="Answer a question from a passage (extractive)")
        async def answer(req: AnswerRequest, request: Request):
            return (await batchers["qa"].submit([(req.question, req.context)], arrived=_arrived(request)))[0]

        @app.post("/v1/answer/batch", tags=["models"], response_model=AnswerBatchResponse, responses=errors,
                  summary="Answer several question/passage pairs")
        async def answer_batch(req: AnswerBatchRequest, request: Request):
            return {"results": await batchers["qa"].submit([(it.question, it.context) for it in req.items],
                                                           arrived=_arrived(request))}

    known = {r.path for r in app.routes if hasattr(r, "path")}
    app.add_middleware(_ObserveAndLimit, metrics=metrics, max_body_bytes=s.max_body_bytes, known_paths=known,
                       admit=admit, retry_after_s=s.retry_after_s)
    return app


def _model_name(predictor) -> str:
    """The name a human-log record gives the served model: its bundle directory's name."""
    d = getattr(predictor, "dir", None)
    return os.path.basename(os.path.normpath(str(d))) if d else "classifier"


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


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("denki")
    except Exception:  # source tree without installation
        return "0"
