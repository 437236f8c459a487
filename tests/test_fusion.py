"""The fused router's numpy pieces: the lexical (TF-IDF + logistic regression) model against scikit-learn, the
fusion rules, and the cross-fitted choice of the fusion on dev."""
from __future__ import annotations

import numpy as np
import pytest

from denki.models.classify.baseline import tfidf_baseline
from denki.models.classify.decision import softmax
from denki.models.classify.fusion import choose_fusion, fuse, fused_logits, stratified_folds
from denki.models.classify.lexical import LexicalModel, char_ngrams

from .conftest import routing_rows


def _split():
    rows = routing_rows(per_label=30)
    labels = sorted({r["label"] for r in rows})
    texts = [r["text"] for r in rows]
    gold = np.array([labels.index(r["label"]) for r in rows])
    return texts, gold, labels


def test_char_ngrams_match_scikit_learn_analyzer():
    from sklearn.feature_extraction.text import TfidfVectorizer

    from denki.models.classify.baseline import _nfkc

    vec = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), preprocessor=_nfkc)
    analyse = vec.build_analyzer()
    for text in ["ログインできません", "ＡＢＣ　ｱｲｳ  \n\t 全角と半角", "a", "", "  ", "改行\nひとつ"]:
        assert char_ngrams(text) == analyse(text)


def test_lexical_model_reproduces_predict_proba_and_round_trips(tmp_path):
    texts, gold, labels = _split()
    train, dev = list(range(0, len(texts), 2)), list(range(1, len(texts), 2))
    noisy = [texts[i] + "  ＡＢＣ\u3000" for i in dev] + ["", "未知の語だけ"]
    base = tfidf_baseline([texts[i] for i in train], gold[train], noisy, np.r_[gold[dev], 0, 0], labels,
                          keep_model=True)
    model = base["model"]
    np.testing.assert_allclose(softmax(model.logits(noisy), axis=1), base["dev_probs"], atol=1e-5)
    files = model.save(tmp_path)
    assert sorted(files) == sorted(p.name for p in tmp_path.iterdir())
    again = LexicalModel.load(tmp_path)
    np.testing.assert_array_equal(again.logits(noisy), model.logits(noisy))


def test_binary_and_a_label_absent_from_training():
    texts, gold, labels = _split()
    two = np.where(gold == 0, 0, 1)
    base = tfidf_baseline(texts, two, texts[:20], two[:20], labels[:2], keep_model=True)
    np.testing.assert_allclose(softmax(base["model"].logits(texts[:20]), axis=1), base["dev_probs"], atol=1e-5)
    keep = gold != 2  # label 2 never seen in training: probability ~0, as in the baseline
    base = tfidf_baseline([t for t, k in zip(texts, keep) if k], gold[keep], texts[:10], gold[:10], labels,
                          keep_model=True)
    p = softmax(base["model"].logits(texts[:10]), axis=1)
    assert p[:, 2].max() < 1e-6
    np.testing.assert_allclose(p, base["dev_probs"], atol=1e-5)


def test_fuse_end_points_and_modes():
    rng = np.random.default_rng(0)
    enc, lex = rng.normal(size=(50, 4)), rng.normal(size=(50, 4))
    for mode in ("prob", "loglinear"):
        np.testing.assert_array_equal(fuse(enc, lex, mode, 1.0).argmax(1), enc.argmax(1))
        np.testing.assert_array_equal(fuse(enc, lex, mode, 0.0).argmax(1), lex.argmax(1))
    p = np.exp(fuse(enc, lex, "prob", 0.3))
    np.testing.assert_allclose(p, 0.3 * softmax(enc, axis=1) + 0.7 * softmax(lex, axis=1))
    assert fused_logits({}, enc, None) is enc
    with pytest.raises(ValueError):
        fused_logits({"fusion": {"mode": "prob", "weight": 0.5}}, enc, None)
    with pytest.raises(ValueError):
        fuse(enc, lex, "max", 0.5)


def test_folds_are_stratified_and_cover_every_row():
    gold = np.array([0] * 23 + [1] * 7 + [2] * 2)
    fold = stratified_folds(gold, 5)
    assert sorted(set(fold)) == [0, 1, 2, 3, 4]
    for c in range(3):
        counts = np.bincount(fold[gold == c], minlength=5)
        assert counts.max() - counts.min() <= 1


def test_fusion_beats_both_when_they_know_different_classes():
    """Encoder right on classes 0–1, lexical right on 2–3 (each guessing elsewhere): the cross-fitted fused router
    beats either alone, and a useless lexical model leaves the encoder's weight at 1."""
    rng = np.random.default_rng(1)
    n, k = 400, 4
    gold = rng.integers(0, k, n)
    enc = rng.normal(size=(n, k))
    lex = rng.normal(size=(n, k))
    enc[np.arange(n), gold] += np.where(gold < 2, 4.0, 0.3)
    lex[np.arange(n), gold] += np.where(gold >= 2, 4.0, 0.3)
    labels = list("abcd")
    c = choose_fusion(enc, lex, gold, labels)
    assert 0 < c["weight"] < 1
    assert c["crossfit"]["macro_f1"] > max(c["encoder_macro_f1"], c["lexical_macro_f1"]) + 0.1
    assert len(c["crossfit"]["per_fold"]) == 5 and sum(f["n"] for f in c["crossfit"]["per_fold"]) == n
    same = choose_fusion(enc, np.zeros((n, k)), gold, labels)  # flat lexical: nothing to add
    assert same["crossfit"]["macro_f1"] == pytest.approx(same["encoder_macro_f1"])


def test_packed_lookup_equals_the_plain_dictionary_one():
    """The n-grams are looked up as packed integers (models/classify/lexical.py); every n-gram of a text with
    astral characters, half-width kana and whitespace runs is found exactly as a dict lookup finds it."""
    texts = ["𠮷野家の😀ｶﾀｶﾅ  と\n\n改行", "abcabc", "ＡＢＣ　漢字", "x", ""]
    grams = sorted({g for t in texts[:3] for g in char_ngrams(t)})
    model = LexicalModel(grams, np.ones(len(grams)), np.zeros((len(grams), 2)), np.zeros(2))
    vocab = model.vocab
    assert model.ngrams == grams  # the strings come back from the packed codes
    for t in texts + ["未知の文字列だけ", "𠮷"]:
        want = sorted(vocab[g] for g in char_ngrams(t) if g in vocab)
        assert sorted(model._feature_hits(t).tolist()) == want, t
