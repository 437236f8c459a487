"""`denki demo`: a Gradio app over the torch-free ONNX predictors — routing, span QA, asking a whole manual
(:mod:`app.demo_ask`), batch scoring, latency (measured on demand per model and variant by :func:`measure_latency`,
and the session's own requests).

Handlers are plain functions of a :class:`DemoModels` (unit-tested without a browser); :func:`build_app` wires them
into Gradio. Defaults are safe: binds 127.0.0.1, analytics off, inputs capped, at most two requests run at once and
batch jobs one at a time (so a big upload cannot starve the routing box).
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from denki.app.demo_ask import NO_ANSWER_JA, UNSURE_JA, ManualAsk, ask_tab, highlight_spans
from denki.models.bundle.onnx import INT8_VARIANTS, MODEL_FILES
from denki.models.io.errors import DenkiError
from denki.models.registry.tasks import task_for
from denki.serve.runtime import MAX_CONTEXT_CHARS, MAX_TEXT_CHARS, Predictor, _cuda_usable

HUMAN_JA = "担当者へ"
DEFAULT_DIRS = {"classifier": "runs/quickstart/classifier-onnx", "qa": "runs/quickstart/qa-onnx"}
BACKEND_LABELS = {"int8": "ORT int8 (CPU)", "int8-channel": "ORT int8 per-channel (CPU)",
                  "int8-static": "ORT int8 static QDQ (CPU)", "o2": "ORT O2 (CPU)", "o3": "ORT O3 (CPU)",
                  "fp32": "ORT fp32 (CPU)", "fp16": "CUDA fp16", "cuda-fp32": "CUDA fp32"}
#: the CPU variants in the order the demo offers them: every int8 variant, then the float graphs
CPU_ORDER = (*INT8_VARIANTS, "o2", "o3", "fp32")
TASK_JA = {"classifier": "振り分け", "qa": "回答抽出"}
#: the latency tab's measurement: timed requests per variant (default, cap) and untimed warm-up requests before them
MEASURE_DEFAULT_N, MEASURE_MAX_N, MEASURE_WARMUP = 50, 500, 3


class DemoModels:
    """Loaded ONNX bundles and one predictor per (task, backend), created on first use."""

    def __init__(self, classifier: str | None = None, qa: str | None = None, *, threads: int | None = None,
                 prefer: str = "auto"):
        if classifier is None and qa is None:
            found = {k: v for k, v in DEFAULT_DIRS.items() if Path(v, "manifest.json").is_file()}
            if not found:
                raise DenkiError("no models given and none found from the quickstart "
                                 f"({DEFAULT_DIRS['classifier']}, {DEFAULT_DIRS['qa']}). Run `denki quickstart "
                                 "--no-demo` first, or pass --classifier DIR / --qa DIR (ONNX bundles from "
                                 "`denki export`)")
            classifier, qa = found.get("classifier"), found.get("qa")
        self.dirs = {"classifier": classifier, "qa": qa}
        self.threads = threads
        self.prefer = prefer
        self.cuda = _cuda_usable()
        self._cache: dict[tuple[str, str], Predictor] = {}
        self._lock = threading.Lock()  # two handlers asking for one new variant at once load it once
        for kind, d in self.dirs.items():
            if d is not None:
                self.predictor(kind, self.backends(kind)[0])  # load now: a broken bundle fails at start-up

    def backends(self, kind: str) -> list[str]:
        d = self.dirs.get(kind)
        if d is None:
            return []
        from denki.serve.runtime import resolve_onnx_bundle

        have = [b for b, f in MODEL_FILES.items() if (resolve_onnx_bundle(d) / f).is_file()]
        out = [BACKEND_LABELS[b] for b in CPU_ORDER if b in have]
        if self.cuda:
            out = [BACKEND_LABELS["fp16"] if "fp16" in have else BACKEND_LABELS["cuda-fp32"]] + out
        preferred = {"int8": "ORT int8", "o2": "ORT O2", "fp32": "ORT fp32", "cuda": "CUDA"}.get(self.prefer)
        if preferred:  # the --backend choice first (it is the one selected at start)
            out.sort(key=lambda label: not label.startswith(preferred))
        return out

    def predictor(self, kind: str, label: str) -> Predictor:
        if self.dirs.get(kind) is None:
            raise DenkiError(f"no {kind} model loaded (start the demo with --{kind} DIR)")
        key = (kind, label)
        with self._lock:
            if key not in self._cache:
                backend = {v: k for k, v in BACKEND_LABELS.items()}.get(label, "auto")
                device = "cuda" if backend in ("fp16", "cuda-fp32") else "cpu"
                backend = "fp32" if backend == "cuda-fp32" else backend
                # warmup: one call at load, so that the first request on this variant pays no cold-start cost
                self._cache[key] = Predictor(self.dirs[kind], backend=backend, device=device, threads=self.threads,
                                             warmup=True)
        return self._cache[key]

    def examples(self, kind: str, n: int = 5) -> list:
        """A few real examples from the bundle's own dev sample (parity_sample.json)."""
        if self.dirs.get(kind) is None:
            return []
        p = self.predictor(kind, self.backends(kind)[0]).dir / "parity_sample.json"
        if not p.is_file():
            return []
        return task_for(kind).examples(json.loads(p.read_text(encoding="utf-8")), n)


# ------------------------------------------------------------------ handlers (plain functions)
def _timing(p: Predictor, wall_ms: float) -> dict:
    t = p.last_timing
    return {"backend": p.backend, "provider": p.provider, "tokenize_ms": round(t.get("tokenize_ms", 0.0), 2),
            "inference_ms": round(t.get("inference_ms", 0.0) + t.get("lexical_ms", 0.0), 2),
            "total_ms": round(wall_ms, 2)}


def route_text(models: DemoModels, text: str, backend: str, top_k: int = 5) -> tuple[str, dict, str, dict]:
    """→ (route markdown, {label: confidence} top-k, why markdown, timing)."""
    text = (text or "").strip()
    if not text:
        return "問い合わせ文を入力してください。", {}, "", {}
    if len(text) > MAX_TEXT_CHARS:
        return (f"入力が長すぎます（{len(text):,} 文字、上限 {MAX_TEXT_CHARS:,} 文字）。", {}, "", {})
    p = models.predictor("classifier", backend)
    t0 = time.perf_counter()
    r = p.classify([text])[0]
    wall = (time.perf_counter() - t0) * 1e3
    scores = dict(sorted(r["scores"].items(), key=lambda kv: -kv[1])[:top_k])
    thr = float(p.task.get("threshold", 0.0) or 0.0)
    out_of_scope = r.get("reason") == "out_of_scope"
    if r["route"] == p.task.get("human_label", "human"):
        head = f"### 振り分け先: **{HUMAN_JA}**（{'どの窓口の内容にも当たらないため' if out_of_scope else '自信度が低いため'}）"
    else:
        head = f"### 振り分け先: **{r['label']}**"
    why = (f"最上位 **{r['label']}** の確信度 {r['score']:.3f} / しきい値 {thr:.3f} → "
           f"{'しきい値未満なので担当者へ回します' if r['score'] < thr else 'しきい値以上です'}"
           f"（温度 T={float(p.task.get('temperature', 1.0)):.2f} で較正済み）")
    sc = p.task.get("scope")
    if sc:  # the out-of-scope check: the TF-IDF model's top probability against its threshold
        why += (f"。対象外チェック: TF-IDF モデルの最上位確率が {float(sc['threshold']):.3f} 未満なら担当者へ → "
                + ("どの窓口の語彙とも合わないため担当者へ回します" if out_of_scope else "対象内です"))
    if r["route"] != p.task.get("human_label", "human"):
        why += "。自動で振り分けます"
    fu = p.task.get("fusion")
    if fu:  # a fused router: say that the probabilities combine the encoder and the TF-IDF model
        why += (f"。確率はエンコーダ（重み {float(fu['weight']):.1f}）と TF-IDF モデル"
                f"（重み {1 - float(fu['weight']):.1f}）の融合です")
    return head, scores, why, _timing(p, wall)


def answer_question(models: DemoModels, question: str, passage: str, backend: str) -> tuple[list, str, dict]:
    """→ (highlighted passage [(text, label|None)], result markdown, timing)."""
    question, passage = (question or "").strip(), passage or ""
    if not question or not passage.strip():
        return [], "質問と本文の両方を入力してください。", {}
    if len(question) > MAX_TEXT_CHARS or len(passage) > MAX_CONTEXT_CHARS:
        return [], (f"入力が長すぎます（質問 {len(question):,} 文字 / 本文 {len(passage):,} 文字、上限 "
                    f"{MAX_TEXT_CHARS:,} / {MAX_CONTEXT_CHARS:,} 文字）。"), {}
    p = models.predictor("qa", backend)
    t0 = time.perf_counter()
    r = p.answer(question, passage)
    wall = (time.perf_counter() - t0) * 1e3
    thr = r["null_threshold"]
    diff = r["null_score_diff"]
    diff_s = "なし（候補スパンなし）" if not np.isfinite(diff) else f"{diff:.3f}"
    conf = r.get("confidence")
    conf_s = "" if conf is None else f"・確信度 {conf:.0%}"
    if r["has_answer"]:
        s, e = r["start"], r["end"]
        spans = highlight_spans(passage, s, e, "回答")
        md = (f"### 回答: **{r['answer']}**\n文字位置 {s}–{e}（{r['windows']} ウィンドウ）・"
              f"無回答スコア差 {diff_s} ≤ しきい値 {thr:.3f}{conf_s}")
    elif r.get("reason") == "unsure":
        cand = r.get("span_answer") or ""
        s, e = r.get("span_start"), r.get("span_end")
        spans = highlight_spans(passage, s if cand else None, e, "候補（確信度不足）")
        md = (f"### {UNSURE_JA}\n確信度 {conf:.0%} < 下限 {float(p.task['min_confidence']):.0%}"
              f"（担当者に確認してください）" + (f"・候補「{cand}」" if cand else ""))
    else:
        cand = r.get("span_answer") or ""
        s, e = r.get("span_start"), r.get("span_end")
        # show what the model considered, clearly marked as rejected
        spans = highlight_spans(passage, s if cand else None, e, "候補（不採用）")
        md = (f"### {NO_ANSWER_JA}\n無回答スコア差 {diff_s} > しきい値 {thr:.3f}（{r['windows']} ウィンドウ）{conf_s}"
              + (f"・最有力候補「{cand}」は不採用" if cand else ""))
    return spans, md, _timing(p, wall)


def score_file(models: DemoModels, path: str | None, backend: str, out_dir: str | None = None) -> tuple:
    """→ (scored file path, errors file path, summary markdown)."""
    from denki.serve.batch import classify_file

    if not path:
        return None, None, "CSV または JSONL ファイルをアップロードしてください。"
    src = Path(path)
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="denki-batch-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    name = src.name.removesuffix(".gz")
    suffix = ".csv" if name.endswith(".csv") else ".jsonl"
    out = out_dir / (Path(name).stem + ".scored" + suffix)
    errs = out_dir / (Path(name).stem + ".errors.jsonl")
    p = models.predictor("classifier", backend)
    try:
        r = classify_file(p.dir, src, out, errors_path=str(errs), backend=p.backend,
                          device="cuda" if p.provider == "CUDAExecutionProvider" else "cpu", progress=False)
    except DenkiError as e:
        return None, None, f"エラー: {e}"
    md = (f"入力 {r['rows_in']} 行 → 採点 {r['rows_out']} 行、エラー {r['rows_err']} 行"
          f"（{r['rows_per_s']:.0f} 行/秒, {p.backend}）")
    return str(out), (str(errs) if r["rows_err"] else None), md


def latency_stats(history: list[dict]) -> tuple[str, object]:
    """Running p50/p95 over the session and a histogram figure."""
    from denki.models.io.plotting import setup_matplotlib

    plt = setup_matplotlib()
    fig, ax = plt.subplots(figsize=(6, 2.8))
    if not history:
        ax.text(0.5, 0.5, "no requests yet", ha="center", va="center")
        ax.set_axis_off()
        return "まだリクエストがありません。", fig
    lines = ["| 種類 | バックエンド | 件数 | p50 ms | p95 ms | 内 推論 p50 ms | 内 トークナイズ p50 ms |", "|---|---|---:|---:|---:|---:|---:|"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for h in history:
        groups.setdefault((h["task"], h["backend"]), []).append(h)
    for (task, backend), hs in groups.items():
        tot = [h["total_ms"] for h in hs]
        lines.append(f"| {task} | {backend} | {len(hs)} | {np.percentile(tot, 50):.2f} | {np.percentile(tot, 95):.2f} | "
                     f"{np.percentile([h['inference_ms'] for h in hs], 50):.2f} | "
                     f"{np.percentile([h['tokenize_ms'] for h in hs], 50):.2f} |")
        ax.hist(tot, bins=20, alpha=0.6, label=f"{task} · {backend}")
    ax.set_xlabel("latency per request (ms)")
    ax.set_ylabel("requests")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return "\n".join(lines), fig


def clamp_requests(n) -> int:
    """The latency tab's N as an int in ``[1, MEASURE_MAX_N]`` (the default when empty or not a number)."""
    try:
        n = int(n)
    except (TypeError, ValueError):
        n = MEASURE_DEFAULT_N
    return max(1, min(MEASURE_MAX_N, n))


def machine_info(threads: int | None) -> dict:
    """What the figures depend on: the CPU model and its speed flags (avx512*/amx*/…, as ``denki bench pick``
    keys its records), onnxruntime's intra-op threads and the cores this process may use."""
    from denki.serve.fastpath import cpu_fingerprint

    fp = cpu_fingerprint()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": fp["model"], "flags": fp["flags"], "threads": threads, "cores": cores}


def measure_latency(models: DemoModels, n: int = MEASURE_DEFAULT_N, *, warmup: int = MEASURE_WARMUP,
                    progress: Callable[[float, str], None] | None = None) -> dict:
    """Time ``n`` single requests per loaded model and per variant this machine offers (``models.backends``),
    after ``warmup`` untimed ones, on the bundles' own examples (the demo's, :meth:`DemoModels.examples`).

    A request is what the demo's handlers call: ``Predictor.classify([text])`` or ``Predictor.answer(q, passage)``
    (tokenisation, the model, the decision rule), timed by wall clock. The variants are interleaved request by
    request, so that each sees the same moments of machine noise. Loading a variant not used yet (its session and
    warm-up) is not timed. ``progress(fraction, text)`` is called as it goes.
    → ``{"rows": [{"kind", "task", "backend", "n", "mean_ms", "p50_ms", "p95_ms", "ratio"}], "n", "warmup",
    "machine"}``; ``ratio`` is the row's p50 over the fastest p50 of the same model."""
    from denki.serve.bench_latency import _pct

    n, warmup = clamp_requests(n), max(0, int(warmup))
    runs = []  # (kind, label, predictor, request function)
    for kind in ("classifier", "qa"):
        labels = models.backends(kind)
        if not labels:
            continue
        task = task_for(kind)
        inputs = models.examples(kind) or [task.warmup_example()]
        for label in labels:
            if progress:
                progress(0.0, f"{TASK_JA[kind]} · {label} を読み込み中")
            p = models.predictor(kind, label)
            # one request = the head's predict on one input (the router's classify, the reader's answer)
            fn = (lambda p, xs, t: lambda i: p.predict([t.request(xs[i % len(xs)])]))(p, inputs, task)
            runs.append((kind, label, p, fn))
    if not runs:
        raise DenkiError("no model loaded: nothing to measure")
    times: list[list[float]] = [[] for _ in runs]
    total = warmup + n
    for i in range(total):
        for j, (*_, fn) in enumerate(runs):
            t0 = time.perf_counter()
            fn(i)
            if i >= warmup:
                times[j].append(time.perf_counter() - t0)
        if progress and (i % 5 == 4 or i == total - 1):
            progress((i + 1) / total, f"{'ウォームアップ' if i < warmup else '計測'} {i + 1}/{total} 回目")
    rows = []
    for (kind, label, p, _), ts in zip(runs, times):
        rows.append({"kind": kind, "task": TASK_JA[kind], "backend": label, "n": len(ts),
                     "mean_ms": float(np.mean(ts)) * 1e3, "p50_ms": _pct(ts, 50), "p95_ms": _pct(ts, 95)})
    for kind in {r["kind"] for r in rows}:
        best = min(r["p50_ms"] for r in rows if r["kind"] == kind)
        for r in rows:
            if r["kind"] == kind:
                r["ratio"] = r["p50_ms"] / best if best > 0 else 1.0
    return {"rows": rows, "n": n, "warmup": warmup, "machine": machine_info(models.threads)}


def measure_markdown(result: dict) -> str:
    """The latency tab's table (Japanese labels) and, under it, the machine the figures were taken on."""
    lines = ["| モデル | 方式 | 件数 | 平均 (ms) | 中央値 p50 (ms) | p95 (ms) | 最速との比 (p50) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        ratio = "**最速**" if r["ratio"] == 1.0 else f"{r['ratio']:.2f}×"
        lines.append(f"| {r['task']} | {r['backend']} | {r['n']} | {r['mean_ms']:.2f} | {r['p50_ms']:.2f} | "
                     f"{r['p95_ms']:.2f} | {ratio} |")
    m = result["machine"]
    threads = f"{m['threads']}" if m["threads"] else "onnxruntime の既定（--threads 未指定）"
    lines += ["", f"1 件ずつのリクエスト（トークナイズ・推論・判定規則を含む実時間）を方式ごとに {result['n']} 回、"
                  f"事前に {result['warmup']} 回のウォームアップ（計測外）。方式は 1 回ずつ交互に実行。",
              "", f"CPU: {m['cpu']} · フラグ: {' '.join(m['flags']) or 'なし'} · スレッド数: {threads} · "
                  f"使えるコア数: {m['cores']}"]
    return "\n".join(lines)


# ------------------------------------------------------------------ Gradio wiring
def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def example_label(example: list[str]) -> str:
    """What an example's button shows: the inquiry, or the question and the start of its passage.

    The examples are given as labels because Gradio 6.17 leaves the cells of an examples *table* (the layout of a
    two-input gr.Examples) empty when it sits in a tab not shown first (its frontend fails reading the cells'
    component props); labelled examples are plain text buttons that show on every tab. Clicking one still fills
    the inputs with the full example."""
    if len(example) == 1:
        return _shorten(example[0], 80)
    return f"{_shorten(example[0], 60)} ／ 本文: {_shorten(example[1], 40)}"


def build_app(models: DemoModels, index: str | None = None):
    """The Gradio app; ``index``: the prebuilt passage index the 「マニュアルに質問」 tab asks (None: the sample
    manual, indexed at start)."""
    import gradio as gr

    if index is not None and models.dirs["qa"] is None:
        raise DenkiError("--index needs a QA model to read its passages: give one with --qa DIR")
    ask = ManualAsk(models, index) if models.dirs["qa"] is not None else None
    with gr.Blocks(title="denki デモ") as app:
        history = gr.State([])
        gr.Markdown("# denki (電気) デモ\n自社の日本語テキストで学習した小さな ELECTRA モデル（ONNX, torch 不要）。"
                    f" 入力上限: 問い合わせ {MAX_TEXT_CHARS:,} 文字 / 本文 {MAX_CONTEXT_CHARS:,} 文字。")
        with gr.Tab("問い合わせ振り分け", visible=models.dirs["classifier"] is not None):
            cls_backend = gr.Radio(models.backends("classifier"), value=(models.backends("classifier") or [None])[0],
                                   label="バックエンド", elem_id="cls-backend")
            inquiry = gr.Textbox(label="問い合わせ文", lines=3, elem_id="route-input",
                                 max_length=MAX_TEXT_CHARS)
            route_btn = gr.Button("振り分ける", variant="primary", elem_id="route-button")
            route_md = gr.Markdown(elem_id="route-output")
            scores = gr.Label(label="上位の確信度", num_top_classes=5, elem_id="route-scores")
            why_md = gr.Markdown(elem_id="route-why")
            cls_timing = gr.JSON(label="レイテンシ (ms)", elem_id="route-timing")
            cls_examples = models.examples("classifier")
            if cls_examples:
                gr.Examples(cls_examples, inputs=[inquiry], label="例", elem_id="route-examples",
                            example_labels=[example_label(e) for e in cls_examples])
        with gr.Tab("回答抽出", visible=models.dirs["qa"] is not None):
            qa_backend = gr.Radio(models.backends("qa"), value=(models.backends("qa") or [None])[0],
                                  label="バックエンド", elem_id="qa-backend")
            question = gr.Textbox(label="質問", lines=1, elem_id="qa-question", max_length=MAX_TEXT_CHARS)
            passage = gr.Textbox(label="本文", lines=8, elem_id="qa-passage", max_length=MAX_CONTEXT_CHARS)
            qa_btn = gr.Button("回答を探す", variant="primary", elem_id="qa-button")
            qa_md = gr.Markdown(elem_id="qa-output")
            highlighted = gr.HighlightedText(label="本文中の回答", color_map={"回答": "orange", "候補（不採用）": "lightgray"},
                                             elem_id="qa-highlight", combine_adjacent=True)
            qa_timing = gr.JSON(label="レイテンシ (ms)", elem_id="qa-timing")
            qa_examples = models.examples("qa", 3)
            if qa_examples:
                gr.Examples(qa_examples, inputs=[question, passage], label="例", elem_id="qa-examples",
                            example_labels=[example_label(e) for e in qa_examples])
        with gr.Tab("マニュアルに質問", visible=ask is not None):
            if ask is not None:
                ask_tab(ask, models.backends("qa"), history)
        with gr.Tab("バッチ", visible=models.dirs["classifier"] is not None):
            gr.Markdown("CSV（ヘッダー行あり）または JSONL をアップロードすると、各行に label / score / route を"
                        "付けたファイルを返します。処理できない行はエラーファイルに行番号と理由付きで出力されます。")
            upload = gr.File(label="入力ファイル (.csv / .jsonl / .gz)", file_types=[".csv", ".jsonl", ".gz"],
                             type="filepath", elem_id="batch-input")
            batch_btn = gr.Button("採点する", elem_id="batch-button")
            batch_md = gr.Markdown(elem_id="batch-output")
            scored = gr.File(label="採点結果", elem_id="batch-scored")
            errors = gr.File(label="エラー行", elem_id="batch-errors")
        with gr.Tab("レイテンシ"):
            gr.Markdown("### 方式ごとの計測\n読み込んだモデルごとに、この環境で使える方式（int8 / O2 / fp32、GPU が"
                        "あれば CUDA）で例文を 1 件ずつ N 回リクエストし、中央値と p95 を並べます（ウォームアップ "
                        f"{MEASURE_WARMUP} 回は計測外）。")
            with gr.Row():
                lat_n = gr.Number(value=MEASURE_DEFAULT_N, minimum=1, maximum=MEASURE_MAX_N, precision=0,
                                  label=f"方式ごとのリクエスト数 N（上限 {MEASURE_MAX_N}）", elem_id="latency-n")
                measure_btn = gr.Button("計測する", variant="primary", elem_id="latency-measure")
            measure_status = gr.Markdown(elem_id="latency-measure-status")
            measure_md = gr.Markdown(elem_id="latency-measure-table")
            gr.Markdown("### このセッションのリクエスト履歴\n上のタブであなたが送ったリクエストの実測値です"
                        "（計測ボタンのリクエストは含みません）。")
            lat_md = gr.Markdown("まだリクエストがありません。", elem_id="latency-table")
            lat_plot = gr.Plot(label="リクエストごとのレイテンシ")
            refresh = gr.Button("更新", elem_id="latency-refresh")

        def do_route(text, backend, hist):
            head, sc, why, timing = route_text(models, text, backend)
            if timing:
                hist = hist + [{"task": "振り分け", **timing}]
            return head, sc, why, timing, hist

        def do_answer(q, ctx, backend, hist):
            spans, md, timing = answer_question(models, q, ctx, backend)
            if timing:
                hist = hist + [{"task": "回答抽出", **timing}]
            return spans, md, timing, hist

        route_btn.click(do_route, [inquiry, cls_backend, history], [route_md, scores, why_md, cls_timing, history],
                        concurrency_id="predict")
        inquiry.submit(do_route, [inquiry, cls_backend, history], [route_md, scores, why_md, cls_timing, history],
                       concurrency_id="predict")
        qa_btn.click(do_answer, [question, passage, qa_backend, history], [highlighted, qa_md, qa_timing, history],
                     concurrency_id="predict")
        batch_btn.click(lambda f, b: score_file(models, f, b), [upload, cls_backend], [scored, errors, batch_md],
                        concurrency_limit=1, concurrency_id="batch")
        def start_measure(n):
            n = clamp_requests(n)
            return gr.update(interactive=False), n, f"計測中…（方式ごとに {n} 件）"

        def do_measure(n, progress=gr.Progress()):
            t0 = time.perf_counter()
            try:
                r = measure_latency(models, n, progress=lambda f, text: progress(f, desc=text))
            except DenkiError as e:
                return f"エラー: {e}", ""
            return f"計測完了（{time.perf_counter() - t0:.1f} 秒）", measure_markdown(r)

        # the button is disabled while a measurement runs (and one runs at a time, across sessions)
        measure_btn.click(start_measure, [lat_n], [measure_btn, lat_n, measure_status], queue=False).then(
            do_measure, [lat_n], [measure_status, measure_md], concurrency_limit=1, concurrency_id="measure").then(
            lambda: gr.update(interactive=True), None, [measure_btn], queue=False)
        refresh.click(latency_stats, [history], [lat_md, lat_plot])
        history.change(latency_stats, [history], [lat_md, lat_plot])
    # At most two predictions at once; batch jobs one at a time; a bounded queue (excess requests are refused).
    app.queue(max_size=64, default_concurrency_limit=2)
    return app


def launch(classifier: str | None, qa: str | None, *, host: str = "127.0.0.1", port: int = 7860,
           threads: int | None = None, prefer: str = "auto", block: bool = True, index: str | None = None):
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    models = DemoModels(classifier, qa, threads=threads, prefer=prefer)
    app = build_app(models, index)
    print(f"denki demo: http://{host}:{port}  (classifier: {models.dirs['classifier']}, qa: {models.dirs['qa']})")
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"denki demo: WARNING: listening on {host}: reachable from other machines; there is no login")
    app.launch(server_name=host, server_port=port, share=False, prevent_thread_lock=not block,
               max_file_size="50mb", quiet=True, footer_links=["settings"])
    return app
