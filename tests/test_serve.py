"""ONNX export parity gate, torch-free runtime, tamper refusal, batch accounting and resume."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from denki.models.io.errors import DenkiError

from .conftest import REPO, inquiry_rows


def test_export_parity_and_files(onnx_classifier):
    man = json.loads((onnx_classifier / "manifest.json").read_text(encoding="utf-8"))
    assert man["kind"] == "onnx-classifier"
    for f in ("model.onnx", "model.o2.onnx", "model.int8.onnx", "model.fp16.onnx", "vocab.txt", "task.json",
              "golden_tokenization.jsonl", "tokenizer_config.json"):
        assert f in man["files"], f
    parity = man["metrics"]["parity"]
    assert parity["fp32"]["passed"] and parity["fp32"]["max_abs_diff"] <= 1e-4
    assert parity["o2"]["passed"]
    assert parity["int8"]["ran"] and 0.8 <= parity["int8"]["agreement"] <= 1.0
    assert "metric_drop" in parity["int8"]


def test_export_gate_blocks_and_writes_nothing(classifier_bundle, tmp_path):
    from denki.models.export.onnx import export_bundle

    out = tmp_path / "never"
    with pytest.raises(DenkiError, match="parity gate failed"):
        export_bundle(classifier_bundle, out, atol=0.0, progress=False)  # fp32 can't be bit-exact: must fail
    assert not out.exists() and not (tmp_path / "never.partial").exists()
    with pytest.raises(DenkiError, match="int8"):
        export_bundle(classifier_bundle, out, quantize="int8", min_agreement=1.01, progress=False)
    assert not out.exists()


def test_runtime_matches_torch_and_golden(onnx_classifier, classifier_bundle):
    import torch
    from transformers import ElectraForSequenceClassification

    from denki.serve.runtime import Predictor

    p = Predictor(onnx_classifier, backend="fp32", device="cpu")
    assert p.provider == "CPUExecutionProvider"
    texts = [r["title"] for r in inquiry_rows(20)]
    onnx_logits = p.logits(texts, batch_size=7)  # length-bucketed batches, restored to input order
    model = ElectraForSequenceClassification.from_pretrained(str(classifier_bundle), use_safetensors=True).eval()
    with torch.no_grad():
        ref = np.concatenate([model(**{k: torch.from_numpy(v) for k, v in
                                       p.tokenizer.pad([p.tokenizer.encode(t, max_length=64)]).items()}).logits.numpy()
                              for t in texts])
    assert np.abs(onnx_logits - ref).max() < 1e-4
    res = p.classify(texts)
    task = p.task
    for r in res:
        assert set(r) == {"label", "score", "scores", "route", "reason"}
        assert r["route"] in (r["label"], "human")
        assert (r["route"] == "human") == (r["score"] < task["threshold"])
        assert abs(sum(r["scores"].values()) - 1) < 1e-6
    # golden vectors reproduce with the bundle's tokenizer
    for line in (onnx_classifier / "golden_tokenization.jsonl").read_text(encoding="utf-8").splitlines()[:10]:
        g = json.loads(line)
        assert p.tokenizer.encode(g["text"], max_length=g["max_length"]).ids == g["ids"]
    auto = Predictor(onnx_classifier)  # CPU: int8 when it passed its gate
    assert auto.backend == "int8"


def test_length_groups_are_optimal_cover_every_row_and_respect_the_cap():
    """The batch planner against brute force over every contiguous split of small sorted inputs."""
    import itertools
    import random

    from denki.serve.runtime import length_groups

    def cost(groups, lengths, c):
        return sum(c + (b - a) * lengths[b - 1] for a, b in groups)

    rng = random.Random(0)
    for _ in range(200):
        n, cap, c = rng.randint(1, 9), rng.randint(1, 5), rng.choice([0, 3, 16, 1e9])
        lengths = sorted(rng.randint(2, 60) for _ in range(n))
        groups = length_groups(lengths, cap, c)
        assert groups[0][0] == 0 and groups[-1][1] == n
        assert all(a < b and b - a <= cap for a, b in groups)
        assert all(g[1] == h[0] for g, h in zip(groups, groups[1:]))  # contiguous, no row lost or repeated
        best = min(cost(list(zip((0, *cuts), (*cuts, n))), lengths, c)
                   for k in range(n) for cuts in itertools.combinations(range(1, n), k)
                   if all(b - a <= cap for a, b in zip((0, *cuts), (*cuts, n))))
        assert cost(groups, lengths, c) == pytest.approx(best)
    assert length_groups([], 32) == []
    # equal lengths: nothing to save by splitting, so as few batches as the cap allows
    assert len(length_groups([10] * 70, 32)) == 3
    # a very long row among short ones gets a batch of its own instead of padding 31 others to its length
    assert length_groups([5] * 31 + [128], 32) == [(0, 31), (31, 32)]
    # sorted_batches: the same cut over the rows sorted by length, ties in input order, every row exactly once
    from denki.serve.runtime import sorted_batches

    assert [b.tolist() for b in sorted_batches([128] + [5] * 31, 32)] == [list(range(1, 32)), [0]]
    assert sorted_batches([], 8) == []


def test_optimum_loads_the_export(onnx_classifier):
    from optimum.onnxruntime import ORTModelForSequenceClassification

    from denki.serve.runtime import Predictor

    m = ORTModelForSequenceClassification.from_pretrained(str(onnx_classifier), file_name="model.onnx")
    p = Predictor(onnx_classifier, backend="fp32", device="cpu")
    batch = p.tokenizer.pad([p.tokenizer.encode("テストの文です", max_length=64)])
    import torch

    out = m(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits.numpy()
    assert np.abs(out - p.run(batch)[0]).max() < 1e-5


def test_runtime_is_torch_free(onnx_classifier):
    code = (
        "import sys; from denki.serve.runtime import Predictor; from denki.serve.batch import classify_file;"
        f"p = Predictor({str(onnx_classifier)!r}); r = p.classify(['ログインできません', '新型スマホ']);"
        "assert len(r) == 2 and r[0]['route'];"
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')];"
        "assert not bad, bad; print('ok', p.describe())"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ok" in res.stdout


def test_models_warm_up_when_they_load(onnx_classifier, onnx_qa):
    """A load runs one call (the first user request should not pay MeCab's and onnxruntime's first-call costs),
    leaves no timing behind, and gives the same answers as a model loaded without it."""
    from denki import Predictor

    for bundle, ask in ((onnx_classifier, lambda p: p.classify(["駅までタクシーを呼んでください"])),
                        (onnx_qa, lambda p: p.answer("保証期間は?", "保証期間は一年間です。"))):
        warm, cold = Predictor(bundle), Predictor(bundle, warmup=False)
        assert warm.warmup_ms > 0 and warm.last_timing == {} and cold.warmup_ms is None
        assert ask(warm) == ask(cold)


def test_tampered_bundle_is_refused(onnx_classifier, tmp_path):
    from denki.serve.runtime import Predictor

    bad = tmp_path / "bad"
    shutil.copytree(onnx_classifier, bad)
    data = bytearray((bad / "model.int8.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad / "model.int8.onnx").write_bytes(bytes(data))
    with pytest.raises(DenkiError, match="sha256"):
        Predictor(bad)
    (bad / "model.int8.onnx").unlink()
    with pytest.raises(DenkiError, match="missing"):
        Predictor(bad)


def _corrupt_input(path, rows):
    with open(path, "wb") as f:
        for i, r in enumerate(rows):
            if i == 3:
                f.write(b'{"title": "unterminated\n')
            if i == 7:
                f.write(b"\xff\xfe not utf-8\n")
            if i == 11:
                f.write(json.dumps({"id": "no-title"}).encode() + b"\n")
            if i == 13:
                f.write(json.dumps({"title": ""}).encode() + b"\n")
            if i == 17:
                f.write(b"[1, 2]\n")
            f.write(json.dumps({"id": r["id"], "title": r["title"]}, ensure_ascii=False).encode() + b"\n")
    return len(rows) + 5


def test_batch_accounting_with_corrupt_lines(onnx_classifier, tmp_path):
    from denki.app.cli import main

    n_in = _corrupt_input(tmp_path / "in.jsonl", inquiry_rows(60))
    out = tmp_path / "out.jsonl"
    assert main(["classify", "--model", str(onnx_classifier), "--input", str(tmp_path / "in.jsonl"),
                 "--output", str(out), "--batch-size", "8"]) == 0
    ok = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    errs = [json.loads(x) for x in (tmp_path / "out.jsonl.errors.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(ok) + len(errs) == n_in
    assert len(errs) == 5
    reasons = " ".join(e["reason"] for e in errs)
    for word in ("malformed JSON", "not UTF-8", "missing field", "empty text", "JSON object"):
        assert word in reasons
    assert all(e["line"] > 0 for e in errs)
    assert all({"id", "title", "label", "score", "route"} <= set(r) for r in ok)


def test_batch_resume_no_duplicates_no_gaps(onnx_classifier, tmp_path):
    from denki.serve.batch import classify_file

    rows = inquiry_rows(60)
    n_in = _corrupt_input(tmp_path / "in.jsonl", rows)
    full = tmp_path / "full.jsonl"
    classify_file(onnx_classifier, tmp_path / "in.jsonl", full, batch_size=8, window=16, progress=False)
    out = tmp_path / "resumed.csv"
    # CSV in/out this time, interrupted after 2 windows of 16 rows (checkpointed after each), then resumed
    import csv

    with open(tmp_path / "in.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "title"])
        for r in rows:
            w.writerow([r["id"], r["title"]])
    with pytest.raises(KeyboardInterrupt):
        classify_file(onnx_classifier, tmp_path / "in.csv", out, batch_size=8, window=16, checkpoint_seconds=0,
                      progress=False, stop_after_windows=2)
    assert not out.exists()
    with pytest.raises(DenkiError, match="--resume"):
        classify_file(onnx_classifier, tmp_path / "in.csv", out, batch_size=8, window=16, progress=False)
    r = classify_file(onnx_classifier, tmp_path / "in.csv", out, batch_size=8, window=16, progress=False,
                      resume=True)
    assert r["resumed_from_line"] > 1
    got = list(csv.DictReader(open(out, encoding="utf-8", newline="")))
    assert [g["id"] for g in got] == [x["id"] for x in rows]  # every row once, in order
    ref = {json.loads(x)["id"]: json.loads(x) for x in full.read_text(encoding="utf-8").splitlines()}
    for g in got:
        assert g["label"] == ref[g["id"]]["label"]
    assert n_in == len(ref) + 5


def test_latency_bench_writes_reports(onnx_classifier, classifier_bundle, tmp_path):
    from denki.serve.bench_latency import bench_latency

    res = bench_latency(str(onnx_classifier), str(tmp_path), torch_model=str(classifier_bundle), iterations=3,
                        batch_iterations=2, threads=1, progress=False)
    for f in ("latency.json", "latency.md", "latency.png"):
        assert (tmp_path / f).stat().st_size > 0
    for row in ("PyTorch eager fp32", "ORT fp32", "ORT o2", "ORT int8", "denki Predictor.classify (end to end)",
                "optimum ORTModel + pipeline (end to end)"):
        assert set(res["rows"][row]) == {"short b1", "short b32", "long b1", "long b32"}
        for cell in res["rows"][row].values():
            assert 0 < cell["p50_ms"] <= cell["p95_ms"] <= cell["p99_ms"] and cell["n"] >= 2
    assert any(k.startswith("int8 vs torch eager") for k in res["ratios_p50"])


def test_qa_export_runtime_exact_spans(onnx_qa, qa_bundle):
    from optimum.onnxruntime import ORTModelForQuestionAnswering

    from denki.serve.runtime import Predictor

    man = json.loads((onnx_qa / "manifest.json").read_text(encoding="utf-8"))
    assert man["kind"] == "onnx-qa" and man["metrics"]["parity"]["fp32"]["passed"]
    assert ORTModelForQuestionAnswering.from_pretrained(str(onnx_qa), file_name="model.onnx") is not None
    p = Predictor(onnx_qa, backend="fp32", device="cpu")
    p.task["null_threshold"] = 1e9  # force an answer: check spans are exact substrings of the ORIGINAL context
    ctx = "ＡＢＣ株式会社（㍿）は①番窓口を東京都千代田区に置いている。" * 12  # long: several windows
    r = p.answer("窓口はどこにありますか?", ctx)
    assert r["has_answer"] and r["windows"] > 1
    assert ctx[r["start"]:r["end"]] == r["answer"] and r["answer"]
    p.task["null_threshold"] = -1e9  # force "no answer"
    r = p.answer("窓口はどこにありますか?", ctx)
    assert not r["has_answer"] and r["answer"] == "" and r["start"] is None
    with pytest.raises(DenkiError, match="empty"):
        p.answer("", ctx)
    p.task["null_rule"] = "head"  # a rule that needs the answerable head this graph does not have
    with pytest.raises(DenkiError, match="answerable_logits output"):
        p.answer("窓口はどこにありますか?", ctx)
    p.task["null_rule"] = "cls"


def test_qa_with_answerable_head_exports_its_third_output_and_serves_each_null_rule(tiny_tokenizer_dir, tmp_path):
    """A bundle fine-tuned with --answerable-head keeps the head through `denki export`: the ONNX graph has
    ``answerable_logits``, the parity gate compares it, and the runtime decides with task.json's null_rule."""
    import torch

    from denki.models.bundle.pytorch import save_bundle
    from denki.models.bundle.presets import electra_config
    from denki.models.export.onnx import export_bundle
    from denki.models.qa.heads import ElectraForQuestionAnsweringWithAnswerable
    from denki.models.text.tokenizer import JapaneseTokenizer
    from denki.serve.runtime import Predictor

    from .conftest import SAMPLE_QA_DEV, read_jsonl

    rows = read_jsonl(SAMPLE_QA_DEV)[:8]
    torch.manual_seed(0)
    model = ElectraForQuestionAnsweringWithAnswerable(
        electra_config("tiny", JapaneseTokenizer.load(tiny_tokenizer_dir).vocab_size)).eval()
    with torch.no_grad():  # a head whose logit is not ~0: the rules must then disagree somewhere
        model.answerable[-1].bias.fill_(0.5)
    task = {"task": "qa", "null_threshold": 0.0, "max_answer_length": 30, "max_length": 128, "doc_stride": 32,
            "n_best": 20, "answerable_head": True, "null_rule": "head"}
    src = tmp_path / "qa-head"
    save_bundle(model, tiny_tokenizer_dir, src, "qa", extra_files={
        "task.json": task, "parity_sample.json": {"format": 1, "examples": [
            {"id": r["id"], "question": r["question"], "context": r["context"]} for r in rows]}})
    man = export_bundle(src, tmp_path / "onnx", optimize="O2", quantize="int8", min_agreement=0.0, max_drop=1.0,
                        progress=False)
    parity = man["metrics"]["parity"]
    assert parity["fp32"]["passed"] and parity["o2"]["passed"] and parity["int8"]["ran"] and parity["n"] == len(rows)
    # an int8 variant failing the strict gate names the head and the two ways out (agreement > 1 always fails)
    with pytest.raises(DenkiError, match="has the answerable head.*--no-answerable-head"):
        export_bundle(src, tmp_path / "onnx-strict", quantize="int8", min_agreement=1.01, progress=False)
    assert not (tmp_path / "onnx-strict").exists()
    assert json.loads((tmp_path / "onnx/config.json").read_text(encoding="utf-8"))["architectures"] == [
        "ElectraForQuestionAnswering"]
    p = Predictor(tmp_path / "onnx", backend="fp32", device="cpu")
    assert p.output_names == ["start_logits", "end_logits", "answerable_logits"]
    assert Predictor(tmp_path / "onnx", backend="int8", device="cpu").output_names[2] == "answerable_logits"
    q, c = rows[0]["question"], rows[0]["context"] * 3  # several windows
    with torch.no_grad():
        enc = p.tokenizer.encode_windows(q, c, max_length=128, stride=32)
        ref = model(**{k: torch.from_numpy(v) for k, v in p.tokenizer.pad(enc).items()}).answerable_logits.numpy()
    r = p.answer(q, c)
    # head rule: no answer iff -max over windows of the answerable logit > threshold (0 here)
    assert r["windows"] == len(enc) > 1 and r["null_score_diff"] == pytest.approx(-ref.max(), abs=1e-4)
    assert r["has_answer"] == (not -ref.max() > 0.0)
    p.task["null_rule"] = "cls"  # the plain [CLS] score ignores the head
    r_cls = p.answer(q, c)
    assert r_cls["null_score_diff"] != pytest.approx(r["null_score_diff"])
    p.task["null_rule"] = "combined"
    assert p.answer(q, c)["null_score_diff"] == pytest.approx(r_cls["null_score_diff"] - ref.max(), abs=1e-3)
