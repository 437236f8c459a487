"""The passage index: a folder with ``passages.sqlite`` (the passages, and an SQLite FTS5 table of their words,
ranked by FTS5's built-in BM25, k1 = 1.2, b = 0.75) and ``manifest.json`` (format, the word segmenter, counts,
the documents, and the sha256 of every file, written last: a folder without it is not an index).

    idx = PassageIndex.build(["manual.md", "faq.jsonl"], "runs/index")   # built in runs/index.partial, renamed
    idx.search("保証期間はどのくらいですか", k=5)                          # → [Hit(passage, score, rank), …]
    idx.add(["new.md"]); idx.remove(["old.md"])                           # no full rebuild

Why FTS5: it ships with Python's sqlite3 (no install: the runtime stays small), it is a maintained BM25
implementation with an inverted index on disk, and a transaction makes add/remove atomic. The words are
denki's MeCab words (:mod:`.words`), stored space-separated so FTS5's ``unicode61`` tokenizer sees the same words.
"""
from __future__ import annotations

import datetime as _dt
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json, replace_dir, sha256_file
from denki.models.retrieval.passages import Passage, read_passages
from denki.models.retrieval.words import search_words, segmenter_id

INDEX_FORMAT = 1
KIND = "passage-index"
DB = "passages.sqlite"
MANIFEST = "manifest.json"
MAX_QUERY_WORDS = 64  # a longer query is cut (its first words): an FTS5 OR over hundreds of terms is slow

_SCHEMA = """
CREATE TABLE passages (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, doc TEXT NOT NULL, title TEXT NOT NULL,
                       text TEXT NOT NULL, loc TEXT NOT NULL);
CREATE INDEX passages_doc ON passages(doc);
CREATE VIRTUAL TABLE fts USING fts5(words, content='', tokenize='unicode61 remove_diacritics 0');
"""


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float  # BM25 (higher is better)
    rank: int     # 1-based


def _fts_query(words: Sequence[str]) -> str:
    """Any of the words (OR), each an FTS5 string literal (a word is never read as FTS5 syntax)."""
    seen: list[str] = []
    for w in words:
        if w not in seen:
            seen.append(w)
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in seen[:MAX_QUERY_WORDS])


class PassageIndex:
    """An open index (read-only unless :meth:`add` / :meth:`remove` is called)."""

    def __init__(self, directory: str | os.PathLike, *, verify: bool = True):
        self.dir = Path(directory)
        self.manifest = read_index_manifest(self.dir)
        if verify:
            verify_index(self.dir, self.manifest)
        self._db = sqlite3.connect(self.dir / DB, check_same_thread=False)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, sources: Sequence[str | os.PathLike], out: str | os.PathLike, *, progress: bool = False):
        """Index every passage of ``sources`` into ``out`` (built in ``OUT.partial``, then renamed)."""
        out = Path(out)
        tmp = out.with_name(out.name + ".partial")
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        db = sqlite3.connect(tmp / DB)
        db.executescript(_SCHEMA)
        t0 = time.perf_counter()
        n = _insert(db, sources, progress=progress)
        db.commit()
        db.execute("INSERT INTO fts(fts) VALUES('optimize')")
        db.commit()
        db.close()
        _write_manifest(tmp, {"built_seconds": round(time.perf_counter() - t0, 1), "built_from": [str(s) for s in sources]})
        replace_dir(tmp, out)
        return cls(out, verify=False)

    def add(self, sources: Sequence[str | os.PathLike], *, progress: bool = False) -> int:
        """Add the passages of ``sources`` (a document already in the index is refused: remove it first) →
        passages added. One transaction: all or nothing."""
        have = set(self.documents())
        for s in sources:
            from denki.models.io.corpus import parse_source

            name = parse_source(s)[0].name
            if name in have:
                raise DenkiError(f"{name}: already in the index {self.dir} (denki index remove it first, or "
                                 "rebuild)")
        with self._db:
            n = _insert(self._db, sources, progress=progress)
        self._refresh_manifest()
        return n

    def remove(self, docs: Iterable[str]) -> int:
        """Remove every passage of the named documents → passages removed. Unknown names are an error."""
        docs = list(docs)
        have = set(self.documents())
        unknown = [d for d in docs if d not in have]
        if unknown:
            raise DenkiError(f"not in the index {self.dir}: {', '.join(unknown)} (denki index list shows its "
                             "documents)")
        with self._db:
            n = 0
            for d in docs:
                rows = self._db.execute("SELECT rowid, title, text FROM passages WHERE doc = ?", (d,)).fetchall()
                for rowid, title, text in rows:
                    # a contentless FTS5 table forgets a row by being told its words again
                    self._db.execute("INSERT INTO fts(fts, rowid, words) VALUES('delete', ?, ?)",
                                     (rowid, _passage_words(title, text)))
                self._db.execute("DELETE FROM passages WHERE doc = ?", (d,))
                n += len(rows)
        self._refresh_manifest()
        return n

    def _refresh_manifest(self) -> None:
        _write_manifest(self.dir, {k: self.manifest.get(k) for k in ("built_seconds", "built_from")})
        self.manifest = read_index_manifest(self.dir)

    # ------------------------------------------------------------------ reading
    def documents(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT doc FROM passages ORDER BY doc")]

    def document_counts(self) -> list[tuple[str, int]]:
        return [(d, n) for d, n in self._db.execute("SELECT doc, COUNT(*) FROM passages GROUP BY doc ORDER BY doc")]

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM passages").fetchone()[0]

    def passage(self, pid: str) -> Passage | None:
        row = self._db.execute("SELECT id, doc, title, text, loc FROM passages WHERE id = ?", (pid,)).fetchone()
        return Passage(*row) if row else None

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """The ``k`` best passages for ``query`` by BM25 over its words; ``[]`` when no word of it is indexed."""
        words = search_words(query)
        if not words:
            return []
        rows = self._db.execute(
            "SELECT p.id, p.doc, p.title, p.text, p.loc, -bm25(fts) AS s FROM fts JOIN passages p "
            "ON p.rowid = fts.rowid WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT ?",
            (_fts_query(words), int(k))).fetchall()
        return [Hit(Passage(*r[:5]), float(r[5]), i + 1) for i, r in enumerate(rows)]

    def close(self) -> None:
        self._db.close()


# ---------------------------------------------------------------------------------------------- helpers
def _passage_words(title: str, text: str) -> str:
    """What FTS5 indexes for a passage: the words of its title (a heading, an article title) and its text."""
    return " ".join(search_words(f"{title}\n{text}" if title else text))


def _insert(db: sqlite3.Connection, sources: Sequence[str | os.PathLike], *, progress: bool) -> int:
    from tqdm.auto import tqdm

    n = 0
    bar = tqdm(desc="index: passages", unit=" passage", disable=not progress, mininterval=1.0)
    for s in sources:
        for p in read_passages(s):
            try:
                cur = db.execute("INSERT INTO passages(id, doc, title, text, loc) VALUES(?, ?, ?, ?, ?)",
                                 (p.id, p.doc, p.title, p.text, p.where))
            except sqlite3.IntegrityError:
                raise DenkiError(f"{p.where}: passage id {p.id!r} is already in the index (two documents with "
                                 "the same file name?)") from None
            db.execute("INSERT INTO fts(rowid, words) VALUES(?, ?)",
                       (cur.lastrowid, _passage_words(p.title, p.text)))
            n += 1
            bar.update(1)
    bar.close()
    return n


def _write_manifest(directory: Path, extra: dict) -> None:
    db = sqlite3.connect(directory / DB)
    n, docs = db.execute("SELECT COUNT(*), COUNT(DISTINCT doc) FROM passages").fetchone()
    db.close()
    atomic_write_json(directory / MANIFEST, {
        "format": INDEX_FORMAT, "kind": KIND,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "segmenter": segmenter_id(), "passages": n, "documents": docs, "ranking": "SQLite FTS5 bm25 (k1 1.2, b 0.75)",
        "sqlite": sqlite3.sqlite_version, **extra,
        "files": {DB: sha256_file(directory / DB)}})


def read_index_manifest(directory: str | os.PathLike) -> dict:
    import json

    d = Path(directory)
    path = d / MANIFEST
    if not path.is_file():
        raise DenkiError(f"{d}: not a passage index (no {MANIFEST}; build one with `denki index build`)")
    m = json.loads(path.read_text(encoding="utf-8"))
    if m.get("kind") != KIND:
        raise DenkiError(f"{d}: a {m.get('kind')!r} folder, not a passage index")
    if m.get("format") != INDEX_FORMAT:
        raise DenkiError(f"{d}: index format {m.get('format')}, this denki reads {INDEX_FORMAT}: rebuild it")
    return m


def verify_index(directory: Path, manifest: dict) -> None:
    """Every file against its sha256, and the segmenter against this denki's (a query must be cut the same way)."""
    for name, sha in manifest.get("files", {}).items():
        if not (directory / name).is_file():
            raise DenkiError(f"{directory}: {name} is missing")
        if sha256_file(directory / name) != sha:
            raise DenkiError(f"{directory}: {name} does not match its sha256 in {MANIFEST} (changed outside "
                             "denki index, or corrupted): rebuild the index")
    want = segmenter_id()
    if manifest.get("segmenter") != want:
        raise DenkiError(f"{directory}: built with another word segmenter ({manifest.get('segmenter')}) than this "
                         f"denki's ({want}): its words would not match a query's; rebuild the index")
