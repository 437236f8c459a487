"""Tokenizer: transformers parity (denki's unidic-lite tokenizer and the checkpoint flavours: ipadic,
lower-casing, both; character subwords), original-string offsets, edge cases, settings errors, file errors, CLI."""
from __future__ import annotations

import functools
import gzip
import json
import random
import time
import unicodedata

import pytest

from denki.models.io.errors import DenkiError, InputError
from denki.models.text.normalize import lower_chars, nfkc_with_alignment, normalize_with_alignment
from denki.models.io.textio import iter_lines
from denki.models.text.tokenizer import JapaneseTokenizer

from .conftest import (FLAVOURS, SAMPLE_CORPUS, SAMPLE_QA_DEV, SAMPLE_QA_TRAIN, SAMPLE_ROUTING_DEV, read_jsonl,
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
    "Hello WORLD ＨＥＬＬＯ ｗｏｒｌｄ ＬｉｎｕｘとUNIX",  # case: lower-casing flavours must keep offsets
    "ΑΣ ΣΑΣ ℌ𝐀𝚺 Ⅻ ⅷ",                # Σ lower-cased per character (σ, never the final ς); NFKC makes capitals
]


@functools.lru_cache(maxsize=None)
def _hf(tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    assert type(tok).__name__ == "BertJapaneseTokenizer"
    return tok


@pytest.fixture(params=list(FLAVOURS))
def flavour(request, flavour_tokenizer_dirs):
    """``(name, tokenizer directory, denki tokenizer)`` for each checkpoint flavour."""
    d = flavour_tokenizer_dirs[request.param]
    return request.param, d, JapaneseTokenizer.load(d)


def _expected_text(tok: JapaneseTokenizer, orig: str) -> str:
    """What the tokens spanning ``orig`` spell under the tokenizer's settings (whitespace dropped)."""
    s = tok.settings
    t = lower_chars(orig) if s.do_lower_case else orig
    t = unicodedata.normalize("NFKC", t) if s.normalize_text else t
    return "".join((t.lower() if s.do_lower_case else t).split())


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
        assert _expected_text(tok, orig) == piece, (orig, pieces)
    return enc


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_offsets_and_parity(flavour, text):
    _, d, tok = flavour
    enc = _check_offsets(tok, text)
    assert enc.ids == _hf(d)(text)["input_ids"]


def test_flavours_differ(flavour_tokenizer_dirs):
    """The flavours really tokenise differently (ipadic segments otherwise; lower-casing folds ASCII case), so
    the parity tests above check four different encoders, and the settings survive save/load."""
    toks = {n: JapaneseTokenizer.load(d) for n, d in flavour_tokenizer_dirs.items()}
    assert toks["ipadic"].settings.mecab_dic == "ipadic" and toks["unidic-lite-lower"].settings.do_lower_case
    text = "外国人参政権について話し合った"  # ipadic: について is one word; unidic: に つい て
    from denki.models.text.tokenizer import mecab_words

    assert mecab_words(text, "ipadic") != mecab_words(text, "unidic_lite")
    lower = toks["unidic-lite-lower"]
    assert lower.tokenize("Linux UNIX") == lower.tokenize("linux unix")
    assert toks["unidic-lite"].tokenize("Linux") != toks["unidic-lite"].tokenize("linux")
    # default settings keep the fingerprint they always had (existing token caches stay valid); others change it
    assert len({t.fingerprint() for t in toks.values()}) == len(toks)
    assert json.loads((flavour_tokenizer_dirs["unidic-lite"] / "denki_tokenizer.json").read_text())[
        "normalization"] == "NFKC"
    assert json.loads((flavour_tokenizer_dirs["ipadic-lower"] / "denki_tokenizer.json").read_text())[
        "settings"] == {"mecab_dic": "ipadic", "do_lower_case": True}


def test_lower_case_offsets(flavour_tokenizer_dirs):
    """Lower-casing keeps offsets in the original string, also where a character grows (İ → i + U+0307) and
    where NFKC turns a full-width capital into ASCII first."""
    tok = JapaneseTokenizer.load(flavour_tokenizer_dirs["unidic-lite-lower"])
    text = "ＬＩＮＵＸとİz"
    enc = tok.encode(text)
    spans = [(text[a:b], t) for (a, b), t, s in zip(enc.offsets, enc.tokens, enc.sequence_ids) if s is not None]
    # every token points into the original (full-width capitals), while spelling the lower-cased text
    assert "".join(t.replace("##", "") for _, t in spans if t != "[UNK]").startswith("linuxと")
    assert spans[0][0].startswith("Ｌ") and all(orig for orig, _ in spans)
    norm, starts, ends = normalize_with_alignment("İz", lower=True)
    assert norm == "i\u0307z" and starts == [0, 0, 1] and ends == [1, 1, 2]
    assert enc.ids == _hf(flavour_tokenizer_dirs["unidic-lite-lower"])(text)["input_ids"]


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


def test_parity_with_transformers_on_samples(flavour):
    _, d, tok = flavour
    _assert_same_ids(tok, _hf(d), _samples_texts())


def test_offsets_on_samples(flavour):
    for t in _samples_texts(300):
        _check_offsets(flavour[2], t)


@functools.lru_cache(maxsize=None)
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
def test_parity_with_transformers_on_shared_corpora(flavour):
    _, d, tok = flavour
    _assert_same_ids(tok, _hf(d), list(_corpus_sample()))


@pytest.mark.extended
def test_offsets_on_shared_corpora(flavour):
    for t in _corpus_sample(150):
        _check_offsets(flavour[2], t)


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
    from denki.app.cli import main

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
    # another dictionary and lower-casing from the command line: written where transformers reads them
    assert main(["tokenizer", "train", "--corpus", str(SAMPLE_CORPUS), "--vocab-size", "2000", "--limit-alphabet",
                 "1000", "--mecab-dic", "ipadic", "--lower-case", "--out", str(tmp_path / "ipa")]) == 0
    cfg = json.loads((tmp_path / "ipa" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert cfg["mecab_kwargs"] == {"mecab_dic": "ipadic"} and cfg["do_lower_case"] is True
    assert JapaneseTokenizer.load(tmp_path / "ipa").settings.mecab_dic == "ipadic"
    # empty corpus → clear error
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    assert main(["tokenizer", "train", "--corpus", str(empty), "--out", str(tmp_path / "t2")]) == 2


def test_help_lists_subcommands(capsys):
    from denki.app.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("tokenizer", "tokenize"):
        assert cmd in out


# ---------------------------------------------------------------- checkpoints written by transformers itself


def _hf_dir(tmp_path, vocab_dir, name, extra_vocab=(), **kw):
    """A tokenizer directory written by ``BertJapaneseTokenizer.save_pretrained`` (what a hub checkpoint holds)."""
    from transformers import BertJapaneseTokenizer

    vocab = (vocab_dir / "vocab.txt").read_text(encoding="utf-8").splitlines() + list(extra_vocab)
    (tmp_path / f"{name}.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    out = tmp_path / name
    BertJapaneseTokenizer(vocab_file=str(tmp_path / f"{name}.txt"), word_tokenizer_type="mecab", **kw
                          ).save_pretrained(str(out))
    return out


def test_transformers_written_directory(tmp_path, flavour_tokenizer_dirs):
    """A directory written by transformers (added_tokens_decoder, its own key set) with never_split and an extra
    special token: denki reads the settings and gives the same ids as the tokenizer transformers loads back."""
    d = _hf_dir(tmp_path, flavour_tokenizer_dirs["ipadic-lower"], "hf", extra_vocab=["[URL]", "H"],
                do_lower_case=True, never_split=["H"], mecab_kwargs={"mecab_dic": "ipadic"},
                additional_special_tokens=["[URL]"])
    tok = JapaneseTokenizer.load(d)
    assert tok.settings.never_split == ("H",) and tok.settings.extra_tokens == ("[URL]",)
    texts = ["詳しくは[URL]を参照", "ℌとＨとhとH", "外国人参政権 [SEP] について"] + _samples_texts(200)
    for t in texts:
        assert tok.encode(t, truncation=False).ids == _hf(d)(t, truncation=False)["input_ids"], t
    # never_split: the MeCab surface "H" (NFKC of ℌ, after per-character lower-casing left ℌ alone) stays upper-case
    assert "H" in tok.tokenize("ℌ") and tok.tokenize("[URL]") == ["[URL]"]


def test_character_subwords(tmp_path, tiny_tokenizer_dir):
    """subword_tokenizer_type="character" (e.g. bert-base-japanese-char-v3): one token per character of each
    MeCab surface, including lone whitespace surfaces (\\r → [UNK]), as transformers does."""
    from transformers import BertJapaneseTokenizer

    chars = sorted({c for line in SAMPLE_CORPUS.read_text(encoding="utf-8").splitlines()[:300] for c in line
                    if not c.isspace()})
    (tmp_path / "v.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars) + "\n",
                                    encoding="utf-8")
    BertJapaneseTokenizer(vocab_file=str(tmp_path / "v.txt"), word_tokenizer_type="mecab",
                          subword_tokenizer_type="character").save_pretrained(str(tmp_path / "char"))
    tok = JapaneseTokenizer.load(tmp_path / "char")
    hf = _hf(tmp_path / "char")
    _assert_same_ids(tok, hf, EDGE_CASES + _samples_texts())
    for t in EDGE_CASES[:14]:
        _check_offsets(tok, t)


def _write_config(d, **fields):
    d.mkdir(parents=True, exist_ok=True)
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "東京"]) + "\n",
                                 encoding="utf-8")
    cfg = {"tokenizer_class": "BertJapaneseTokenizer", "word_tokenizer_type": "mecab",
           "subword_tokenizer_type": "wordpiece", "mecab_kwargs": {"mecab_dic": "unidic_lite"}}
    cfg.update(fields)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return d


@pytest.mark.parametrize("fields, message", [
    ({"word_tokenizer_type": None}, r"word_tokenizer_type.*'basic'"),
    ({"word_tokenizer_type": "sudachi"}, r"word_tokenizer_type.*only 'mecab'"),
    ({"subword_tokenizer_type": "sentencepiece"}, r"subword_tokenizer_type.*not supported"),
    ({"tokenizer_class": "BertTokenizer"}, r"tokenizer_class"),
    ({"mecab_kwargs": {"mecab_dic": "jumandic"}}, r"mecab_kwargs\.mecab_dic"),
    ({"mecab_kwargs": {"mecab_dic": None, "mecab_option": "-d /usr/lib/mecab/dic"}}, r"mecab_kwargs\.mecab_dic"),
    ({"mecab_kwargs": {"mecab_dic": "ipadic", "mecab_option": "-u user.dic"}}, r"mecab_option"),
    ({"mecab_kwargs": {"dic": "ipadic"}}, r"unknown keys \['dic'\]"),
    ({"mecab_dic": "ipadic"}, r"top-level mecab_dic"),
    ({"do_lower_case": "yes"}, r"do_lower_case"),
    ({"do_subword_tokenize": False}, r"do_subword_tokenize"),
    ({"mask_token": {"content": "[MASK]", "single_word": True}}, r"single_word"),
    ({"do_lower_case": True, "mask_token": "<mask>"}, r"lower-case letters"),
])
def test_unsupported_settings_name_file_and_field(tmp_path, fields, message):
    d = _write_config(tmp_path / "t", **fields)
    with pytest.raises(InputError, match=message) as e:
        JapaneseTokenizer.load(d)
    assert "tokenizer_config.json" in str(e.value)


def test_special_token_missing_from_vocab(tmp_path):
    d = _write_config(tmp_path / "t", mask_token="[MSK]")
    with pytest.raises(DenkiError, match=r"\[MSK\].*not in the vocabulary"):
        JapaneseTokenizer.load(d)


def test_other_special_token_ids(tmp_path):
    """Special tokens need not sit at ids 0..4 (denki's own layout): ids come from the vocabulary."""
    d = tmp_path / "t"
    d.mkdir()
    (d / "vocab.txt").write_text("\n".join(["東京", "[UNK]", "[SEP]", "都", "[PAD]", "[CLS]", "[MASK]", "##都"]) + "\n",
                                 encoding="utf-8")
    from transformers import BertJapaneseTokenizer

    BertJapaneseTokenizer(vocab_file=str(d / "vocab.txt"), word_tokenizer_type="mecab",
                          mecab_kwargs={"mecab_dic": "ipadic"}).save_pretrained(str(tmp_path / "hf"))
    tok = JapaneseTokenizer.load(tmp_path / "hf")
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (4, 1, 5, 2, 6)
    for t in ["東京都", "東京都に[MASK]", ""]:
        assert tok.encode(t).ids == _hf(tmp_path / "hf")(t)["input_ids"]
    assert (tok.pad([tok.encode("東京"), tok.encode("東京都東京")])["input_ids"][0, -1]) == 4
