"""Torch-free parts of the routing classifier: the decision rule, calibration fitting, metrics and the
labelled-file reader's errors."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from denki.models.classify.calibration import (choose_threshold, fit_min_recall_offsets, fit_temperature,
                                               fit_temperature_report)
from denki.models.classify.evaluate import evaluate_logits
from denki.models.classify.decision import decide, route, softmax
from denki.models.io.errors import InputError
from denki.models.classify.metrics import classification_metrics, ece, nll
from denki.models.io.records import check_label_sets, iter_records, read_labelled


# ------------------------------------------------------------------------------------------ decision rule
def test_route_applies_offsets_temperature_and_threshold_in_order():
    task = {"labels": ["a", "b", "c"], "temperature": 2.0, "threshold": 0.5, "offsets": [0.0, 0.0, 1.5]}
    logits = np.array([[3.0, 0.0, 0.0],     # a clearly
                       [1.6, 1.2, 0.0],     # a, but unsure at T=2 → human
                       [1.0, 0.0, 0.0 + 0.1]])  # c wins only thanks to its offset
    out = route(logits, task)
    assert [o["label"] for o in out] == ["a", "a", "c"]
    # score = softmax(logits / T)[label], offsets not included
    p = softmax(logits / 2.0, axis=1)
    assert out[0]["score"] == pytest.approx(p[0, 0])
    assert out[2]["score"] == pytest.approx(p[2, 2])
    assert [o["route"] for o in out] == ["a", "human", "human"]
    assert out[0]["route"] == "a" and p[0, 0] >= 0.5 > p[1, 0]
    for o in out:
        assert sum(o["scores"].values()) == pytest.approx(1.0)


def test_route_defaults_never_abstain():
    out = route(np.array([[0.0, 0.01]]), {"labels": ["x", "y"]})
    assert out[0]["route"] == "y" and out[0]["score"] == pytest.approx(softmax(np.array([0.0, 0.01]))[1])


def test_route_rejects_wrong_shapes():
    with pytest.raises(ValueError):
        route(np.zeros((2, 3)), {"labels": ["a", "b"]})
    with pytest.raises(ValueError):
        decide(np.zeros((2, 3)), {"labels": ["a", "b", "c"], "offsets": [0, 0]})


# ------------------------------------------------------------------------------------------ calibration
def _synthetic(n=2000, k=4, seed=0, sharpness=1.0):
    """Logits whose softmax is calibrated at ``sharpness=1`` (labels drawn from it); >1 makes it over-confident."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1.5, size=(n, k))
    p = softmax(z, axis=1)
    gold = np.array([rng.choice(k, p=row) for row in p])
    return z * sharpness, gold


def test_temperature_scaling_fixes_over_confidence():
    z, gold = _synthetic(sharpness=4.0)
    t = fit_temperature(z, gold)
    assert 3.0 < t < 5.5  # the true factor is 4
    conf0, conf1 = softmax(z, 1).max(1), softmax(z / t, 1).max(1)
    correct = z.argmax(1) == gold
    assert nll(softmax(z / t, 1), gold) < nll(softmax(z, 1), gold) - 0.1
    assert ece(conf1, correct) < ece(conf0, correct) / 2


def test_temperature_found_for_a_confident_router():
    """A fine-tuned router's logits: large margins, 5 % mistakes. With the gold probability clipped at 1e-12 the loss
    went flat at small T (every mistake stuck at 27.6) and the search fell back to T = 1; the exact loss finds the
    optimum, known here by a grid."""
    rng = np.random.default_rng(0)
    n, k = 500, 6
    gold = rng.integers(0, k, n)
    pred = gold.copy()
    wrong = rng.uniform(size=n) < 0.05
    pred[wrong] = (gold[wrong] + 1) % k
    z = rng.normal(0, 1, (n, k))
    z[np.arange(n), pred] += 12
    rep = fit_temperature_report(z, gold)
    grid = np.linspace(0.5, 8, 751)
    best = grid[np.argmin([nll(softmax(z / t, 1), gold) for t in grid])]
    assert abs(rep["temperature"] - best) < 0.02 and rep["fallback"] is None
    assert rep["nll_after"] < rep["nll_before"] - 0.2
    # a known temperature: labels drawn from softmax(z), logits handed over sharpened 8×
    zc, gc = _synthetic(n=3000, k=5, seed=3, sharpness=8.0)
    assert 7.0 < fit_temperature(zc, gc) < 9.2
    # a dev set the router separates perfectly: the optimum is T → 0, on the search's edge, and the report says so
    sep = fit_temperature_report(np.eye(4)[[0, 1, 2, 3] * 5] * 5.0, np.array([0, 1, 2, 3] * 5))
    assert sep["fallback"] and "edge" in sep["fallback"]


def test_threshold_reaches_target_precision_with_max_coverage():
    rng = np.random.default_rng(1)
    score = rng.uniform(0.2, 1.0, size=3000)
    correct = rng.uniform(size=3000) < score  # higher score → more often right
    res = choose_threshold(score, correct, target_precision=0.9)
    assert res["reached"] and res["mode"] == "precision"
    kept = score >= res["threshold"]
    assert correct[kept].mean() >= 0.9
    assert res["coverage"] == pytest.approx(kept.mean())
    # the next lower candidate threshold would miss the target: the chosen one has the largest coverage
    lower = score[score < res["threshold"]]
    if len(lower):
        kept2 = score >= lower.max()
        assert correct[kept2].mean() < 0.9


def test_threshold_unreachable_target_and_coverage_mode():
    score = np.linspace(0.1, 1.0, 100)
    correct = np.zeros(100, dtype=bool)
    correct[::2] = True
    res = choose_threshold(score, correct, target_precision=0.99)
    assert not res["reached"]
    cov = choose_threshold(score, correct, target_coverage=0.9)
    assert cov["coverage"] >= 0.9 and (score >= cov["threshold"]).mean() == pytest.approx(0.9)
    none = choose_threshold(score, correct)
    assert none["threshold"] == 0.0 and none["mode"] == "none"


def test_min_recall_offsets_reach_floor_and_are_minimal():
    z, gold = _synthetic(n=3000, k=5, seed=2)
    z[:, 3] -= 1.5  # class 3 is under-predicted
    pred = z.argmax(1)
    r0 = (pred[gold == 3] == 3).mean()
    floor = 0.9
    assert r0 < floor
    b, reached = fit_min_recall_offsets(z, gold, {3: floor})
    assert reached[3]
    assert (b[[0, 1, 2, 4]] == 0).all() and b[3] > 0
    r1 = ((z + b).argmax(1)[gold == 3] == 3).mean()
    assert r1 >= floor
    smaller = b.copy()
    smaller[3] -= 1e-3
    assert ((z + smaller).argmax(1)[gold == 3] == 3).mean() < floor


def test_min_recall_two_classes_and_evaluate_logits():
    z, gold = _synthetic(n=2000, k=4, seed=3)
    z[:, 0] -= 1.0
    z[:, 1] -= 1.0
    b, reached = fit_min_recall_offsets(z, gold, {0: 0.7, 1: 0.7})
    assert reached == {0: True, 1: True}
    # an infeasible pair of floors (0 and 1 are confused with each other) is reported, not hidden
    _, unreachable = fit_min_recall_offsets(z, gold, {0: 0.95, 1: 0.95})
    assert not all(unreachable.values())
    task = {"labels": list("abcd"), "offsets": list(b), "temperature": 1.0, "threshold": 0.6}
    res = evaluate_logits(z, gold, task, curves=True)
    assert res["per_class"]["a"]["recall"] >= 0.7 and res["per_class"]["b"]["recall"] >= 0.7
    assert 0 < res["abstain_rate"] < 1
    idx, score, _, abstain = decide(z, task)
    assert res["accuracy_non_abstained"] == pytest.approx((idx == gold)[~abstain].mean())
    assert {"accuracy", "macro_f1", "per_class", "abstain_rate", "n", "ece", "coverage_curve"} <= set(res)


def test_metrics_match_sklearn():
    from sklearn.metrics import accuracy_score, f1_score, precision_recall_fscore_support

    rng = np.random.default_rng(4)
    gold = rng.integers(0, 4, 500)
    pred = np.where(rng.uniform(size=500) < 0.6, gold, rng.integers(0, 4, 500))
    m = classification_metrics(gold, pred, list("wxyz"))
    p, r, f, s = precision_recall_fscore_support(gold, pred, labels=range(4), zero_division=0)
    assert m["accuracy"] == pytest.approx(accuracy_score(gold, pred))
    assert m["macro_f1"] == pytest.approx(f1_score(gold, pred, average="macro"))
    for k, lab in enumerate("wxyz"):
        assert m["per_class"][lab]["precision"] == pytest.approx(p[k])
        assert m["per_class"][lab]["recall"] == pytest.approx(r[k])
        assert m["per_class"][lab]["support"] == s[k]


# ------------------------------------------------------------------------------------------ reading files
def _write(path, text: str):
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _jsonl(rows):
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def test_reads_jsonl_gz_and_csv_with_physical_lines(tmp_path):
    j = _write(tmp_path / "a.jsonl.gz", _jsonl([{"text": "猫", "label": "x"}]) + "\n" + _jsonl([{"text": "犬", "label": 2}]))
    d = read_labelled(j)
    assert d.texts == ["猫", "犬"] and d.labels == ["x", "2"] and d.lines == [1, 3]
    c = _write(tmp_path / "b.csv", 'text,label\n"複数\n行",x\n犬,y\n')
    d = read_labelled(c)
    assert d.texts == ["複数\n行", "犬"] and d.lines == [2, 4]
    t = read_labelled(_write(tmp_path / "c.jsonl", _jsonl([{"title": "T", "text": "B", "label": "x"}])),
                      text_field="title+text")
    assert t.texts == ["T\nB"]
    assert [n for n, _ in iter_records(c)] == [2, 4]


@pytest.mark.parametrize("name,content,line,field,msg", [
    ("missing.jsonl", _jsonl([{"text": "a", "label": "x"}, {"body": "b", "label": "y"}]), 2, "text", "missing"),
    ("empty.jsonl", _jsonl([{"text": "a", "label": "x"}, {"text": "  ", "label": "y"}]), 2, "text", "empty"),
    ("nolabel.jsonl", _jsonl([{"text": "a", "label": "x"}, {"text": "b"}]), 2, "label", "missing"),
    ("bad.jsonl", _jsonl([{"text": "a", "label": "x"}]) + '{"text": "b", "label": \n', 2, None, "malformed JSON"),
    ("list.jsonl", '["a", "x"]\n', 1, None, "JSON object"),
    ("bad.csv", "text,label\na,x\nb,y,z\n", 3, None, "malformed CSV"),
    ("quote.csv", 'text,label\na,x\n"b"c,y\n', 3, None, "malformed CSV"),
    ("missing.csv", "body,label\na,x\n", 2, "text", "missing"),
    ("bad.jsonl.gz", _jsonl([{"text": "a", "label": "x"}]) + "{oops\n", 2, None, "malformed JSON"),
])
def test_bad_input_names_file_line_field(tmp_path, name, content, line, field, msg):
    p = _write(tmp_path / name, content)
    with pytest.raises(InputError) as ei:
        read_labelled(p)
    e = ei.value
    assert e.path == str(p) and e.line == line and e.field == field
    assert f"{p}:{line}" in str(e) and msg in str(e)


def test_skip_empty_records_skipped_rows(tmp_path):
    p = _write(tmp_path / "e.jsonl", _jsonl([{"text": "a", "label": "x"}, {"text": "", "label": "y"}]))
    d = read_labelled(p, skip_empty=True)
    assert d.texts == ["a"] and d.skipped == [{"line": 2, "field": "text", "reason": "empty text"}]


def test_invalid_utf8_names_line(tmp_path):
    p = tmp_path / "sjis.jsonl"
    p.write_bytes(b'{"text": "a", "label": "x"}\n' + '{"text": "猫", "label": "x"}\n'.encode("cp932"))
    with pytest.raises(InputError, match=r"sjis.jsonl:2: invalid UTF-8"):
        read_labelled(p)


def test_label_set_checks(tmp_path):
    train = read_labelled(_write(tmp_path / "t.jsonl", _jsonl([{"text": "a", "label": "x"},
                                                               {"text": "b", "label": "y"}])))
    dev = read_labelled(_write(tmp_path / "d.jsonl", _jsonl([{"text": "a", "label": "x"},
                                                             {"text": "c", "label": "z"}])))
    with pytest.raises(InputError) as ei:
        check_label_sets(train, dev)
    assert ei.value.line == 2 and ei.value.field == "label" and "d.jsonl:2" in str(ei.value) and "'z'" in str(ei.value)
    one = read_labelled(_write(tmp_path / "o.jsonl", _jsonl([{"text": "a", "label": "x"}] * 3)))
    with pytest.raises(InputError, match="at least 2 distinct labels"):
        check_label_sets(one, one)


def test_unknown_extension(tmp_path):
    with pytest.raises(InputError, match="unknown file type"):
        read_labelled(_write(tmp_path / "x.txt", "a\n"))
