"""Prometheus metrics of the HTTP API (:class:`Metrics`): counters, histograms and gauges kept by
``prometheus_client`` in a registry per app, rendered in the text exposition format; summed over the workers of
``denki serve --workers N`` through prometheus_client's multiprocess mode. No torch, no web framework."""
import os
from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from denki.serve.microbatch import BatchStats

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
QUEUE_WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0)


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
    - ``denki_http_in_flight``, ``denki_queue_items{model}``, ``denki_model_info{model,version}`` (1 for the
      served bundle's version) (gauges).

    ``denki_http_errors_total`` counts the refusals of the outer layer too: ``unauthorized`` (401, no valid API
    key), ``overloaded`` / ``shutting_down`` (503), ``body_too_large`` (413).

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
        # livemax: 1 for a version some live worker serves (a finished worker's are dropped by close())
        self._model_info = Gauge("denki_model_info", "The served bundle's version per model (first 12 hex "
                                 "characters of the sha256 of its manifest.json; model_version in the answers).",
                                 ["model", "version"], registry=r, multiprocess_mode="livemax")
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

    def add_model(self, model: str, version: str | None = None) -> None:
        """Show the model's queue gauge from the start (0), not only after its first request, and its version
        (``denki_model_info{model,version} 1``)."""
        self._queue_items.labels(model).set(0)
        if version is not None:
            self._model_info.labels(model, version).set(1)

    def move_model_version(self, model: str, old: str, new: str) -> None:
        """A reload: ``denki_model_info{model,old}`` 0 and ``{model,new}`` 1 (set, not removed: in multiprocess
        mode each worker's value lives in the shared files, and a worker still on the old version keeps its 1)."""
        if old != new:
            self._model_info.labels(model, old).set(0)
        self._model_info.labels(model, new).set(1)

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
