"""`denki classify`: score a big CSV/JSONL file with an ONNX classifier bundle, streaming, resumable.

Accounting: every input record ends up either in the output (input fields + ``label``, ``score``, ``route``) or in
the errors file (``{"id", "line", "reason", "raw"}``: bad encoding, malformed JSON/CSV, missing field, empty or
over-long text) — ``output rows + error rows = input records``, checked at the end.

Engine (:func:`classify_file`): read → tokenise → model → write stages over bounded windows of rows, overlapping
in threads (:mod:`serve.pipeline`); texts are sorted by token length inside a window and written back in input
order, so the output order is the input order. The tokenise and model stages are the router head's own
(:class:`models.classify.runtime.RouterHead`: encode, batches, run_batch, fuse, finish), as the Python API's.
Reading, checking and writing the files is :mod:`serve.batch_files`.

Resumability: output and errors are written to ``*.partial`` files; after a window, at most every
``checkpoint_seconds``, both are flushed and fsynced and a state file (``OUTPUT.partial.state.json``) records
the last input line of the window and the byte sizes of both files (also at the start and at the end). A killed
run re-run with ``--resume`` truncates the partial files to the recorded sizes (dropping anything written after
the last checkpoint) and continues after the recorded line: no duplicates, no gaps, and — window boundaries
depending only on the input and the options — the same bytes as an uninterrupted run. When the input is done
the partial files are renamed (gzip-compressed first for ``.gz`` names) into place.

Torch-free (serve/).
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from denki.models.io.errors import DenkiError, InputError
from denki.models.io.fileio import atomic_write_json, sha256_file
from denki.serve.batch_files import (ADDED, Encoder, Row, Writer, check_text, csv_header, error_record, file_format,
                                     finalize, iter_rows, output_prefix, scored_record)

__all__ = ["classify_file", "default_workers", "plan_threads", "ADDED", "Row", "check_text", "csv_header",
           "error_record", "iter_rows", "output_prefix", "scored_record"]


def default_workers() -> int:
    """The cores this process may run on (the affinity mask where the OS has one, e.g. under ``taskset`` or a
    container's cpuset), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def plan_threads(workers: int, threads: int | None = None, device: str = "cpu") -> tuple[int, int]:
    """``(onnxruntime intra-op threads per call, concurrent model calls)`` for ``workers`` cores.

    Default: ``workers`` concurrent calls of 1 thread each — different batches run side by side on different
    cores. For a small model that scales better than splitting one batch's matrix products over several threads,
    and a 1-thread call never spin-waits, so the Python stages (reading, tokenising, writing: one GIL, about one
    core at most, ~15% of the work for the quickstart's tiny model) get their share of the same cores from the
    OS. ``threads`` T overrides: ``workers // T`` calls of T threads each (bigger models, where one call's
    products are large enough to split). On CUDA one call at a time: the GPU is the parallel part."""
    workers = max(1, int(workers))
    t = max(1, int(threads)) if threads else 1
    calls = 1 if device == "cuda" else max(1, workers // t)
    return t, calls


@dataclass
class _Window:
    """A bounded window of consecutive input rows on its way through the pipeline (see :func:`classify_file`)."""

    rows: list[Row]  # every row of the window, good and bad, in input order
    good: list[int]  # positions in ``rows`` of the rows with a text to score
    texts: list[str]  # their texts (freed once tokenised)
    last_line: int  # physical input line where the window ends: a checkpoint after it resumes there
    head: list = None  # per good row: its output without the added fields (see _Encoder), filled by tokenise
    batches: list = None  # [(positions into ``good``, padded int64 arrays)], sorted by token length
    lexical: object = None  # a fused router's TF-IDF logits (len(good), K), filled by tokenise
    label_idx: object = None  # per good row, input order: the decision (filled by the model stage)
    score: object = None
    abstain: object = None


@dataclass
class _Paths:
    """The run's files: input, output, errors, their partial files and the resume state."""

    inp: Path
    out: Path
    err: Path

    @classmethod
    def of(cls, input_path, output_path, errors_path) -> "_Paths":
        out = Path(output_path)
        err = Path(errors_path) if errors_path else out.with_name(out.name.removesuffix(".gz") + ".errors.jsonl")
        p = cls(Path(input_path), out, err)
        p.in_fmt, p.out_fmt = file_format(p.inp), file_format(out)
        p.part_out = out.with_name("." + out.name.removesuffix(".gz") + ".partial")
        p.part_err = err.with_name("." + err.name.removesuffix(".gz") + ".partial")
        p.state = p.part_out.with_name(p.part_out.name + ".state.json")
        if not p.inp.is_file():
            raise InputError("file not found", path=str(p.inp))
        return p


def _check_options(batch_size: int, workers: int | None, window: int | None) -> tuple[int, int]:
    """``(workers, window)`` after defaults, or a :class:`DenkiError` naming the option that is wrong."""
    if batch_size < 1:
        raise DenkiError(f"batch size must be at least 1, got {batch_size}")
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise DenkiError(f"--workers must be at least 1, got {workers}")
    window = 16 * batch_size if window is None else int(window)
    if window < batch_size:  # batches never span windows: a smaller window would only shrink them
        raise DenkiError(f"--window ({window}) must be at least --batch-size ({batch_size})")
    return workers, window


def _open_router(model_dir, backend: str, device: str, threads: int | None, workers: int):
    """The predictor (every call is a full batch, bar a window's last: rank recorded variants by their batch-N
    time) and ``(onnxruntime threads per call, concurrent calls)``; refuses a bundle whose head is not a router's."""
    from denki.serve.runtime import Predictor

    predictor = Predictor(model_dir, backend=backend, device=device,
                          threads=plan_threads(workers, threads, "cpu")[0], workload="batch")
    if not hasattr(predictor.head, "finish") or not hasattr(predictor.head, "encode"):
        raise predictor.head.refuse("a classifier")
    return predictor, plan_threads(workers, threads, predictor.device)


def _load_state(paths: _Paths, settings: dict, resume: bool, progress: bool) -> dict | None:
    """An interrupted run's state when resuming it (its settings must match); refuses to overwrite one."""
    if not paths.state.exists():
        if resume and progress:
            print("classify: nothing to resume, starting from the beginning")
        return None
    if not resume:
        raise DenkiError(f"an interrupted run left {paths.state}; re-run with --resume to continue it, or delete "
                         f"{paths.part_out}, {paths.part_err} and the state file to start over")
    state = json.loads(paths.state.read_text(encoding="utf-8"))
    changed = [k for k in settings if state["settings"].get(k) != settings[k]]
    if changed:
        raise DenkiError(f"--resume: the interrupted run used different {', '.join(changed)}; "
                         "re-run with the same options, or delete its partial files to start over")
    return state


def _output_columns(paths: _Paths) -> tuple[list[str] | None, str]:
    """``(CSV output header or None, prefix of the added fields)``: CSV keeps the input's columns and adds
    ``label, score, route`` — as ``denki_label``... when the input already has one of those names."""
    if paths.in_fmt == "csv":
        in_header = csv_header(paths.inp)
        prefix = output_prefix(in_header)
        return in_header + [prefix + k for k in ADDED], prefix
    if paths.out_fmt == "csv":
        raise DenkiError("CSV output needs CSV input (JSONL records have no fixed columns); write .jsonl instead")
    return None, ""


class _BatchRun:
    """One run of the engine: the stages (:meth:`read_windows` → :meth:`tokenise` → :meth:`infer` →
    :meth:`write`), the counters and the checkpoints. Built by :func:`classify_file`."""

    def __init__(self, predictor, paths: _Paths, settings: dict, state: dict | None, header, prefix: str, *,
                 batch_size: int, window: int, field: str, checkpoint_seconds: float,
                 stop_after_windows: int | None, pool):
        from denki.models.classify.decision import HUMAN

        self.head, self.paths, self.settings = predictor.head, paths, settings
        self.batch_size, self.window, self.field, self.pool = batch_size, window, field, pool
        self.checkpoint_seconds, self.stop_after_windows = checkpoint_seconds, stop_after_windows
        self.last_line = state["last_line"] if state else 0  # input lines done before an interruption
        self.n_out = state["rows_out"] if state else 0
        self.n_err = state["rows_err"] if state else 0
        self.prefix = state.get("prefix", prefix) if state else prefix
        self.enc = Encoder(paths.out_fmt, paths.in_fmt, header, self.prefix, self.head.labels,
                           predictor.task.get("human_label", HUMAN))
        self.w_out = Writer(paths.part_out, paths.out_fmt, header, state["out_bytes"] if state else None)
        self.w_err = Writer(paths.part_err, "jsonl", None, state["err_bytes"] if state else None)
        self.n_read = self.n_new = self.written = 0
        self.end_line = self.last_line
        self.last_ckpt = time.monotonic()
        # wall seconds spent inside each stage (blocked puts/gets excluded): which stage bounds the run
        self.busy = {"read": 0.0, "tokenise": 0.0, "model": 0.0, "write": 0.0}
        self.bar = None

    def checkpoint(self, upto_line: int) -> None:
        """fsync both partial files, then record where they end (atomically)."""
        ob, eb = self.w_out.sync(), self.w_err.sync()
        atomic_write_json(self.paths.state, {"settings": self.settings, "last_line": upto_line,
                                             "rows_out": self.n_out, "rows_err": self.n_err, "out_bytes": ob,
                                             "err_bytes": eb, "prefix": self.prefix})

    # --- stage 1 (source): read, parse and check rows; cut them into windows (by count: deterministic)
    def read_windows(self):
        rows: list[Row] = []
        good: list[int] = []
        texts: list[str] = []
        for row in iter_rows(self.paths.inp):
            if row.end_line <= self.last_line:
                continue  # done before the interruption
            text = check_text(row, self.field)
            if text is not None:
                good.append(len(rows))
                texts.append(text)
            rows.append(row)
            if len(texts) >= self.window or len(rows) >= 4 * self.window:
                self.n_read += len(rows)
                yield _Window(rows, good, texts, row.end_line)
                rows, good, texts = [], [], []
        if rows:
            self.n_read += len(rows)
            yield _Window(rows, good, texts, rows[-1].end_line)

    # --- stage 2: tokenise, bucket by length, pad; encode the records for output
    def tokenise(self, w: _Window) -> _Window:
        encs = self.head.encode(w.texts)
        # a fused router's TF-IDF half (numpy) runs here, beside the tokenizer, not on the model threads
        w.lexical = self.head.lexical_logits(w.texts)
        w.texts = []
        w.batches = self.head.batches(encs, self.batch_size)
        w.head = [self.enc.head(w.rows[i].record) for i in w.good]
        for i in w.good:
            w.rows[i].record = None  # the output text is ready: free the parsed record
        return w

    # --- stage 3: the model, then the routing rule, vectorised. onnxruntime releases the GIL in run() and one
    # session may be run from several threads, so a pool runs a window's batches side by side; each batch's
    # result is the same whichever thread runs it.
    def infer(self, w: _Window) -> _Window:
        if w.batches:
            logits = np.empty((len(w.good), len(self.head.labels)), dtype=np.float32)
            run = lambda b: self.head.run_batch(b[1])  # noqa: E731
            for (idx, _), lg in zip(w.batches, self.pool.map(run, w.batches) if self.pool else map(run, w.batches)):
                logits[idx] = lg
            w.batches = None
            logits = self.head.fuse(logits, w.lexical)
            w.label_idx, w.score, _, w.abstain = self.head.finish(logits, w.lexical)
        return w

    # --- stage 4 (sink): write in input order, checkpoint by time
    def write(self, w: _Window) -> None:
        out_lines: list = []
        err_lines: list[str] = []
        g = 0
        for row in w.rows:
            if row.error is not None:
                err_lines.append(json.dumps(error_record(row, self.paths.inp), ensure_ascii=False) + "\n")
                continue
            k, s, h = int(w.label_idx[g]), w.score[g], bool(w.abstain[g])
            out_lines.append(self.enc.jsonl(w.head[g], k, s, h) if self.paths.out_fmt == "jsonl"
                             else self.enc.csv_row(w.head[g], k, s, h))
            g += 1
        if self.paths.out_fmt == "jsonl":
            self.w_out.f.write("".join(out_lines))
        else:
            self.w_out.csv.writerows(out_lines)
        self.w_err.f.write("".join(err_lines))
        self.n_out += len(out_lines)
        self.n_err += len(err_lines)
        self.n_new += len(w.rows)
        self.bar.update(len(w.rows))
        self.written += 1
        if self.stop_after_windows is not None and self.written >= self.stop_after_windows:
            _simulated_crash()
        if self.checkpoint_seconds <= 0 or time.monotonic() - self.last_ckpt >= self.checkpoint_seconds:
            self.checkpoint(w.last_line)
            self.last_ckpt = time.monotonic()
        self.end_line = w.last_line

    # --- the pipeline
    def _timed(self, fn, key):
        def run(w):
            t = time.perf_counter()
            try:
                return fn(w)
            finally:
                self.busy[key] += time.perf_counter() - t
        return run

    def _timed_source(self, it):
        it = iter(it)
        while True:
            t = time.perf_counter()
            w = next(it, None)
            self.busy["read"] += time.perf_counter() - t
            if w is None:
                return
            yield w

    def run(self, threaded: bool, fresh: bool, progress: bool) -> None:
        """Every window through the stages (at most two windows wait between stages: memory stays flat whatever
        the file's size), checkpoints at the start and the end."""
        from tqdm.auto import tqdm

        from denki.serve.pipeline import run_pipeline

        self.bar = tqdm(desc="classify", unit=" rows", initial=self.n_out + self.n_err, disable=not progress)
        try:
            if fresh:
                self.checkpoint(0)  # from now on an interrupted run is detected, even before its first window
            run_pipeline(self._timed_source(self.read_windows()),
                         [self._timed(self.tokenise, "tokenise"), self._timed(self.infer, "model")],
                         self._timed(self.write, "write"), threaded=threaded, maxsize=2, name="denki-classify")
            self.checkpoint(self.end_line)
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)
            self.bar.close()
            self.w_out.close()
            self.w_err.close()

    def finish(self) -> None:
        """Check the accounting, then rename the partial files into place and drop the state."""
        if self.n_new != self.n_read:  # a lost or doubled window would be a bug here, never a property of the input
            raise DenkiError(f"internal error: read {self.n_read} rows but wrote {self.n_new}; the partial files "
                             f"are kept ({self.paths.part_out}); please report this")
        finalize(self.paths.part_out, self.paths.out)
        finalize(self.paths.part_err, self.paths.err)
        self.paths.state.unlink()


def classify_file(model_dir, input_path, output_path, *, text_field: str | None = None, batch_size: int = 64,
                  errors_path: str | None = None, resume: bool = False, backend: str = "auto",
                  device: str = "auto", threads: int | None = None, workers: int | None = None,
                  window: int | None = None, checkpoint_seconds: float = 2.0, progress: bool = True,
                  stop_after_windows: int | None = None) -> dict:
    """Score ``input_path`` into ``output_path`` with the pipelined engine; returns counts and throughput.

    Stages (``serve.pipeline``): *read* (decode, parse, check every row) → *tokenise* (encode a window's texts,
    sort them by token length into batches of ``batch_size``, pad; encode the output records) → *model*
    (onnxruntime, then the bundle's decision rule) → *write* (rows back in input order; checkpoint). With
    ``workers`` ≥ 2 (default: every core this process may use) the stages run in their own threads joined by
    bounded queues, and the model stage runs up to ``workers`` batches at once (onnxruntime threads per call:
    ``threads``, default 1; see :func:`plan_threads`); ``workers`` 1 runs the stages in turn in one thread.

    ``window`` (default ``16 × batch_size``): rows are length-bucketed within consecutive windows of this many
    texts (or ``4 × window`` rows, whichever comes first, so bad rows cannot grow a window), which bounds memory
    and keeps the output in input order. Window boundaries depend only on the input, ``batch_size`` and
    ``window``, never on timing or ``workers``, so every run — threaded, sequential or resumed — makes the same
    batches and writes the same bytes (int8 models quantise activations per batch, so batch composition matters).

    Checkpoints (fsync both partial files, then the state file atomically) happen after a window once
    ``checkpoint_seconds`` have passed since the last one (0: after every window), at the start and at the end;
    the state only ever names a fully written window boundary, so ``resume`` truncates to it and redoes the rest.
    ``stop_after_windows`` simulates a crash right after that many windows are written, before their checkpoint
    (tests of ``--resume``).

    Returns ``rows_in/rows_out/rows_err``, ``seconds``, ``rows_per_s`` (rows of this run), the thread plan
    (``workers``, ``model_calls``, ``ort_threads``), ``window`` and ``stage_seconds`` (wall seconds spent inside
    each stage: the busiest one bounds the run)."""
    workers, window = _check_options(batch_size, workers, window)
    paths = _Paths.of(input_path, output_path, errors_path)
    predictor, (n_threads, n_calls) = _open_router(model_dir, backend, device, threads, workers)
    field = text_field or predictor.task.get("text_field", "text")
    # batch_size and window decide the batches, and so (int8) the exact scores: a resume must use the same
    settings = {"input": str(paths.inp.resolve()), "input_size": paths.inp.stat().st_size,
                "input_sha256": sha256_file(paths.inp), "text_field": field,
                "model": predictor.manifest.get("files", {}).get(predictor.model_file.name),
                "backend": predictor.backend, "output": str(paths.out.resolve()), "errors": str(paths.err.resolve()),
                "batch_size": batch_size, "window": window}
    state = _load_state(paths, settings, resume, progress)
    header, prefix = _output_columns(paths)
    pool = ThreadPoolExecutor(n_calls, thread_name_prefix="denki-model") if workers > 1 and n_calls > 1 else None
    run = _BatchRun(predictor, paths, settings, state, header, prefix, batch_size=batch_size, window=window,
                    field=field, checkpoint_seconds=checkpoint_seconds, stop_after_windows=stop_after_windows,
                    pool=pool)
    t0 = time.perf_counter()
    run.run(threaded=workers > 1, fresh=state is None, progress=progress)
    seconds = time.perf_counter() - t0
    run.finish()
    return {"rows_out": run.n_out, "rows_err": run.n_err, "rows_in": run.n_out + run.n_err, "seconds": seconds,
            "rows_per_s": run.n_new / seconds if seconds > 0 else 0.0, "output": str(paths.out),
            "errors": str(paths.err), "backend": predictor.describe(), "resumed_from_line": run.last_line,
            "workers": workers, "ort_threads": n_threads, "model_calls": n_calls if workers > 1 else 1,
            "window": window, "stage_seconds": run.busy}


def _simulated_crash() -> None:
    """What ``stop_after_windows`` does: stop as Ctrl-C would (a test swaps in ``os._exit`` for a hard crash)."""
    raise KeyboardInterrupt("simulated interruption")
