"""End to end on the shipped QA sample (samples/qa_{train,dev}.jsonl, 300 / 150 JaQuAD questions, a third
unanswerable) with a tiny random-init encoder: `denki finetune qa` → bundle (task.json, parity
sample, report) → `denki evaluate qa` (official SQuAD v2 key names, predictions file). A few dozen steps only:
this checks the plumbing and the decision rule, not quality."""
from __future__ import annotations

import json
import math

import pytest

from denki.app.cli import main
from denki.models.bundle.format import read_manifest, read_task, verify_bundle

from .conftest import SAMPLE_QA_DEV, SAMPLE_QA_TRAIN

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def qa_bundle(tmp_path_factory, tiny_tokenizer_dir):
    import torch

    from denki.models.bundle.pytorch import random_init_bundle

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("qa")
    random_init_bundle("tiny", tiny_tokenizer_dir, root / "pre", seed=0)
    out = root / "qa"
    rc = main(["finetune", "qa", "--model", str(root / "pre"), "--train", str(SAMPLE_QA_TRAIN),
               "--dev", str(SAMPLE_QA_DEV), "--out", str(out), "--max-length", "192",
               "--doc-stride", "64", "--max-answer-length", "20", "--seeds", "2", "--max-steps", "12",
               "--batch-size", "16", "--max-dev-examples", "60", "--no-progress", "--threads", "1"])
    assert rc == 0
    return root, out


def test_finetune_writes_a_verified_qa_bundle_with_task_and_report(qa_bundle):
    root, out = qa_bundle
    bundle = out / "bundle"  # the deployable bundle; reports and plots stay beside it in OUT/
    manifest = verify_bundle(bundle, kinds=("qa",))
    assert "task.json" in manifest["files"] and "parity_sample.json" in manifest["files"]
    assert "report.json" not in manifest["files"]
    task = read_task(bundle)
    assert task["task"] == "qa" and task["max_length"] == 192 and task["doc_stride"] == 64
    assert task["max_answer_length"] == 20 and math.isfinite(task["null_threshold"])
    rep = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert rep["null_threshold"] == task["null_threshold"]
    assert rep["dev_metrics"]["best_f1_thresh"] == pytest.approx(task["null_threshold"])
    # the stored threshold reproduces the tuned F1 on dev (the report's tuned column)
    assert rep["dev_metrics"]["f1"] == pytest.approx(rep["dev_metrics_threshold0"]["best_f1"])
    assert [s["seed"] for s in rep["seeds"]] == [0, 1] and rep["kept_seed"] in (0, 1)
    assert all(s["steps"] == 12 for s in rep["seeds"])
    # no --lr: the tiny encoder's default (1e-3, as for the router; 3e-4 lost on JaQuAD), recorded where it was used
    assert rep["settings"]["lr"] == 1e-3 and all(s["lr"] == 1e-3 for s in rep["seeds"])
    assert set(rep["errors"]) == {"wrong_span", "false_no_answer", "false_answer"}
    for img in ("score_diff_hist.png", "f1_vs_threshold.png"):
        assert (out / img).stat().st_size > 1000
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "HasAns_f1" in md and "NoAns_exact" in md and "Chosen null threshold" in md
    parity = json.loads((bundle / "parity_sample.json").read_text(encoding="utf-8"))["examples"]
    assert 0 < len(parity) <= 100 and {"id", "question", "context", "expected"} <= set(parity[0])
    assert read_manifest(bundle)["source"]["pretrained"] == str(root / "pre")


def test_evaluate_writes_official_keys_and_exact_substring_predictions(qa_bundle, capsys):
    root, out = qa_bundle
    mj, pj = root / "metrics.json", root / "preds.json"
    data = SAMPLE_QA_DEV
    rc = main(["evaluate", "qa", "--model", str(out), "--data", str(data), "--output-json", str(mj),
               "--predictions", str(pj), "--no-progress", "--threads", "1"])
    assert rc == 0
    m = json.loads(mj.read_text(encoding="utf-8"))
    for k in ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_f1", "best_f1_thresh",
              "total"):
        assert k in m, k
    assert m["total"] == 150 and m["HasAns_total"] == 100 and m["NoAns_total"] == 50
    assert m["null_threshold"] == read_task(out / "bundle")["null_threshold"]
    preds = json.loads(pj.read_text(encoding="utf-8"))
    contexts = {json.loads(line)["id"]: json.loads(line)["context"] for line in data.open(encoding="utf-8")}
    assert set(preds) == set(contexts)
    assert all(p == "" or p in contexts[q] for q, p in preds.items())
    assert '"f1"' in capsys.readouterr().out


def test_evaluate_refuses_a_pretrained_bundle_and_a_missing_file(qa_bundle, capsys):
    root, out = qa_bundle
    assert main(["evaluate", "qa", "--model", str(root / "pre"), "--data", str(SAMPLE_QA_DEV)]) == 2
    assert "bundle kind is 'pretrained'" in capsys.readouterr().err
    assert main(["evaluate", "qa", "--model", str(out), "--data", str(root / "nope.jsonl")]) == 2
    assert "file not found" in capsys.readouterr().err


def test_answerable_head_variant_trains_compares_rules_and_evaluates(qa_bundle, tmp_path, capsys):
    root, _ = qa_bundle
    out = tmp_path / "qa_head"
    rc = main(["finetune", "qa", "--model", str(root / "pre"), "--train", str(SAMPLE_QA_TRAIN),
               "--dev", str(SAMPLE_QA_DEV), "--out", str(out), "--max-length", "192",
               "--doc-stride", "64", "--max-steps", "6", "--batch-size", "16", "--max-train-examples", "100",
               "--max-dev-examples", "40", "--answerable-head", "--no-progress", "--threads", "1"])
    assert rc == 0
    # --no-progress: plain progress lines instead of a bar (6 steps: every step is a 5 % mark), ending at 6/6
    steps = [ln.split()[4] for ln in capsys.readouterr().out.splitlines() if ln.startswith("qa: seed 0 step ")]
    assert steps[-1] == "6/6," and len(steps) == 6
    task = read_task(out / "bundle")
    assert task["answerable_head"] is True and task["null_rule"] in ("cls", "head", "combined")
    rep = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert set(rep["seeds"][0]["dev_metrics_by_null_rule"]) == {"cls", "head", "combined"}
    assert "answerable head" in (out / "report.md").read_text(encoding="utf-8")
    mj = tmp_path / "m.json"
    assert main(["evaluate", "qa", "--model", str(out), "--data", str(SAMPLE_QA_DEV),
                 "--max-examples", "30", "--output-json", str(mj), "--no-progress", "--threads", "1"]) == 0
    m = json.loads(mj.read_text(encoding="utf-8"))
    assert m["null_rule"] == task["null_rule"] and m["total"] == 30


def test_init_random_control_trains_from_scratch_and_needs_a_tokenizer(tiny_tokenizer_dir, tmp_path, capsys):
    out = tmp_path / "qa_rand"
    args = ["finetune", "qa", "--init-random", "tiny", "--train", str(SAMPLE_QA_TRAIN), "--dev", str(SAMPLE_QA_DEV),
            "--out", str(out), "--max-length", "192", "--doc-stride", "64", "--max-steps", "4",
            "--batch-size", "16", "--max-train-examples", "60", "--max-dev-examples", "30", "--no-progress",
            "--threads", "1", "--lr", "5e-4"]
    assert main(args) == 2  # no vocabulary to build the random model with
    assert "--init-random needs --tokenizer" in capsys.readouterr().err
    assert main(args + ["--tokenizer", str(tiny_tokenizer_dir)]) == 0
    rep = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert rep["source"] == {"init": "random", "size": "tiny"} and rep["settings"]["init_random"] == "tiny"
    assert rep["pretrained_health_warning"] is None and rep["seeds"][0]["steps"] == 4
    assert rep["settings"]["lr"] == 5e-4 and rep["seeds"][0]["lr"] == 5e-4  # a given --lr wins over the default
    manifest = verify_bundle(out / "bundle", kinds=("qa",))
    assert manifest["source"]["pretrained"] is None
    assert manifest["source"]["pretrained_source"] == {"init": "random", "size": "tiny"}
    assert (out / "bundle" / "vocab.txt").read_bytes() == (tiny_tokenizer_dir / "vocab.txt").read_bytes()
    # both sources at once is a usage error (argparse: exit 2)
    with pytest.raises(SystemExit):
        main(args + ["--tokenizer", str(tiny_tokenizer_dir), "--model", str(tmp_path)])


def test_fine_tuning_lr_defaults_by_encoder_width():
    from denki.models.training.defaults import default_finetune_lr, default_layer_decay

    assert [default_finetune_lr(h) for h in (128, 256, 768)] == [1e-3, 3e-4, 1e-4]  # tiny, small, base
    assert [default_layer_decay(h) for h in (128, 256, 768)] == [1.0, 0.8, 0.8]


def test_answerable_head_default_follows_the_pretraining_objective(qa_bundle, tmp_path, capsys):
    """No --answerable-head / --no-answerable-head: on for a bundle denki pretrained with ELECTRA (measured to help
    on JaQuAD), off for anything else; the report says which way it was chosen."""
    import shutil

    from denki.models.qa.config import default_answerable_head

    root, _ = qa_bundle
    electra = tmp_path / "electra"
    shutil.copytree(root / "pre", electra)
    mp = electra / "manifest.json"
    manifest = json.loads(mp.read_text(encoding="utf-8"))
    manifest["source"] = {**(manifest.get("source") or {}), "objective": "electra"}
    mp.write_text(json.dumps(manifest), encoding="utf-8")
    assert default_answerable_head(manifest) is True
    assert default_answerable_head({"kind": "pretrained", "source": {"objective": "mlm"}}) is False
    assert default_answerable_head({"kind": "pretrained", "source": {"init": "import"}}) is False
    assert default_answerable_head({"init": "random", "size": "tiny"}) is False and not default_answerable_head(None)
    args = ["--train", str(SAMPLE_QA_TRAIN), "--dev", str(SAMPLE_QA_DEV), "--max-length", "128", "--doc-stride",
            "64", "--max-steps", "2", "--batch-size", "8", "--max-train-examples", "40", "--max-dev-examples", "20",
            "--no-progress", "--threads", "1"]
    for model, extra, head, by in ((electra, [], True, "default"), (electra, ["--no-answerable-head"], False, "option"),
                                   (root / "pre", [], False, "default")):
        out = tmp_path / f"qa-{model.name}-{len(extra)}"
        assert main(["finetune", "qa", "--model", str(model), "--out", str(out), *args, *extra]) == 0
        assert read_task(out / "bundle")["answerable_head"] is head
        settings = json.loads((out / "report.json").read_text(encoding="utf-8"))["settings"]
        assert settings["answerable_head"] is head and settings["answerable_head_by"] == by
        assert ("training the answerable head (the default" in capsys.readouterr().err) is (head and by == "default")


def test_a_qa_bundle_fine_tunes_further_and_keeps_its_head(qa_bundle, tmp_path, capsys):
    """A QA model (such as the shipped QA checkpoint) is a starting point too: `finetune qa --model QA_BUNDLE` starts
    from its weights, span head included, and keeps its answerable head (or its absence) unless told otherwise."""
    from safetensors.torch import load_file

    from denki.models.qa.config import default_answerable_head

    root, plain = qa_bundle
    assert default_answerable_head(read_manifest(plain / "bundle")) is False
    args = ["--train", str(SAMPLE_QA_TRAIN), "--dev", str(SAMPLE_QA_DEV), "--max-length", "128", "--doc-stride",
            "64", "--max-steps", "2", "--batch-size", "8", "--max-train-examples", "40", "--max-dev-examples", "20",
            "--no-progress", "--threads", "1"]
    head = tmp_path / "head"
    assert main(["finetune", "qa", "--model", str(root / "pre"), "--out", str(head), "--answerable-head", *args]) == 0
    assert default_answerable_head(read_manifest(head / "bundle")) is True
    again = tmp_path / "again"
    assert main(["finetune", "qa", "--model", str(head), "--out", str(again), "--lr", "1e-9", *args]) == 0
    assert read_task(again / "bundle")["answerable_head"] is True
    before, after = load_file(head / "bundle" / "model.safetensors"), load_file(again / "bundle" / "model.safetensors")
    # lr 1e-9: two steps leave the weights where the QA model had them, the span head included (not a new head)
    for k in ("qa_outputs.weight", "answerable.0.weight", "answerable.2.weight"):
        key = next(n for n in before if n.endswith(k))
        assert (before[key] - after[key]).abs().max() < 1e-6, key


def test_eval_each_epoch_scores_dev_after_every_whole_epoch(qa_bundle, tmp_path, capsys):
    root, _ = qa_bundle
    out = tmp_path / "qa_epochs"
    # 40 questions → 3 windows-batches of 16 per epoch at most; 3 epochs: two mid-run scorings plus the final one
    rc = main(["finetune", "qa", "--model", str(root / "pre"), "--train", str(SAMPLE_QA_TRAIN),
               "--dev", str(SAMPLE_QA_DEV), "--out", str(out), "--max-length", "192", "--doc-stride", "64",
               "--epochs", "3", "--batch-size", "16", "--max-train-examples", "40", "--max-dev-examples", "20",
               "--eval-each-epoch", "--no-progress", "--threads", "1"])
    assert rc == 0
    rep = json.loads((out / "report.json").read_text(encoding="utf-8"))
    seed = rep["seeds"][0]
    curve = seed["epoch_scores"]
    assert [e["epoch"] for e in curve] == [1, 2, 3]
    per_epoch = curve[0]["step"]
    assert [e["step"] for e in curve] == [per_epoch, 2 * per_epoch, seed["steps"]] and seed["steps"] == 3 * per_epoch
    assert curve[-1]["best_f1"] == seed["dev_metrics"]["best_f1"]  # the last row is the kept model's own scoring
    assert all(0.0 <= e["best_f1"] <= 100.0 and e["null_rule"] for e in curve)
    assert "after epoch 2: dev best F1" in capsys.readouterr().err
    assert "Dev after each epoch" in (out / "report.md").read_text(encoding="utf-8")


def test_target_precision_stores_a_confidence_floor_that_evaluate_and_the_runtime_apply(qa_bundle, tmp_path, capsys):
    root, _ = qa_bundle
    out = tmp_path / "qa_sel"
    rc = main(["finetune", "qa", "--model", str(root / "pre"), "--train", str(SAMPLE_QA_TRAIN),
               "--dev", str(SAMPLE_QA_DEV), "--out", str(out), "--max-length", "192", "--doc-stride", "64",
               "--max-steps", "6", "--batch-size", "16", "--max-train-examples", "60", "--max-dev-examples", "60",
               "--target-precision", "0.6", "--no-progress", "--threads", "1"])
    assert rc == 0
    task = read_task(out / "bundle")
    cal = task["confidence"]
    assert cal["answer"]["n"] + cal["no_answer"]["n"] == 60 and cal["fitted_on"] == str(SAMPLE_QA_DEV)
    assert task["target_precision"] == 0.6 and 0.0 <= task["min_confidence"] <= 1.0
    assert isinstance(task["target_precision_reached"], bool)
    rep = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert rep["settings"]["target_precision"] == 0.6
    op = rep["selective"]["operating_point"]
    assert op["min_confidence"] == task["min_confidence"] and 0.0 <= op["coverage"] <= 1.0
    if task["target_precision_reached"]:
        assert op["right"] >= 0.6
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "Selective answering" in md and (out / "coverage.png").stat().st_size > 0
    # evaluate: the same table on a file, and the plot
    capsys.readouterr()
    png = tmp_path / "cov.png"
    assert main(["evaluate", "qa", "--model", str(out), "--data", str(SAMPLE_QA_DEV), "--max-examples", "40",
                 "--coverage-plot", str(png), "--no-progress", "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert "| coverage | questions | min confidence | right (F1 ≥ 0.5) | exact match |" in printed
    assert "Operating point" in printed and png.stat().st_size > 0
    # out of range: refused before any data is read
    assert main(["finetune", "qa", "--model", str(root / "pre"), "--train", str(SAMPLE_QA_TRAIN), "--dev",
                 str(SAMPLE_QA_DEV), "--out", str(tmp_path / "bad"), "--target-precision", "1.5",
                 "--no-progress"]) != 0
    assert "--target-precision must be between 0 and 1" in capsys.readouterr().err


def test_calibrate_gives_an_old_bundle_a_confidence_in_a_new_bundle(qa_bundle, tmp_path, capsys):
    _, out = qa_bundle  # fine-tuned by the fixture; its task.json is rewritten here without a calibration
    old = tmp_path / "old"
    import shutil

    from denki.models.bundle.format import write_manifest

    shutil.copytree(out / "bundle", old)
    task = read_task(old)
    for k in ("confidence", "min_confidence", "target_precision", "target_precision_reached"):
        task.pop(k, None)
    (old / "task.json").write_text(json.dumps(task), encoding="utf-8")
    m = read_manifest(old)
    write_manifest(old, m["kind"], source=m["source"], metrics=m["metrics"])
    before = (old / "task.json").read_bytes()
    new = tmp_path / "new"
    assert main(["calibrate", "qa", "--model", str(old), "--data", str(SAMPLE_QA_DEV), "--out", str(new),
                 "--target-precision", "0.5", "--no-progress", "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert "| coverage |" in printed and "calibrated bundle →" in printed
    assert (old / "task.json").read_bytes() == before  # the source is left as it is
    manifest = verify_bundle(new, kinds=("qa",))  # checksums rewritten for the new task.json
    t = read_task(new)
    assert t["confidence"]["answer"]["n"] + t["confidence"]["no_answer"]["n"] == 150
    assert t["target_precision"] == 0.5 and "min_confidence" in t
    assert t["null_threshold"] == task["null_threshold"] and manifest["source"]["calibrated"]["data"] == str(SAMPLE_QA_DEV)


def test_bf16_precision_runs_the_training_forward_under_autocast(qa_bundle, tmp_path, monkeypatch):
    """`--precision bf16`: each training step's forward runs under bf16 autocast (the speed-up on avx512_bf16/AMX
    CPUs), the report records it, and the saved bundle keeps fp32 weights; fp32 (the default) runs no autocast."""
    import torch
    from safetensors.torch import load_file

    import denki.models.qa.model as qa_model

    root, _ = qa_bundle
    seen = []
    real = qa_model.compute_loss

    def spy(model, batch):
        seen.append(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)
        return real(model, batch)

    monkeypatch.setattr(qa_model, "compute_loss", spy)
    args = ["--train", str(SAMPLE_QA_TRAIN), "--dev", str(SAMPLE_QA_DEV), "--max-length", "128", "--doc-stride",
            "64", "--max-steps", "2", "--batch-size", "8", "--max-train-examples", "40", "--max-dev-examples", "20",
            "--no-progress", "--threads", "1"]
    for precision, autocast in (("bf16", True), ("fp32", False)):
        seen.clear()
        out = tmp_path / precision
        assert main(["finetune", "qa", "--model", str(root / "pre"), "--out", str(out), "--precision", precision,
                     *args]) == 0
        assert seen == [autocast, autocast]
        assert json.loads((out / "report.json").read_text(encoding="utf-8"))["settings"]["precision"] == precision
        assert {t.dtype for t in load_file(out / "bundle" / "model.safetensors").values()} == {torch.float32}
