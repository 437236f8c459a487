"""Deterministic WordPiece trainer (models/text/wordpiece_trainer.py): rules, determinism, and quality vs HF."""
from __future__ import annotations

import random
import unicodedata
from collections import Counter

import pytest

from denki.models.io.errors import DenkiError
from denki.models.text.tokenizer import SPECIAL_TOKENS, JapaneseTokenizer, mecab_words
from denki.models.text.wordpiece_trainer import train_wordpiece

from .conftest import SAMPLE_CORPUS

SPECIALS = ["[PAD]", "[UNK]"]


@pytest.fixture(scope="module")
def sample_lines() -> list[str]:
    from denki.models.io.corpus import iter_corpus

    return list(iter_corpus([SAMPLE_CORPUS]))


@pytest.fixture(scope="module")
def sample_counts(sample_lines) -> Counter:
    wc: Counter = Counter()
    for line in sample_lines:
        wc.update(mecab_words(unicodedata.normalize("NFKC", line)))
    return wc


def _score(vocab: list[str], lines: list[str]) -> tuple[float, float]:
    """(characters per token, [UNK] rate) of the denki encoder with ``vocab`` over ``lines``."""
    tok = JapaneseTokenizer(vocab)
    n_tok = n_chr = n_unk = 0
    for line in lines:
        ids = tok.token_ids(line)
        n_tok += len(ids)
        n_chr += len(line)
        n_unk += sum(i == tok.unk_id for i in ids)
    return n_chr / n_tok, n_unk / n_tok


def _reference(word_counts: dict[str, int], vocab_size: int, min_frequency: int) -> list[str]:
    """Naive trainer (full recount per merge, no alphabet limit) with the same rules, to check the incremental
    bookkeeping of the real one."""
    chars = sorted({ch for w in word_counts for ch in w})
    cont = sorted({ch for w in word_counts for ch in w[1:]})
    vocab = list(SPECIALS) + chars + ["##" + c for c in cont]
    ids = {t: i for i, t in enumerate(vocab)}
    words = [([ids[c if i == 0 else "##" + c] for i, c in enumerate(w)], n) for w, n in sorted(word_counts.items())]
    while len(vocab) < vocab_size:
        counts: Counter = Counter()
        for syms, n in words:
            for p in zip(syms, syms[1:]):
                counts[p] += n
        if not counts:
            break
        (a, b), best = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if best < min_frequency:
            break
        tok = vocab[a] + vocab[b].removeprefix("##")
        if tok not in ids:
            ids[tok] = len(vocab)
            vocab.append(tok)
        new = ids[tok]
        for k, (syms, n) in enumerate(words):
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[k] = (out, n)
    return vocab


def test_hand_example_merges_in_count_order():
    # pairs: a+##b 8, ##b+##c 5, ##b+##d 3, b+##c 2  →  ab (8), then ab+##c 5, ab+##d 3, b+##c 2
    vocab = train_wordpiece({"abc": 5, "abd": 3, "bc": 2, "x": 1}, 100, special_tokens=SPECIALS)
    assert vocab == ["[PAD]", "[UNK]", "a", "b", "c", "d", "x", "##b", "##c", "##d", "ab", "abc", "abd", "bc"]


def test_continuing_merges_and_ties_by_id():
    # [a ##a ##a ##a] ×3: ##a+##a (6) first → [a, ##aa, ##a]; then a+##aa and ##aa+##a tie at 3: lower ids win
    vocab = train_wordpiece({"aaaa": 3}, 100, special_tokens=["[UNK]"])
    assert vocab == ["[UNK]", "a", "##a", "##aa", "aaa", "aaaa"]


def test_min_frequency_stops_merging():
    counts = {"ab": 1, "cd": 3}
    base = ["[PAD]", "[UNK]", "a", "b", "c", "d", "##b", "##d"]
    assert train_wordpiece(counts, 100, special_tokens=SPECIALS, min_frequency=4) == base
    assert train_wordpiece(counts, 100, special_tokens=SPECIALS, min_frequency=2) == base + ["cd"]
    assert train_wordpiece(counts, 100, special_tokens=SPECIALS, min_frequency=1) == base + ["cd", "ab"]


def test_vocab_size_respected_and_no_duplicates(sample_counts):
    for size in (3200, 3500, 5000):
        vocab = train_wordpiece(sample_counts, size, special_tokens=SPECIAL_TOKENS, limit_alphabet=1500)
        assert len(vocab) == size
        assert len(set(vocab)) == len(vocab)
        assert vocab[:len(SPECIAL_TOKENS)] == SPECIAL_TOKENS
        assert all(t not in vocab[len(SPECIAL_TOKENS):] for t in SPECIAL_TOKENS)
    small = train_wordpiece({"abc": 5}, 100, special_tokens=SPECIALS)
    assert len(small) < 100  # ran out of pairs before the size


def test_alphabet_larger_than_vocab_size_is_refused():
    with pytest.raises(DenkiError, match="limit_alphabet"):
        train_wordpiece({"abcdef": 3}, 8, special_tokens=SPECIALS)


def test_deterministic_and_independent_of_input_order(sample_counts):
    kw = dict(special_tokens=SPECIAL_TOKENS, limit_alphabet=1500)
    first = train_wordpiece(sample_counts, 4000, **kw)
    assert train_wordpiece(sample_counts, 4000, **kw) == first
    items = list(sample_counts.items())
    for seed in (1, 2):
        random.Random(seed).shuffle(items)
        assert train_wordpiece(dict(items), 4000, **kw) == first


def test_limit_alphabet_keeps_most_frequent_characters_and_drops_others():
    # character frequencies: a 10, b 6, c 6, d 1  (b and c tie: the lower code point, b, is kept)
    counts = {"ab": 6, "ac": 4, "c": 2, "acd": 0, "ad": 1}
    vocab = train_wordpiece(counts, 100, special_tokens=SPECIALS, limit_alphabet=2, min_frequency=1)
    singles = [t for t in vocab[2:] if len(t.removeprefix("##")) == 1]
    assert set(singles) == {"a", "b", "##b"}
    assert "c" not in vocab and "##c" not in vocab and "d" not in vocab
    # as HF: characters outside the alphabet are dropped from training words, positions keep the "##" form
    vocab = train_wordpiece({"xab": 5, "ab": 5, "yy": 1}, 100, special_tokens=SPECIALS, limit_alphabet=2)
    assert vocab == ["[PAD]", "[UNK]", "a", "b", "##a", "##b", "ab", "##ab"]


def test_long_words_are_not_trained_on():
    long_word = "ab" * 60  # 120 characters: the encoder makes it [UNK] anyway
    vocab = train_wordpiece({long_word: 50, "cd": 2}, 100, special_tokens=SPECIALS)
    assert vocab == ["[PAD]", "[UNK]", "c", "d", "##d", "cd"]


def test_whitespace_in_keys_is_split():
    assert train_wordpiece({"ab ab": 1}, 100, special_tokens=SPECIALS) == train_wordpiece(
        {"ab": 2}, 100, special_tokens=SPECIALS)


@pytest.mark.parametrize("seed", range(6))
def test_incremental_counts_match_naive_recount(seed):
    rng = random.Random(seed)
    counts = {"".join(rng.choice("abcd") for _ in range(rng.randint(1, 9))): rng.randint(1, 20)
              for _ in range(60)}
    for min_freq in (1, 3):
        expected = _reference(counts, 80, min_freq)
        assert train_wordpiece(counts, 80, special_tokens=SPECIALS, min_frequency=min_freq) == expected


def test_trained_vocab_encodes_sample_corpus(sample_counts, sample_lines):
    vocab = train_wordpiece(sample_counts, 4000, special_tokens=SPECIAL_TOKENS, limit_alphabet=1500)
    chars_per_token, unk_rate = _score(vocab, sample_lines)
    assert unk_rate < 0.01
    assert chars_per_token >= 1.3


def test_quality_close_to_hf_trainer(sample_counts, sample_lines):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    hf = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordPieceTrainer(vocab_size=4000, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                        limit_alphabet=1500, continuing_subword_prefix="##", show_progress=False)
    hf.train_from_iterator((" ".join([w] * n) for w, n in sample_counts.items()), trainer=trainer)
    hf_vocab = [t for t, _ in sorted(hf.get_vocab().items(), key=lambda kv: kv[1])]
    ours = train_wordpiece(sample_counts, 4000, special_tokens=SPECIAL_TOKENS, limit_alphabet=1500)
    ours_cpt, ours_unk = _score(ours, sample_lines)
    hf_cpt, hf_unk = _score(hf_vocab, sample_lines)
    assert abs(ours_cpt - hf_cpt) / hf_cpt < 0.10, (ours_cpt, hf_cpt)
    assert ours_unk <= hf_unk * 1.5 + 1e-3, (ours_unk, hf_unk)
