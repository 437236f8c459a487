"""Reading labelled (or unlabelled) records from JSONL or CSV files, plain or ``.gz``. Torch-free.

The format is chosen by extension: ``.jsonl`` / ``.json`` (one JSON object per line) or ``.csv`` (header row
required; comma-separated, RFC 4180 quoting). Every error names the file, the physical line and, where it applies,
the field — e.g. ``dev.csv:17 (field 'label'): missing``. Line numbers are 1-based physical lines of the
(decompressed) file, so a CSV record whose quoted field spans several lines is reported at its first line.

Used by fine-tuning / evaluation (``read_labelled``) and by batch scoring (``iter_records``).
"""
from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from denki.models.io.errors import InputError
from denki.models.io.textio import iter_lines, open_binary

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
CSV_SUFFIXES = (".csv",)


def file_format(path: str | os.PathLike) -> str:
    """``"jsonl"`` or ``"csv"`` from the file name (a trailing ``.gz`` is ignored)."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(CSV_SUFFIXES):
        return "csv"
    raise InputError("unknown file type; expected .jsonl or .csv (optionally .gz)", path=str(path))


def _iter_jsonl(path) -> Iterator[tuple[int, dict]]:
    for lineno, text in iter_lines(path):
        if not text.strip():
            continue  # blank lines (e.g. a trailing newline) carry no record
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"malformed JSON ({e.msg} at column {e.colno})", path=str(path), line=lineno) from None
        if not isinstance(obj, dict):
            raise InputError(f"expected a JSON object per line, got {type(obj).__name__}", path=str(path),
                             line=lineno)
        yield lineno, obj


def _iter_csv(path) -> Iterator[tuple[int, dict]]:
    raw = open_binary(path)
    # utf-8-sig drops a BOM; newline="" lets the csv module handle quoted newlines itself.
    f = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict", newline="")
    reader = csv.reader(f, strict=True)
    last = 0  # physical line where the previous record ended
    try:
        try:
            header = next(reader)
        except StopIteration:
            raise InputError("empty CSV file (a header row is required)", path=str(path), line=1) from None
        last = reader.line_num
        names = [h.strip() for h in header]
        if not any(names):
            raise InputError("CSV header row is empty", path=str(path), line=1)
        dup = sorted({n for n in names if names.count(n) > 1 and n})
        if dup:
            raise InputError(f"duplicate column name(s) in the CSV header: {dup}", path=str(path), line=1)
        while True:
            start = last + 1
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                raise InputError(f"malformed CSV ({e})", path=str(path), line=start) from None
            last = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # blank line
            if len(row) != len(names):
                raise InputError(f"malformed CSV: {len(row)} fields, the header has {len(names)}",
                                 path=str(path), line=start)
            yield start, dict(zip(names, row))
    except UnicodeDecodeError as e:
        raise InputError(f"invalid UTF-8 ({e.reason}); convert the file to UTF-8 (e.g. `iconv -f CP932 -t UTF-8`)",
                         path=str(path), line=last + 1) from None
    except (OSError, EOFError) as e:
        raise InputError(f"cannot read file: {e}", path=str(path)) from None
    finally:
        f.close()


def iter_records(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` for every record of a JSONL or CSV file (blank lines skipped).

    Raises :class:`InputError` naming file and line for a malformed line, a non-object JSON line, or a CSV row
    whose field count differs from the header.
    """
    fmt = file_format(path)
    return _iter_jsonl(path) if fmt == "jsonl" else _iter_csv(path)


def get_text(rec: dict, name: str, path, lineno: int, *, allow_empty: bool = False) -> str:
    """The string value of field ``name``; :class:`InputError` if missing, null, not a string, or empty."""
    if name not in rec:
        have = ", ".join(list(rec)[:10])
        raise InputError(f"missing (record has: {have})", path=str(path), line=lineno, field=name)
    v = rec[name]
    if v is None:
        raise InputError("is null", path=str(path), line=lineno, field=name)
    if not isinstance(v, str):
        raise InputError(f"expected a string, got {type(v).__name__}", path=str(path), line=lineno, field=name)
    if not allow_empty and not v.strip():
        raise InputError("is empty", path=str(path), line=lineno, field=name)
    return v


def get_label(rec: dict, name: str, path, lineno: int) -> str:
    """A label as a string (JSON numbers are accepted and turned into strings: ``1`` → ``"1"``)."""
    if name not in rec:
        have = ", ".join(list(rec)[:10])
        raise InputError(f"missing (record has: {have})", path=str(path), line=lineno, field=name)
    v = rec[name]
    if isinstance(v, bool) or v is None or not isinstance(v, (str, int)):
        raise InputError(f"expected a string label, got {v!r}", path=str(path), line=lineno, field=name)
    v = str(v).strip()
    if not v:
        raise InputError("label is empty", path=str(path), line=lineno, field=name)
    return v


@dataclass
class LabelledData:
    """Texts and labels read from one file (or several, :func:`read_labelled_files`); ``lines[i]`` is the physical
    line of example ``i`` (in ``files[i]`` when read from several files)."""
    path: str
    texts: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # {"line", "field", "reason"} (+ "file") for rows skipped
    files: list[str] = field(default_factory=list)  # per example, only when read from several files
    sources: list[dict] = field(default_factory=list)  # [{"path", "n"}] per file read, in order

    def __len__(self) -> int:
        return len(self.texts)


def read_labelled(path: str | os.PathLike, text_field: str = "text", label_field: str = "label", *,
                  skip_empty: bool = False, limit: int | None = None,
                  forbidden_labels: Mapping[str, str] | None = None) -> LabelledData:
    """Read ``(text, label)`` pairs. An empty text is an error unless ``skip_empty`` (then it is recorded in
    ``.skipped``); every other problem raises :class:`InputError` naming file, line and field.

    ``text_field`` may join several fields with ``+`` (e.g. ``title+text``): they are joined with a newline.
    ``limit`` stops after that many examples (for quick looks; use a proper subsample for experiments).
    ``forbidden_labels``: label → why it cannot be a label here; a row with such a label (compared case-blind) is
    an :class:`InputError` saying why (fine-tuning refuses ``human``, the abstention route).
    """
    out = LabelledData(path=str(path))
    fields = [f for f in text_field.split("+") if f]
    forbidden = {k.casefold(): v for k, v in (forbidden_labels or {}).items()}
    for lineno, rec in iter_records(path):
        label = get_label(rec, label_field, path, lineno)
        if label.casefold() in forbidden:
            raise InputError(f"label {label!r}: {forbidden[label.casefold()]}", path=str(path), line=lineno,
                             field=label_field)
        parts = [get_text(rec, f, path, lineno, allow_empty=True) for f in fields]
        text = "\n".join(p for p in parts if p.strip())
        if not text.strip():
            if skip_empty:
                out.skipped.append({"line": lineno, "field": text_field, "reason": "empty text"})
                continue
            raise InputError("is empty (use --skip-empty to skip such rows)", path=str(path), line=lineno,
                             field=text_field)
        out.texts.append(text)
        out.labels.append(label)
        out.lines.append(lineno)
        if limit is not None and len(out.texts) >= limit:
            break
    if not out.texts:
        raise InputError("no examples in the file", path=str(path))
    out.sources = [{"path": str(path), "n": len(out.texts)}]
    return out


def read_labelled_files(paths: str | os.PathLike | Sequence[str | os.PathLike], text_field: str = "text",
                        label_field: str = "label", **kw) -> LabelledData:
    """:func:`read_labelled` over one file or several, concatenated in the order given (e.g. the original
    training file and the human log's rows once people have labelled them). With several files ``.path`` names
    them all (``a.jsonl + b.jsonl``), ``.files[i]`` says which file example ``i`` came from, skipped rows carry
    their ``file`` and ``.sources`` counts the examples per file. Every error names its own file and line."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [str(p) for p in paths]
    if not paths:
        raise InputError("no training file given")
    if len(paths) == 1:
        return read_labelled(paths[0], text_field, label_field, **kw)
    dup = sorted({p for p in paths if paths.count(p) > 1})
    if dup:
        raise InputError(f"given more than once: {', '.join(dup)} (its rows would count twice)")
    out = LabelledData(path=" + ".join(paths))
    for p in paths:
        part = read_labelled(p, text_field, label_field, **kw)
        out.texts += part.texts
        out.labels += part.labels
        out.lines += part.lines
        out.files += [p] * len(part)
        out.skipped += [{"file": p, **s} for s in part.skipped]
        out.sources += part.sources
    return out


def check_label_sets(train: LabelledData, dev: LabelledData, label_field: str = "label") -> list[str]:
    """The sorted label list of ``train``; :class:`InputError` if it has fewer than 2 labels or if ``dev`` has
    a label that ``train`` lacks (named with its first dev line)."""
    labels = sorted(set(train.labels))
    if len(labels) < 2:
        raise InputError(f"needs at least 2 distinct labels to train a classifier, found {labels}",
                         path=train.path, field=label_field)
    known = set(labels)
    for lab, line in zip(dev.labels, dev.lines):
        if lab not in known:
            raise InputError(f"label {lab!r} does not occur in the training file {train.path}",
                             path=dev.path, line=line, field=label_field)
    return labels
