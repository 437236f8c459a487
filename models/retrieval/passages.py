"""Documents → passages, with where each came from. Formats, by file name:

* ``.txt`` / ``.txt.gz`` — one paragraph per line, as a pretraining corpus (blank lines skipped);
* ``.jsonl`` / ``.csv`` (``.gz`` too; ``FILE.jsonl:F1,F2`` for other fields than ``text``) — each record's fields,
  a paragraph per line of a field, as :func:`models.io.corpus.iter_source` reads them;
* ``.json`` / ``.json.gz`` — a SQuAD 2.0 file: every context of every article, the article title as document and
  title, id ``TITLE#N`` (so a collection built from a QA file can be evaluated against its questions);
* anything else (``.md``, ``.rst``, plain text) — split at headings (Markdown ``#`` lines, which become the title of
  the passages under them) and blank lines; a block longer than :data:`MAX_PASSAGE_CHARS` is cut at sentence ends.

Every passage is its original characters (answers are offsets into them); an empty document is an error naming
the file, not a silent nothing.
"""
from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from denki.models.io.corpus import iter_source, parse_source
from denki.models.io.errors import InputError
from denki.models.io.textio import iter_lines

MAX_PASSAGE_CHARS = 1200  # a reader window holds about 350 tokens of passage; longer blocks are cut
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SENTENCE_END = re.compile(r"(?<=[。！？!?])")


@dataclass(frozen=True)
class Passage:
    id: str       # unique in an index: DOC#N, or the record's FILE:LINE
    doc: str      # the document it belongs to (file name, or a SQuAD article's title)
    title: str    # the heading above it, or the article title ("" if none)
    text: str     # the passage in its original characters
    where: str    # file and line, for messages


def _kind(path: Path) -> str:
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".txt"):
        return "lines"
    if name.endswith((".jsonl", ".csv")):
        return "records"
    if name.endswith(".json"):
        return "squad"
    return "blocks"


def _split_long(text: str, limit: int = MAX_PASSAGE_CHARS) -> list[str]:
    """Cut a block longer than ``limit`` characters at sentence ends (a sentence longer than that stays whole)."""
    if len(text) <= limit:
        return [text]
    out, cur = [], ""
    for sent in (s for s in _SENTENCE_END.split(text) if s):
        if cur and len(cur) + len(sent) > limit:
            out.append(cur)
            cur = ""
        cur += sent
    if cur:
        out.append(cur)
    return out


def _blocks(path: Path, doc: str) -> Iterator[Passage]:
    """Markdown / plain text: blank lines and headings end a block; a heading titles the blocks under it."""
    title, buf, start, n = "", [], 0, 0

    def flush():
        nonlocal buf, n
        text = "\n".join(buf).strip()
        buf = []
        for part in _split_long(text) if text else []:
            yield Passage(id=f"{doc}#{n}", doc=doc, title=title, text=part, where=f"{path}:{start}")
            n += 1

    for lineno, line in iter_lines(path):
        m = _HEADING.match(line)
        if m or not line.strip():
            yield from flush()
            if m:
                title = m.group(2)
            continue
        if not buf:
            start = lineno
        buf.append(line.rstrip())
    yield from flush()


def _squad(path: Path) -> Iterator[Passage]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
    except (ValueError, OSError) as e:
        raise InputError(f"not a SQuAD 2.0 JSON file: {e}", path=str(path)) from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise InputError("a .json document must be SQuAD 2.0 ({\"data\": [{\"title\", \"paragraphs\"}]}); "
                         "plain text goes in .txt or .md", path=str(path))
    for a, art in enumerate(data["data"]):
        title = str(art.get("title") or f"article{a}")
        for i, par in enumerate(art.get("paragraphs", [])):
            ctx = par.get("context")
            if isinstance(ctx, str) and ctx.strip():
                yield Passage(id=f"{title}#{i}", doc=title, title=title, text=ctx, where=f"{path}:data[{a}]")


def _lines(source, path: Path, doc: str) -> Iterator[Passage]:
    """A paragraph per line (text), or per paragraph of a record's fields: id ``DOC:LINE`` (``#K`` for the K-th
    passage from the same line: a record's second field, or a long paragraph cut in parts)."""
    last, k = None, 0
    for lineno, par in iter_source(source):
        if not par.strip():
            continue
        for part in _split_long(par.strip()):
            k = k + 1 if lineno == last else 0
            last = lineno
            yield Passage(id=f"{doc}:{lineno}" + (f"#{k}" if k else ""), doc=doc, title="", text=part,
                          where=f"{path}:{lineno}")


def read_passages(source: str | os.PathLike) -> Iterator[Passage]:
    """Every passage of one document source (see the module docstring for the formats)."""
    path, fields = parse_source(source)
    kind = _kind(path)
    if kind != "squad" and fields is not None:
        kind = "records"
    doc = path.name
    n = 0
    if kind == "squad":
        it = _squad(path)
    elif kind == "blocks":
        it = _blocks(path, doc)
    else:  # one paragraph per line, or per line of a record's field
        it = _lines(source, path, doc)
    for p in it:
        n += 1
        yield p
    if n == 0:
        raise InputError("no passage in this document (empty, or only blank lines)", path=str(path))
