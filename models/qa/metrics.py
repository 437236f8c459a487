"""SQuAD 2.0 metrics for Japanese: character-level F1, exact match, HasAns/NoAns split, best-F1 threshold.

Torch-free. The structure and key names are those of the official SQuAD v2 evaluation script
(``exact``, ``f1``, ``HasAns_exact``, ``HasAns_f1``, ``NoAns_exact``, ``NoAns_f1``, ``best_exact``,
``best_exact_thresh``, ``best_f1``, ``best_f1_thresh``, ``total``, ``HasAns_total``, ``NoAns_total``; scores in
percent), plus denki's ``HasAns_span_exact``/``HasAns_span_f1`` (the best non-null span on answerable questions,
i.e. span quality with the null decision switched off). Japanese has no spaces between words, so — as in
JGLUE's JSQuAD evaluation — F1 counts **characters** instead of whitespace tokens. Normalisation before EM and
F1 (:func:`normalize_answer`), in this order:

1. Unicode NFKC (full-width ``ＡＢＣ１`` → ``ABC1``, half-width kana → full-width, ``①`` → ``1``, ``㍿`` → ``株式会社``);
2. lower-case;
3. remove punctuation: every character of Unicode category ``P*`` (、。「」・（）! ? … ) and every ASCII
   ``string.punctuation`` character (which also drops ASCII symbols such as ``$ + < = > ^ ` | ~``);
4. remove all whitespace.

English articles (a/an/the) are NOT removed (the SQuAD script removes them; meaningless for Japanese answers).
A gold answer that normalises to "" is ignored; an unanswerable question has the single gold answer "", and a
prediction scores 1 on it only when it is "" too. With several gold answers the maximum score is taken.
"""
from __future__ import annotations

import math
import string
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence

_ASCII_PUNCT = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    s = unicodedata.normalize("NFKC", s).lower()
    return "".join(ch for ch in s if not (ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")
                                          or ch.isspace()))


def exact_score(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """Character-level F1 after :func:`normalize_answer` (1.0 if both are empty, 0.0 if only one is)."""
    p, g = list(normalize_answer(prediction)), list(normalize_answer(gold))
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def gold_answers(answers: Sequence[str]) -> list[str]:
    """The references that count: non-empty after normalisation, else ``[""]`` (unanswerable)."""
    golds = [a for a in answers if normalize_answer(a)]
    return golds or [""]


def max_over_golds(prediction: str, answers: Sequence[str]) -> tuple[int, float]:
    golds = gold_answers(answers)
    return max(exact_score(prediction, g) for g in golds), max(f1_score(prediction, g) for g in golds)


THRESHOLD_AT = ("sample", "midpoint")
END_MARGIN = 1.0  # where "answer nothing" / "answer everything" wins: this far beyond the lowest / highest diff


def best_threshold(na_scores: Mapping[str, float], span_scores: Mapping[str, float],
                   span_nonempty: Mapping[str, bool], has_ans: Mapping[str, bool], *,
                   at: str = "sample") -> tuple[float, float]:
    """The SQuAD 2.0 ``find_best_thresh``: the null threshold maximising the mean score.

    ``na_scores[qid]`` = ``null_score_diff`` (no answer iff it is > threshold); ``span_scores[qid]`` = EM or
    F1 of the best non-null span against the golds; ``span_nonempty[qid]`` = a span exists. Starting from "no
    answer everywhere", questions are switched to "answer" in increasing ``na_scores``; ties are switched
    together (so the returned threshold reproduces the returned score exactly under the ``>`` rule, unlike the
    official script, which may split ties). Returns ``(best score in percent, threshold)``.

    Every threshold from the best question's score up to (not including) the next higher score gives the same
    score; ``at`` says which one is returned:

    * ``"sample"`` (the official script's choice): the score of the last question switched to "answer". That
      question sits exactly on the threshold — zero margin — so any numeric change of its score (another CPU,
      ONNX, int8) can flip its decision.
    * ``"midpoint"`` (what ``denki finetune qa`` stores): the middle of the gap to the next higher score, the
      threshold with the largest margin to both neighbours; where several switch points reach the best score,
      the one with the widest gap (ties → the lowest).

    When answering nothing is best the threshold is :data:`END_MARGIN` below the smallest score (both modes);
    with ``"midpoint"``, when answering everything is best, it is :data:`END_MARGIN` above the largest.
    """
    if at not in THRESHOLD_AT:
        raise ValueError(f"at must be one of {THRESHOLD_AT}")
    qids = list(na_scores)
    if not qids:
        return 0.0, 0.0
    cur = sum(1 for q in qids if not has_ans[q])
    finite = sorted({na_scores[q] for q in qids if math.isfinite(na_scores[q])})
    # candidates: (score after switching every question up to this switch point, threshold, margin)
    cands = [(cur, (finite[0] - END_MARGIN) if finite else 0.0, END_MARGIN)]
    order = sorted(qids, key=lambda q: na_scores[q])
    i = k = 0
    while i < len(order):
        t = na_scores[order[i]]
        if not math.isfinite(t):
            break  # no span at all: always "no answer", whatever the threshold
        j = i
        while j < len(order) and na_scores[order[j]] == t:
            q = order[j]
            if has_ans[q]:
                cur += span_scores[q]
            elif span_nonempty[q]:
                cur -= 1
            j += 1
        nxt = finite[k + 1] if k + 1 < len(finite) else None
        if at == "sample":
            cands.append((cur, t, 0.0))
        elif nxt is None:
            cands.append((cur, t + END_MARGIN, END_MARGIN))
        else:
            cands.append((cur, t + (nxt - t) / 2, (nxt - t) / 2))
        i, k = j, k + 1
    best = max(c[0] for c in cands)
    if at == "sample":  # the first switch point reaching the best score, as the official script
        score, thresh, _ = next(c for c in cands if c[0] == best)
    else:  # the widest gap among the switch points reaching it (summation rounding aside); ties → the lowest
        top = [c for c in cands if c[0] >= best - 1e-9]
        score, thresh, _ = max(top, key=lambda c: (c[2], -c[1]))
    return 100.0 * score / len(qids), float(thresh)


def squad_v2_metrics(golds: Mapping[str, Sequence[str]], results: Mapping[str, dict], *,
                     threshold_at: str = "sample") -> dict:
    """Official-style metrics. ``golds[qid]`` = reference answer texts (empty list = unanswerable);
    ``results[qid]`` = a :func:`models.qa.postprocess.postprocess_question` result (``answer`` is the decided
    prediction, ``span_answer``/``null_score_diff`` feed the best-threshold search). ``threshold_at``: which of
    the equally good thresholds ``best_exact_thresh`` / ``best_f1_thresh`` report (see :func:`best_threshold`;
    ``best_exact`` / ``best_f1`` do not depend on it)."""
    exact, f1, span_em, span_f1, has_ans, na, nonempty = {}, {}, {}, {}, {}, {}, {}
    for q, answers in golds.items():
        r = results[q]
        has_ans[q] = bool(gold_answers(answers)[0])
        exact[q], f1[q] = max_over_golds(r["answer"], answers)
        span_em[q], span_f1[q] = max_over_golds(r.get("span_answer", r["answer"]), answers)
        na[q] = r["null_score_diff"]
        nonempty[q] = bool(r.get("span_answer", r["answer"]))
    n = len(golds)
    has = [q for q in golds if has_ans[q]]
    no = [q for q in golds if not has_ans[q]]
    out = {"exact": 100.0 * sum(exact.values()) / n if n else 0.0,
           "f1": 100.0 * sum(f1.values()) / n if n else 0.0,
           "total": n}
    if has:
        out.update(HasAns_exact=100.0 * sum(exact[q] for q in has) / len(has),
                   HasAns_f1=100.0 * sum(f1[q] for q in has) / len(has), HasAns_total=len(has),
                   # denki extra: the best span as if the model always answered (threshold = +inf) — says
                   # whether the span head learned anything, separately from the null decision
                   HasAns_span_exact=100.0 * sum(span_em[q] for q in has) / len(has),
                   HasAns_span_f1=100.0 * sum(span_f1[q] for q in has) / len(has))
    if no:
        out.update(NoAns_exact=100.0 * sum(exact[q] for q in no) / len(no),
                   NoAns_f1=100.0 * sum(f1[q] for q in no) / len(no), NoAns_total=len(no))
    be, bet = best_threshold(na, span_em, nonempty, has_ans, at=threshold_at)
    bf, bft = best_threshold(na, span_f1, nonempty, has_ans, at=threshold_at)
    out.update(best_exact=be, best_exact_thresh=bet, best_f1=bf, best_f1_thresh=bft)
    return out


def f1_vs_threshold(golds: Mapping[str, Sequence[str]], results: Mapping[str, dict],
                    thresholds: Sequence[float]) -> list[float]:
    """Overall F1 (percent) at each threshold — the curve behind ``best_f1_thresh``."""
    rows = []
    for q, answers in golds.items():
        r = results[q]
        _, sf = max_over_golds(r.get("span_answer", ""), answers)
        _, nf = max_over_golds("", answers)
        rows.append((r["null_score_diff"], sf if r.get("span_start") is not None else nf, nf))
    n = len(rows) or 1
    return [100.0 * sum(sf if not (d > t) else nf for d, sf, nf in rows) / n for t in thresholds]
