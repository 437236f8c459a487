"""`denki classify`: score a big CSV/JSONL file with an ONNX classifier bundle, streaming, resumable.

Accounting: every input record ends up either in the output (input fields + ``label``, ``score``, ``route``) or in
the errors file (``{"line", "reason", "raw"}``: bad encoding, malformed JSON/CSV, missing field, empty or
over-long text) — ``output rows + error rows = input records``, checked at the end.

Resumability: output and errors are written to ``*.partial`` files; after each batch both are flushed and a state
file (``OUTPUT.partial.state.json``) records the last input line consumed and the byte sizes of both files. A
killed run re-run with ``--resume`` truncates the partial files to the recorded sizes (dropping anything written
after the last checkpoint) and continues after the recorded line: no duplicates, no gaps. When the input is done
the partial files are renamed (gzip-compressed first for ``.gz`` names) into place.

Torch-free (serve/).
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from models.io.errors import DenkiError, InputError
from models.io.fileio import atomic_write_json, sha256_file
from models.io.textio import open_binary
from serve.runtime import MAX_TEXT_CHARS

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


def classify_file(model_dir, input_path, output_path, *, text_field: str | None = None, batch_size: int = 64,
                  errors_path: str | None = None, resume: bool = False, backend: str = "auto",
                  device: str = "auto", threads: int | None = None, progress: bool = True,
                  stop_after_batches: int | None = None) -> dict:
    """Score ``input_path`` into ``output_path``; returns counts and throughput.

    ``stop_after_batches`` simulates a crash after that many checkpoints (tests of ``--resume``)."""
    from tqdm.auto import tqdm

    from serve.runtime import Predictor

    inp, out = Path(input_path), Path(output_path)
    err = Path(errors_path) if errors_path else out.with_name(out.name.removesuffix(".gz") + ".errors.jsonl")
    in_fmt, out_fmt = _fmt(inp), _fmt(out)
    part_out = out.with_name("." + out.name.removesuffix(".gz") + ".partial")
    part_err = err.with_name("." + err.name.removesuffix(".gz") + ".partial")
    state_path = part_out.with_name(part_out.name + ".state.json")
    if not inp.is_file():
        raise InputError("file not found", path=str(inp))
    predictor = Predictor(model_dir, backend=backend, device=device, threads=threads)
    field = text_field or predictor.task.get("text_field", "text")
    settings = {"input": str(inp.resolve()), "input_size": inp.stat().st_size, "input_sha256": sha256_file(inp),
                "text_field": field, "model": predictor.manifest.get("files", {}).get(predictor.model_file.name),
                "backend": predictor.backend, "output": str(out.resolve()), "errors": str(err.resolve())}
    state = None
    if state_path.exists():
        if not resume:
            raise DenkiError(f"an interrupted run left {state_path}; re-run with --resume to continue it, or delete "
                             f"{part_out}, {part_err} and the state file to start over")
        state = json.loads(state_path.read_text(encoding="utf-8"))
        changed = [k for k in settings if state["settings"].get(k) != settings[k]]
        if changed:
            raise DenkiError(f"--resume: the interrupted run used different {', '.join(changed)}; "
                             "delete its partial files to start over")
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
    w_out = _Writer(part_out, out_fmt, header, state["out_bytes"] if state else None)
    w_err = _Writer(part_err, "jsonl", None, state["err_bytes"] if state else None)

    t0 = time.perf_counter()
    n_new = 0
    batch: list[Row] = []
    texts: list[str] = []
    checkpoints = 0
    bar = tqdm(desc="classify", unit=" rows", initial=n_out + n_err, disable=not progress)

    def flush(upto_line: int) -> None:
        nonlocal n_out, n_err, batch, texts, checkpoints, n_new
        if texts:
            results = predictor.classify(texts, batch_size=batch_size)
        else:
            results = []
        k = 0
        for row in batch:
            if row.error is not None:
                w_err.write({"line": row.line, "reason": row.error, "raw": row.raw})
                n_err += 1
                continue
            res = results[k]
            k += 1
            rec_prefix = prefix or (output_prefix(None, row.record) if in_fmt == "jsonl" else "")
            w_out.write(scored_record(row.record, res, rec_prefix))
            n_out += 1
        bar.update(len(batch))
        n_new += len(batch)
        batch, texts = [], []
        ob, eb = w_out.sync(), w_err.sync()
        atomic_write_json(state_path, {"settings": settings, "last_line": upto_line, "rows_out": n_out,
                                       "rows_err": n_err, "out_bytes": ob, "err_bytes": eb, "prefix": prefix})
        checkpoints += 1

    last_seen = last_line
    try:
        for row in iter_rows(inp):
            if row.end_line <= last_line:
                continue  # done before the interruption
            last_seen = row.end_line
            text = check_text(row, field)
            if text is not None:
                texts.append(text)
            batch.append(row)
            if len(texts) >= batch_size or len(batch) >= 4 * batch_size:
                flush(last_seen)
                if stop_after_batches is not None and checkpoints >= stop_after_batches:
                    raise KeyboardInterrupt("simulated interruption")
        flush(last_seen)
    finally:
        bar.close()
        w_out.close()
        w_err.close()
    seconds = time.perf_counter() - t0
    _finalize(part_out, out)
    _finalize(part_err, err)
    state_path.unlink()
    return {"rows_out": n_out, "rows_err": n_err, "rows_in": n_out + n_err, "seconds": seconds,
            "rows_per_s": n_new / seconds if seconds > 0 else 0.0, "output": str(out), "errors": str(err),
            "backend": predictor.describe(), "resumed_from_line": last_line}
