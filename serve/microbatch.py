"""Micro-batching and admission control across concurrent HTTP requests (asyncio; no torch, no web framework).

    batcher = MicroBatcher(predictor.classify, max_batch=32, max_wait_ms=2, max_queue=2048, max_queue_ms=250)
    await batcher.start()
    results = await batcher.submit(["text a", "text b"])   # this request's results, in order
    await batcher.close()                                  # finishes everything already queued

One worker task per model takes the first waiting request, then keeps collecting requests until the batch holds
``max_batch`` items (texts or question/context pairs) or ``max_wait_ms`` have passed since the first one, runs
``fn(items)`` once in a thread (so the event loop keeps accepting requests while onnxruntime works), and hands
each request its slice of the results. A request is never split: one with more items than are left in the batch
waits for the next batch (a request larger than ``max_batch`` runs as a batch of its own).

With ``enabled=False`` every request is its own batch (one request → one inference, served in arrival order).
Whether to batch is decided per model by :func:`resolve_batching` (``auto``: :data:`BATCHING_RULE`: on, with
no batching wait on CPU, where that was measured to pay at light and heavy load alike).

**Admission: latency is bounded by shedding, not by a queue length.** Under overload a queue only turns extra
work into waiting (the first load test: p50 2.1 s, p99 12.5 s, 1.3 % shed), so three rules bound it:

- *Deadline* (``max_queue_ms``): a request whose model call has not started ``max_queue_ms`` after it arrived is
  answered :class:`QueueFull` (HTTP 503 + Retry-After) at that moment, and the worker never starts a request
  whose deadline has passed. An admitted request therefore waits at most the deadline plus the model call it is
  part of.
- *Estimate* (the queue bound from the measured service rate): every model call updates an exponentially
  weighted mean of seconds per item; a request arriving when the items ahead of it would need more than the
  deadline is refused at once (:meth:`check_admission`, cheap: nothing is tokenised), instead of waiting the
  whole deadline to be refused. So the effective queue bound is ``max_queue_ms × measured items/s``, whatever
  the model and the machine, with no count to tune. The models of one process share its cores, so batchers
  built with one :class:`SharedBacklog` estimate the wait from the work queued for *all* of them: otherwise a
  costly model (QA, ~25 ms a call) keeps being admitted while its own queue is short and takes the CPU from a
  cheap one (the router), which is then refused ever more — at 2x capacity 93 % of QA requests were admitted
  and 34 % of router requests, and goodput fell to 0.77x (docs/serving.md). With a shared backlog a
  request's chance of admission does not depend on its model.
- *Memory backstop* (``max_queue``): at most that many items wait, whatever the estimate says.

A caller that goes away (its ``submit`` is cancelled: the HTTP layer cancels it when the client disconnects)
takes its work with it: a queued request is skipped, a running one's results are dropped.

If a batch fails, each of its requests is re-run alone, so one bad input (e.g. a question the tokenizer refuses)
fails only its own request.
"""
from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from denki.models.io.errors import DenkiError

#: weight of the newest model call in the seconds-per-item estimate (about the last ten calls count)
EWMA_ALPHA = 0.1

#: reasons a request is shed (the ``reason`` label of ``denki_shed_total``)
SHED_REASONS = ("estimate", "deadline", "queue_full")

#: the request deadline by default (``denki serve --max-queue-ms``): a request whose model call has not started
#: within it is answered 503. It bounds p99 of admitted requests by about 250 ms + one model call (measured to
#: hold under overload: docs/serving.md, "Admission control")
DEFAULT_MAX_QUEUE_MS = 250.0

#: ``batching="auto"``, stated once for ``denki serve --help`` (the measurements: docs/serving.md, "Micro-batching")
BATCHING_RULE = ("auto = on, with the batching wait chosen per device (--max-wait-ms): none on CPU, where a batch "
                 "is whatever queued while the previous call ran (measured to pay at light and heavy load alike, "
                 "while waiting for company cost throughput at light load; docs/serving.md), 2 ms on CUDA, where "
                 "one call has a large fixed cost that a fuller batch shares (not yet measured)")

#: the batching wait by device when ``--max-wait-ms`` is not given (the rule above)
DEFAULT_WAIT_MS = {"cpu": 0.0, "cuda": 2.0}


def default_wait_ms(device: str) -> float:
    """How long the first request of a batch waits for company on ``device`` by default (:data:`BATCHING_RULE`)."""
    return DEFAULT_WAIT_MS["cuda" if device == "cuda" else "cpu"]


def batching_mode(value) -> str:
    """``True``/``False`` (older callers' settings) → ``on``/``off``; ``auto``/``on``/``off`` as they are."""
    if isinstance(value, bool):
        return "on" if value else "off"
    mode = str(value).strip().lower()
    if mode not in ("auto", "on", "off"):
        raise DenkiError(f"batching must be auto, on or off, not {value!r}")
    return mode


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask: taskset and container cpusets count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def resolve_batching(mode, device: str = "cpu", threads: int | None = None) -> tuple[bool, str]:
    """Whether a model served on ``device`` with ``threads`` onnxruntime intra-op threads micro-batches, and why.

    ``on``/``off`` are obeyed; ``auto`` follows :data:`BATCHING_RULE`: on, with no batching wait on CPU (a batch
    forms only from requests that queued while the previous call ran, so a lone request never waits) and a short
    one on CUDA (:func:`default_wait_ms`)."""
    mode = batching_mode(mode)
    if mode != "auto":
        return mode == "on", f"{mode} (asked for)"
    if device == "cuda":
        return True, "on (auto: CUDA, 2 ms batching wait; a GPU call has a large fixed cost that a batch shares)"
    n = int(threads) if threads else usable_cores()
    return True, (f"on (auto: CPU, {n} intra-op thread{'s' if n > 1 else ''}, no batching wait: a batch is what "
                  f"queued while the previous call ran; measured to pay in the serve-load study, docs/serving.md)")


class QueueFull(Exception):
    """The request cannot be served in time or the queue is at its memory bound; retry later (HTTP 503).

    ``reason``: ``estimate`` (refused on arrival: the measured service rate says it would wait past the deadline),
    ``deadline`` (it waited ``max_queue_ms`` without starting) or ``queue_full`` (``max_queue`` items wait)."""

    def __init__(self, message: str, reason: str = "queue_full", details: dict | None = None):
        super().__init__(message)
        self.reason = reason
        self.details = {"reason": reason, **(details or {})}


class ShuttingDown(Exception):
    """The batcher is closing and accepts no new work (HTTP 503)."""


@dataclass
class _Job:
    items: Sequence[Any]
    future: asyncio.Future
    arrived: float  # time.monotonic() when the request arrived (the deadline counts from here)
    deadline: float  # time.monotonic() by which its model call must have started (inf: no deadline)
    released: bool = False  # its items no longer count toward the queue bound
    started: bool = False  # its model call has begun: it is no longer shed, whatever the clock says


@dataclass
class BatchStats:
    """What the worker reports after each model call (the HTTP layer turns it into metrics)."""
    items: int
    requests: int
    seconds: float
    failed: bool = False
    queue_waits: tuple[float, ...] = ()  # seconds each request of the batch waited before the call started


class SharedBacklog:
    """The batchers of one process, which share its cores: admission looks at the work queued for all of them.

    ``estimated_wait()`` is the sum of the members' own backlogs (queued items × their measured seconds per item,
    plus what is left of their running calls): the CPU has to get through all of it, whichever model a new
    request is for (conservative when the machine has cores to spare for two calls at once)."""

    def __init__(self) -> None:
        self.members: list[MicroBatcher] = []

    def add(self, batcher: "MicroBatcher") -> None:
        self.members.append(batcher)

    def busy(self) -> bool:
        """Whether any member has work queued or running."""
        return any(b.pending > 0 for b in self.members)

    def estimated_wait(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        return sum(b.own_backlog(now) for b in self.members)


class MicroBatcher:
    """Collects concurrent requests into one model call and sheds what cannot start in time (module docstring).

    ``fn``: ``items -> results`` (same length and order), called in a worker thread.
    ``max_queue_ms``: the deadline (None: no deadline, no estimate; the memory backstop only).
    ``on_batch``: optional callback receiving a :class:`BatchStats` after each call (on the event loop).
    ``on_shed``: optional callback receiving the reason each time a request is refused.
    ``on_pending``: optional callback receiving the pending item count whenever it changes (a gauge).
    ``backlog``: a :class:`SharedBacklog` of the process's batchers (admission then counts their work too);
    without one the batcher is the only member of a backlog of its own.
    """

    def __init__(self, fn: Callable[[list], list], *, max_batch: int = 32, max_wait_ms: float = 2.0,
                 max_queue: int = 2048, max_queue_ms: float | None = None, enabled: bool = True,
                 name: str = "model", on_batch: Callable[[BatchStats], None] | None = None,
                 on_shed: Callable[[str], None] | None = None, on_pending: Callable[[int], None] | None = None,
                 backlog: SharedBacklog | None = None):
        if max_batch < 1 or max_queue < 1 or max_wait_ms < 0:
            raise ValueError("max_batch and max_queue must be ≥ 1 and max_wait_ms ≥ 0")
        if max_queue_ms is not None and max_queue_ms <= max_wait_ms:
            raise ValueError("max_queue_ms (the deadline) must be larger than max_wait_ms (the batching wait)")
        self.fn = fn
        self.max_batch = int(max_batch)
        self.max_wait = float(max_wait_ms) / 1e3
        self.max_queue = int(max_queue)
        self.max_queue_s = None if max_queue_ms is None else float(max_queue_ms) / 1e3
        self.enabled = bool(enabled)
        self.name = name
        self.on_batch = on_batch
        self.on_shed = on_shed
        self.on_pending = on_pending
        self._queue: asyncio.Queue[_Job] | None = None
        self._pending_items = 0  # items queued or running; the memory bound and the estimate count these
        self._running_items = 0  # items of the model call in progress
        self._running_since = 0.0  # time.monotonic() when it started
        self._seconds_per_item: float | None = None  # measured service time (EWMA); None until measured
        self._calls = 0
        self._carry: _Job | None = None  # a job that did not fit into the previous batch
        self._worker: asyncio.Task | None = None
        self._closing = False
        self.backlog = SharedBacklog() if backlog is None else backlog
        self.backlog.add(self)

    # ----------------------------------------------------------------- state
    @property
    def pending(self) -> int:
        """Items waiting or being processed."""
        return self._pending_items

    @property
    def running(self) -> bool:
        return self._worker is not None and not self._worker.done() and not self._closing

    @property
    def seconds_per_item(self) -> float | None:
        """The measured service time per item (exponentially weighted over recent model calls; None before the
        second call — the first one, onnxruntime's warm-up, is not counted)."""
        return self._seconds_per_item

    def estimated_wait(self, now: float | None = None) -> float:
        """Seconds a request arriving now would wait before its model call starts: the backlog of every batcher
        sharing the cores (just this one's, :meth:`own_backlog`, unless a :class:`SharedBacklog` was given)."""
        return self.backlog.estimated_wait(now)

    def own_backlog(self, now: float | None = None) -> float:
        """Seconds of work this batcher holds: the queued items times the measured seconds per item, plus what
        is left of the call in progress (0 until a call was measured)."""
        spi = self._seconds_per_item
        if spi is None:
            return 0.0
        now = time.monotonic() if now is None else now
        queued = max(0, self._pending_items - self._running_items)
        left_of_running = max(0.0, self._running_items * spi - (now - self._running_since))
        return queued * spi + left_of_running

    async def start(self) -> None:
        if self._worker is None:
            self._queue = asyncio.Queue()  # bounded by check_admission()
            self._worker = asyncio.create_task(self._run(), name=f"microbatch-{self.name}")

    async def close(self, timeout: float = 30.0) -> None:
        """Stop accepting work, finish what is queued (up to ``timeout`` s), then stop the worker."""
        self._closing = True
        if self._worker is None:
            return
        t_end = time.monotonic() + timeout
        while self._pending_items > 0 and time.monotonic() < t_end and not self._worker.done():
            await asyncio.sleep(0.01)
        self._worker.cancel()
        try:
            await self._worker
        except (asyncio.CancelledError, Exception):
            pass
        # anything still queued after the timeout gets a clear error rather than hanging forever
        leftovers = [self._carry] if self._carry else []
        while self._queue is not None and not self._queue.empty():
            leftovers.append(self._queue.get_nowait())
        for job in leftovers:
            if not job.future.done():
                job.future.set_exception(ShuttingDown("server is shutting down"))
        self._carry = None
        self._worker = None

    # ---------------------------------------------------------------- admission
    def check_admission(self, n: int = 1) -> None:
        """Raise :class:`ShuttingDown` or :class:`QueueFull` if a request of ``n`` items would be refused now.

        Cheap by design (a few comparisons): the HTTP layer calls it before it even reads the request body, so a
        rejection costs no JSON parsing and no tokenisation. :meth:`submit` calls it again with the real count."""
        if self._closing or self._worker is None:
            raise ShuttingDown("server is shutting down" if self._closing else "batcher not started")
        # A request larger than the whole queue could never be admitted; let it in alone when the queue is idle.
        if self._pending_items + n > self.max_queue and self._pending_items > 0:
            self._shed("queue_full")
            raise QueueFull(f"{self._pending_items} items queued (limit {self.max_queue})", "queue_full",
                            {"queued_items": self._pending_items, "max_queue": self.max_queue})
        if self.max_queue_s is not None and self.backlog.busy():
            wait = self.estimated_wait()
            if wait > self.max_queue_s:
                self._shed("estimate")
                raise QueueFull(f"estimated queue wait {wait * 1e3:.0f} ms exceeds the {self.max_queue_s * 1e3:.0f} ms "
                                f"deadline", "estimate",
                                {"estimated_wait_ms": round(wait * 1e3, 1), "max_queue_ms": self.max_queue_s * 1e3})

    def _shed(self, reason: str) -> None:
        if self.on_shed is not None:
            self.on_shed(reason)

    # ---------------------------------------------------------------- submit
    async def submit(self, items: Sequence[Any], *, arrived: float | None = None) -> list:
        """Queue ``items`` (one request) and wait for their results.

        ``arrived``: ``time.monotonic()`` when the request reached the server (default: now); its deadline counts
        from there. Raises :class:`QueueFull` when it is refused or its deadline passes before its model call
        starts, :class:`ShuttingDown` while closing, or whatever ``fn`` raised for this request's items."""
        n = len(items)
        self.check_admission(max(1, n))
        if n == 0:
            return []
        assert self._queue is not None
        now = time.monotonic()
        arrived = now if arrived is None else min(arrived, now)
        deadline = math.inf if self.max_queue_s is None else arrived + self.max_queue_s
        # It spent its whole budget before reaching the queue (body upload, a busy loop). Refused only when work is
        # waiting: on an idle batcher its call starts at once, and refusing it would only waste what it cost so far
        # (CI saw an idle server refuse a lone request after a 387 ms stall).
        if now >= deadline:
            if self._pending_items > 0:
                self._shed("deadline")
                raise QueueFull(f"waited {(now - arrived) * 1e3:.0f} ms before queueing", "deadline",
                                {"waited_ms": round((now - arrived) * 1e3, 1), "max_queue_ms": self.max_queue_s * 1e3})
            deadline = now + self.max_queue_s  # idle: its budget counts from the queue, where it is first in line
        job = _Job(list(items), asyncio.get_running_loop().create_future(), arrived=arrived, deadline=deadline)
        self._add_pending(n)
        self._queue.put_nowait(job)
        try:
            return await self._result(job)
        finally:
            if not job.future.done():
                job.future.cancel()  # our caller was cancelled (client gone): the worker skips the job
            if job.future.cancelled():
                self._release(job)

    async def _result(self, job: _Job) -> list:
        """Wait for the job's results; past its deadline without having started, it is shed."""
        if math.isinf(job.deadline):
            return await job.future
        timeout = job.deadline - time.monotonic()
        if timeout > 0:
            done, _ = await asyncio.wait((job.future,), timeout=timeout)
            if done:
                return job.future.result()
        if job.started or job.future.done():
            return await job.future  # its model call is running: at most that call more
        job.future.cancel()  # the worker skips it; submit() releases its items
        self._shed("deadline")
        waited = time.monotonic() - job.arrived
        raise QueueFull(f"not started within the {self.max_queue_s * 1e3:.0f} ms deadline", "deadline",
                        {"waited_ms": round(waited * 1e3, 1), "max_queue_ms": self.max_queue_s * 1e3})

    # ---------------------------------------------------------------- worker
    async def _next_job(self, timeout: float | None) -> _Job | None:
        if self._carry is not None:
            job, self._carry = self._carry, None
            return job
        assert self._queue is not None
        if not self._queue.empty():  # fast path: no timer when work is already waiting
            return self._queue.get_nowait()
        if timeout is None:
            return await self._queue.get()
        if timeout <= 0:
            return None
        try:
            return await asyncio.wait_for(self._queue.get(), timeout)
        except (asyncio.TimeoutError, TimeoutError):
            return None

    def _add_pending(self, n: int) -> None:
        self._pending_items += n
        if self.on_pending is not None:
            self.on_pending(self._pending_items)

    def _release(self, job: _Job) -> None:
        if not job.released:
            job.released = True
            self._add_pending(-len(job.items))

    def _observe_service(self, seconds: float, items: int) -> None:
        """Update the seconds-per-item estimate (the first call, onnxruntime's warm-up, is left out)."""
        self._calls += 1
        if self._calls == 1 or items <= 0:
            return
        spi = seconds / items
        prev = self._seconds_per_item
        self._seconds_per_item = spi if prev is None else prev + EWMA_ALPHA * (spi - prev)

    async def _collect(self) -> list[_Job]:
        """Wait for one job, then gather more until the batch is full or the wait is over."""
        loop = asyncio.get_running_loop()
        first = await self._next_job(None)
        batch, size = [first], len(first.items)
        deadline = loop.time() + self.max_wait
        while self.enabled and size < self.max_batch:
            job = await self._next_job(deadline - loop.time())
            if job is None:
                break
            if size + len(job.items) > self.max_batch:
                self._carry = job  # never split a request; it opens the next batch
                break
            batch.append(job)
            size += len(job.items)
        return batch

    def _dispatch(self, batch: list[_Job]) -> list[_Job]:
        """The jobs of ``batch`` that will run: cancelled ones are released, overdue ones shed; the rest are
        marked started (from now on their deadline no longer applies)."""
        now = time.monotonic()
        live = []
        for j in batch:
            if j.future.done():  # cancelled: the client went away, or it was shed by its own timer
                self._release(j)
            elif now > j.deadline:  # never start work for a request already past its deadline
                self._release(j)
                self._shed("deadline")
                j.future.set_exception(QueueFull(
                    f"not started within the {self.max_queue_s * 1e3:.0f} ms deadline", "deadline",
                    {"waited_ms": round((now - j.arrived) * 1e3, 1), "max_queue_ms": self.max_queue_s * 1e3}))
            else:
                j.started = True
                live.append(j)
        return live

    async def _call(self, items: list) -> list:
        results = await asyncio.to_thread(self.fn, items)
        if len(results) != len(items):
            raise RuntimeError(f"{self.name}: model returned {len(results)} results for {len(items)} items")
        return results

    async def _run(self) -> None:
        while True:
            batch = await self._collect()
            live = self._dispatch(batch)
            if not live:
                continue
            items = [x for j in live for x in j.items]
            t0 = time.perf_counter()
            self._running_items, self._running_since = len(items), time.monotonic()
            waits = tuple(self._running_since - j.arrived for j in live)
            failed = False
            try:
                try:
                    results = await self._call(items)
                except Exception:
                    if len(live) == 1:
                        raise
                    # isolate the failing request(s): re-run each request alone
                    failed = True
                    results = None
                if results is not None:
                    k = 0
                    for j in live:
                        n = len(j.items)
                        if not j.future.done():
                            j.future.set_result(results[k:k + n])
                        k += n
                else:
                    for j in live:
                        try:
                            r = await self._call(list(j.items))
                            if not j.future.done():
                                j.future.set_result(r)
                        except Exception as e:  # noqa: BLE001 — handed to the request that caused it
                            if not j.future.done():
                                j.future.set_exception(e)
            except Exception as e:  # noqa: BLE001 — a single request failed: its caller gets the error
                failed = True
                for j in live:
                    if not j.future.done():
                        j.future.set_exception(e)
            finally:
                self._running_items = 0
                for j in batch:
                    self._release(j)
            seconds = time.perf_counter() - t0
            if not failed:
                self._observe_service(seconds, len(items))
            if self.on_batch is not None:
                self.on_batch(BatchStats(items=len(items), requests=len(live), seconds=seconds, failed=failed,
                                         queue_waits=waits))
