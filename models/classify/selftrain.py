"""Self-training on unlabelled inquiries (``denki finetune classify --unlabelled FILE …``): for a router with few
labels, the TF-IDF model labels the unlabelled texts it is surest of, is refitted on them, and again; the encoder
then trains on the labelled rows plus a capped share of those pseudo-labelled rows, and the lexical half of the
fused router is the TF-IDF model refitted on the labelled rows plus all of them.

Steps (:func:`self_train_files`):

1. :func:`read_unlabelled` reads only ``--text-field`` of each row: a label field in the file is never read, so a
   file exported with its desks still counts as unlabelled;
2. :func:`drop_duplicates` drops texts that equal a training or dev text (NFKC, outer whitespace stripped) — a dev
   text would otherwise come back to early stopping and calibration with a label guessed by the model — and
   repeats inside the pool;
3. :func:`self_train` — round ``r`` predicts the pool with the current TF-IDF model (:func:`baseline.fit_tfidf`,
   fitted on labelled rows only in round 1), keeps for each predicted class the :data:`ROUND_FRACTIONS`\\ ``[r]``
   most confident of the texts predicted as that class, and refits on labelled + kept;
4. :func:`cap_per_class` picks at most ``cap`` of the last round's pseudo rows per class for the encoder, which also
   sees each labelled row :func:`labelled_repeats` times an epoch (half its rows are labelled ones).

Dev is untouched: it keeps early stopping, the fusion weight, calibration and the threshold, as without
``--unlabelled``. The figures behind the constants: docs/classify.md, "Few labels".
"""
from __future__ import annotations

import math
import os
import random
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from denki.models.io.errors import DenkiError, InputError

#: share of each predicted class kept after rounds 1, 2, 3: a growing share lets the first rounds add only the
#: surest texts, and keeping 90 % at the end leaves out the least sure tenth (chosen in a probe on inquiry routing)
ROUND_FRACTIONS = (0.3, 0.6, 0.9)

#: pseudo-labelled rows per class the encoder trains on (the TF-IDF half takes them all): more made each epoch longer
#: and did not score better (docs/classify.md, "Few labels")
DEFAULT_ENCODER_CAP = 100

#: the labelled rows are repeated until they make at least this share of the encoder's training rows, so that a few
#: clean labels are not drowned by ten times as many guessed ones (without it, many more pseudo rows than labelled
#: ones scored below the labelled rows alone: docs/classify.md, "Few labels")
LABELLED_SHARE = 0.5


def labelled_repeats(n_labelled: int, n_pseudo: int, share: float = LABELLED_SHARE) -> int:
    """How many times the encoder sees each labelled row per epoch: the least ``r ≥ 1`` with
    ``r·n_labelled ≥ share·(r·n_labelled + n_pseudo)``."""
    if n_labelled <= 0 or n_pseudo <= 0 or share <= 0:
        return 1
    return max(1, math.ceil(share / (1.0 - share) * n_pseudo / n_labelled))


def text_key(text: str) -> str:
    """What "the same text" means for the duplicate check: NFKC (as the tokenizer and TF-IDF see it), stripped."""
    return unicodedata.normalize("NFKC", text).strip()


@dataclass
class UnlabelledPool:
    """Texts of the ``--unlabelled`` files after :func:`drop_duplicates`, and what was dropped."""
    texts: list[str] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)  # [{"path", "n"}] rows with a text, per file
    empty: int = 0                  # rows whose text was empty (skipped)
    dropped_train_dev: int = 0      # texts equal to a training or dev text
    dropped_repeats: int = 0        # texts equal to an earlier unlabelled text


def read_unlabelled(paths: str | os.PathLike | Sequence[str | os.PathLike], text_field: str = "text") -> UnlabelledPool:
    """The texts of one or several JSONL/CSV(.gz) files; only ``text_field`` (``a+b`` joins fields as
    :func:`records.read_labelled` does) is read from each row. Empty texts are skipped and counted."""
    from denki.models.io.records import get_text, iter_records

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    fields = [f for f in text_field.split("+") if f]
    pool = UnlabelledPool()
    for p in paths:
        n = 0
        for lineno, rec in iter_records(p):
            parts = [get_text(rec, f, p, lineno, allow_empty=True) for f in fields]
            text = "\n".join(x for x in parts if x.strip())
            if not text.strip():
                pool.empty += 1
                continue
            pool.texts.append(text)
            n += 1
        pool.files.append({"path": str(p), "n": n})
    if not pool.texts:
        raise InputError("no texts in the unlabelled file(s)", path=", ".join(str(p) for p in paths))
    return pool


def drop_duplicates(pool: UnlabelledPool, seen_texts: Sequence[str]) -> UnlabelledPool:
    """Drop from ``pool`` (in place) every text equal (:func:`text_key`) to one of ``seen_texts`` (the training
    and dev texts) or to an earlier pool text."""
    seen, own = {text_key(t) for t in seen_texts}, set()
    kept = []
    for t in pool.texts:
        k = text_key(t)
        if k in seen:
            pool.dropped_train_dev += 1
        elif k in own:
            pool.dropped_repeats += 1
        else:
            own.add(k)
            kept.append(t)
    pool.texts = kept
    return pool


def self_train(labelled_texts: Sequence[str], labelled_gold, pool_texts: Sequence[str], n_labels: int, *,
               fractions: Sequence[float] = ROUND_FRACTIONS, C: float = 10.0, seed: int = 0) -> dict:
    """Self-train the TF-IDF model (:func:`baseline.fit_tfidf`) on ``pool_texts``. Returns ``{"index": pool
    indices kept in the last round (n,), "gold": their pseudo-labels (n,), "confidence": their predicted
    probability (n,), "rounds": [{"round", "fraction", "kept", "kept_per_class": [K], "predicted_per_class": [K],
    "seconds"}]}``; the caller fits the final model on labelled + kept."""
    from denki.models.classify.baseline import fit_tfidf

    gold = np.asarray(labelled_gold, dtype=np.int64)
    texts = list(labelled_texts)
    pool_texts = list(pool_texts)
    keep = np.zeros(0, dtype=np.int64)
    pseudo = np.zeros(0, dtype=np.int64)
    conf_kept = np.zeros(0)
    rounds = []
    for r, frac in enumerate(fractions, start=1):
        t0 = time.perf_counter()
        vec, clf, _ = fit_tfidf(texts + [pool_texts[i] for i in keep], np.concatenate([gold, pseudo]), C=C,
                                seed=seed)
        probs = np.zeros((len(pool_texts), n_labels))
        probs[:, clf.classes_] = clf.predict_proba(vec.transform(pool_texts))
        pred, conf = probs.argmax(axis=1), probs.max(axis=1)
        chosen, per_class, predicted = [], [], []
        for c in range(n_labels):
            idx = np.flatnonzero(pred == c)
            n_keep = int(round(frac * len(idx)))
            order = idx[np.argsort(-conf[idx], kind="stable")]  # most confident first; ties keep pool order
            chosen.append(order[:n_keep])
            per_class.append(n_keep)
            predicted.append(int(len(idx)))
        keep = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
        pseudo, conf_kept = pred[keep], conf[keep]
        rounds.append({"round": r, "fraction": float(frac), "kept": int(len(keep)), "kept_per_class": per_class,
                       "predicted_per_class": predicted, "seconds": time.perf_counter() - t0})
    return {"index": keep, "gold": pseudo, "confidence": conf_kept, "rounds": rounds}


def cap_per_class(gold, cap: int | None, seed: int = 0) -> np.ndarray:
    """Positions (sorted) of at most ``cap`` rows per class of ``gold``, drawn with ``Random(seed)``; all when
    ``cap`` is None."""
    gold = np.asarray(gold)
    if cap is None:
        return np.arange(len(gold))
    rng = random.Random(seed)
    out = []
    for c in sorted(set(gold.tolist())):
        idx = np.flatnonzero(gold == c).tolist()
        out += idx if len(idx) <= cap else rng.sample(idx, cap)
    return np.asarray(sorted(out), dtype=np.int64)


@dataclass
class SelfTraining:
    """What :func:`self_train_files` hands to fine-tuning: the pseudo-labelled rows for the TF-IDF half (all kept)
    and for the encoder (capped), as texts and label indices, how many times the encoder sees each labelled row
    (:func:`labelled_repeats`), and the report section."""
    lexical_texts: list[str]
    lexical_gold: np.ndarray
    encoder_texts: list[str]
    encoder_gold: np.ndarray
    labelled_repeats: int
    report: dict


def self_train_files(paths: Sequence[str], text_field: str, train_texts: Sequence[str], train_gold,
                     dev_texts: Sequence[str], labels: list[str], *, cap: int | None = DEFAULT_ENCODER_CAP,
                     fractions: Sequence[float] = ROUND_FRACTIONS, seed: int = 0) -> SelfTraining:
    """Read, de-duplicate and self-train on the ``--unlabelled`` files (module docstring); prints one line."""
    from denki.models.io.fileio import sha256_file

    if cap is not None and cap < 0:
        raise DenkiError(f"--unlabelled-cap must be ≥ 0, got {cap}")
    if any(not 0 < f <= 1 for f in fractions):
        raise DenkiError(f"self-training fractions must be in (0, 1], got {list(fractions)}")
    t0 = time.perf_counter()
    paths = [str(p) for p in paths]
    pool = read_unlabelled(paths, text_field)
    n_read = len(pool.texts)
    drop_duplicates(pool, list(train_texts) + list(dev_texts))
    K = len(labels)
    if pool.texts:
        st = self_train(train_texts, train_gold, pool.texts, K, fractions=fractions, seed=seed)
    else:
        st = {"index": np.zeros(0, dtype=np.int64), "gold": np.zeros(0, dtype=np.int64),
              "confidence": np.zeros(0), "rounds": []}
    lex_texts = [pool.texts[i] for i in st["index"]]
    lex_gold = np.asarray(st["gold"], dtype=np.int64)
    enc_pos = cap_per_class(lex_gold, cap, seed=seed)
    enc_texts = [lex_texts[i] for i in enc_pos]
    enc_gold = lex_gold[enc_pos]
    repeats = labelled_repeats(len(train_texts), len(enc_texts))
    count = lambda g: {lab: int((g == i).sum()) for i, lab in enumerate(labels)}  # noqa: E731
    report = {
        "files": [{**f, "sha256": sha256_file(f["path"])} for f in pool.files],
        "rows_with_text": n_read, "empty_rows": pool.empty,
        "dropped_equal_to_train_or_dev": pool.dropped_train_dev, "dropped_repeats": pool.dropped_repeats,
        "pool": len(pool.texts), "fractions": [float(f) for f in fractions],
        "rounds": [{**r, "kept_per_class": dict(zip(labels, r["kept_per_class"])),
                    "predicted_per_class": dict(zip(labels, r["predicted_per_class"]))} for r in st["rounds"]],
        "kept": len(lex_texts), "kept_per_class": count(lex_gold),
        "mean_confidence_kept": float(np.mean(st["confidence"])) if len(lex_texts) else None,
        "encoder_cap_per_class": cap, "encoder_rows": len(enc_texts), "encoder_per_class": count(enc_gold),
        "labelled_repeats": repeats, "labelled_share": LABELLED_SHARE,
        "lexical_rows": len(lex_texts), "seconds": time.perf_counter() - t0,
        "rule": "each round: predict the pool with TF-IDF fitted on labelled + kept, keep the given fraction of "
                "each predicted class by confidence (models/classify/selftrain.py)",
    }
    dropped = pool.dropped_train_dev + pool.dropped_repeats
    if not pool.texts:
        print(f"self-training: no unlabelled text left after dropping {dropped:,} duplicates of training/dev "
              "texts and repeats; training on the labelled rows only", flush=True)
    else:
        print(f"self-training: {len(pool.texts):,} unlabelled texts ({dropped:,} duplicates of train/dev or repeats "
              f"dropped, {pool.empty:,} empty); kept per round "
              + " / ".join(f"{r['kept']:,}" for r in st["rounds"])
              + f"; encoder +{len(enc_texts):,} rows (≤ {cap if cap is not None else 'all'} per class; labelled rows "
              f"×{repeats}), TF-IDF "
              f"+{len(lex_texts):,} ({report['seconds']:.0f}s)", flush=True)
    return SelfTraining(lex_texts, lex_gold, enc_texts, enc_gold, repeats, report)
