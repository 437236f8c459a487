"""The README's main job as a test: `denki quickstart --no-demo` end to end on the shipped sample (smaller
pretraining budget to stay fast), then a re-run that skips every stage."""
from __future__ import annotations

import json
import time

from models.bundle import verify_bundle


def test_quickstart_pipeline_end_to_end_and_rerun_skips(tmp_path, capsys):
    from app.cli import main

    out = tmp_path / "qs"
    assert main(["quickstart", "--no-demo", "--out", str(out), "--pretrain-flops", "1e12"]) == 0
    printed = capsys.readouterr().out
    assert "denki quickstart summary" in printed and "TF-IDF baseline" in printed
    for d, kind in (("pretrain/bundle", "pretrained"), ("classifier/bundle", "classifier"),
                    ("classifier-random-init/bundle", "classifier"), ("qa/bundle", "qa"),
                    ("classifier-onnx", "onnx-classifier"), ("qa-onnx", "onnx-qa")):
        assert verify_bundle(out / d)["kind"] == kind, d
    s = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert s["pretrain"]["flops"] >= 1e12
    r = s["routing"]
    for part in ("onnx", "pytorch", "pytorch_random_init", "tfidf_baseline"):
        assert 0.0 <= r[part]["accuracy"] <= 1.0, part
    assert r["deployed"] in ("pretrained", "random-init control")
    assert set(s["latency_p50_ms_batch1"]) == {"fp32", "o2", "int8"}
    assert s["parity"]["classifier"]["fp32"]["passed"] and s["parity"]["qa"]["fp32"]["passed"]
    for k in ("exact", "f1", "total"):
        assert s["qa"]["onnx"][k] is not None
    t0 = time.perf_counter()
    assert main(["quickstart", "--no-demo", "--out", str(out), "--pretrain-flops", "1e12"]) == 0
    assert capsys.readouterr().out.count("done already (skipped)") == 7
    assert time.perf_counter() - t0 < 60
