"""The plain baseline a user would try first: TF-IDF over character 1–3-grams + logistic regression
(scikit-learn), trained on the same train split and scored on the same dev split as the fine-tuned model. The
fitted model is also the lexical half of the fused router (:mod:`models.classify.lexical`, :mod:`.fusion`)."""
from __future__ import annotations

import time
import unicodedata

import numpy as np


def _nfkc(text: str) -> str:
    # Same normalisation as denki's tokenizer, so full-width/half-width variants count as one n-gram.
    return unicodedata.normalize("NFKC", text)


def fit_tfidf(texts: list[str], gold, *, C: float = 10.0, max_features: int = 300_000, seed: int = 0):
    """``(vectorizer, classifier, x)``: the TF-IDF (char 1–3-grams, sublinear tf, NFKC) + logistic regression of
    :func:`tfidf_baseline` fitted on ``texts``; also the model that self-training refits (:mod:`.selftrain`)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True, min_df=1,
                          max_features=max_features, preprocessor=_nfkc, dtype=np.float32)
    x = vec.fit_transform(texts)
    clf = LogisticRegression(C=C, max_iter=2000, random_state=seed)
    clf.fit(x, gold)
    return vec, clf, x


def tfidf_baseline(train_texts: list[str], train_gold: np.ndarray, dev_texts: list[str], dev_gold: np.ndarray,
                   labels: list[str], *, C: float = 10.0, max_features: int = 300_000, seed: int = 0,
                   keep_model: bool = False) -> dict:
    """Fit TF-IDF (char 1–3-grams, sublinear tf) + multinomial logistic regression; return dev metrics
    (``classification_metrics`` plus ``ece``, ``coverage_curve``) and ``train_seconds``. With ``keep_model``
    also ``"model"``: the fit as a :class:`models.classify.lexical.LexicalModel` (numpy), and ``"dev_probs"``
    ``(n_dev, K)`` (scikit-learn's, for the parity check of the numpy copy); the caller pops both before JSON.

    ``C=10``: character n-gram features are many and sparse; light regularisation is the usual first choice."""
    from denki.models.classify.metrics import classification_metrics, coverage_curve, ece

    t0 = time.perf_counter()
    vec, clf, x_train = fit_tfidf(train_texts, train_gold, C=C, max_features=max_features, seed=seed)
    train_seconds = time.perf_counter() - t0
    probs = np.zeros((len(dev_texts), len(labels)))
    probs[:, clf.classes_] = clf.predict_proba(vec.transform(dev_texts))  # a class absent from train stays 0
    pred = probs.argmax(axis=1)
    out = classification_metrics(dev_gold, pred, labels)
    correct = pred == dev_gold
    out["ece"] = ece(probs.max(axis=1), correct)
    out["coverage_curve"] = coverage_curve(probs.max(axis=1), correct)
    out["train_seconds"] = train_seconds
    out["settings"] = {"analyzer": "char", "ngram_range": [1, 3], "sublinear_tf": True, "C": C,
                       "max_features": max_features, "features": int(x_train.shape[1])}
    if keep_model:
        from denki.models.classify.lexical import LexicalModel

        out["model"] = LexicalModel.from_sklearn(vec, clf, len(labels))
        out["dev_probs"] = probs
    return out
