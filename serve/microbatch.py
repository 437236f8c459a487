"""Micro-batching across concurrent HTTP requests (asyncio; no torch, no web framework).

    batcher = MicroBatcher(predictor.classify, max_batch=32, max_wait_ms=2, max_queue=512)
    await batcher.start()
    results = await batcher.submit(["text a", "text b"])   # this request's results, in order
    await batcher.close()                                  # finishes everything already queued

One worker task per model takes the first waiting request, then keeps collecting requests until the batch holds
``max_batch`` items (texts or question/context pairs) or ``max_wait_ms`` have passed since the first one, runs
``fn(items)`` once in a thread (so the event loop keeps accepting requests while onnxruntime works), and hands
each request its slice of the results. A request is never split: one with more items than are left in the batch
waits for the next batch (a request larger than ``max_batch`` runs as a batch of its own).

With ``enabled=False`` every request is its own batch (one request → one inference, served in arrival order):
the baseline the load test compares against.

Memory is bounded: at most ``max_queue`` items wait; :meth:`submit` raises :class:`QueueFull` beyond that (the
HTTP layer answers 503 with ``Retry-After``) instead of queueing without limit.

If a batch fails, each of its requests is re-run alone, so one bad input (e.g. a question the tokenizer refuses)
fails only its own request.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


class QueueFull(Exception):
    """The batcher already holds ``max_queue`` items; retry later (HTTP 503)."""


class ShuttingDown(Exception):
    """The batcher is closing and accepts no new work (HTTP 503)."""


@dataclass
class _Job:
    items: Sequence[Any]
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)
    released: bool = False  # its items no longer count toward the queue bound


@dataclass
class BatchStats:
    """What the worker reports after each model call (the HTTP layer turns it into metrics)."""
    items: int
    requests: int
    seconds: float
    failed: bool = False


class MicroBatcher:
    """Collects concurrent requests into one model call (see module docstring).

    ``fn``: ``items -> results`` (same length and order), called in a worker thread.
    ``on_batch``: optional callback receiving a :class:`BatchStats` after each call (on the event loop).
    """

    def __init__(self, fn: Callable[[list], list], *, max_batch: int = 32, max_wait_ms: float = 2.0,
                 max_queue: int = 512, enabled: bool = True, name: str = "model",
                 on_batch: Callable[[BatchStats], None] | None = None):
        if max_batch < 1 or max_queue < 1 or max_wait_ms < 0:
            raise ValueError("max_batch and max_queue must be ≥ 1 and max_wait_ms ≥ 0")
        self.fn = fn
        self.max_batch = int(max_batch)
        self.max_wait = float(max_wait_ms) / 1e3
        self.max_queue = int(max_queue)
        self.enabled = bool(enabled)
        self.name = name
        self.on_batch = on_batch
        self._queue: asyncio.Queue[_Job] | None = None
        self._pending_items = 0  # items queued or running; the back-pressure bound
        self._carry: _Job | None = None  # a job that did not fit into the previous batch
        self._worker: asyncio.Task | None = None
        self._closing = False

    # ----------------------------------------------------------------- state
    @property
    def pending(self) -> int:
        """Items waiting or being processed."""
        return self._pending_items

    @property
    def running(self) -> bool:
        return self._worker is not None and not self._worker.done() and not self._closing

    async def start(self) -> None:
        if self._worker is None:
            self._queue = asyncio.Queue()  # bounded by the item count checked in submit()
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

    # ---------------------------------------------------------------- submit
    async def submit(self, items: Sequence[Any]) -> list:
        """Queue ``items`` (one request) and wait for their results. Raises :class:`QueueFull` when the queue
        holds ``max_queue`` items already, :class:`ShuttingDown` while closing, or whatever ``fn`` raised for
        this request's items."""
        if self._closing or self._worker is None:
            raise ShuttingDown("server is shutting down" if self._closing else "batcher not started")
        n = len(items)
        if n == 0:
            return []
        # A request larger than the whole queue could never be admitted; let it in alone when the queue is idle.
        if self._pending_items + n > self.max_queue and self._pending_items > 0:
            raise QueueFull(f"{self._pending_items} items queued (limit {self.max_queue})")
        assert self._queue is not None
        job = _Job(list(items), asyncio.get_running_loop().create_future())
        self._pending_items += n
        self._queue.put_nowait(job)
        try:
            return await job.future
        finally:
            # Cancelled (client went away) or done: the worker skips cancelled jobs; the count is released once.
            if job.future.cancelled():
                self._release(job)

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

    def _release(self, job: _Job) -> None:
        if not job.released:
            job.released = True
            self._pending_items -= len(job.items)

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

    async def _call(self, items: list) -> list:
        results = await asyncio.to_thread(self.fn, items)
        if len(results) != len(items):
            raise RuntimeError(f"{self.name}: model returned {len(results)} results for {len(items)} items")
        return results

    async def _run(self) -> None:
        while True:
            batch = await self._collect()
            live = [j for j in batch if not j.future.done()]  # cancelled requests (client gone) are skipped
            for j in batch:
                if j.future.done():
                    self._release(j)
            if not live:
                continue
            items = [x for j in live for x in j.items]
            t0 = time.perf_counter()
            try:
                try:
                    results = await self._call(items)
                    failed = False
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
                for j in batch:
                    self._release(j)
            if self.on_batch is not None:
                self.on_batch(BatchStats(items=len(items), requests=len(live),
                                         seconds=time.perf_counter() - t0, failed=failed))
