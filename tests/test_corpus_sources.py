"""Corpus sources (`--corpus`): text files, and the text fields of JSONL/CSV records (models.io.corpus)."""
from __future__ import annotations

import gzip
import json

import pytest

from .conftest import SAMPLE_CORPUS, SAMPLE_QA_TRAIN, SAMPLE_ROUTING_TRAIN
from denki.models.io.corpus import iter_corpus, iter_source, parse_source, source_sha256
from denki.models.io.errors import InputError
from denki.models.io.textio import iter_lines


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_text_file_is_read_line_by_line_as_before():
    assert list(iter_source(SAMPLE_CORPUS)) == list(iter_lines(SAMPLE_CORPUS))
    assert parse_source(SAMPLE_CORPUS)[1] is None
    from denki.models.io.fileio import sha256_file

    assert source_sha256(SAMPLE_CORPUS) == sha256_file(SAMPLE_CORPUS)  # existing caches and runs keep their key


def test_jsonl_default_field_is_text_and_labels_are_not_read():
    texts = list(iter_corpus([SAMPLE_ROUTING_TRAIN]))
    rows = [json.loads(line) for line in SAMPLE_ROUTING_TRAIN.read_text(encoding="utf-8").splitlines()]
    distinct = list(dict.fromkeys(p.strip() for r in rows for p in r["text"].split("\n") if p.strip()))
    assert texts == distinct
    labels = {r["label"] for r in rows}
    assert not labels & set(texts)


def test_named_fields_split_paragraphs_and_skip_repeats(tmp_path):
    p = _jsonl(tmp_path / "qa.jsonl", [
        {"question": "誰が書いた?", "context": "第一段落。\n\n第二段落。", "label": "x"},
        {"question": "いつ?", "context": "第一段落。\n\n第二段落。"},  # the same context: not repeated
        {"context": "第三段落。"},  # one of the fields is enough
    ])
    got = list(iter_source(f"{p}:question,context"))
    assert got == [(1, "誰が書いた?"), (1, "第一段落。"), (1, "第二段落。"), (2, "いつ?"),
                   (3, "第三段落。")]
    # the same file through other fields is another corpus (cache key, run identity)
    assert source_sha256(f"{p}:question") != source_sha256(f"{p}:question,context")


def test_qa_file_gives_questions_and_each_context_once():
    rows = [json.loads(line) for line in SAMPLE_QA_TRAIN.read_text(encoding="utf-8").splitlines()]
    got = [t for _, t in iter_source(f"{SAMPLE_QA_TRAIN}:question,context")]
    assert len(got) == len(set(got))
    n_ctx = len({r["context"] for r in rows})
    assert n_ctx < len(rows)  # the file repeats contexts
    assert len(got) < sum(1 + r["context"].count("\n") + 1 for r in rows)


def test_csv_and_gz(tmp_path):
    p = tmp_path / "logs.csv.gz"
    with gzip.open(p, "wt", encoding="utf-8", newline="") as f:
        f.write('id,body\n1,"パスワードを忘れました。\n再発行できますか?"\n2,請求書の宛名を変えたい\n')
    want = ["パスワードを忘れました。", "再発行できますか?", "請求書の宛名を変えたい"]
    assert list(iter_corpus([f"{p}:body"])) == want


def test_errors_name_file_line_and_field(tmp_path):
    p = _jsonl(tmp_path / "logs.jsonl", [{"text": "よい行"}, {"body": "text が無い"}])
    with pytest.raises(InputError, match=r"logs\.jsonl:2: none of the corpus fields text \(record has: body\)"):
        list(iter_source(p))
    q = _jsonl(tmp_path / "n.jsonl", [{"text": 3}])
    with pytest.raises(InputError, match=r"n\.jsonl:1 \(field 'text'\): expected a string, got int"):
        list(iter_source(q))
    with pytest.raises(InputError, match="only .jsonl / .csv files have fields"):
        parse_source(f"{SAMPLE_CORPUS}:text")
    with pytest.raises(InputError, match="corpus file not found"):
        parse_source(tmp_path / "missing.jsonl:text")
    with pytest.raises(InputError, match="no field names"):
        parse_source(f"{p}:")
    empty = _jsonl(tmp_path / "e.jsonl", [{"text": "  "}])
    with pytest.raises(InputError, match="corpus file is empty"):
        list(iter_corpus([empty]))


def test_token_cache_and_tokenizer_training_read_records(tmp_path, tiny_tokenizer):
    from denki.models.text.tokenizer import train_tokenizer
    from denki.pretrain.data import build_token_cache

    spec = f"{SAMPLE_QA_TRAIN}:question,context"
    cache = build_token_cache([SAMPLE_ROUTING_TRAIN, spec], tiny_tokenizer, tmp_path / "cache", progress=False)
    paragraphs = list(iter_corpus([SAMPLE_ROUTING_TRAIN, spec]))
    want = sum(len(tiny_tokenizer.token_ids(t)) + 1 for t in paragraphs if tiny_tokenizer.token_ids(t))
    assert cache.n_tokens == want
    tok = train_tokenizer([SAMPLE_ROUTING_TRAIN], vocab_size=1500, limit_alphabet=400, progress=False)
    assert tok.config["train"]["lines"] == len(list(iter_corpus([SAMPLE_ROUTING_TRAIN])))
    assert tok.token_ids("誰が")  # the questions' words made the vocabulary
