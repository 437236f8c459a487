"""Demo handlers (no browser): routing, QA highlighting, batch upload, latency stats and measurement, input
caps."""
from __future__ import annotations

import json

import pytest

from denki.models.io.errors import DenkiError


@pytest.fixture(scope="module")
def models(onnx_classifier, onnx_qa):
    from denki.app.demo import DemoModels

    return DemoModels(str(onnx_classifier), str(onnx_qa))


def test_backends_and_examples(models):
    assert models.backends("classifier")[0] == "ORT int8 (CPU)"
    assert "ORT fp32 (CPU)" in models.backends("classifier")
    ex = models.examples("classifier")
    assert ex and all(isinstance(e[0], str) and e[0] for e in ex)
    qa_ex = models.examples("qa")
    assert qa_ex and len(qa_ex[0]) == 2


def test_every_cpu_variant_has_a_demo_label():
    from denki.app.demo import BACKEND_LABELS, CPU_ORDER
    from denki.models.bundle.onnx import CPU_VARIANTS

    # a variant `denki export` can write but the demo does not list would be unselectable there
    assert sorted(CPU_ORDER) == sorted(CPU_VARIANTS) and all(b in BACKEND_LABELS for b in CPU_ORDER)


def test_route_handler(models):
    from denki.app.demo import HUMAN_JA, route_text

    head, scores, why, timing = route_text(models, "新しいスマートフォンが発売されました", "ORT fp32 (CPU)")
    assert head.startswith("### 振り分け先")
    assert len(scores) == 5 and abs(sum(scores.values()) - 1) < 1 or sum(scores.values()) <= 1.0000001
    assert "しきい値" in why and timing["backend"] == "fp32" and timing["total_ms"] > 0
    # the bundle's threshold decides "human"
    models.predictor("classifier", "ORT fp32 (CPU)").task["threshold"] = 1.01
    head, *_ = route_text(models, "新しいスマートフォンが発売されました", "ORT fp32 (CPU)")
    assert HUMAN_JA in head
    models.predictor("classifier", "ORT fp32 (CPU)").task["threshold"] = 0.3
    msg, scores, _, timing = route_text(models, "あ" * 20_001, "ORT fp32 (CPU)")
    assert "長すぎ" in msg and not scores and not timing
    assert "入力" in route_text(models, "   ", "ORT fp32 (CPU)")[0]


def test_qa_handler_highlights_exact_span(models):
    from denki.app.demo import NO_ANSWER_JA, answer_question

    p = models.predictor("qa", "ORT int8 (CPU)")
    passage = "富士山は静岡県と山梨県にまたがる活火山である。標高は3776メートル。"
    p.task["null_threshold"] = 1e9
    spans, md, timing = answer_question(models, "富士山の標高は?", passage, "ORT int8 (CPU)")
    assert "".join(s for s, _ in spans) == passage
    hl = [s for s, lab in spans if lab == "回答"]
    assert len(hl) == 1 and hl[0] in passage and "回答" in md
    p.task["null_threshold"] = -1e9
    spans, md, _ = answer_question(models, "富士山の標高は?", passage, "ORT int8 (CPU)")
    assert NO_ANSWER_JA in md and "".join(t for t, _ in spans) == passage
    assert "回答" not in [lab for _, lab in spans]  # a rejected candidate is never labelled as the answer
    assert [t for t, lab in spans if lab == "候補（不採用）"] == [hl[0]]
    p.task["null_threshold"] = 0.0
    assert "長すぎ" in answer_question(models, "q", "あ" * 100_001, "ORT int8 (CPU)")[1]


def test_batch_handler_reports_errors(models, tmp_path):
    from denki.app.demo import score_file

    src = tmp_path / "upload.jsonl"
    src.write_text(json.dumps({"title": "テスト記事"}, ensure_ascii=False) + "\n{bad json\n" +
                   json.dumps({"title": "スマホ"}, ensure_ascii=False) + "\n", encoding="utf-8")
    out, errs, md = score_file(models, str(src), "ORT fp32 (CPU)", out_dir=str(tmp_path / "o"))
    assert "採点 2 行" in md and "エラー 1 行" in md
    assert len(open(out, encoding="utf-8").read().splitlines()) == 2
    assert json.loads(open(errs, encoding="utf-8").read().splitlines()[0])["line"] == 2
    assert score_file(models, None, "ORT fp32 (CPU)")[0] is None


def test_latency_stats(models):
    from denki.app.demo import latency_stats, route_text

    md, fig = latency_stats([])
    assert "まだ" in md
    hist = []
    for t in ("一つ目", "二つ目", "三つ目"):
        timing = route_text(models, t, "ORT int8 (CPU)")[3]
        hist.append({"task": "振り分け", **timing})
    md, fig = latency_stats(hist)
    assert "| 振り分け | int8 | 3 |" in md and fig is not None


def test_predictors_are_warmed_up_at_load(models):
    # the first real request on a variant must not pay MeCab's first lookups or onnxruntime's first-run allocations
    for kind in ("classifier", "qa"):
        for label in models.backends(kind):
            assert models.predictor(kind, label).warmup_ms is not None


def test_measure_latency(models):
    from denki.app.demo import MEASURE_MAX_N, clamp_requests, measure_latency, measure_markdown

    seen = []
    r = measure_latency(models, 4, warmup=1, progress=lambda f, text: seen.append(f))
    rows = r["rows"]
    # one row per loaded model and per variant this machine offers, in the demo's own order
    for kind in ("classifier", "qa"):
        assert [x["backend"] for x in rows if x["kind"] == kind] == models.backends(kind)
        assert min(x["ratio"] for x in rows if x["kind"] == kind) == 1.0
    assert len(rows) == len(models.backends("classifier")) + len(models.backends("qa"))
    for x in rows:
        assert x["n"] == 4 and 0 < x["p50_ms"] <= x["p95_ms"] and x["mean_ms"] > 0 and x["ratio"] >= 1.0
    assert seen and seen[-1] == 1.0
    assert r["machine"]["cores"] >= 1 and isinstance(r["machine"]["flags"], list)
    md = measure_markdown(r)
    assert "| モデル | 方式 | 件数 |" in md and "中央値 p50 (ms)" in md and "p95 (ms)" in md
    assert "| 振り分け | ORT int8 (CPU) | 4 |" in md and "| 回答抽出 | ORT fp32 (CPU) | 4 |" in md
    assert "**最速**" in md and "CPU:" in md and "スレッド数" in md
    assert clamp_requests(10**6) == MEASURE_MAX_N and clamp_requests(0) == 1 and clamp_requests(None) == 50


def test_measure_latency_one_model(onnx_classifier):
    from denki.app.demo import DemoModels, measure_latency

    m = DemoModels(str(onnx_classifier), None, threads=1)
    r = measure_latency(m, 2, warmup=0)
    assert {x["kind"] for x in r["rows"]} == {"classifier"} and r["machine"]["threads"] == 1


def test_missing_models_message(tmp_path, monkeypatch):
    from denki.app.demo import DemoModels

    monkeypatch.chdir(tmp_path)
    with pytest.raises(DenkiError, match="denki quickstart"):
        DemoModels()


def test_build_app(models):
    from denki.app.demo import build_app

    app = build_app(models)
    assert app is not None
