"""The passage index (models/retrieval, `denki index`): documents → passages in every format, BM25 search over
MeCab words, add/remove without a rebuild, the manifest that refuses a tampered index or another segmenter, and the
errors a user meets (an empty document, a duplicate, an unknown name)."""
from __future__ import annotations

import gzip
import json

import pytest

from denki.app.cli import main
from denki.models.io.errors import DenkiError, InputError
from denki.models.retrieval.evaluate import passage_recall
from denki.models.retrieval.index import PassageIndex
from denki.models.retrieval.passages import MAX_PASSAGE_CHARS, read_passages
from denki.models.retrieval.words import search_words

from .conftest import REPO, manual_squad_file

MANUAL_QA = REPO / "samples" / "manual_qa.jsonl"

MD = """# 電気ケトル KT-200

本製品の保証期間はお買い上げ日から1年間です。
保証期間内の故障は無料で修理いたします。

## お問い合わせ

サポートセンターの電話番号は 0120-123-456 です。受付時間は平日の午前9時から午後6時までです。
"""


@pytest.fixture()
def docs(tmp_path):
    (tmp_path / "kettle.md").write_text(MD, encoding="utf-8")
    (tmp_path / "bakery.txt").write_text("こむぎ堂の営業時間は午前7時から午後7時までです。\n\n定休日は毎週水曜日です。\n",
                                         encoding="utf-8")
    (tmp_path / "faq.jsonl").write_text(
        json.dumps({"id": 1, "text": "返品は商品到着後8日以内に受け付けます。"}, ensure_ascii=False) + "\n"
        + json.dumps({"id": 2, "text": "パスワードは8文字以上で設定してください。\n確認コードは30分以内に入力します。"},
                     ensure_ascii=False) + "\n", encoding="utf-8")
    return tmp_path


def test_passages_in_every_format_keep_their_original_text_and_titles(docs, tmp_path):
    md = list(read_passages(docs / "kettle.md"))
    assert [p.title for p in md] == ["電気ケトル KT-200", "お問い合わせ"]
    assert md[0].text == "本製品の保証期間はお買い上げ日から1年間です。\n保証期間内の故障は無料で修理いたします。"
    assert md[0].id == "kettle.md#0" and md[0].where.endswith("kettle.md:3")
    txt = list(read_passages(docs / "bakery.txt"))
    assert [p.id for p in txt] == ["bakery.txt:1", "bakery.txt:3"]  # one paragraph per line, blank lines skipped
    recs = list(read_passages(docs / "faq.jsonl"))
    assert [p.id for p in recs] == ["faq.jsonl:1", "faq.jsonl:2", "faq.jsonl:2#1"]  # a field's lines are passages
    sq = {"data": [{"title": "梅雨", "paragraphs": [{"context": "梅雨は雨季の一種である。", "qas": []}]}]}
    with gzip.open(tmp_path / "s.json.gz", "wt", encoding="utf-8") as f:
        json.dump(sq, f, ensure_ascii=False)
    (p,) = list(read_passages(tmp_path / "s.json.gz"))
    assert (p.id, p.doc, p.text) == ("梅雨#0", "梅雨", "梅雨は雨季の一種である。")
    long = tmp_path / "long.md"
    long.write_text("これは長い文です。" * 400, encoding="utf-8")
    parts = list(read_passages(long))
    assert len(parts) > 1 and all(len(x.text) <= MAX_PASSAGE_CHARS for x in parts)
    assert "".join(x.text for x in parts) == "これは長い文です。" * 400


def test_bad_documents_are_named(tmp_path):
    (tmp_path / "empty.md").write_text("\n\n  \n", encoding="utf-8")
    with pytest.raises(InputError, match="empty.md.*no passage"):
        list(read_passages(tmp_path / "empty.md"))
    (tmp_path / "x.json").write_text('{"not": "squad"}', encoding="utf-8")
    with pytest.raises(InputError, match="SQuAD 2.0"):
        list(read_passages(tmp_path / "x.json"))
    with pytest.raises(InputError, match="not found"):
        list(read_passages(tmp_path / "missing.txt"))


def test_search_words_drop_function_words_and_symbols():
    words = search_words("保証期間はどのくらいですか?")
    assert "保証" in words and "は" not in words and "?" not in words and "です" not in words
    assert search_words("ＡＢＣ") == ["abc"]  # NFKC + lower, as the tokenizer


def test_build_search_add_remove_and_the_manifest(docs, tmp_path):
    out = tmp_path / "idx"
    idx = PassageIndex.build([docs / "kettle.md", docs / "bakery.txt"], out)
    assert len(idx) == 4 and idx.documents() == ["bakery.txt", "kettle.md"]
    assert not (tmp_path / "idx.partial").exists()
    hits = idx.search("保証期間はどのくらいですか?", k=3)
    assert hits[0].passage.id == "kettle.md#0" and hits[0].rank == 1 and hits[0].score > 0
    assert idx.search("電話番号を教えて", k=1)[0].passage.title == "お問い合わせ"  # the heading's words count too
    assert idx.search("!?。", k=3) == []  # no word left to search with
    assert idx.search("量子コンピュータ", k=3) == []  # no word in common
    assert idx.add([docs / "faq.jsonl"]) == 3 and len(idx) == 7
    assert idx.search("返品は何日以内?", k=1)[0].passage.doc == "faq.jsonl"
    with pytest.raises(DenkiError, match="already in the index"):
        idx.add([docs / "faq.jsonl"])
    assert idx.remove(["kettle.md"]) == 2 and len(idx) == 5
    assert all(h.passage.doc != "kettle.md" for h in idx.search("保証期間", k=5))
    with pytest.raises(DenkiError, match="not in the index"):
        idx.remove(["nothing.md"])
    idx.close()
    reopened = PassageIndex(out)  # the manifest follows add/remove: it verifies
    assert len(reopened) == 5 and reopened.manifest["passages"] == 5 and reopened.manifest["documents"] == 2
    reopened.close()


def test_a_tampered_index_or_another_segmenter_is_refused(docs, tmp_path):
    out = tmp_path / "idx"
    PassageIndex.build([docs / "bakery.txt"], out).close()
    m = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    m["segmenter"]["version"] = 0
    (out / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    with pytest.raises(DenkiError, match="another word segmenter"):
        PassageIndex(out)
    with open(out / "passages.sqlite", "ab") as f:
        f.write(b"x")
    with pytest.raises(DenkiError, match="does not match its sha256"):
        PassageIndex(out)
    with pytest.raises(DenkiError, match="not a passage index"):
        PassageIndex(tmp_path)


def test_recall_on_the_manual_set_and_the_cli(tmp_path, capsys):
    out = tmp_path / "idx"
    assert main(["index", "build", "--docs", f"{MANUAL_QA}:context", "--out", str(out), "--no-progress"]) == 0
    assert "6 passages from 1 documents" in capsys.readouterr().out  # one paragraph per manual, repeats skipped
    assert main(["index", "search", "--index", str(out), "--query", "大浴場は何時まで?", "-k", "2", "--json"]) == 0
    hit = json.loads(capsys.readouterr().out)["hits"][0]
    assert "大浴場" in hit["text"] and hit["rank"] == 1 and hit["document"] == "manual_qa.jsonl"
    assert main(["index", "list", "--index", str(out)]) == 0
    assert "manual_qa.jsonl" in capsys.readouterr().out
    # recall of the manual questions against their own paragraph (SQuAD layout: one article per manual)
    path = manual_squad_file(tmp_path)
    idx = PassageIndex.build([path], tmp_path / "idx2")
    rec = passage_recall(idx, path)
    assert rec["questions"] == 23 and rec["recall_at"]["5"] == 1.0 and rec["recall_at"]["1"] >= 0.9
