"""Out of scope → human (models/classify/scope.py): the threshold keeps the asked share of dev routed, the rule
sends flat TF-IDF distributions to a human with the reason, every path needs the lexical logits once a bundle has
the rule, and a real fine-tune on the shipped inquiries sends unrelated texts to a human while routing inquiries."""
from __future__ import annotations

import json

import numpy as np
import pytest

from denki.app.cli import main
from denki.models.classify.decision import decide, route
from denki.models.classify.scope import fit_scope, out_of_scope, scope_scores

from .conftest import HOTEL_TONIGHT, OUT_OF_SCOPE, SAMPLE_ROUTING_DEV, SAMPLE_ROUTING_TRAIN

TASK = {"labels": ["a", "b", "c"], "temperature": 1.0, "threshold": 0.5}


def _lexical(rng, n, peaked):
    """(n, 3) lexical logits: peaked rows (in scope) or nearly flat ones (out of scope)."""
    z = rng.normal(0, 0.1, size=(n, 3))
    if peaked:
        z[np.arange(n), rng.integers(0, 3, n)] += 4.0
    return z


def test_fit_scope_keeps_the_asked_share_of_dev():
    rng = np.random.default_rng(0)
    dev = _lexical(rng, 400, peaked=True)
    entry = fit_scope({}, dev, keep=0.9)
    assert entry["score"] == "tfidf-msp" and entry["n_dev"] == 400 and entry["keep"] == 0.9
    kept = (scope_scores({"scope": entry}, dev) >= entry["threshold"]).mean()
    assert kept == pytest.approx(0.9, abs=0.01) and entry["dev_kept"] == pytest.approx(kept)
    with pytest.raises(ValueError, match="keep"):
        fit_scope({}, dev, keep=1.0)


def test_flat_texts_go_to_a_human_with_the_reason():
    rng = np.random.default_rng(1)
    task = {**TASK, "scope": fit_scope({}, _lexical(rng, 300, peaked=True), keep=0.95)}
    flat, peaked = _lexical(rng, 50, peaked=False), _lexical(rng, 50, peaked=True)
    assert out_of_scope(task, flat, 50).all() and out_of_scope(task, peaked, 50).mean() < 0.2
    # the encoder is sure of every text: only the scope rule can send one to a human
    logits = np.tile([8.0, 0.0, 0.0], (100, 1))
    res = route(logits, task, np.vstack([flat, peaked]))
    assert all(r["route"] == "human" and r["reason"] == "out_of_scope" for r in res[:50])
    assert sum(r["route"] == "a" and r["reason"] is None for r in res[50:]) >= 40
    # without the rule, the same logits route everything
    assert not decide(logits, TASK)[3].any()
    assert [r["reason"] for r in route(np.array([[0.1, 0.0, 0.0]]), TASK)] == ["unsure"]


def test_a_bundle_with_the_rule_needs_the_lexical_logits():
    task = {**TASK, "scope": {"score": "tfidf-msp", "threshold": 0.5}}
    with pytest.raises(ValueError, match="lexical"):
        decide(np.zeros((2, 3)), task)
    with pytest.raises(ValueError, match="not one this denki knows"):
        decide(np.zeros((2, 3)), {**TASK, "scope": {"score": "future-score", "threshold": 0.5}}, np.zeros((2, 3)))


@pytest.fixture(scope="module")
def router(inquiry_router):
    return inquiry_router


def test_finetuned_router_sends_unrelated_texts_to_a_human(router):
    from denki.serve.runtime import Predictor

    task = json.loads((router / "onnx" / "task.json").read_text(encoding="utf-8"))
    assert task["scope"]["keep"] == 0.95 and task["scope"]["n_dev"] == 300
    assert (router / "onnx" / "lexical.safetensors").is_file()
    p = Predictor(router / "onnx", backend="fp32")
    res = p.classify(OUT_OF_SCOPE + [HOTEL_TONIGHT])
    assert [r["route"] for r in res[:4]] == ["human"] * 4 and {r["reason"] for r in res[:4]} == {"out_of_scope"}
    assert res[4]["route"] == "宿泊" and res[4]["reason"] is None


def test_scope_keep_zero_turns_it_off_and_evaluate_reports_the_rate(router, tmp_path):
    out = tmp_path / "eval.json"
    assert main(["evaluate", "classify", "--model", str(router / "onnx"), "--data", str(SAMPLE_ROUTING_DEV),
                 "--output-json", str(out), "--no-progress"]) == 0
    rate = json.loads(out.read_text(encoding="utf-8"))["out_of_scope_rate"]
    assert rate == pytest.approx(0.05, abs=0.02)  # dev chose the threshold to keep 95 % routed
    assert main(["finetune", "classify", "--model", str(router / "run"), "--train", str(SAMPLE_ROUTING_TRAIN),
                 "--dev", str(SAMPLE_ROUTING_DEV), "--out", str(tmp_path / "off"), "--epochs", "0",
                 "--scope-keep", "0", "--no-progress", "--threads", "1"]) == 0
    assert "scope" not in json.loads((tmp_path / "off" / "bundle" / "task.json").read_text(encoding="utf-8"))
