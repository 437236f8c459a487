"""The demo's 「マニュアルに質問」 tab: ask a whole manual (:class:`serve.asker.Asker`: the passage index finds the
best passages by BM25, the reader reads each, one answer comes back) — by default the sample manual
``samples/manual.md`` (indexed once at start into a temporary folder), or a prebuilt index (``denki demo --index
DIR``), or a few documents a user uploads (indexed for that browser session only).

:class:`ManualAsk` holds the logic as plain functions (tested without a browser); :func:`ask_tab` builds the tab's
Gradio components inside ``build_app``. This module also holds what both answer tabs share: the highlighted-span
pieces (:func:`highlight_spans`) and the no-answer wording.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from denki.models.io.errors import DenkiError
from denki.models.task.batching import MAX_TEXT_CHARS
from denki.serve.asker import DEFAULT_K

NO_ANSWER_JA = "回答なし"
UNSURE_JA = "わかりません（確信度が低いため回答を控えます）"
TASK_JA = "マニュアルに質問"
SAMPLE_MANUAL = Path(__file__).resolve().parents[1] / "samples" / "manual.md"
#: questions whose answers are in samples/manual.md (the tab's examples when it asks the sample manual)
EXAMPLE_QUESTIONS = ["イートインスペースは何席ありますか?", "保証期間はどのくらいですか?", "こむぎ堂は何時に開きますか?"]
#: uploads: the formats accepted (no .gz: a small compressed file can unpack to gigabytes), how many files and
#: how many bytes in all
UPLOAD_SUFFIXES = (".md", ".txt", ".jsonl", ".csv")
MAX_UPLOAD_FILES = 5
MAX_UPLOAD_BYTES = 2 * 1024 * 1024
#: passages read per question (the reader reads each: latency grows with k): denki ask's default
ASK_K = DEFAULT_K
PASSAGE_HEADERS = ["順位", "採用", "見出し", "文書", "BM25", "読み取った候補", "スコア"]
SPAN_CHARS = 24  # a passage's candidate span in the table is cut to this many characters
COLOR_MAP = {"回答": "orange", "候補（不採用）": "lightgray", "候補（確信度不足）": "lightgray"}


def highlight_spans(text: str, start: int | None, end: int | None, label: str) -> list[tuple[str, str | None]]:
    """``text`` as gr.HighlightedText pieces: before the span, the span labelled ``label``, after it (empty pieces
    left out); the whole text unlabelled when there is no span."""
    if start is None or end is None:
        return [(text, None)] if text else []
    return [x for x in ((text[:start], None), (text[start:end], label), (text[end:], None)) if x[0]]


def check_uploads(paths: Sequence[str] | None) -> list[Path]:
    """The uploaded files, checked before indexing: how many, their formats, their total size, distinct names,
    UTF-8 text. Raises :class:`DenkiError` with a Japanese message naming the file."""
    paths = [Path(p) for p in (paths or []) if p]
    if not paths:
        raise DenkiError("ファイルを選んでください。")
    if len(paths) > MAX_UPLOAD_FILES:
        raise DenkiError(f"ファイルが多すぎます（{len(paths)} 個、上限 {MAX_UPLOAD_FILES} 個）。")
    kinds = " / ".join(UPLOAD_SUFFIXES)
    for p in paths:
        if not p.name.lower().endswith(UPLOAD_SUFFIXES):
            raise DenkiError(f"{p.name}: この形式は読めません（{kinds} のみ）。")
    total = sum(p.stat().st_size for p in paths)
    if total > MAX_UPLOAD_BYTES:
        raise DenkiError(f"ファイルが大きすぎます（合計 {total / 2**20:.1f} MB、上限 {MAX_UPLOAD_BYTES / 2**20:.0f} MB）。")
    names = [p.name for p in paths]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise DenkiError(f"{dup}: 同じ名前のファイルが 2 つあります（名前を変えてください）。")
    for p in paths:
        data = p.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DenkiError(f"{p.name}: UTF-8 のテキストではありません（{e.start} バイト目）。UTF-8 で保存し直して"
                             "ください。") from None
        if not data.strip():
            raise DenkiError(f"{p.name}: 空のファイルです。")
    return paths


class ManualAsk:
    """The tab's state shared by every browser session: the default source (the sample manual or ``--index``),
    the opened indexes; each question gets an :class:`Asker` over the source's open index and the demo's own reader.

    A *source* is ``None`` (the default) or ``{"dir", "label", "upload": True}`` for a session's uploaded
    documents (the tab keeps it in a gr.State; :meth:`discard` removes its index)."""

    def __init__(self, models, index: str | None = None, *, sample: str | Path | None = SAMPLE_MANUAL,
                 k: int = ASK_K):
        from denki.models.retrieval.index import PassageIndex

        self.models = models
        self.k = k
        self.work = Path(tempfile.mkdtemp(prefix="denki-demo-ask-"))
        atexit.register(shutil.rmtree, self.work, ignore_errors=True)
        self._indexes: dict[str, PassageIndex] = {}
        self._lock = threading.Lock()
        self.is_sample = index is None
        if index is not None:  # a prebuilt index: opened (and verified) now, so a broken one fails at start
            self.default = {"dir": str(index), "label": f"索引 {index}"}
        elif sample is not None and Path(sample).is_file():  # the sample manual: a few ms to index
            PassageIndex.build([sample], self.work / "sample")
            self.default = {"dir": str(self.work / "sample"), "label": f"サンプルマニュアル {Path(sample).name}"}
        else:
            self.default = None
        if self.default:
            self.index(self.default["dir"])

    def index(self, directory: str):
        from denki.models.retrieval.index import PassageIndex

        with self._lock:
            if directory not in self._indexes:
                self._indexes[directory] = PassageIndex(directory)
            return self._indexes[directory]

    def asker(self, source: dict | None, backend: str):
        """An :class:`Asker` on the source's index, reading with the demo's own predictor for ``backend``."""
        from denki.serve.asker import Asker

        source = source or self.default
        if source is None:
            raise DenkiError("質問先の文書がありません（samples/manual.md が見つかりません）。文書をアップロードするか、"
                             "denki demo --index DIR で索引を指定してください。")
        return Asker(self.index(source["dir"]), self.models.predictor("qa", backend), k=self.k)

    def source_markdown(self, source: dict | None) -> str:
        source = source or self.default
        if source is None:
            return "質問先: なし（文書をアップロードしてください）"
        idx = self.index(source["dir"])
        docs = idx.documents()
        names = "、".join(docs[:5]) + (f" ほか {len(docs) - 5} 件" if len(docs) > 5 else "")
        return f"質問先: **{source['label']}**（{len(docs)} 文書・{len(idx)} 段落: {names}）"

    # ------------------------------------------------------------------ uploads
    def upload(self, paths: Sequence[str] | None, previous: dict | None = None) -> tuple[dict | None, str]:
        """Index the uploaded files for one session → (its new source, status markdown). A bad upload keeps
        ``previous`` and says why (in Japanese, naming the file)."""
        from denki.models.retrieval.index import PassageIndex

        try:
            files = check_uploads(paths)
            out = self.work / f"upload-{uuid.uuid4().hex[:12]}"
            try:
                PassageIndex.build([str(p) for p in files], out)
            except DenkiError as e:  # the reader of passages names the file by its full (server) path
                msg = str(e)
                for p in files:
                    msg = msg.replace(str(p), p.name)
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(out.with_name(out.name + ".partial"), ignore_errors=True)
                raise DenkiError(f"文書を読み込めませんでした: {msg}") from None
        except DenkiError as e:
            return previous, f"**エラー**: {e}\n\n{self.source_markdown(previous)}"
        self.discard(previous)
        source = {"dir": str(out), "label": "アップロードした文書", "upload": True}
        return source, self.source_markdown(source)

    def reset(self, previous: dict | None) -> tuple[None, str]:
        """Back to the default source (the sample manual or ``--index``)."""
        self.discard(previous)
        return None, self.source_markdown(None)

    def discard(self, source: dict | None) -> None:
        """Close and remove an uploaded source's index (the default one stays)."""
        if not source or not source.get("upload"):
            return
        with self._lock:
            idx = self._indexes.pop(source["dir"], None)
        if idx is not None:
            idx.close()
        shutil.rmtree(source["dir"], ignore_errors=True)

    # ------------------------------------------------------------------ asking
    def ask(self, question: str, backend: str, source: dict | None = None) -> tuple[list, str, list, dict]:
        """→ (highlighted passage [(text, label|None)], result markdown, passage rows (:data:`PASSAGE_HEADERS`),
        timing: retrieval_ms, reader_ms and the latency history's keys)."""
        question = (question or "").strip()
        if not question:
            return [], "質問を入力してください。", [], {}
        if len(question) > MAX_TEXT_CHARS:
            return [], f"入力が長すぎます（{len(question):,} 文字、上限 {MAX_TEXT_CHARS:,} 文字）。", [], {}
        try:
            a = self.asker(source, backend)
        except DenkiError as e:
            return [], f"エラー: {e}", [], {}
        t0 = time.perf_counter()
        r = a.ask(question)
        wall = (time.perf_counter() - t0) * 1e3
        t = a.reader.last_timing if r["passages"] else {}
        timing = {"backend": a.reader.backend, "provider": a.reader.provider,
                  "retrieval_ms": round(r["retrieval_ms"], 2), "reader_ms": round(r["reader_ms"], 2),
                  "tokenize_ms": round(t.get("tokenize_ms", 0.0), 2),
                  "inference_ms": round(t.get("inference_ms", 0.0) + t.get("lexical_ms", 0.0), 2),
                  "total_ms": round(wall, 2)}
        return _spans(r), result_markdown(r, a.threshold), passage_rows(r), timing


def _spans(r: dict) -> list:
    """The chosen passage with the answer (or the rejected candidate) highlighted."""
    passage = r.get("passage") or ""
    if r["has_answer"]:
        return highlight_spans(passage, r["start"], r["end"], "回答")
    cand = r.get("span_answer") or ""
    if cand and passage.count(cand) == 1:  # the rejected span's offsets are not returned: mark it where unique
        s = passage.index(cand)
        label = "候補（確信度不足）" if r["reason"] == "unsure" else "候補（不採用）"
        return highlight_spans(passage, s, s + len(cand), label)
    return highlight_spans(passage, None, None, "")


def result_markdown(r: dict, threshold: float) -> str:
    """The answer and where it came from, or 「回答なし」 and why."""
    where = ""
    if r.get("document"):
        where = f"文書 **{r['document']}**" + (f"・見出し「{r['title']}」" if r.get("title") else "")
    conf = r.get("confidence")
    conf_s = "" if conf is None else f"・確信度 {conf:.0%}"
    diff = r.get("null_score_diff")
    diff_s = "なし" if diff is None else f"{diff:.3f}"
    n = len(r["passages"])
    if r["has_answer"]:
        return (f"### 回答: **{r['answer']}**\n{where}\n\n{n} 段落を読み、無回答スコア差 {diff_s} ≤ しきい値 "
                f"{threshold:.3f}{conf_s}")
    cand = r.get("span_answer") or ""
    if r["reason"] == "no_passage":
        why = "質問と同じ語を含む段落が見つかりませんでした（索引の検索結果 0 件）。"
    elif r["reason"] == "unsure":
        why = (f"最有力の候補{f'「{cand}」' if cand else ''}は確信度が低いため回答を控えます{conf_s}"
               "（担当者に確認してください）。")
    elif r.get("document"):
        why = (f"読んだ {n} 段落のどれにも回答が見つかりませんでした（最有力の候補{f'「{cand}」' if cand else ''}も"
               f"無回答スコア差 {diff_s} > しきい値 {threshold:.3f}）。")
    else:
        why = f"読んだ {n} 段落のどれにも回答の候補がありませんでした。"
    return f"### {NO_ANSWER_JA}\n{why}" + (f"\n\n最有力の段落: {where}" if where else "")


def passage_rows(r: dict) -> list[list]:
    """One row per passage read, in BM25 order; 採用 marks the one the answer (or the rejected candidate) is in."""
    rows = []
    for p in r["passages"]:
        chosen = p["id"] == r.get("passage_id")
        mark = ("◎" if r["has_answer"] else "×") if chosen else ""
        score = "" if p["score"] is None else round(float(p["score"]), 3)
        span = p["span_answer"] or ""
        span = span if len(span) <= SPAN_CHARS else span[: SPAN_CHARS - 1] + "…"
        rows.append([p["rank"], mark, p["title"] or "", p["document"], round(float(p["bm25"]), 2), span, score])
    return rows


# ------------------------------------------------------------------ Gradio wiring
def ask_tab(ask: ManualAsk, backends: list[str], history) -> None:
    """The tab's components and events, built inside the caller's ``gr.Tab`` (``history``: the demo's latency
    history gr.State, which this tab's requests join)."""
    import gradio as gr

    gr.Markdown(f"質問に近い段落を索引から BM25 で {ask.k} 件探し、回答抽出モデルが 1 段落ずつ読んで、いちばん確かな"
                "回答を 1 つ返します（どの段落にもなければ「回答なし」）。")
    source = gr.State(None, delete_callback=ask.discard)
    source_md = gr.Markdown(ask.source_markdown(None), elem_id="ask-source")
    with gr.Accordion("自分の文書に質問する（アップロード）", open=False):
        files = gr.File(label=f"文書（{' / '.join(UPLOAD_SUFFIXES)}、{MAX_UPLOAD_FILES} 個・合計 "
                              f"{MAX_UPLOAD_BYTES // 2**20} MB まで、UTF-8）", file_count="multiple",
                        file_types=list(UPLOAD_SUFFIXES), type="filepath", elem_id="ask-files")
        reset = gr.Button("サンプルマニュアルに戻す" if ask.is_sample else "既定の索引に戻す", elem_id="ask-reset")
    backend = gr.Radio(backends, value=(backends or [None])[0], label="バックエンド", elem_id="ask-backend")
    question = gr.Textbox(label="質問", lines=1, elem_id="ask-question", max_length=MAX_TEXT_CHARS)
    button = gr.Button("質問", variant="primary", elem_id="ask-button")
    if ask.is_sample and ask.default:
        gr.Examples([[q] for q in EXAMPLE_QUESTIONS], inputs=[question], label="例（サンプルマニュアルに答えがある質問）",
                    elem_id="ask-examples", example_labels=EXAMPLE_QUESTIONS)
    out_md = gr.Markdown(elem_id="ask-output")
    highlighted = gr.HighlightedText(label="回答を含む段落", color_map=COLOR_MAP, combine_adjacent=True,
                                     elem_id="ask-highlight")
    table = gr.Dataframe(headers=PASSAGE_HEADERS, label="読んだ段落（BM25 の順位順）", interactive=False,
                         wrap=True, column_widths=["7%", "7%", "28%", "16%", "9%", "23%", "10%"],
                         elem_id="ask-passages")
    timing_json = gr.JSON(label="レイテンシ (ms): 検索 retrieval_ms / 読解 reader_ms", elem_id="ask-timing")

    def do_ask(q, b, src, hist):
        spans, md, rows, timing = ask.ask(q, b, src)
        if timing:
            hist = hist + [{"task": TASK_JA, **timing}]
        return spans, md, {"data": rows, "headers": PASSAGE_HEADERS}, timing, hist

    outputs = [highlighted, out_md, table, timing_json, history]
    button.click(do_ask, [question, backend, source, history], outputs, concurrency_id="predict")
    question.submit(do_ask, [question, backend, source, history], outputs, concurrency_id="predict")
    files.upload(ask.upload, [files, source], [source, source_md], concurrency_limit=1, concurrency_id="batch")
    reset.click(lambda src: (*ask.reset(src), None), [source], [source, source_md, files], queue=False)
