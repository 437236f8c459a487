"""The batch engine's files (torch-free): reading JSONL/CSV records line by line without ever raising for a bad
line (:func:`iter_rows`), the text checks every engine shares (:func:`check_text`), error rows
(:func:`error_record`), the added output fields (:data:`ADDED`, prefixed ``denki_`` when the input already has
one of those names: :func:`output_prefix`), output formatting (:class:`Encoder`) and partial files
(:class:`Writer`, :func:`finalize`). Used by :mod:`serve.batch` and :mod:`serve.ray_batch`."""
from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from denki.models.io.errors import InputError
from denki.models.io.textio import open_binary
from denki.models.task.batching import MAX_TEXT_CHARS

ADDED = ("label", "score", "route")


def file_format(path: Path) -> str:
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
    if file_format(path) == "jsonl":
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
        # the text is blank: the record shows which one it was
        row.error, row.raw = f"empty text in field {field!r}", json.dumps(row.record, ensure_ascii=False)[:200]
    elif len(value) > MAX_TEXT_CHARS:
        row.error, row.raw = (f"text in field {field!r} is {len(value):,} characters "
                              f"(limit {MAX_TEXT_CHARS:,})"), value[:200]
    else:
        return value
    return None


def error_record(row: Row, path: Path, id_field: str = "id") -> dict:
    """An error row: ``{"id", "line", "reason", "raw"}``. ``id`` is the record's own ``id_field`` value when it was
    parsed and has one, else ``FILE:LINE`` (as the Ray engine's), so an error can be traced to its input."""
    own = row.record.get(id_field) if isinstance(row.record, dict) else None
    rid = own if own is not None and own != "" else f"{path.name}:{row.line}"
    return {"id": rid, "line": row.line, "reason": row.error, "raw": row.raw}


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


class Writer:
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


def finalize(partial: Path, final: Path) -> None:
    if final.name.endswith(".gz"):
        tmp = final.with_name("." + final.name + ".partial")
        with open(partial, "rb") as src, gzip.open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(tmp, final)
        partial.unlink()
    else:
        os.replace(partial, final)



class Encoder:
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
