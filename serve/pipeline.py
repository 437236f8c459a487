"""A small staged pipeline: a source, stages and a sink joined by bounded queues — the engine under `denki classify`.

    run_pipeline(source, [tokenise, infer], write, threaded=True)

``source`` is an iterable of work items (for ``denki classify``: a window of rows, read, parsed and tokenised);
each stage maps an item to the next item (the model call); ``sink`` consumes the last ones (writing, checkpoints).

* ``threaded=False`` runs everything in the calling thread, one item at a time, in order: the sequential reference
  (and ``--workers 1``).
* ``threaded=True`` runs the source and every stage in a thread of its own and the sink in the calling thread,
  joined by FIFO queues of ``maxsize`` items. One thread per stage and FIFO queues mean the sink sees the items in
  source order, so the output is the same as the sequential run's whenever the stages are deterministic. The
  overlap is real where a stage releases the GIL (onnxruntime's ``run``, file I/O, fsync); pure-Python stages
  still share one core.
* Memory is bounded: at most ``maxsize`` items wait in each queue, plus one being worked on per thread.
* The first exception in any thread (``KeyboardInterrupt`` included) stops every thread and is re-raised in the
  caller; Ctrl-C lands in the calling thread (the sink), which stops the others the same way. Threads are daemons
  polling a stop flag, so an interrupted run does not hang on a full or empty queue.

Torch-free, stdlib only (serve/).
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

_END = object()  # end-of-stream marker passed down the queues
_POLL_S = 0.1  # how often a blocked put/get looks at the stop flag


class _Stopped(Exception):
    """Raised inside a worker when another thread failed: unwind quietly (the first error is the one reported)."""


def run_pipeline(source: Iterable[Any], stages: list[Callable[[Any], Any]], sink: Callable[[Any], None], *,
                 threaded: bool = True, maxsize: int = 2, name: str = "denki") -> None:
    """Push every item of ``source`` through ``stages`` into ``sink`` (see the module docstring)."""
    if not threaded:
        for item in source:
            for stage in stages:
                item = stage(item)
            sink(item)
        return

    stop = threading.Event()
    errors: list[BaseException] = []
    lock = threading.Lock()
    queues = [queue.Queue(maxsize=maxsize) for _ in range(len(stages) + 1)]

    def fail(e: BaseException) -> None:
        with lock:
            if not errors:
                errors.append(e)
        stop.set()

    def put(q: queue.Queue, item) -> None:
        while True:
            try:
                q.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                if stop.is_set():
                    raise _Stopped from None

    def get(q: queue.Queue):
        while True:
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                if stop.is_set():
                    raise _Stopped from None

    def run_source() -> None:
        try:
            for item in source:
                if stop.is_set():
                    return
                put(queues[0], item)
            put(queues[0], _END)
        except _Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 — any failure, even KeyboardInterrupt, goes to the caller
            fail(e)

    def run_stage(k: int) -> None:
        try:
            while True:
                item = get(queues[k])
                if item is _END:
                    put(queues[k + 1], _END)
                    return
                put(queues[k + 1], stages[k](item))
        except _Stopped:
            pass
        except BaseException as e:  # noqa: BLE001
            fail(e)

    threads = [threading.Thread(target=run_source, name=f"{name}-source", daemon=True)]
    threads += [threading.Thread(target=run_stage, args=(k,), name=f"{name}-stage{k + 1}", daemon=True)
                for k in range(len(stages))]
    for t in threads:
        t.start()
    try:
        while True:
            item = get(queues[-1])
            if item is _END:
                break
            sink(item)
    except _Stopped:
        pass
    except BaseException as e:  # noqa: BLE001 — the sink's own failure, or Ctrl-C in the calling thread
        fail(e)
    finally:
        stop.set()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
