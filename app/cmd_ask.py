"""`denki ask`: ask a question of a whole collection (a passage index and a QA bundle); one question, or a
file of them."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ASK_FIELDS = ("answer", "has_answer", "reason", "document", "passage_id", "title", "start", "end", "score",
              "confidence", "null_score_diff", "null_threshold", "passages", "retrieval_ms", "reader_ms")


def register(sub) -> None:
    p = sub.add_parser(
        "ask", help="ask a question of a whole collection: the passage index finds passages, the reader answers",
        description="Search the passage index (`denki index build`) for the k best passages by BM25, read each "
                    "with the QA bundle, and answer with the span of the most answerable passage — or 回答なし "
                    "when none holds one (docs/ask.md). One --question, or --input questions.jsonl/.csv (field "
                    "'question'; records pass through with the answer fields added) to --output answers.jsonl. "
                    "Bad rows become error rows {id, line, reason, raw}; nothing is skipped silently.")
    p.add_argument("--index", required=True, help="passage index folder (denki index build)")
    p.add_argument("--qa", required=True, help="QA bundle: onnx-qa (denki export), torch-free")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--question", help="one question")
    src.add_argument("--input", help="questions file (.jsonl or .csv, .gz ok) with a 'question' field")
    p.add_argument("--output", help="answers file (.jsonl, .gz ok), with --input; written atomically")
    p.add_argument("-k", type=int, default=5, help="passages read per question (default: 5)")
    p.add_argument("--null-threshold", type=float, default=None,
                   help="answer only when the best passage's null score difference is at most this (default: the "
                        "reader's own, task.json null_threshold)")
    p.add_argument("--json", action="store_true", help="--question: print one JSON object")
    p.add_argument("--backend", default="auto", help="ONNX variant (fp32, o2, int8, fp16; default: auto)")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    p.set_defaults(func=cmd_ask)


def cmd_ask(args) -> int:
    from denki.models.io.errors import DenkiError
    from denki.serve.asker import Asker

    if args.input and not args.output:
        raise DenkiError("--input needs --output (where the answers go)")
    asker = Asker(args.index, args.qa, k=args.k, null_threshold=args.null_threshold, backend=args.backend,
                  threads=args.threads)
    if args.question is not None:
        r = asker.ask(args.question)
        if args.json:
            print(json.dumps({k: r.get(k) for k in ASK_FIELDS} | {"question": args.question}, ensure_ascii=False))
        else:
            _print_answer(r)
        return 0
    n, bad = _ask_file(asker, Path(args.input), Path(args.output))
    print(f"ask: {n:,} questions answered, {bad:,} error rows → {args.output}")
    return 0


def _print_answer(r: dict) -> None:
    if r["has_answer"]:
        print(f"回答: {r['answer']}")
    else:
        print({"unsure": "わかりません（確信度が低いため回答を控えます）", "no_passage": "回答なし（関連する文書なし）"}
              .get(r["reason"], "回答なし"))
    if r["document"]:
        title = f" [{r['title']}]" if r["title"] else ""
        print(f"文書: {r['document']}{title}  passage {r['passage_id']}"
              + (f"  chars {r['start']}–{r['end']}" if r["has_answer"] else ""))
    for p in r["passages"]:
        print(f"  {p['rank']}. bm25 {p['bm25']:.2f}  diff {p['null_score_diff']}  {p['id']}  「{p['span_answer']}」")
    print(f"retrieval {r['retrieval_ms']:.1f} ms, reader {r['reader_ms']:.1f} ms")


def _ask_file(asker, src: Path, dst: Path) -> tuple[int, int]:
    """Every row of ``src`` → one JSON line in ``dst`` (the record plus ``denki_ask``: the answer fields), or an
    error row; written to a partial file beside ``dst``, renamed at the end."""
    from denki.models.io.fileio import temp_file_beside
    from denki.serve.batch_files import check_text, error_record, finalize, iter_rows

    fd, tmp = temp_file_beside(dst)
    n = bad = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for row in iter_rows(src):
                q = check_text(row, "question")
                if q is None:
                    out.write(json.dumps(error_record(row, src), ensure_ascii=False) + "\n")
                    bad += 1
                    continue
                r = asker.ask(q)
                out.write(json.dumps({**row.record, "denki_ask": {k: r.get(k) for k in ASK_FIELDS}},
                                     ensure_ascii=False) + "\n")
                n += 1
        finalize(Path(tmp), dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if bad:
        print(f"ask: {bad} rows could not be asked (error rows in the output)", file=sys.stderr)
    return n, bad
