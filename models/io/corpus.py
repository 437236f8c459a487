"""Pretraining corpus sources: plain text, or the text fields of JSONL / CSV records. Torch-free.

A *source* is what ``--corpus`` takes (``denki tokenizer train``, ``denki pretrain``, ``denki experiment``):

* ``corpus.txt`` / ``corpus.txt.gz`` (any name that is not JSONL/CSV) — one paragraph per line, used as it is;
* ``logs.jsonl`` / ``logs.csv`` (optionally ``.gz``) — the ``text`` field of every record;
* ``logs.jsonl:title,body`` — the named fields of every record (a record must have at least one of them).

Records are how a company's own text usually sits: inquiry logs, the texts of a labelled file (its labels are not
read), QA files (``qa_train.jsonl:question,context``). A field's value is split on newlines into paragraphs, blank
ones dropped, and a paragraph seen before in the same source is skipped (a QA file repeats each context once per
question; the shipped corpora are de-duplicated the same way). Every error names the file, line and field.

The identity of a source (its cache key and a pretraining run's ``corpus_sha256``) is the file's sha256, plus the
fields for a records source: the same file read through other fields is another corpus.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from denki.models.io.errors import InputError
from denki.models.io.fileio import sha256_file
from denki.models.io.records import file_format, iter_records
from denki.models.io.textio import count_lines, iter_lines

DEFAULT_FIELDS = ("text",)
CORPUS_HELP = ("corpus sources: text files (.txt/.txt.gz, one paragraph per line) and/or JSONL/CSV files "
               "(.jsonl/.csv, optionally .gz) whose 'text' field is read; FILE.jsonl:F1,F2 reads other fields "
               "(e.g. qa.jsonl:question,context). Labels are never read.")


def parse_source(spec: str | os.PathLike) -> tuple[Path, tuple[str, ...] | None]:
    """``(path, fields)`` of a source; ``fields`` is None for a plain-text file.

    ``PATH:F1,F2`` names the fields of a JSONL/CSV file; a path that exists as written is never split (so a
    file name with a colon still works)."""
    s = os.fspath(spec)
    fields: tuple[str, ...] | None = None
    if not Path(s).exists() and ":" in s:
        s, _, names = s.rpartition(":")
        fields = tuple(f.strip() for f in names.split(",") if f.strip())
        if not fields:
            raise InputError("no field names after ':' (expected FILE.jsonl:FIELD[,FIELD...])", path=os.fspath(spec))
    path = Path(s)
    if not path.exists():
        raise InputError("corpus file not found", path=s)
    if path.is_dir():
        raise InputError("is a directory, expected a corpus file", path=s)
    try:
        file_format(path)
    except InputError:  # not JSONL/CSV: a plain-text corpus
        if fields is not None:
            raise InputError(f"fields {','.join(fields)!r} given, but only .jsonl / .csv files have fields; "
                             "a text corpus is one paragraph per line", path=s) from None
        return path, None
    return path, fields or DEFAULT_FIELDS


def source_sha256(spec: str | os.PathLike) -> str:
    """The identity of a source: the file's sha256 (plain text), ``sha256:field,field`` (records)."""
    path, fields = parse_source(spec)
    sha = sha256_file(path)
    return sha if fields is None else f"{sha}:{','.join(fields)}"


def count_source_lines(spec: str | os.PathLike) -> int:
    """Physical lines of the source's file (for progress bars; a record may give several paragraphs)."""
    return count_lines(parse_source(spec)[0])


def iter_source(spec: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, paragraph)``: every line of a text file (blank ones included, as ``iter_lines``
    does), or every new non-blank paragraph of the fields of a records file.

    Raises :class:`InputError` for a record with none of the fields (naming the fields it has), a field that is
    not a string, and whatever ``iter_lines`` / ``iter_records`` raise (bad UTF-8, malformed JSON or CSV)."""
    path, fields = parse_source(spec)
    if fields is None:
        yield from iter_lines(path)
        return
    # 8-byte digests of the paragraphs seen (~80 bytes per distinct paragraph): deterministic, unlike hash(),
    # whose per-process seed would make a (2^-64) collision, and so the token cache, differ between runs
    seen: set[bytes] = set()
    for lineno, rec in iter_records(path):
        found = False
        for name in fields:
            v = rec.get(name)
            if v is None:
                continue
            if not isinstance(v, str):
                raise InputError(f"expected a string, got {type(v).__name__}", path=str(path), line=lineno,
                                 field=name)
            found = True
            for par in v.split("\n"):
                par = par.strip()
                if not par:
                    continue
                h = hashlib.blake2b(par.encode("utf-8"), digest_size=8).digest()
                if h in seen:
                    continue
                seen.add(h)
                yield lineno, par
        if not found:
            have = ", ".join(list(rec)[:10])
            raise InputError(f"none of the corpus fields {', '.join(fields)} (record has: {have}); name them as "
                             f"{path.name}:FIELD[,FIELD]", path=str(path), line=lineno)


def iter_corpus(sources: list[str | os.PathLike], skip_blank: bool = True) -> Iterator[str]:
    """Yield the paragraphs of several sources in order; blank lines are skipped.

    Raises :class:`InputError` if a source gives no non-blank paragraph at all."""
    for spec in sources:
        n = 0
        for _, text in iter_source(spec):
            if skip_blank and not text.strip():
                continue
            n += 1
            yield text
        if n == 0:
            raise InputError("corpus file is empty (no non-blank line)", path=str(parse_source(spec)[0]))
