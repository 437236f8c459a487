"""End to end: `denki finetune classify` / `denki evaluate classify` on the shipped routing sample with a tiny
model (an extended variant on ../shared's livedoor titles runs when the shared data is there)."""
from __future__ import annotations

import csv
import gzip
import json
import random

import numpy as np
import pytest

from denki.app.cli import main
from .conftest import routing_rows, shared, write_split

CAUSE = "タクシー"  # the route that gets a recall floor (and, thinned, the rare route)
FT = ["--seeds", "2", "--epochs", "1", "--max-length", "64", "--threads", "1", "--no-progress"]


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """50 inquiries per desk from samples/routing_train.jsonl (300 tourist-desk requests, 6 desks)
    split 220 / 80 into JSONL files."""
    rows = routing_rows(per_label=50)
    random.Random(0).shuffle(rows)
    return write_split(tmp_path_factory.mktemp("cls_data"), rows, 220)


@pytest.fixture(scope="module")
def pretrained(tiny_tokenizer_dir, tmp_path_factory):
    from denki.models.bundle.pytorch import random_init_bundle

    out = tmp_path_factory.mktemp("pre") / "bundle"
    random_init_bundle("tiny", tiny_tokenizer_dir, out, seed=0)
    return out


@pytest.fixture(scope="module")
def finetuned(split, pretrained, tmp_path_factory):
    out = tmp_path_factory.mktemp("ft") / "run"
    rc = main(["finetune", "classify", "--model", str(pretrained), "--train", str(split / "train.jsonl"),
               "--dev", str(split / "dev.jsonl"), "--out", str(out), "--target-precision", "0.5",
               "--min-recall", f"{CAUSE}=0.8", "--fusion", "on", *FT])  # fused: every test below sees the TF-IDF half
    assert rc == 0
    return out


def test_finetune_writes_bundle_report_and_pngs(finetuned):
    from denki.models.bundle.format import read_task, verify_bundle

    manifest = verify_bundle(finetuned / "bundle", kinds=("classifier",))
    assert "task.json" in manifest["files"] and "parity_sample.json" in manifest["files"]
    assert manifest["source"]["chosen_seed"] in (0, 1)
    task = read_task(finetuned / "bundle")
    assert task["labels"] == sorted(task["labels"]) and len(task["labels"]) == 6
    assert task["temperature"] > 0 and len(task["offsets"]) == 6 and task["max_length"] == 64
    assert task["min_recall"][CAUSE]["floor"] == 0.8
    parity = json.loads((finetuned / "bundle" / "parity_sample.json").read_text(encoding="utf-8"))
    assert len(parity["texts"]) == len(parity["labels"]) == len(parity["logits"]) == 80
    report = json.loads((finetuned / "report.json").read_text(encoding="utf-8"))
    assert len(report["seeds"]) == 2 and report["seed_summary"]["chosen_seed"] in (0, 1)
    # --class-weights auto on a split with about as many examples per route: no weights
    assert report["config"]["class_weights_requested"] == "auto" and report["config"]["class_weights"] == "none"
    assert report["config"]["label_count_ratio"] < 10
    assert report["baseline"]["settings"]["ngram_range"] == [1, 3]
    assert {"accuracy", "macro_f1", "per_class", "ece", "ece_uncalibrated", "abstain_rate"} <= set(report["dev"])
    assert {"accuracy", "macro_f1", "per_class", "ece", "train_seconds"} <= set(report["baseline"])
    # the タクシー floor is met on dev by the stored offsets
    if task["min_recall"][CAUSE]["reached_on_dev"]:
        assert report["dev"]["per_class"][CAUSE]["recall"] >= 0.8
    md = (finetuned / "report.md").read_text(encoding="utf-8")
    assert "TF-IDF" in md and "macro-F1" in md and CAUSE in md
    for png in ("confusion.png", "reliability.png", "coverage.png"):
        data = (finetuned / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


def test_evaluate_matches_finetune_report(finetuned, split, tmp_path):
    out = tmp_path / "eval.json"
    rc = main(["evaluate", "classify", "--model", str(finetuned), "--data", str(split / "dev.jsonl"),
               "--output-json", str(out), "--threads", "1", "--no-progress"])
    assert rc == 0
    res = json.loads(out.read_text(encoding="utf-8"))
    assert {"accuracy", "macro_f1", "per_class", "abstain_rate", "n"} <= set(res)
    assert res["n"] == 80
    assert set(res["per_class"][CAUSE]) >= {"precision", "recall", "f1", "support"}
    # the saved bundle is the median-seed model the report describes: same dev figures
    report = json.loads((finetuned / "report.json").read_text(encoding="utf-8"))
    assert res["accuracy"] == pytest.approx(report["dev"]["accuracy"])
    assert res["abstain_rate"] == pytest.approx(report["dev"]["abstain_rate"])


def test_bundle_logits_route_through_numpy_rule(finetuned, split):
    """The PyTorch model + models.classify.decision.route reproduce the parity sample's logits and decisions."""
    from denki.models.bundle.format import read_task
    from denki.models.classify.predict import torch_logits_fn
    from denki.models.classify.decision import route

    from denki.models.classify.fusion import fuse
    from denki.models.classify.lexical import LexicalModel

    bundle = finetuned / "bundle"
    parity = json.loads((bundle / "parity_sample.json").read_text(encoding="utf-8"))
    logits = torch_logits_fn(bundle, device="cpu", progress=False)(parity["texts"][:16])
    fusion = read_task(bundle)["fusion"]  # the fixture asks for --fusion on: the logits are the fused ones
    lex = LexicalModel.load(bundle).logits(parity["texts"][:16])
    want = fuse(np.asarray(parity["logits"][:16]), lex, fusion["mode"], fusion["weight"])
    np.testing.assert_allclose(logits, want, atol=1e-4)
    out = route(logits, read_task(bundle), lex)  # the out-of-scope rule reads the TF-IDF logits
    assert all(o["route"] in (o["label"], "human") for o in out)


def test_epochs_zero_refits_the_rule_only(finetuned, split, tmp_path):
    from denki.models.bundle.format import read_task

    rc = main(["finetune", "classify", "--model", str(finetuned), "--train", str(split / "train.jsonl"),
               "--dev", str(split / "dev.jsonl"), "--out", str(tmp_path / "refit"), "--epochs", "0",
               "--target-coverage", "0.5", "--no-baseline", "--max-length", "64", "--no-progress"])
    assert rc == 0
    old = json.loads((finetuned / "report.json").read_text(encoding="utf-8"))
    new = json.loads((tmp_path / "refit" / "report.json").read_text(encoding="utf-8"))
    assert new["seeds"][0]["macro_f1"] == pytest.approx(old["seeds"][0 if old["seed_summary"]["chosen_seed"] == 0
                                                                  else 1]["macro_f1"])
    assert read_task(tmp_path / "refit" / "bundle")["abstention"]["mode"] == "coverage"
    assert new["dev"]["abstain_rate"] == pytest.approx(0.5, abs=0.05)


def test_random_init_from_csv_and_gz(split, tiny_tokenizer_dir, tmp_path):
    rows = [json.loads(x) for x in (split / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    with open(tmp_path / "train.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["question", "answer_type"])
        w.writerows([[r["text"], r["label"]] for r in rows])
    with gzip.open(tmp_path / "dev.jsonl.gz", "wb") as f:
        f.write((split / "dev.jsonl").read_bytes().replace(b'"text"', b'"question"').replace(b'"label"',
                                                                                              b'"answer_type"'))
    rc = main(["finetune", "classify", "--init-random", "tiny", "--tokenizer", str(tiny_tokenizer_dir),
               "--train", str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.jsonl.gz"),
               "--text-field", "question", "--label-field", "answer_type", "--out", str(tmp_path / "rand"),
               "--target-coverage", "0.8", "--no-baseline", *FT[:1], "1", *FT[2:]])
    assert rc == 0
    report = json.loads((tmp_path / "rand" / "report.json").read_text(encoding="utf-8"))
    assert report["model"] == {"init": "random", "size": "tiny"} and report["baseline"] is None
    assert report["dev"]["abstain_rate"] == pytest.approx(0.2, abs=0.05)


@pytest.mark.parametrize("mode,counts,want", [
    ("auto", [987, 410, 293, 278, 25, 7], "balanced"),  # jaquad-qtype's experiment sample: ratio 141
    ("auto", [254, 251, 123], "none"),                   # livedoor-title's: ratio 2.1
    ("auto", [10, 1], "balanced"),                       # exactly the threshold
    ("none", [100, 1], "none"), ("balanced", [5, 5], "balanced"),
])
def test_resolve_class_weights(mode, counts, want):
    from denki.models.classify.finetune import resolve_class_weights

    got, ratio = resolve_class_weights(mode, np.array(counts))
    assert got == want and ratio == pytest.approx(max(counts) / min(counts))


@pytest.mark.parametrize("n,batch,want", [
    (2000, 32, (10, 3)),    # the experiment's samples: the 10 / 3 the defaults were measured with
    (5000, 32, (10, 3)),    # larger sets keep 10 epochs
    (1000, 32, (20, 6)),    # 32 updates per epoch → 20 epochs for ≥ 630 updates
    (500, 32, (40, 12)),
    (250, 32, (40, 12)),    # capped at 40 epochs
    (3, 32, (40, 12)),
])
def test_default_schedule(n, batch, want):
    from denki.models.classify.finetune import AUTO_MIN_UPDATES, default_schedule

    epochs, patience = default_schedule(n, batch)
    assert (epochs, patience) == want
    assert epochs == 40 or epochs * -(-n // batch) >= AUTO_MIN_UPDATES


def test_small_training_set_gets_more_epochs(split, pretrained, tmp_path, capsys):
    """Without --epochs a small training file gets the step-based schedule, printed and recorded in the report."""
    n = len((split / "train.jsonl").read_text(encoding="utf-8").splitlines())
    rc = main(["finetune", "classify", "--model", str(pretrained), "--train", str(split / "train.jsonl"),
               "--dev", str(split / "dev.jsonl"), "--out", str(tmp_path / "run"), "--no-baseline", "--seeds", "1",
               "--patience", "1", "--max-length", "64", "--threads", "1", "--no-progress"])
    assert rc == 0
    from denki.models.classify.finetune import default_schedule

    epochs, _ = default_schedule(n, 32)
    assert epochs > 10 and f"schedule: up to {epochs} epochs, patience 1" in capsys.readouterr().out
    rep = json.loads((tmp_path / "run" / "report.json").read_text(encoding="utf-8"))
    assert rep["config"]["epochs"] == epochs and rep["config"]["epochs_requested"] is None
    assert rep["config"]["patience"] == 1 and rep["config"]["patience_requested"] == 1
    assert 1 <= rep["seeds"][0]["epochs_run"] <= epochs


def test_auto_class_weights_balance_a_skewed_split(split, pretrained, tmp_path, capsys):
    """A route with under a tenth of the others' examples turns the balanced loss on, and the report says so."""
    rows = [json.loads(x) for x in (split / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    kept, seen = [], 0
    for r in rows:  # keep 3 of the ~37 タクシー training rows
        if r["label"] == CAUSE:
            seen += 1
            if seen > 3:
                continue
        kept.append(r)
    train = _jsonl(tmp_path / "train.jsonl", kept)
    rc = main(["finetune", "classify", "--model", str(pretrained), "--train", str(train),
               "--dev", str(split / "dev.jsonl"), "--out", str(tmp_path / "run"), "--no-baseline",
               *FT[:1], "1", *FT[2:]])
    assert rc == 0
    assert "class weights: balanced (--class-weights auto" in capsys.readouterr().out
    cfg = json.loads((tmp_path / "run" / "report.json").read_text(encoding="utf-8"))["config"]
    assert cfg["class_weights"] == "balanced" and cfg["class_weights_requested"] == "auto"
    assert cfg["label_count_ratio"] >= 10
    assert cfg["epochs"] == 1 and cfg["epochs_requested"] == 1  # an explicit --epochs is kept


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("train_rows,dev_rows,where,needle", [
    ([{"text": "a", "label": "x"}, {"text": "b", "label": "y"}],
     [{"text": "a", "label": "x"}, {"text": "c", "label": "z"}], "dev.jsonl:2 (field 'label')", "'z'"),
    ([{"text": "a", "label": "x"}, {"text": "b", "label": "x"}],
     [{"text": "a", "label": "x"}], "train.jsonl (field 'label')", "at least 2 distinct labels"),
    ([{"text": "a", "label": "x"}, {"txt": "b", "label": "y"}],
     [{"text": "a", "label": "x"}], "train.jsonl:2 (field 'text')", "missing"),
    ([{"text": "a", "label": "x"}, {"text": "", "label": "y"}],
     [{"text": "a", "label": "x"}], "train.jsonl:2 (field 'text')", "empty"),
])
def test_cli_bad_input_is_a_clear_error(tmp_path, pretrained, capsys, train_rows, dev_rows, where, needle):
    tr, dv = _jsonl(tmp_path / "train.jsonl", train_rows), _jsonl(tmp_path / "dev.jsonl", dev_rows)
    rc = main(["finetune", "classify", "--model", str(pretrained), "--train", str(tr), "--dev", str(dv),
               "--out", str(tmp_path / "o"), *FT])
    err = capsys.readouterr().err
    assert rc == 2 and where in err and needle in err and "Traceback" not in err
    assert not (tmp_path / "o" / "bundle").exists()


def test_evaluate_rejects_unknown_label(finetuned, tmp_path, capsys):
    p = _jsonl(tmp_path / "x.jsonl", [{"text": "今夜泊まれるホテルはありますか?", "label": "宿泊"}, {"text": "何?", "label": "Spam"}])
    assert main(["evaluate", "classify", "--model", str(finetuned), "--data", str(p), "--no-progress"]) == 2
    assert "x.jsonl:2 (field 'label')" in capsys.readouterr().err


def test_evaluate_onnx_bundle_matches_pytorch(classifier_bundle, onnx_classifier, tmp_path):
    """`denki evaluate classify` scores an ONNX bundle through serve's runtime with the same metrics code."""
    from .conftest import inquiry_rows

    data = _jsonl(tmp_path / "d.jsonl", [{"title": r["title"], "label": r["label"]} for r in inquiry_rows()])
    res = {}
    for name, bundle in (("torch", classifier_bundle), ("onnx", onnx_classifier)):
        out = tmp_path / f"{name}.json"
        assert main(["evaluate", "classify", "--model", str(bundle), "--data", str(data), "--output-json", str(out),
                     "--device", "cpu", "--no-progress"]) == 0
        res[name] = json.loads(out.read_text(encoding="utf-8"))
    assert res["onnx"]["kind"] == "onnx-classifier" and res["onnx"]["n"] == res["torch"]["n"] == 60
    assert abs(res["onnx"]["accuracy"] - res["torch"]["accuracy"]) <= 2 / 60  # fp32 ONNX: at most a tie flips
    assert abs(res["onnx"]["abstain_rate"] - res["torch"]["abstain_rate"]) <= 2 / 60


@pytest.mark.extended
def test_extended_livedoor_titles_nine_labels(tiny_tokenizer_dir, tmp_path):
    """Extended (needs ../shared): news titles of livedoor_mini (9 labels, text in the ``title`` field of rows that
    also carry a long ``text`` body) through `finetune classify` and `evaluate classify`."""
    rows = [json.loads(x) for x in shared("livedoor_mini.jsonl").read_text(encoding="utf-8").splitlines()]
    tr = _jsonl(tmp_path / "train.jsonl", [r for i, r in enumerate(rows) if i % 4])
    dv = _jsonl(tmp_path / "dev.jsonl", [r for i, r in enumerate(rows) if i % 4 == 0])
    out = tmp_path / "ld"
    rc = main(["finetune", "classify", "--init-random", "tiny", "--tokenizer", str(tiny_tokenizer_dir),
               "--train", str(tr), "--dev", str(dv), "--text-field", "title", "--out", str(out),
               "--target-coverage", "0.8", *FT[:1], "1", *FT[2:]])
    assert rc == 0
    from denki.models.bundle.format import read_task

    task = read_task(out / "bundle")
    assert len(task["labels"]) == 9 and task["text_field"] == "title"
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert len(report["dev"]["per_class"]) == 9 and report["baseline"]["macro_f1"] >= 0
    res_path = tmp_path / "eval.json"
    assert main(["evaluate", "classify", "--model", str(out), "--data", str(dv), "--output-json", str(res_path),
                 "--no-progress"]) == 0
    res = json.loads(res_path.read_text(encoding="utf-8"))
    assert res["n"] == len(rows) // 4 and res["accuracy"] == pytest.approx(report["dev"]["accuracy"])


def test_fused_router_exports_and_serves_without_change_for_the_caller(finetuned, split, tmp_path):
    """A fused bundle (--fusion on): the report shows the three routers, the export carries and gates the lexical
    part, and the ONNX runtime, `denki evaluate` and the batch CLI give the PyTorch evaluation's decisions."""
    from denki.models.bundle.format import read_task, verify_bundle
    from denki.models.export.onnx import export_bundle
    from denki.serve.batch import classify_file
    from denki.serve.runtime import Predictor

    report = json.loads((finetuned / "report.json").read_text(encoding="utf-8"))
    fu = report["fusion"]
    assert fu["shipped"] and fu["requested"] == "on" and fu["mode"] in ("prob", "loglinear")
    assert 0 <= fu["weight"] <= 1 and fu["crossfit"]["folds"] >= 2 and len(fu["per_seed"]) == 2
    assert fu["encoder_macro_f1"] == pytest.approx(report["seeds"][[s["seed"] for s in report["seeds"]].index(
        report["seed_summary"]["chosen_seed"])]["macro_f1"])
    assert fu["lexical_macro_f1"] == pytest.approx(report["baseline"]["macro_f1"], abs=1e-9)
    md = (finetuned / "report.md").read_text(encoding="utf-8")
    assert "Fusion with the TF-IDF model" in md and "cross-fitted" in md
    manifest = verify_bundle(finetuned / "bundle")
    assert {"lexical.safetensors", "lexical_vocab.json"} <= set(manifest["files"])

    out = tmp_path / "onnx"
    m = export_bundle(finetuned, out, progress=False)  # fp32 only: the evaluation below compares exact decisions
    assert m["metrics"]["parity"]["lexical"]["max_abs_diff_probs"] < 1e-4
    assert read_task(out)["fusion"] == read_task(finetuned / "bundle")["fusion"]
    res = {}
    for name, bundle in (("torch", finetuned), ("onnx", out)):
        path = tmp_path / f"{name}.json"
        assert main(["evaluate", "classify", "--model", str(bundle), "--data", str(split / "dev.jsonl"),
                     "--output-json", str(path), "--device", "cpu", "--no-progress"]) == 0
        res[name] = json.loads(path.read_text(encoding="utf-8"))
    assert abs(res["onnx"]["accuracy"] - res["torch"]["accuracy"]) <= 1 / 80  # fp32: at most a tie flips
    assert res["torch"]["accuracy"] == pytest.approx(report["dev"]["accuracy"])

    p = Predictor(out, backend="fp32")
    assert p.lexical is not None and "fused with TF-IDF" in p.describe()
    texts = [json.loads(line)["text"] for line in (split / "dev.jsonl").read_text(encoding="utf-8").splitlines()]
    direct = p.classify(texts)
    assert "lexical_ms" in p.last_timing
    plain = Predictor(out, backend="fp32")
    # the encoder alone: neither the fusion nor the out-of-scope rule (both read the TF-IDF model)
    plain.lexical, plain.task = None, {k: v for k, v in plain.task.items() if k not in ("fusion", "scope")}
    assert [r["label"] for r in direct] != [r["label"] for r in plain.classify(texts)] or fu["weight"] == 1.0
    scored = tmp_path / "scored.jsonl"
    classify_file(out, split / "dev.jsonl", scored, backend="fp32", workers=2, progress=False)
    rows = [json.loads(line) for line in scored.read_text(encoding="utf-8").splitlines()]
    key = next(k for k in rows[0] if k.endswith("route"))  # prefixed: the input already has a "label" field
    assert [r[key] for r in rows] == [d["route"] for d in direct]


def test_fusion_off_and_fusion_without_baseline(split, pretrained, tmp_path, capsys):
    from denki.models.bundle.format import read_task, verify_bundle

    out = tmp_path / "off"
    assert main(["finetune", "classify", "--model", str(pretrained), "--train", str(split / "train.jsonl"),
                 "--dev", str(split / "dev.jsonl"), "--out", str(out), "--fusion", "off", "--seeds", "1",
                 "--scope-keep", "0", *FT[2:]]) == 0
    assert "fusion" not in read_task(out / "bundle") and "scope" not in read_task(out / "bundle")
    assert not any(f.startswith("lexical") for f in verify_bundle(out / "bundle")["files"])
    # fusion off keeps the out-of-scope rule by default, and with it the TF-IDF files it reads
    assert main(["finetune", "classify", "--model", str(pretrained), "--train", str(split / "train.jsonl"),
                 "--dev", str(split / "dev.jsonl"), "--out", str(tmp_path / "off-scope"), "--fusion", "off",
                 "--seeds", "1", *FT[2:]]) == 0
    task = read_task(tmp_path / "off-scope" / "bundle")
    assert "fusion" not in task and task["scope"]["score"] == "tfidf-msp"
    assert {"lexical.safetensors", "lexical_vocab.json"} <= set(verify_bundle(tmp_path / "off-scope" / "bundle")["files"])
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["fusion"] is None
    assert main(["finetune", "classify", "--model", str(pretrained), "--train", str(split / "train.jsonl"),
                 "--dev", str(split / "dev.jsonl"), "--out", str(tmp_path / "x"), "--fusion", "on",
                 "--no-baseline", *FT]) == 2
    assert "--fusion on needs the TF-IDF model" in capsys.readouterr().err
