"""`denki index build|add|remove|list|search`: the passage index that `denki ask` reads (SQLite FTS5 BM25 over
denki's MeCab words; docs/ask.md)."""
from __future__ import annotations

import json
import time

DOCS_HELP = ("documents: .txt (one paragraph per line), .md and other plain text (split at headings and blank "
             "lines; a heading titles the passages under it), .jsonl/.csv records (their 'text' field, or "
             "FILE.jsonl:F1,F2), SQuAD 2.0 .json (its contexts); .gz ok")


def register(sub) -> None:
    ix = sub.add_parser("index", help="build and change a passage index (for asking a whole manual)",
                        description="A passage index: a folder with the passages of your documents, their words "
                                    "in an SQLite FTS5 table ranked by BM25, and a manifest (sha256 of every "
                                    "file, the word segmenter).")
    ix.set_defaults(_group_parser=ix)
    isub = ix.add_subparsers(dest="index_command", metavar="ACTION")
    p = isub.add_parser("build", help="index documents into a new folder")
    p.add_argument("--docs", nargs="+", required=True, metavar="SOURCE", help=DOCS_HELP)
    p.add_argument("--out", required=True, help="the index folder (built beside it in OUT.partial, then renamed)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    p.set_defaults(func=cmd_index_build)
    p = isub.add_parser("add", help="add documents to an index (no rebuild)")
    p.add_argument("--index", required=True)
    p.add_argument("--docs", nargs="+", required=True, metavar="SOURCE", help=DOCS_HELP)
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    p.set_defaults(func=cmd_index_add)
    p = isub.add_parser("remove", help="remove documents from an index by name (as `denki index list` shows)")
    p.add_argument("--index", required=True)
    p.add_argument("--docs", nargs="+", required=True, metavar="NAME")
    p.set_defaults(func=cmd_index_remove)
    p = isub.add_parser("list", help="the documents of an index and their passage counts")
    p.add_argument("--index", required=True)
    p.set_defaults(func=cmd_index_list)
    p = isub.add_parser("search", help="the best passages for a question (BM25)")
    p.add_argument("--index", required=True)
    p.add_argument("--query", required=True)
    p.add_argument("-k", type=int, default=5, help="passages to return (default: 5)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    p.set_defaults(func=cmd_index_search)


def cmd_index_build(args) -> int:
    from denki.models.retrieval.index import PassageIndex

    t0 = time.perf_counter()
    idx = PassageIndex.build(args.docs, args.out, progress=not args.no_progress)
    print(f"index: {len(idx):,} passages from {len(idx.documents()):,} documents in "
          f"{time.perf_counter() - t0:.1f} s → {args.out}")
    return 0


def cmd_index_add(args) -> int:
    from denki.models.retrieval.index import PassageIndex

    idx = PassageIndex(args.index)
    n = idx.add(args.docs, progress=not args.no_progress)
    print(f"index: +{n:,} passages; {len(idx):,} in all")
    return 0


def cmd_index_remove(args) -> int:
    from denki.models.retrieval.index import PassageIndex

    idx = PassageIndex(args.index)
    n = idx.remove(args.docs)
    print(f"index: −{n:,} passages; {len(idx):,} left")
    return 0


def cmd_index_list(args) -> int:
    from denki.models.retrieval.index import PassageIndex

    idx = PassageIndex(args.index)
    for doc, n in idx.document_counts():
        print(f"{n:>8,}  {doc}")
    print(f"{len(idx):,} passages, {len(idx.documents()):,} documents")
    return 0


def cmd_index_search(args) -> int:
    from denki.models.retrieval.index import PassageIndex

    idx = PassageIndex(args.index)
    hits = idx.search(args.query, k=args.k)
    if args.json:
        print(json.dumps({"query": args.query, "hits": [
            {"rank": h.rank, "score": round(h.score, 4), "id": h.passage.id, "document": h.passage.doc,
             "title": h.passage.title, "text": h.passage.text} for h in hits]}, ensure_ascii=False))
        return 0
    if not hits:
        print("no passage shares a word with the query")
    for h in hits:
        title = f" [{h.passage.title}]" if h.passage.title else ""
        print(f"{h.rank}. {h.score:.2f}  {h.passage.id}{title}  {h.passage.text[:80]}")
    return 0
