"""Tokenizer: transformers parity, original-string offsets, edge cases, file errors, CLI."""
from __future__ import annotations

import gzip
import json
import random
import time
import unicodedata

import pytest

from models.io.errors import InputError
from models.text.normalize import nfkc_with_alignment
from models.io.textio import iter_lines
from models.text.tokenizer import JapaneseTokenizer

from .conftest import (SAMPLE_CORPUS, SAMPLE_QA_DEV, SAMPLE_QA_TRAIN, SAMPLE_ROUTING_DEV, read_jsonl,
                       shared)

EDGE_CASES = [
    "",
    " ",
    "\u3000\u3000",
    "\t\n ",
    "東京都に住んでいます。",
    "ＡＢＣ　ｄｅｆ　１２３",          # full-width letters, digits and an ideographic space
    "ｶﾞｯｺｳﾆ ｲｷﾏｽ",                  # half-width kana with voiced marks (compose under NFKC)
    "①②③と㍿と㌔と㍻",              # NFKC expands these
    "か\u3099き\u3099",               # combining dakuten → が ぎ
    "e\u0301te\u0301",               # combining acute
    "絵文字😀と👨‍👩‍👧‍👦家族🇯🇵旗",      # emoji, ZWJ sequences, flags
    "タブ\tと改行\nと\r\nCRLF",
    "a[CLS]b [SEP] c[MASK]d",        # literal special tokens (split out, as transformers does)
    "［ＣＬＳ］は全角",                 # full-width brackets: NOT a special token (split happens before NFKC)
    "x" * 150 + " 長い単語",           # a word over 100 characters → one [UNK]
    "ﾃﾞｰﾀﾍﾞｰｽ\u200bゼロ幅\ufeffBOM",
    "Ω≒≠√∞㎏㎡℃¼½",
]


def _hf(tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    assert type(tok).__name__ == "BertJapaneseTokenizer"
    return tok


def _check_offsets(tok: JapaneseTokenizer, text: str):
    """Every token's offsets index the original text and normalise back to the token text (minus whitespace).

    Tokens that come from one original character that NFKC expanded (㍿ → 株式 ##会社) share that character's
    span; their concatenated texts must equal the normalised span.
    """
    enc = tok.encode(text, truncation=False)
    groups: dict[tuple[int, int], list[str | None]] = {}
    prev_end = 0
    for t, tid, (a, b), seq in zip(enc.tokens, enc.ids, enc.offsets, enc.sequence_ids):
        if seq is None:
            assert (a, b) == (0, 0)
            continue
        assert 0 <= a < b <= len(text), (t, a, b)
        assert a >= prev_end or (a, b) in groups, "offsets must not go backwards"
        prev_end = max(prev_end, b)
        groups.setdefault((a, b), []).append(None if tid == tok.unk_id else (t[2:] if t.startswith("##") else t))
    for (a, b), pieces in groups.items():
        if None in pieces:  # an [UNK] inside: nothing to compare
            continue
        piece = "".join(pieces)
        orig = text[a:b]
        if orig in ("[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"):
            continue
        # whitespace never becomes a token (´ → " ́": the space is dropped, the accent kept)
        assert "".join(unicodedata.normalize("NFKC", orig).split()) == piece, (orig, pieces)
    return enc


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_offsets_and_parity(tiny_tokenizer, tiny_tokenizer_dir, text):
    enc = _check_offsets(tiny_tokenizer, text)
    assert enc.ids == _hf(tiny_tokenizer_dir)(text)["input_ids"]


def test_specific_offsets(tiny_tokenizer):
    text = "ＡＢ①㍿が"
    enc = tiny_tokenizer.encode(text)
    spans = {text[a:b] for (a, b), s in zip(enc.offsets, enc.sequence_ids) if s is not None}
    assert spans <= {"ＡＢ", "Ａ", "Ｂ", "①", "㍿", "が"}
    assert "㍿" in spans and "①" in spans
    # dakuten survive: が and か are different tokens
    assert tiny_tokenizer.token_ids("が") != tiny_tokenizer.token_ids("か")
    # empty text → [CLS] [SEP]
    empty = tiny_tokenizer.encode("")
    assert empty.tokens == ["[CLS]", "[SEP]"] and empty.offsets == [(0, 0), (0, 0)]


def test_nfkc_alignment_maps_back():
    for text in EDGE_CASES + ["ｶﾞｷﾞＡＢＣ①㍿か\u3099", "\u1100\u1161\u11a8"]:
        norm, starts, ends = nfkc_with_alignment(text)
        assert norm == unicodedata.normalize("NFKC", text)
        if starts is None:
            assert norm == text
            continue
        assert len(starts) == len(ends) == len(norm)
        # each original cluster normalises to exactly the normalised characters mapped to it
        clusters: dict[tuple[int, int], str] = {}
        for i, ch in enumerate(norm):
            clusters[(starts[i], ends[i])] = clusters.get((starts[i], ends[i]), "") + ch
        for (a, b), s in clusters.items():
            assert unicodedata.normalize("NFKC", text[a:b]) == s


def _samples_texts(n_corpus: int = 1000) -> list[str]:
    """Texts shipped in samples/: corpus paragraphs (man pages + Wikipedia), routing questions, QA questions and
    contexts (real text with odd characters; no ../shared needed)."""
    rng = random.Random(0)
    lines = SAMPLE_CORPUS.read_text(encoding="utf-8").splitlines()
    texts = rng.sample(lines, min(n_corpus, len(lines)))
    texts += [r["text"] for r in read_jsonl(SAMPLE_ROUTING_DEV)][:400]
    for path in (SAMPLE_QA_TRAIN, SAMPLE_QA_DEV):
        for r in read_jsonl(path)[:150]:
            texts += [r["question"], r["context"][:3000]]
    return texts


def _assert_same_ids(tok, hf, texts: list[str]) -> None:
    """denki's ids equal BertJapaneseTokenizer's on every text (> 1,500 of them)."""
    mismatches = []
    for t in texts:
        ours = tok.encode(t, truncation=False).ids
        theirs = hf(t, truncation=False)["input_ids"]
        if ours != theirs:
            mismatches.append(t[:80])
    assert not mismatches, f"{len(mismatches)}/{len(texts)} texts differ, e.g. {mismatches[:3]}"
    assert len(texts) > 1500


def test_parity_with_transformers_on_samples(tiny_tokenizer, tiny_tokenizer_dir):
    _assert_same_ids(tiny_tokenizer, _hf(tiny_tokenizer_dir), _samples_texts())


def test_offsets_on_samples(tiny_tokenizer):
    for t in _samples_texts(300):
        _check_offsets(tiny_tokenizer, t)


def _corpus_sample(n_per_file: int = 400) -> list[str]:
    """Extended (needs ../shared): lines from the shared corpora (also the large docs corpus, whose text the
    tokenizer never saw) and labelled sets (real text with odd characters)."""
    rng = random.Random(0)
    texts: list[str] = []
    for name in ("corpus_manpages_ja.txt.gz", "corpus_wiki_ja.txt.gz", "corpus_docs_ja.txt.gz"):
        lines = []
        with gzip.open(shared(name), "rt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i >= 20000:
                    break
                lines.append(line.rstrip("\n"))
        texts += rng.sample(lines, n_per_file)
    for name in ("livedoor_mini.jsonl", "qa_mini_dev.jsonl", "manpages_section_mini.jsonl"):
        with open(shared(name), encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        for r in rows[:150]:
            texts.append(r.get("title") or r.get("question") or "")
            texts.append((r.get("text") or r.get("context") or "")[:3000])
    return texts


@pytest.mark.extended
def test_parity_with_transformers_on_shared_corpora(tiny_tokenizer, tiny_tokenizer_dir):
    _assert_same_ids(tiny_tokenizer, _hf(tiny_tokenizer_dir), _corpus_sample())


@pytest.mark.extended
def test_offsets_on_shared_corpora(tiny_tokenizer):
    for t in _corpus_sample(150):
        _check_offsets(tiny_tokenizer, t)


def test_pair_encoding_and_windows(tiny_tokenizer):
    q = "東京の人口は?"
    ctx = "東京都の人口は約1400万人である。" * 30
    enc = tiny_tokenizer.encode(q, ctx, max_length=64)
    assert len(enc) == 64 and enc.overflow
    assert enc.ids[0] == tiny_tokenizer.cls_id and enc.ids.count(tiny_tokenizer.sep_id) == 2
    assert enc.sequence_ids[0] is None and set(s for s in enc.sequence_ids if s is not None) == {0, 1}
    assert enc.type_ids == [0 if s in (0, None) and i <= enc.ids.index(tiny_tokenizer.sep_id) else 1
                            for i, s in enumerate(enc.sequence_ids)]
    wins = tiny_tokenizer.encode_windows(q, ctx, max_length=64, stride=16)
    assert len(wins) > 1
    full = tiny_tokenizer.encode(ctx, truncation=False)
    ctx_ids = full.ids[1:-1]
    covered = []
    for w in wins:
        assert len(w) <= 64
        part = [i for i, s in zip(w.ids, w.sequence_ids) if s == 1]
        start = w.extra["window_start"]
        assert part == ctx_ids[start:start + len(part)]
        # context offsets index the original context
        for (a, b), s, tid in zip(w.offsets, w.sequence_ids, w.ids):
            if s == 1 and tid != tiny_tokenizer.unk_id:
                assert unicodedata.normalize("NFKC", ctx[a:b]) in tiny_tokenizer.id_to_token[tid].replace("##", "") \
                    or tiny_tokenizer.id_to_token[tid].replace("##", "") in unicodedata.normalize("NFKC", ctx[a:b])
        covered.append((start, start + len(part)))
    # consecutive windows overlap by exactly `stride` tokens and the last one reaches the end
    for (a0, b0), (a1, b1) in zip(covered, covered[1:]):
        assert b0 - a1 == 16
    assert covered[-1][1] == len(ctx_ids)
    with pytest.raises(Exception, match="no room"):
        tiny_tokenizer.encode_windows("長い質問" * 100, ctx, max_length=64, stride=16)


def test_batch_padding(tiny_tokenizer):
    encs = tiny_tokenizer.encode_batch(["短い", "これは少し長い文です。東京に行きます。"])
    batch = tiny_tokenizer.pad(encs)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (2, len(encs[1]))
    assert batch["attention_mask"][0].sum() == len(encs[0])
    assert (batch["input_ids"][0, len(encs[0]):] == tiny_tokenizer.pad_id).all()
    assert [e.sample_index for e in encs] == [0, 1]


def test_very_long_input_is_linear(tiny_tokenizer):
    unit = "東京都の人口は約1400万人である。ＡＢＣ①"  # not NFKC-stable: exercises the alignment path
    small = unit * (250_000 // len(unit))
    big = unit * (1_000_000 // len(unit))
    t0 = time.perf_counter()
    e_small = tiny_tokenizer.encode(small, truncation=False)
    t1 = time.perf_counter()
    e_big = tiny_tokenizer.encode(big, truncation=False)
    t2 = time.perf_counter()
    assert len(big) >= 990_000
    assert abs(len(e_big) / len(e_small) - len(big) / len(small)) < 0.05
    assert e_big.offsets[-2][1] == len(big)
    # 4× the input must not cost anywhere near 16× (quadratic); generous bound for noisy machines
    assert (t2 - t1) < 10 * max(t1 - t0, 0.05)


def test_invalid_utf8_names_file_and_line(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_bytes("一行目\n二行目\n".encode() + b"\xff\xfe bad\n")
    with pytest.raises(InputError, match=r"bad\.txt:3"):
        list(iter_lines(p))
    gz = tmp_path / "bad.txt.gz"
    with gzip.open(gz, "wb") as f:
        f.write(b"ok\n\x82\xa0sjis\n")
    with pytest.raises(InputError, match=r"bad\.txt\.gz:2"):
        list(iter_lines(gz))


def test_save_load_roundtrip(tiny_tokenizer, tmp_path):
    tiny_tokenizer.save(tmp_path / "t")
    again = JapaneseTokenizer.load(tmp_path / "t")
    assert again.id_to_token == tiny_tokenizer.id_to_token
    assert again.fingerprint() == tiny_tokenizer.fingerprint()
    assert again.token_ids("東京都") == tiny_tokenizer.token_ids("東京都")


def test_cli_train_and_tokenize(tmp_path):
    from app.cli import main

    out = tmp_path / "tok"
    assert main(["tokenizer", "train", "--corpus", str(SAMPLE_CORPUS), "--vocab-size", "3000",
                 "--limit-alphabet", "1200", "--out", str(out)]) == 0
    inp = tmp_path / "in.txt"
    inp.write_text("東京都に住む。\n\nＡＢＣ①㍿\n", encoding="utf-8")
    res = tmp_path / "out.jsonl"
    assert main(["tokenize", "--tokenizer", str(out), "--input", str(inp), "--output", str(res)]) == 0
    rows = [json.loads(line) for line in res.read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3]
    assert rows[1]["tokens"] == ["[CLS]", "[SEP]"]
    tok = JapaneseTokenizer.load(out)
    for r in rows:
        assert r["ids"] == tok.encode(r["text"], truncation=False).ids
        assert r["offsets"][0] == [0, 0] and r["offsets"][-1] == [0, 0]
        assert r["tokens"] == tok.convert_ids_to_tokens(r["ids"])
    # a bad file: error names file and line, exit code 2, no output file left behind
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\n")
    assert main(["tokenize", "--tokenizer", str(out), "--input", str(bad), "--output",
                 str(tmp_path / "bad.jsonl")]) == 2
    assert not (tmp_path / "bad.jsonl").exists()
    # empty corpus → clear error
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    assert main(["tokenizer", "train", "--corpus", str(empty), "--out", str(tmp_path / "t2")]) == 2


def test_help_lists_subcommands(capsys):
    from app.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("tokenizer", "tokenize"):
        assert cmd in out
