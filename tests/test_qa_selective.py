"""Selective answering (models/qa/selective.py): the confidence calibration, the abstention floor, the decision
every serving path applies, and the coverage table — on synthetic results whose right/wrong is known."""
from __future__ import annotations

import math

import numpy as np
import pytest

from denki.models.qa.selective import (confidence_of, decide, fit_confidence, fit_min_confidence, format_rows,
                                       is_right, selective_report)


def _result(answer: str, diff: float, score: float | None = 5.0, thr: float = 0.0) -> dict:
    has = bool(answer) and not (diff > thr)
    return {"answer": answer if has else "", "start": 0 if has else None, "end": len(answer) if has else None,
            "has_answer": has, "null_score_diff": diff, "score": score, "span_answer": answer,
            "span_start": 0 if answer else None, "span_end": len(answer) if answer else None}


def _synthetic(n: int = 400, seed: int = 0):
    """Answers whose chance of being right rises with their margin: far from the null decision → mostly right."""
    rng = np.random.default_rng(seed)
    results, golds = {}, {}
    for i in range(n):
        q = f"q{i}"
        if i % 2:  # answered; right with probability sigmoid(margin)
            margin = rng.uniform(0.0, 6.0)
            right = rng.random() < 1 / (1 + math.exp(-(margin - 2.0)))
            results[q] = _result("東京", -margin, score=rng.normal(8.0, 1.0))
            golds[q] = ["東京"] if right else ["大阪府"]
        else:  # 回答なし; right (unanswerable) with probability rising with its margin
            margin = rng.uniform(0.0, 6.0)
            right = rng.random() < 1 / (1 + math.exp(-(margin - 1.0)))
            results[q] = _result("東京", margin)
            golds[q] = [] if right else ["東京"]
    return results, golds


def test_is_right_counts_a_no_answer_on_an_unanswerable_question_and_partial_spans():
    assert is_right({"answer": ""}, [])
    assert not is_right({"answer": ""}, ["東京"])
    assert is_right({"answer": "東京都"}, ["東京"])          # char F1 0.8
    assert is_right({"answer": "東京都渋谷区"}, ["東京"])      # char F1 exactly 0.5 (precision 2/6, recall 1)
    assert not is_right({"answer": "東京都渋谷区神南"}, ["東京"])  # char F1 0.4
    assert not is_right({"answer": "大阪"}, ["東京"])


def test_confidence_is_calibrated_and_rises_with_the_margin():
    results, golds = _synthetic(2000)
    cal = fit_confidence(results, golds, 0.0, fitted_on="synthetic")
    assert cal["answer"]["n"] == 1000 and cal["no_answer"]["n"] == 1000
    conf = {q: confidence_of(r, cal, 0.0) for q, r in results.items()}
    # calibrated: the mean confidence of each kind matches its rate of right answers (logistic regression's property)
    for kind, has in (("answer", True), ("no_answer", False)):
        qs = [q for q, r in results.items() if r["has_answer"] == has]
        assert abs(np.mean([conf[q] for q in qs]) - np.mean([is_right(results[q], golds[q]) for q in qs])) < 0.01
    assert confidence_of(_result("東京", -5.0), cal, 0.0) > confidence_of(_result("東京", -0.5), cal, 0.0)
    assert confidence_of(_result("東京", 5.0), cal, 0.0) > confidence_of(_result("東京", 0.5), cal, 0.0)
    # no valid span at all: the largest 回答なし margin, a finite probability
    assert 0.5 < confidence_of(_result("", math.inf, score=None), cal, 0.0) <= 0.999


def test_one_class_only_gives_a_smoothed_constant():
    results = {f"q{i}": _result("東京", -1.0 - i) for i in range(8)}
    cal = fit_confidence(results, {q: ["東京"] for q in results}, 0.0)
    c = confidence_of(results["q0"], cal, 0.0)
    assert c == pytest.approx(9 / 10)  # (8 + 1) / (8 + 2)
    assert cal["no_answer"]["n"] == 0 and 0.0 < confidence_of(_result("", 2.0), cal, 0.0) < 1.0


def test_min_confidence_reaches_the_target_precision_on_dev_and_decide_abstains_below_it():
    results, golds = _synthetic(2000)
    cal = fit_confidence(results, golds, 0.0)
    chosen = fit_min_confidence(results, golds, cal, 0.0, 0.9)
    assert chosen["reached"] and chosen["precision"] >= 0.9 and 0.05 < chosen["coverage"] < 0.9
    task = {"null_threshold": 0.0, "confidence": cal, "min_confidence": chosen["threshold"],
            "target_precision": 0.9}
    decided = {q: decide(r, task) for q, r in results.items()}
    kept = [q for q, r in decided.items() if not r["abstained"]]
    assert len(kept) / len(results) == pytest.approx(chosen["coverage"])
    assert np.mean([is_right(results[q], golds[q]) for q in kept]) == pytest.approx(chosen["precision"])
    unsure = [r for r in decided.values() if r["abstained"]]
    assert unsure and all(r["reason"] == "unsure" and r["answer"] == "" and not r["has_answer"]
                          and r["start"] is None for r in unsure)
    assert any(r["span_answer"] for r in unsure)  # the candidate stays visible
    assert {r["reason"] for q, r in decided.items() if q in kept} == {"answer", "no_answer"}
    # the operating point of the report is the same figure
    rep = selective_report(results, golds, task)
    assert rep["operating_point"]["coverage"] == pytest.approx(chosen["coverage"])
    assert rep["operating_point"]["right"] == pytest.approx(chosen["precision"])


def test_decide_without_a_calibration_keeps_old_bundles_answering():
    r = decide(_result("東京", -1.0), {"null_threshold": 0.0})
    assert r["confidence"] is None and r["reason"] == "answer" and not r["abstained"] and r["answer"] == "東京"
    r = decide(_result("東京", 1.0), {"null_threshold": 0.0, "min_confidence": 0.99})
    assert r["reason"] == "no_answer" and not r["abstained"]  # no confidence: nothing to compare the floor with


def test_coverage_table_precision_falls_as_coverage_grows():
    results, golds = _synthetic(2000, seed=1)
    cal = fit_confidence(results, golds, 0.0)
    rep = selective_report(results, golds, {"null_threshold": 0.0, "confidence": cal})
    rows = rep["rows"]
    assert [r["coverage"] for r in rows][-1] == 1.0 and rows[-1]["n"] == 2000
    assert rows[0]["right"] > rows[-1]["right"] + 0.1
    assert rows[-1]["right"] == pytest.approx(np.mean([is_right(results[q], golds[q]) for q in results]))
    assert all(a["min_confidence"] >= b["min_confidence"] for a, b in zip(rows, rows[1:]))
    assert "operating_point" not in rep
    lines = format_rows(rep)
    assert lines[0].startswith("| coverage") and len(lines) == 2 + len(rows)
    assert selective_report(results, golds, {"null_threshold": 0.0}) == {}


def test_the_onnx_runtime_gives_every_answer_a_confidence_and_abstains_below_the_floor(onnx_qa):
    """The serving path (session + reader head) applies task.json's calibration and floor: set on a loaded model
    (the head reads task.json at each call)."""
    from denki.serve.runtime import Predictor

    p = Predictor(onnx_qa, backend="fp32", device="cpu", threads=1)
    q, ctx = "会議は何時から?", "定例会議は毎週月曜の10時から第二会議室で始まる。"
    plain = p.answer(q, ctx)
    assert plain["confidence"] is None and plain["reason"] == "answer" and plain["answer"]  # fixture: always answers
    results, golds = _synthetic(400)
    p.task["confidence"] = fit_confidence(results, golds, 0.0)
    p.task["null_threshold"] = 1e6  # as the fixture: margins are huge, so the answer's confidence is the capped one
    r = p.answer(q, ctx)
    assert 0.0 < r["confidence"] < 1.0 and r["reason"] == "answer" and r["answer"] == plain["answer"]
    p.task["min_confidence"] = r["confidence"] + 1e-6
    u = p.answer(q, ctx)
    assert u["reason"] == "unsure" and u["abstained"] and u["answer"] == "" and not u["has_answer"]
    assert u["span_answer"] == plain["answer"] and u["confidence"] == pytest.approx(r["confidence"])
