"""`denki classify`: score a big CSV/JSONL file with an ONNX classifier bundle, streaming, resumable.

Accounting: every input record ends up either in the output (input fields + ``label``, ``score``, ``route``) or in
the errors file (``{"line", "reason", "raw"}``: bad encoding, malformed JSON/CSV, missing field, empty or
over-long text) — ``output rows + error rows = input records``, checked at the end.

Engine (:func:`classify_file`): read → tokenise → model → write stages over bounded windows of rows, overlapping
in threads (:mod:`serve.pipeline`); texts are sorted by token length inside a window and written back in input
order, so the output order is the input order.

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

import csv
import gzip
import io
import json
import math
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from denki.models.io.errors import DenkiError, InputError
from denki.models.io.fileio import atomic_write_json, sha256_file
from denki.models.io.textio import open_binary
from denki.serve.runtime import MAX_TEXT_CHARS, sorted_batches

ADDED = ("label", "score", "route")


def _fmt(path: Path) -> str:
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith(".csv"):
        return "csv"
    raise InputError("unknown file type; expected .jsonl or .csv (optionally .gz)", path=str(path))


@dataclass
class Row:
    line: int  # physical line (1-based) where the record starts
    end_line: int  # physical line where it ends (CSV quoted newlines)
    record: dict | None
    error: str | None
    raw: str


def _decoded_lines(path: Path) -> Iterator[tuple[int, str | None, bytes]]:
    """``(lineno, text or None if not UTF-8, raw bytes)`` for every physical line."""
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, start=1):
            body = raw.rstrip(b"\n").rstrip(b"\r")
            if lineno == 1 and body.startswith(b"\xef\xbb\xbf"):
                body = body[3:]
            try:
                yield lineno, body.decode("utf-8"), body
            except UnicodeDecodeError:
                yield lineno, None, body[:200]


def iter_rows(path: Path) -> Iterator[Row]:
    """Every record of a JSONL/CSV file, good or bad, never raising for a bad line."""
    if _fmt(path) == "jsonl":
        for lineno, text, raw in _decoded_lines(path):
            if text is None:
                yield Row(lineno, lineno, None, "bad encoding (not UTF-8)", raw.decode("utf-8", "replace"))
                continue
            if not text.strip():
                continue  # a blank line is not a record
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                yield Row(lineno, lineno, None, f"malformed JSON ({e.msg} at column {e.colno})", text[:200])
                continue
            if not isinstance(obj, dict):
                yield Row(lineno, lineno, None, f"expected a JSON object, got {type(obj).__name__}", text[:200])
                continue
            yield Row(lineno, lineno, obj, None, "")
        return
    # CSV: physical lines are decoded one by one (so a bad byte costs one row, not the file), then parsed.
    lines = _decoded_lines(path)
    header = None
    pending: list[tuple[int, str]] = []
    for lineno, text, raw in lines:
        if text is None:
            if header is None:
                raise InputError("header line is not UTF-8", path=str(path), line=lineno)
            yield Row(lineno, lineno, None, "bad encoding (not UTF-8)", raw.decode("utf-8", "replace"))
            pending.clear()
            continue
        pending.append((lineno, text))
        chunk = "\n".join(t for _, t in pending)
        if chunk.count('"') % 2:  # inside a quoted field that continues on the next line
            continue
        start, end = pending[0][0], lineno
        pending.clear()
        try:
            fields = next(csv.reader(io.StringIO(chunk), strict=True), [])
        except csv.Error as e:
            yield Row(start, end, None, f"malformed CSV ({e})", chunk[:200])
            continue
        if header is None:
            if not fields:
                raise InputError("empty header line", path=str(path), line=start)
            header = fields
            continue
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue  # blank line
        if len(fields) != len(header):
            yield Row(start, end, None, f"malformed CSV: {len(fields)} fields, header has {len(header)}", chunk[:200])
            continue
        yield Row(start, end, dict(zip(header, fields)), None, "")
    if pending:
        yield Row(pending[0][0], pending[-1][0], None, "malformed CSV: unterminated quoted field",
                  "\n".join(t for _, t in pending)[:200])
    if header is None:
        raise InputError("no header line (CSV needs one)", path=str(path))


def check_text(row: Row, field: str) -> str | None:
    """The text to score from a parsed row, or ``None`` after setting ``row.error``/``row.raw`` (missing field,
    not text, empty, over the runtime's limit). Shared by the local and the Ray engine: same rules, same reasons."""
    if row.error is not None:
        return None
    value = row.record.get(field)
    if value is None:
        row.error, row.raw = f"missing field {field!r}", json.dumps(row.record, ensure_ascii=False)[:200]
    elif not isinstance(value, str):
        row.error, row.raw = f"field {field!r} is not text ({type(value).__name__})", str(value)[:200]
    elif not value.strip():
        row.error, row.raw = f"empty text in field {field!r}", value[:200]
    elif len(value) > MAX_TEXT_CHARS:
        row.error, row.raw = (f"text in field {field!r} is {len(value):,} characters "
                              f"(limit {MAX_TEXT_CHARS:,})"), value[:200]
    else:
        return value
    return None


def output_prefix(in_header: list[str] | None, record: dict | None = None) -> str:
    """``denki_`` when an input column/field already has one of the added names (never overwrite silently)."""
    names = set(in_header or ()) | set(record or ())
    return "denki_" if set(ADDED) & names else ""


def scored_record(record: dict, result: dict, prefix: str) -> dict:
    rec = dict(record)
    rec[prefix + "label"] = result["label"]
    rec[prefix + "score"] = round(float(result["score"]), 6)
    rec[prefix + "route"] = result["route"]
    return rec


def csv_header(path: Path) -> list[str]:
    for _, text, _ in _decoded_lines(path):
        if text is not None and text.strip():
            return next(csv.reader(io.StringIO(text)))
    raise InputError("no header line (CSV needs one)", path=str(path))


class _Writer:
    """Appends rows to an uncompressed partial file in JSONL or CSV."""

    def __init__(self, path: Path, fmt: str, header: list[str] | None, truncate_to: int | None):
        self.path, self.fmt, self.header = path, fmt, header
        if truncate_to is not None:
            with open(path, "r+b") as f:
                f.truncate(truncate_to)
        new = truncate_to is None or truncate_to == 0
        self.f = open(path, "a" if not new else "w", encoding="utf-8", newline="")
        self.csv = csv.writer(self.f) if fmt == "csv" else None
        if self.csv is not None and new and header is not None:
            self.csv.writerow(header)

    def write(self, rec: dict) -> None:
        if self.csv is not None:
            self.csv.writerow(["" if rec.get(k) is None else rec.get(k) for k in self.header])
        else:
            self.f.write(json.dumps(rec, ensure_ascii=False) + "\n")

    def sync(self) -> int:
        self.f.flush()
        os.fsync(self.f.fileno())
        return self.f.tell()

    def close(self) -> None:
        self.f.close()


def _finalize(partial: Path, final: Path) -> None:
    if final.name.endswith(".gz"):
        tmp = final.with_name("." + final.name + ".partial")
        with open(partial, "rb") as src, gzip.open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(tmp, final)
        partial.unlink()
    else:
        os.replace(partial, final)


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


class _Encoder:
    """Output formatting, split so that the expensive half (encoding the input record) runs in the tokenise
    stage, off the writer's path, and the writer only appends the three added fields to a ready string.

    The result is byte-identical to ``json.dumps(scored_record(...), ensure_ascii=False)`` (JSONL) or to
    ``csv.writer.writerow`` of the record's columns plus the added ones (CSV): a nonempty record's JSON text ends
    in ``}``, and the added keys, being new, come last in the dict. A record that already has one of the
    (prefixed) added names keeps the dict path, where the value replaces the old one in its place."""

    def __init__(self, out_fmt: str, in_fmt: str, header: list[str] | None, prefix: str, labels: list[str],
                 human: str):
        self.out_fmt, self.in_fmt, self.header, self.prefix = out_fmt, in_fmt, header, prefix
        self.in_header = header[: -len(ADDED)] if header else None
        self.labels = labels
        dumps = lambda x: json.dumps(x, ensure_ascii=False)  # noqa: E731
        self.label_json = [dumps(lab) for lab in labels]
        self.human_json = dumps(human)
        self.human = human

    def prefix_for(self, record: dict) -> str:
        # CSV input: one prefix for the file (its header); JSONL: per record, as scored_record's callers did
        return self.prefix or (output_prefix(None, record) if self.in_fmt == "jsonl" else "")

    def head(self, record: dict):
        """``(prefix, text)`` for the fast path, or ``(prefix, record)`` when the record needs the dict path."""
        p = self.prefix_for(record)
        if any(p + k in record for k in ADDED) or not record:
            return p, record
        if self.out_fmt == "jsonl":
            return p, json.dumps(record, ensure_ascii=False)[:-1]
        return p, ["" if record.get(k) is None else record.get(k) for k in self.in_header]

    def jsonl(self, head, k: int, score: float, human: bool) -> str:
        p, h = head
        score = round(float(score), 6)
        if not isinstance(h, str):
            res = {"label": self.labels[k], "score": score, "route": self.human if human else self.labels[k]}
            return json.dumps(scored_record(h, res, p), ensure_ascii=False) + "\n"
        s = repr(score) if math.isfinite(score) else json.dumps(score)
        return (f'{h}, "{p}label": {self.label_json[k]}, "{p}score": {s}, '
                f'"{p}route": {self.human_json if human else self.label_json[k]}}}\n')

    def csv_row(self, head, k: int, score: float, human: bool) -> list:
        p, h = head
        score = round(float(score), 6)
        lab = self.labels[k]
        if isinstance(h, dict):
            rec = scored_record(h, {"label": lab, "score": score, "route": self.human if human else lab}, p)
            return ["" if rec.get(c) is None else rec.get(c) for c in self.header]
        return h + [lab, score, self.human if human else lab]


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
    from tqdm.auto import tqdm

    from denki.models.classify.decision import HUMAN, decide
    from denki.serve.pipeline import run_pipeline
    from denki.serve.runtime import Predictor

    if batch_size < 1:
        raise DenkiError(f"batch size must be at least 1, got {batch_size}")
    workers = default_workers() if workers is None else int(workers)
    if workers < 1:
        raise DenkiError(f"--workers must be at least 1, got {workers}")
    window = 16 * batch_size if window is None else int(window)
    if window < batch_size:  # batches never span windows: a smaller window would only shrink them
        raise DenkiError(f"--window ({window}) must be at least --batch-size ({batch_size})")
    inp, out = Path(input_path), Path(output_path)
    err = Path(errors_path) if errors_path else out.with_name(out.name.removesuffix(".gz") + ".errors.jsonl")
    in_fmt, out_fmt = _fmt(inp), _fmt(out)
    part_out = out.with_name("." + out.name.removesuffix(".gz") + ".partial")
    part_err = err.with_name("." + err.name.removesuffix(".gz") + ".partial")
    state_path = part_out.with_name(part_out.name + ".state.json")
    if not inp.is_file():
        raise InputError("file not found", path=str(inp))
    # every call is a full batch (bar a window's last): rank recorded variants by their batch-N time
    predictor = Predictor(model_dir, backend=backend, device=device,
                          threads=plan_threads(workers, threads, "cpu")[0], workload="batch")
    n_threads, n_calls = plan_threads(workers, threads, predictor.device)
    if predictor.kind != "onnx-classifier":
        raise DenkiError(f"{predictor.dir} is a {predictor.kind} bundle, not a classifier")
    field = text_field or predictor.task.get("text_field", "text")
    # batch_size and window decide the batches, and so (int8) the exact scores: a resume must use the same
    settings = {"input": str(inp.resolve()), "input_size": inp.stat().st_size, "input_sha256": sha256_file(inp),
                "text_field": field, "model": predictor.manifest.get("files", {}).get(predictor.model_file.name),
                "backend": predictor.backend, "output": str(out.resolve()), "errors": str(err.resolve()),
                "batch_size": batch_size, "window": window}
    state = None
    if state_path.exists():
        if not resume:
            raise DenkiError(f"an interrupted run left {state_path}; re-run with --resume to continue it, or delete "
                             f"{part_out}, {part_err} and the state file to start over")
        state = json.loads(state_path.read_text(encoding="utf-8"))
        changed = [k for k in settings if state["settings"].get(k) != settings[k]]
        if changed:
            raise DenkiError(f"--resume: the interrupted run used different {', '.join(changed)}; "
                             "re-run with the same options, or delete its partial files to start over")
    elif resume and progress:
        print("classify: nothing to resume, starting from the beginning")

    header = None
    prefix = ""
    if in_fmt == "csv":
        in_header = csv_header(inp)
        prefix = output_prefix(in_header)
        header = in_header + [prefix + k for k in ADDED]
    elif out_fmt == "csv":
        raise DenkiError("CSV output needs CSV input (JSONL records have no fixed columns); write .jsonl instead")
    last_line = state["last_line"] if state else 0
    n_out = state["rows_out"] if state else 0
    n_err = state["rows_err"] if state else 0
    prefix = state.get("prefix", prefix) if state else prefix
    labels = list(predictor.task["labels"])
    enc = _Encoder(out_fmt, in_fmt, header, prefix, labels, predictor.task.get("human_label", HUMAN))
    tok, max_length = predictor.tokenizer, predictor.max_length
    w_out = _Writer(part_out, out_fmt, header, state["out_bytes"] if state else None)
    w_err = _Writer(part_err, "jsonl", None, state["err_bytes"] if state else None)

    def checkpoint(upto_line: int) -> None:
        ob, eb = w_out.sync(), w_err.sync()
        atomic_write_json(state_path, {"settings": settings, "last_line": upto_line, "rows_out": n_out,
                                       "rows_err": n_err, "out_bytes": ob, "err_bytes": eb, "prefix": prefix})

    # --- stage 1 (source): read, parse and check rows; cut them into windows (by count: deterministic)
    n_read = 0

    def read_windows():
        nonlocal n_read
        rows: list[Row] = []
        good: list[int] = []
        texts: list[str] = []
        for row in iter_rows(inp):
            if row.end_line <= last_line:
                continue  # done before the interruption
            text = check_text(row, field)
            if text is not None:
                good.append(len(rows))
                texts.append(text)
            rows.append(row)
            if len(texts) >= window or len(rows) >= 4 * window:
                n_read += len(rows)
                yield _Window(rows, good, texts, row.end_line)
                rows, good, texts = [], [], []
        if rows:
            n_read += len(rows)
            yield _Window(rows, good, texts, rows[-1].end_line)

    # --- stage 2: tokenise, bucket by length, pad; encode the records for output
    def tokenise(w: _Window) -> _Window:
        encs = [tok.encode(t, max_length=max_length) for t in w.texts]
        # a fused router's TF-IDF half (numpy) runs here, beside the tokenizer, not on the model threads
        w.lexical = predictor.lexical.logits(w.texts) if predictor.lexical is not None and w.texts else None
        w.texts = []
        w.batches = [(idx, tok.pad([encs[i] for i in idx]))
                     for idx in sorted_batches([len(e) for e in encs], batch_size)]
        w.head = [enc.head(w.rows[i].record) for i in w.good]
        for i in w.good:
            w.rows[i].record = None  # the output text is ready: free the parsed record
        return w

    # --- stage 3: the model, then the routing rule, vectorised. onnxruntime releases the GIL in run() and one
    # session may be run from several threads, so a pool runs a window's batches side by side; each batch's
    # result is the same whichever thread runs it.
    pool = ThreadPoolExecutor(n_calls, thread_name_prefix="denki-model") if workers > 1 and n_calls > 1 else None

    def infer(w: _Window) -> _Window:
        if w.batches:
            logits = np.empty((len(w.good), len(labels)), dtype=np.float32)
            run = lambda b: predictor.run(b[1])[0]  # noqa: E731
            for (idx, _), lg in zip(w.batches, pool.map(run, w.batches) if pool else map(run, w.batches)):
                logits[idx] = lg
            w.batches = None
            logits = predictor.fuse(logits, w.lexical)
            w.label_idx, w.score, _, w.abstain = decide(logits, predictor.task, w.lexical)
        return w

    # --- stage 4 (sink): write in input order, checkpoint by time
    t0 = time.perf_counter()
    n_new = 0
    written = 0
    last_ckpt = time.monotonic()
    bar = tqdm(desc="classify", unit=" rows", initial=n_out + n_err, disable=not progress)

    def write(w: _Window) -> None:
        nonlocal n_out, n_err, n_new, written, last_ckpt
        out_lines: list = []
        err_lines: list[str] = []
        g = 0
        for row in w.rows:
            if row.error is not None:
                err_lines.append(json.dumps({"line": row.line, "reason": row.error, "raw": row.raw},
                                            ensure_ascii=False) + "\n")
                continue
            k, s, h = int(w.label_idx[g]), w.score[g], bool(w.abstain[g])
            if out_fmt == "jsonl":
                out_lines.append(enc.jsonl(w.head[g], k, s, h))
            else:
                out_lines.append(enc.csv_row(w.head[g], k, s, h))
            g += 1
        if out_fmt == "jsonl":
            w_out.f.write("".join(out_lines))
        else:
            w_out.csv.writerows(out_lines)
        w_err.f.write("".join(err_lines))
        n_out += len(out_lines)
        n_err += len(err_lines)
        n_new += len(w.rows)
        bar.update(len(w.rows))
        written += 1
        if stop_after_windows is not None and written >= stop_after_windows:
            _simulated_crash()
        if checkpoint_seconds <= 0 or time.monotonic() - last_ckpt >= checkpoint_seconds:
            checkpoint(w.last_line)
            last_ckpt = time.monotonic()

    # wall seconds spent inside each stage (blocked puts/gets excluded): which stage bounds the run
    busy = {"read": 0.0, "tokenise": 0.0, "model": 0.0, "write": 0.0}

    def timed(fn, key):
        def run(w):
            t = time.perf_counter()
            try:
                return fn(w)
            finally:
                busy[key] += time.perf_counter() - t
        return run

    def timed_source(it):
        it = iter(it)
        while True:
            t = time.perf_counter()
            w = next(it, None)
            busy["read"] += time.perf_counter() - t
            if w is None:
                return
            yield w

    end_line = last_line
    try:
        if state is None:
            checkpoint(0)  # from now on an interrupted run is detected, even before its first window
        def sink(w: _Window) -> None:
            nonlocal end_line
            write(w)
            end_line = w.last_line

        # at most two windows wait between stages: memory stays flat whatever the file's size
        run_pipeline(timed_source(read_windows()), [timed(tokenise, "tokenise"), timed(infer, "model")],
                     timed(sink, "write"), threaded=workers > 1, maxsize=2, name="denki-classify")
        checkpoint(end_line)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        bar.close()
        w_out.close()
        w_err.close()
    if n_new != n_read:  # a lost or doubled window would be a bug here, never a property of the input
        raise DenkiError(f"internal error: read {n_read} rows but wrote {n_new}; the partial files are kept "
                         f"({part_out}); please report this")
    seconds = time.perf_counter() - t0
    _finalize(part_out, out)
    _finalize(part_err, err)
    state_path.unlink()
    return {"rows_out": n_out, "rows_err": n_err, "rows_in": n_out + n_err, "seconds": seconds,
            "rows_per_s": n_new / seconds if seconds > 0 else 0.0, "output": str(out), "errors": str(err),
            "backend": predictor.describe(), "resumed_from_line": last_line, "workers": workers,
            "ort_threads": n_threads, "model_calls": n_calls if workers > 1 else 1,
            "window": window, "stage_seconds": busy}


def _simulated_crash() -> None:
    """What ``stop_after_windows`` does: stop as Ctrl-C would (a test swaps in ``os._exit`` for a hard crash)."""
    raise KeyboardInterrupt("simulated interruption")
