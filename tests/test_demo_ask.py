"""The demo's 「マニュアルに質問」 tab without a browser (app/demo_ask.py): the sample manual asked with the shipped
reader (the answer highlighted in the right section), 回答なし and why, uploads (checked, indexed per session, a
clear Japanese message for a bad file), a prebuilt index (`denki demo --index`), input caps."""
from __future__ import annotations

import json

import pytest

from denki.models.io.errors import DenkiError

from .conftest import REPO

BAKERY = "ベーカリー・こむぎ堂のご案内"


@pytest.fixture(scope="module")
def shipped_ask(shipped_qa_onnx):
    from denki.app.demo import DemoModels
    from denki.app.demo_ask import ManualAsk

    models = DemoModels(qa=str(shipped_qa_onnx), threads=1)
    return ManualAsk(models), models.backends("qa")[0]


@pytest.fixture(scope="module")
def tiny_ask(onnx_qa):
    """The tab on the random-init test reader (it always answers something: null_threshold 1e6)."""
    from denki.app.demo import DemoModels
    from denki.app.demo_ask import ManualAsk

    models = DemoModels(qa=str(onnx_qa), threads=1)
    return ManualAsk(models), models.backends("qa")[0]


def test_sample_manual_answer_is_highlighted_in_its_section(shipped_ask):
    from denki.app.demo_ask import PASSAGE_HEADERS

    ask, backend = shipped_ask
    assert "サンプルマニュアル manual.md" in ask.source_markdown(None) and "7 段落" in ask.source_markdown(None)
    spans, md, rows, timing = ask.ask("イートインスペースは何席ありますか?", backend)
    passage = "".join(t for t, _ in spans)
    assert [t for t, lab in spans if lab == "回答"] == ["10席"]
    assert "店内には10席のイートインスペース" in passage  # the bakery's paragraph, whole
    assert "### 回答: **10席**" in md and f"見出し「{BAKERY}」" in md and "manual.md" in md
    # the passages read, in BM25 order: the bakery's first, marked as the one answered from
    assert rows and all(len(r) == len(PASSAGE_HEADERS) for r in rows)
    assert rows[0][:3] == [1, "◎", BAKERY] and rows[0][5] == "10席"
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1)) and rows[0][4] >= rows[-1][4]
    assert timing["retrieval_ms"] >= 0 and timing["reader_ms"] > 0 and timing["total_ms"] > 0
    assert {"backend", "tokenize_ms", "inference_ms"} <= set(timing)  # what the latency history groups by
    spans, md, rows, _ = ask.ask("保証期間はどのくらいですか?", backend)
    assert [t for t, lab in spans if lab == "回答"] == ["1年間"] and "電気ケトル KT-200 取扱説明書" in md


def test_unrelated_question_gets_no_answer_and_why(shipped_ask):
    from denki.app.demo_ask import NO_ANSWER_JA

    ask, backend = shipped_ask
    spans, md, rows, timing = ask.ask("量子コンピュータの原理は?", backend)
    assert md.startswith(f"### {NO_ANSWER_JA}") and "回答:" not in md
    assert "同じ語を含む段落が見つかりませんでした" in md  # no passage shares a word with it
    assert spans == [] and rows == [] and timing["reader_ms"] == 0
    # a question that finds passages none of which holds its answer: the reader's no, with the margin
    spans, md, rows, _ = ask.ask("ゴジラの第1作が公開されたのはいつですか?", backend)
    assert md.startswith(f"### {NO_ANSWER_JA}") and "どれにも回答が見つかりませんでした" in md and "しきい値" in md
    assert rows and "回答" not in [lab for _, lab in spans]


def test_result_markdown_says_why_there_is_no_answer():
    from denki.app.demo_ask import NO_ANSWER_JA, _spans, result_markdown

    base = {"answer": "", "has_answer": False, "document": "m.md", "title": "見出し", "passage": "朝は9時に開く。",
            "passage_id": "m.md#0", "start": None, "end": None, "confidence": 0.4, "null_score_diff": -1.0,
            "span_answer": "9時", "passages": [{"id": "m.md#0"}]}
    md = result_markdown({**base, "reason": "unsure"}, 0.0)
    assert md.startswith(f"### {NO_ANSWER_JA}") and "確信度が低い" in md and "「9時」" in md
    assert ("9時", "候補（確信度不足）") in _spans({**base, "reason": "unsure"})
    md = result_markdown({**base, "reason": "no_answer", "null_score_diff": 2.5}, 0.5)
    assert "無回答スコア差 2.500 > しきい値 0.500" in md and "見出し「見出し」" in md
    assert ("9時", "候補（不採用）") in _spans({**base, "reason": "no_answer"})


def test_question_caps(tiny_ask):
    from denki.models.task.batching import MAX_TEXT_CHARS

    ask, backend = tiny_ask
    assert ask.ask("   ", backend)[1] == "質問を入力してください。"
    spans, md, rows, timing = ask.ask("あ" * (MAX_TEXT_CHARS + 1), backend)
    assert "長すぎ" in md and f"{MAX_TEXT_CHARS:,}" in md and not spans and not rows and not timing


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_bad_uploads_get_a_clear_message(tiny_ask, tmp_path):
    from denki.app.demo_ask import MAX_UPLOAD_BYTES, MAX_UPLOAD_FILES

    ask, _ = tiny_ask
    good = _write(tmp_path / "good.md", "# 見出し\n\n本文です。")
    (tmp_path / "sjis.txt").write_bytes("シフトJISの本文".encode("shift_jis"))
    (tmp_path / "big.txt").write_text("あ" * (MAX_UPLOAD_BYTES // 3 + 10), encoding="utf-8")
    (tmp_path / "d").mkdir()
    cases = {
        "ファイルを選んでください": [],
        "この形式は読めません": [good, _write(tmp_path / "manual.pdf", "%PDF-1.4")],
        "ファイルが多すぎます": [_write(tmp_path / f"f{i}.md", "本文") for i in range(MAX_UPLOAD_FILES + 1)],
        "ファイルが大きすぎます": [str(tmp_path / "big.txt")],
        "UTF-8 のテキストではありません": [str(tmp_path / "sjis.txt")],
        "空のファイルです": [_write(tmp_path / "empty.md", "\n\n")],
        "同じ名前のファイル": [good, _write(tmp_path / "d" / "good.md", "本文")],
        # a CSV without a text column: the index builder's reason, with the file's name (not the server's path)
        "文書を読み込めませんでした": [_write(tmp_path / "faq.csv", "subject,body\n保証,1年間です\n")],
    }
    previous = {"dir": ask.default["dir"], "label": "前の文書"}  # a bad upload keeps what was there
    for expected, paths in cases.items():
        source, md = ask.upload(paths, previous)
        assert source is previous and md.startswith("**エラー**") and expected in md, (expected, md)
        assert str(tmp_path) not in md and "前の文書" in md
    assert "faq.csv" in ask.upload(cases["文書を読み込めませんでした"])[1]


def test_upload_is_indexed_and_asked_then_reset(tiny_ask, tmp_path):
    from pathlib import Path

    ask, backend = tiny_ask
    a = _write(tmp_path / "shop.md", "# 営業案内\n\n当店の営業時間は午前10時から午後8時までです。\n")
    b = _write(tmp_path / "faq.jsonl", json.dumps({"text": "送料は全国一律500円です。"}, ensure_ascii=False) + "\n")
    source, md = ask.upload([a, b])
    assert source["upload"] and "アップロードした文書" in md and "2 文書・2 段落" in md and "shop.md" in md
    spans, md, rows, _ = ask.ask("営業時間は何時からですか?", backend, source)
    assert rows[0][2:4] == ["営業案内", "shop.md"]
    assert "".join(t for t, _ in spans) == "当店の営業時間は午前10時から午後8時までです。"
    assert ask.ask("送料はいくらですか?", backend, source)[2][0][3] == "faq.jsonl"
    # the default source is still the sample manual for every other session
    assert ask.ask("営業時間は何時からですか?", backend)[2][0][3] == "manual.md"
    # a second upload replaces the first (its index removed); going back to the sample manual removes it too
    source2, _ = ask.upload([a], source)
    assert not Path(source["dir"]).exists() and Path(source2["dir"]).exists()
    none, md = ask.reset(source2)
    assert none is None and "サンプルマニュアル" in md and not Path(source2["dir"]).exists()


def test_prebuilt_index_and_cli_option(onnx_qa, tmp_path):
    from denki.app.cli import build_parser
    from denki.app.demo import DemoModels, build_app
    from denki.app.demo_ask import ManualAsk
    from denki.models.retrieval.index import PassageIndex

    PassageIndex.build([REPO / "samples" / "manual.md", _write(tmp_path / "extra.txt", "追加の段落です。")],
                       tmp_path / "ix")
    models = DemoModels(qa=str(onnx_qa), threads=1)
    ask = ManualAsk(models, str(tmp_path / "ix"))
    assert not ask.is_sample and f"索引 {tmp_path / 'ix'}" in ask.source_markdown(None)
    assert "2 文書・8 段落" in ask.source_markdown(None)
    with pytest.raises(DenkiError):  # a folder that is no index fails at start, not on the first question
        ManualAsk(models, str(tmp_path))
    assert build_parser().parse_args(["demo", "--index", "runs/index"]).index == "runs/index"
    assert build_parser().parse_args(["demo"]).index is None
    with pytest.raises(DenkiError, match="--qa"):
        build_app(_classifier_only(), str(tmp_path / "ix"))


def _classifier_only():
    class M:  # build_app refuses --index before it touches a model
        dirs = {"classifier": "x", "qa": None}

    return M()


def test_no_sample_manual(tiny_ask, onnx_qa):
    from denki.app.demo import DemoModels
    from denki.app.demo_ask import ManualAsk

    ask = ManualAsk(DemoModels(qa=str(onnx_qa), threads=1), sample=None)
    assert ask.default is None and "アップロード" in ask.source_markdown(None)
    assert "アップロード" in ask.ask("保証期間は?", tiny_ask[1])[1]


def test_app_has_the_tab(onnx_qa):
    from denki.app.demo import DemoModels, build_app

    app = build_app(DemoModels(qa=str(onnx_qa), threads=1))
    ids = {getattr(b, "elem_id", None) for b in app.blocks.values()}
    assert {"ask-question", "ask-button", "ask-highlight", "ask-passages", "ask-files", "ask-reset"} <= ids
