"""The quickstart's ask stage: index the sample manual (``denki index build``) and ask it a few questions with the
exported QA model (``denki ask``), as a user would. Torch-free."""
from __future__ import annotations

from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
#: the sample manual the quickstart indexes (scripts/make_manual_qa.py writes it), and what it asks of it: two
#: questions whose answers are in it and one about something it does not cover (回答なし expected)
MANUAL = SAMPLES / "manual.md"
ASK_EXAMPLES = ["イートインスペースは何席ありますか?", "保証期間はどのくらいですか?", "量子コンピュータの原理は何ですか?"]


def ask_sample_manual(index_dir: Path, qa_onnx: Path, *, threads: int | None = None) -> dict:
    """Build the index of :data:`MANUAL` at ``index_dir`` (replacing one there) and ask it :data:`ASK_EXAMPLES`
    → ``{"index", "passages", "k", "questions": [{"question", "answer", "has_answer", "reason", "title",
    "passages_read", "ms"}]}`` (``ms``: retrieval + reader, after one warm-up question)."""
    import shutil

    from denki.models.retrieval.index import PassageIndex
    from denki.serve.asker import Asker

    if index_dir.exists():
        shutil.rmtree(index_dir)
    PassageIndex.build([MANUAL], index_dir).close()
    asker = Asker(index_dir, qa_onnx, threads=threads)
    asker.ask(ASK_EXAMPLES[0])  # warm-up: the first call pays for the session's first run
    rows = []
    for q in ASK_EXAMPLES:
        r = asker.ask(q)
        rows.append({"question": q, **{k: r[k] for k in ("answer", "has_answer", "reason", "title")},
                     "passages_read": len(r["passages"]), "ms": round(r["retrieval_ms"] + r["reader_ms"], 1)})
    return {"index": str(index_dir), "passages": len(asker.index), "k": asker.k, "questions": rows}
