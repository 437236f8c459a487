"""Reading extractive-QA data: SQuAD 2.0 nested JSON or flat JSONL in the HF ``squad_v2`` layout (.gz allowed).

Both layouts become a list of :class:`QAExample`. Validation is strict and never silent:

* a file that is not valid JSON/JSONL, a record without ``id``/``question``/``context``, or **duplicate ids** →
  :class:`~models.io.errors.InputError` naming file, line (JSONL) and field (predictions are keyed by id, so a
  duplicate would silently overwrite another question's prediction);
* an empty question or context, an answer whose ``answer_start`` does not match its ``text``, an answerable
  question without answers or an unanswerable one with answers → the question is **skipped and listed**
  (``QAData.skipped``: id, reason, where) — or raises with ``strict=True``.

This module is torch-free (the ONNX runtime may reuse it).
"""
from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from denki.models.io.errors import InputError
from denki.models.io.textio import open_binary


@dataclass
class QAExample:
    """One question over one context. ``answers`` = ``[(text, char_start), ...]`` (empty ⇔ unanswerable)."""

    id: str
    question: str
    context: str
    answers: list[tuple[str, int]] = field(default_factory=list)
    title: str = ""
    meta: dict = field(default_factory=dict)  # answer_type, question_type, … passed through to reports

    @property
    def is_impossible(self) -> bool:
        return not self.answers

    @property
    def answer_texts(self) -> list[str]:
        return [t for t, _ in self.answers]


@dataclass
class QAData:
    """Examples read from a file, plus every question that was skipped and why."""

    path: str
    examples: list[QAExample]
    skipped: list[dict] = field(default_factory=list)  # {"id", "reason", "where"}

    @property
    def n_answerable(self) -> int:
        return sum(not e.is_impossible for e in self.examples)

    def summary(self) -> dict:
        reasons: dict[str, int] = {}
        for s in self.skipped:
            reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
        return {"path": self.path, "examples": len(self.examples), "answerable": self.n_answerable,
                "unanswerable": len(self.examples) - self.n_answerable, "skipped": len(self.skipped),
                "skipped_by_reason": reasons}


def _read_text(path: Path) -> str:
    with open_binary(path) as f:
        try:
            raw = f.read()
        except (OSError, EOFError) as e:
            raise InputError(f"cannot read file: {e}", path=str(path)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise InputError("invalid UTF-8; convert the file to UTF-8", path=str(path), line=line) from None
    return text[1:] if text.startswith("\ufeff") else text


def _is_jsonl(path: Path, text: str) -> bool:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if name.endswith(".jsonl"):
        return True
    if name.endswith(".json"):
        return False
    # unknown suffix: a nested SQuAD file is one object with a "data" key
    try:
        obj = json.loads(text)
        return not (isinstance(obj, dict) and "data" in obj)
    except json.JSONDecodeError:
        return True


def _answers_from_flat(rec: dict, where: str) -> list[tuple[object, object]]:
    ans = rec.get("answers", {"text": [], "answer_start": []})
    if ans is None:
        return []
    if isinstance(ans, list):  # tolerate the nested per-answer layout in JSONL too
        return [(a.get("text"), a.get("answer_start")) for a in ans if isinstance(a, dict)]
    if not isinstance(ans, dict):
        raise InputError("'answers' must be {'text': [...], 'answer_start': [...]}", path=where, field="answers")
    texts, starts = ans.get("text", []), ans.get("answer_start", [])
    if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
        raise InputError("'answers.text' and 'answers.answer_start' must be lists of the same length",
                         path=where, field="answers")
    return list(zip(texts, starts))


class _Collector:
    def __init__(self, path: Path, strict: bool):
        self.path, self.strict = path, strict
        self.examples: list[QAExample] = []
        self.skipped: list[dict] = []
        self.seen: dict[str, str] = {}

    def skip(self, qid: str, reason: str, where: str, detail: str, line: int | None, fld: str | None) -> None:
        if self.strict:
            raise InputError(f"question {qid!r}: {detail}", path=str(self.path), line=line, field=fld)
        self.skipped.append({"id": qid, "reason": reason, "where": where, "detail": detail})

    def add(self, rec: dict, context, title: str, where: str, line: int | None) -> None:
        for key in ("id", "question"):
            if key not in rec:
                raise InputError(f"missing field {key!r}", path=str(self.path), line=line, field=key)
        qid = str(rec["id"])
        if qid in self.seen:
            raise InputError(f"duplicate question id {qid!r} (first seen at {self.seen[qid]}); ids must be unique "
                             "because predictions are keyed by id", path=str(self.path), line=line, field="id")
        self.seen[qid] = where
        question = rec["question"]
        if not isinstance(question, str) or not isinstance(context, str):
            raise InputError("'question' and 'context' must be strings", path=str(self.path), line=line,
                             field="question" if not isinstance(question, str) else "context")
        if not question.strip():
            return self.skip(qid, "empty_question", where, "empty question", line, "question")
        if not context.strip():
            return self.skip(qid, "empty_context", where, "empty context", line, "context")
        pairs = rec["_pairs"] if "_pairs" in rec else _answers_from_flat(rec, str(self.path))
        answers: list[tuple[str, int]] = []
        for text, start in pairs:
            if not isinstance(text, str) or not isinstance(start, int) or isinstance(start, bool):
                return self.skip(qid, "bad_answer", where, f"answer {text!r} at {start!r} is not (str, int)",
                                 line, "answers")
            if not text or context[start:start + len(text)] != text or start < 0:
                found = context.find(text) if text else -1
                hint = f"; the text occurs at {found}" if found >= 0 else ""
                return self.skip(qid, "answer_start_mismatch", where,
                                 f"answer {text!r}: context[{start}:{start + len(text)}] is "
                                 f"{context[max(0, start):start + len(text)]!r}{hint}", line, "answer_start")
            answers.append((text, start))
        impossible = rec.get("is_impossible")
        if impossible is True and answers:
            return self.skip(qid, "impossible_with_answers", where, "is_impossible is true but answers are given",
                             line, "is_impossible")
        if impossible is False and not answers:
            return self.skip(qid, "answerable_without_answers", where,
                             "is_impossible is false but no answer is given", line, "answers")
        meta = {k: rec[k] for k in ("answer_type", "question_type", "source_qid") if k in rec}
        self.examples.append(QAExample(qid, question, context, answers, title, meta))


def read_qa(path: str | os.PathLike, *, strict: bool = False, limit: int | None = None) -> QAData:
    """Read a SQuAD 2.0 JSON or flat JSONL (``.gz`` allowed) QA file. ``limit`` keeps the first N questions
    (after validation) — for quick runs; the caller should say so."""
    p = Path(path)
    text = _read_text(p)
    col = _Collector(p, strict)
    if _is_jsonl(p, text):
        for lineno, line in enumerate(io.StringIO(text), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"invalid JSON ({e.msg})", path=str(p), line=lineno) from None
            if not isinstance(rec, dict):
                raise InputError("each line must be a JSON object", path=str(p), line=lineno)
            if "context" not in rec:
                raise InputError("missing field 'context'", path=str(p), line=lineno, field="context")
            col.add(rec, rec["context"], str(rec.get("title", "")), f"line {lineno}", lineno)
    else:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"invalid JSON ({e.msg})", path=str(p), line=e.lineno) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
            raise InputError("not a SQuAD 2.0 file: expected {\"data\": [{\"paragraphs\": [...]}]}", path=str(p),
                             field="data")
        for ai, article in enumerate(obj["data"]):
            title = str(article.get("title", ""))
            for pi, para in enumerate(article.get("paragraphs", [])):
                if "context" not in para:
                    raise InputError(f"data[{ai}].paragraphs[{pi}] has no 'context'", path=str(p), field="context")
                for qi, qa in enumerate(para.get("qas", [])):
                    where = f"data[{ai}].paragraphs[{pi}].qas[{qi}]"
                    rec = dict(qa)
                    rec["_pairs"] = [(a.get("text"), a.get("answer_start")) for a in qa.get("answers", [])
                                        if isinstance(a, dict)]
                    col.add(rec, para["context"], title, where, None)
    if not col.examples:
        raise InputError(f"no usable question in the file ({len(col.skipped)} skipped)", path=str(p))
    examples = col.examples[:limit] if limit else col.examples
    return QAData(str(p), examples, col.skipped)
