"""The lexical half of a fused router, in numpy: the TF-IDF (character 1–3-grams, sublinear tf, l2) + logistic
regression model that ``denki finetune classify`` fits as its baseline (:mod:`models.classify.baseline`), stored in
the bundle and evaluated without scikit-learn, scipy or torch — the ONNX runtime, the batch CLI, the HTTP server,
Ray and the demo call it through :class:`serve.runtime.Predictor`.

Files in a classifier bundle (hashed in its manifest like every file)::

    lexical.safetensors   idf (F,) float32 · coef (F, K) float32 · intercept (K,) float32   (K = the task's labels)
    lexical_vocab.json    {"ngrams": [the F n-grams in feature order], "ngram_range": [1, 3], ...}

The transform reproduces scikit-learn's ``TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True,
preprocessor=NFKC)`` exactly (same n-grams, same whitespace folding, same idf and l2 norm); ``lexical_logits`` then
gives one logit per label whose softmax is ``LogisticRegression.predict_proba`` (a binary model's single decision
value ``d`` becomes the logits ``[0, d]``, whose softmax is its sigmoid). A test checks both against scikit-learn,
and the bundle's ``parity_sample.json`` carries scikit-learn's probabilities for ``denki export``'s gate.
"""
from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from denki.models.io.errors import DenkiError

LEXICAL_FILE = "lexical.safetensors"
LEXICAL_VOCAB = "lexical_vocab.json"
#: a class the logistic regression never saw in training gets this logit (probability ~0, as in the baseline)
ABSENT_LOGIT = -1e4
_WHITE_SPACES = re.compile(r"\s\s+")  # scikit-learn's char analyzer folds runs of 2+ whitespace into one space
_BITS = 21  # bits per code point (+ 1) when an n-gram is packed into one integer (0x10FFFF + 1 < 2**21)


def char_ngrams(text: str, ngram_range: tuple[int, int] = (1, 3)) -> list[str]:
    """The n-grams scikit-learn's ``analyzer="char"`` yields for ``text`` after NFKC (same order, duplicates kept)."""
    doc = _WHITE_SPACES.sub(" ", unicodedata.normalize("NFKC", text))
    lo, hi = ngram_range
    grams: list[str] = []
    for n in range(lo, min(hi, len(doc)) + 1):
        grams.extend(doc[i:i + n] for i in range(len(doc) - n + 1))
    return grams


class LexicalModel:
    """TF-IDF + multinomial logistic regression as arrays. ``coef`` is stored feature-major ``(F, K)`` so that
    one text's logits are a gather of its n-grams' rows, weighted: ``w @ coef[idx] + intercept``."""

    def __init__(self, ngrams: Sequence[str], idf: np.ndarray, coef: np.ndarray, intercept: np.ndarray, *,
                 ngram_range: tuple[int, int] = (1, 3), sublinear_tf: bool = True):
        idf = np.asarray(idf, dtype=np.float32)
        coef = np.asarray(coef, dtype=np.float32)
        self.intercept = np.asarray(intercept, dtype=np.float32)
        self.ngram_range = (int(ngram_range[0]), int(ngram_range[1]))
        self.sublinear_tf = bool(sublinear_tf)
        f, k = coef.shape
        if idf.shape != (f,) or self.intercept.shape != (k,) or len(ngrams) != f:
            raise DenkiError(f"lexical model: {len(ngrams)} n-grams, idf {idf.shape}, coef {coef.shape}, "
                             f"intercept {self.intercept.shape} do not fit together")
        self._index_codes(ngrams, idf, coef)

    def _index_codes(self, ngrams: Sequence[str], idf: np.ndarray, coef: np.ndarray) -> None:
        """Each n-gram as one integer — its code points + 1 packed 21 bits apiece (Unicode ends below 2**21 − 1, so
        three fit in an int64, and the + 1 keeps n-grams of different lengths apart) — in one sorted table, with the
        ``idf`` and ``coef`` rows in the same order: a text's n-grams are then found with one ``np.searchsorted``
        and their rows read directly (a dict probe per n-gram cost more than the int8 encoder itself on a
        34-character title). Only these arrays are kept: the strings come back from the codes when needed."""
        codes = np.empty(len(ngrams), dtype=np.int64)
        for i, g in enumerate(ngrams):
            code = 0
            for ch in g:
                code = (code << _BITS) | (ord(ch) + 1)
            codes[i] = code
        order = np.argsort(codes, kind="stable")
        self._codes = codes[order]
        self._order = order  # sorted position → feature index
        self._idf_sorted = np.ascontiguousarray(idf[order])
        self._coef_sorted = np.ascontiguousarray(coef[order])

    @staticmethod
    def _decode(code: int) -> str:
        chars = []
        while code:
            chars.append(chr((code & ((1 << _BITS) - 1)) - 1))
            code >>= _BITS
        return "".join(reversed(chars))

    @property
    def ngrams(self) -> list[str]:
        """The n-grams in feature order."""
        out = [""] * len(self._codes)
        for pos, i in enumerate(self._order):
            out[i] = self._decode(int(self._codes[pos]))
        return out

    @property
    def vocab(self) -> dict[str, int]:
        """n-gram → feature index (built on demand; prediction does not use it)."""
        return {g: i for i, g in enumerate(self.ngrams)}

    @property
    def idf(self) -> np.ndarray:
        out = np.empty_like(self._idf_sorted)
        out[self._order] = self._idf_sorted
        return out

    @property
    def coef(self) -> np.ndarray:
        out = np.empty_like(self._coef_sorted)
        out[self._order] = self._coef_sorted
        return out

    @property
    def n_labels(self) -> int:
        return int(self._coef_sorted.shape[1])

    @classmethod
    def from_sklearn(cls, vectorizer, classifier, n_labels: int) -> LexicalModel:
        """From a fitted ``TfidfVectorizer`` and ``LogisticRegression`` whose classes are label indices."""
        ngrams = [None] * len(vectorizer.vocabulary_)
        for g, i in vectorizer.vocabulary_.items():
            ngrams[i] = g
        f = len(ngrams)
        coef = np.zeros((f, n_labels), dtype=np.float64)
        intercept = np.full(n_labels, ABSENT_LOGIT, dtype=np.float64)
        classes = [int(c) for c in classifier.classes_]
        if len(classes) == 2 and classifier.coef_.shape[0] == 1:  # binary: sigmoid(d) = softmax([0, d])[1]
            intercept[classes[0]] = 0.0
            coef[:, classes[1]] = classifier.coef_[0]
            intercept[classes[1]] = classifier.intercept_[0]
        else:
            for row, c in enumerate(classes):
                coef[:, c] = classifier.coef_[row]
                intercept[c] = classifier.intercept_[row]
        return cls(ngrams, vectorizer.idf_, coef, intercept, ngram_range=tuple(vectorizer.ngram_range),
                   sublinear_tf=bool(vectorizer.sublinear_tf))

    # ------------------------------------------------------------------ files
    def save(self, directory: str | os.PathLike) -> list[str]:
        """Write :data:`LEXICAL_FILE` and :data:`LEXICAL_VOCAB` into ``directory``; returns their names."""
        from safetensors.numpy import save_file

        d = Path(directory)
        ngrams = self.ngrams
        save_file({"idf": self.idf, "coef": self.coef, "intercept": self.intercept}, str(d / LEXICAL_FILE))
        (d / LEXICAL_VOCAB).write_text(json.dumps({
            "ngrams": ngrams, "ngram_range": list(self.ngram_range), "sublinear_tf": self.sublinear_tf,
            "analyzer": "char", "preprocessor": "NFKC", "norm": "l2",
            "note": "TF-IDF + logistic regression of denki finetune classify; see models/classify/lexical.py"},
            ensure_ascii=False), encoding="utf-8")
        return [LEXICAL_FILE, LEXICAL_VOCAB]

    @classmethod
    def load(cls, directory: str | os.PathLike) -> LexicalModel:
        """From a bundle directory (safetensors only; the caller verifies the manifest's sha256s)."""
        from safetensors.numpy import load_file

        d = Path(directory)
        if not (d / LEXICAL_FILE).is_file() or not (d / LEXICAL_VOCAB).is_file():
            raise DenkiError(f"{d}: task.json asks for fusion with the lexical model, but {LEXICAL_FILE} / "
                             f"{LEXICAL_VOCAB} are missing (re-export the bundle with this denki)")
        arrays = load_file(str(d / LEXICAL_FILE))
        meta = json.loads((d / LEXICAL_VOCAB).read_text(encoding="utf-8"))
        return cls(meta["ngrams"], arrays["idf"], arrays["coef"], arrays["intercept"],
                   ngram_range=tuple(meta.get("ngram_range", (1, 3))), sublinear_tf=meta.get("sublinear_tf", True))

    # -------------------------------------------------------------- predict
    def _tfidf(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """``(positions in the sorted table (m,), l2-normalised weights (m,) float32)`` of one text."""
        pos = self._hits(text)
        if not len(pos):
            return pos, np.zeros(0, dtype=np.float32)
        pos, tf = np.unique(pos, return_counts=True)
        w = (np.log(tf, dtype=np.float32) + 1.0 if self.sublinear_tf else tf.astype(np.float32)) * self._idf_sorted[pos]
        return pos, w / np.sqrt(np.dot(w, w))

    def features(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """One text's TF-IDF row as ``(feature indices (m,), l2-normalised weights (m,) float32)``."""
        pos, w = self._tfidf(text)
        return self._order[pos], w

    def _hits(self, text: str) -> np.ndarray:
        """Sorted-table position of every n-gram of ``text`` in the vocabulary (repeats kept: they are the counts)."""
        doc = _WHITE_SPACES.sub(" ", unicodedata.normalize("NFKC", text))
        cp = np.frombuffer(doc.encode("utf-32-le"), dtype=np.uint32).astype(np.int64) + 1  # code points + 1 (L,)
        lo, hi = self.ngram_range
        grams, code = [], cp
        for n in range(1, min(hi, len(cp)) + 1):
            if n > 1:  # the n-gram starting at each position, packed as _index_codes packed the vocabulary
                code = (code[:-1] << _BITS) | cp[n - 1:]
            if n >= lo:
                grams.append(code)
        if not grams or not len(self._codes):
            return np.zeros(0, dtype=np.int64)
        allg = np.concatenate(grams) if len(grams) > 1 else grams[0]
        pos = np.minimum(np.searchsorted(self._codes, allg), len(self._codes) - 1)
        return pos[self._codes[pos] == allg]

    def _feature_hits(self, text: str) -> np.ndarray:
        """Feature index of every n-gram of ``text`` in the vocabulary (repeats kept)."""
        return self._order[self._hits(text)]

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        """``(n, K)`` float64 logits; ``softmax`` of a row = the logistic regression's ``predict_proba``."""
        out = np.empty((len(texts), self.n_labels), dtype=np.float64)
        for r, t in enumerate(texts):
            pos, w = self._tfidf(t)
            out[r] = self.intercept + (w @ self._coef_sorted[pos] if len(pos) else 0.0)
        return out
