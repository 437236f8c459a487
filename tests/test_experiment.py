"""`denki experiment electra-vs-mlm` at CI scale: one tiny budget, one seed, the shipped samples, one epoch.

Checks the report files and their structure, the plot, the RTD diagnostics, and that a second run reuses every
cached stage. Never asserts who wins (at this budget nothing is learnt; see DESIGN.md).
"""
from __future__ import annotations

import json
import time

import pytest

from denki.app.cli import main
from tests.conftest import SAMPLE_CORPUS, SAMPLE_QA_DEV, SAMPLE_QA_TRAIN, routing_rows


@pytest.fixture(scope="module")
def experiment(tmp_path_factory, tiny_tokenizer_dir):
    root = tmp_path_factory.mktemp("experiment")
    # 180 routing-sample questions (30 per route), in a field named "question": the task spec names it
    rows = [json.dumps({"id": r["id"], "question": r["text"], "label": r["label"]}, ensure_ascii=False)
            for r in routing_rows(180)]
    (root / "route_train.jsonl").write_text("".join(r + "\n" for i, r in enumerate(rows) if i % 4),
                                            encoding="utf-8")
    (root / "route_dev.jsonl").write_text("".join(r + "\n" for i, r in enumerate(rows) if i % 4 == 0),
                                          encoding="utf-8")
    qa_task = root / "qa_task.json"  # the JSON form of an own task definition
    qa_task.write_text(json.dumps({"name": "qa-mini", "kind": "qa", "train": str(SAMPLE_QA_TRAIN),
                                   "dev": str(SAMPLE_QA_DEV)}), encoding="utf-8")
    out = root / "out"
    # the corpus: the sample text file plus the task's own questions read from its JSONL (a FILE:FIELD source)
    argv = ["experiment", "electra-vs-mlm", "--corpus", str(SAMPLE_CORPUS), f"{root / 'route_train.jsonl'}:question",
            "--tokenizer", str(tiny_tokenizer_dir), "--out", str(out), "--size", "tiny",
            "--flops-budgets", "2e10", "--task", f"route=classify:{root / 'route_train.jsonl'}:"
                                                 f"{root / 'route_dev.jsonl'}:question",
            "--task", str(qa_task), "--seeds", "1", "--epochs", "1", "--max-train", "40", "--max-dev", "30",
            "--batch-size", "8", "--seq-len", "64", "--max-length", "64", "--qa-max-length", "192",
            "--cache-dir", str(root / "cache"), "--threads", "1", "--no-progress", "--electra15"]
    t0 = time.perf_counter()
    assert main(argv) == 0
    first = time.perf_counter() - t0
    return out, argv, first


def _routing_only(argv: list[str], out) -> list[str]:
    """The fixture's command with another --out, the routing task only and no ELECTRA-15% ablation."""
    a = list(argv)
    a[a.index("--out") + 1] = str(out)
    keep = [i for i, x in enumerate(a) if x == "--task"]
    a = a[:keep[1]] + a[keep[1] + 2:]
    a.remove("--electra15")
    return a


def test_report_files_and_structure(experiment):
    out, _, _ = experiment
    for name in ("report.json", "report.md", "score_vs_flops.png", "experiment.json"):
        assert (out / name).is_file(), name
    assert (out / "score_vs_flops.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rep = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert rep["budgets"] == [2e10] and rep["seeds"] == 1
    assert set(rep["results"]) == {"route", "qa-mini", "qa-mini (span F1)"}
    assert rep["results"]["route"]["metric"] == "macro_f1" and rep["results"]["qa-mini"]["metric"] == "best_f1"
    assert rep["results"]["qa-mini (span F1)"]["metric"] == "HasAns_span_f1"
    for name, res in rep["results"].items():
        assert set(res["cells"]) == {"electra-2e10", "mlm-2e10", "electra15-2e10", "random"}
        for c in res["cells"].values():
            assert c["n"] == 1 and c["min"] <= c["median"] <= c["max"]
        if name.endswith("(span F1)"):  # no constant-answer reference for the span view
            assert res["trivial"] is None and all(0 <= c["median"] <= 100 for c in res["cells"].values())
        else:
            assert res["trivial"]["score"] >= 0 and res["trivial"]["answer"].startswith("always")
        comp = res["electra_vs_mlm"]["2e10"]
        assert comp["seed_sd_pooled"] is None and "seed noise not measured" in comp["verdict"]
        assert "seed noise not measured" in res["electra_vs_electra15"]["2e10"]["verdict"]
    lo, hi = (0, 1), (0, 100)
    for r in rep["per_seed"]:
        rng = lo if r["task"] == "route" else hi
        key = "macro_f1" if r["task"] == "route" else "best_f1"
        assert rng[0] <= r[key] <= rng[1]
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## route" in md and "## qa-mini" in md and "| budget (FLOPs) | ELECTRA | MLM | ELECTRA 15% | random init |" in md
    assert "Does ELECTRA win at this scale?" in md and "## Ablation: ELECTRA 15%" in md
    assert "ELECTRA − ELECTRA 15% =" in md
    assert "Reference: a constant answer" in md and "## qa-mini (span F1) (qa, dev HasAns_span_f1)" in md
    assert "score_vs_flops.png" in md and "Command: `" in md and rep["command"]


def test_rtd_diagnostics_and_equal_flops(experiment):
    out, _, _ = experiment
    rep = json.loads((out / "report.json").read_text(encoding="utf-8"))
    rows = {r["model"]: r for r in rep["pretraining"]}
    assert set(rows) == {"electra-2e10", "mlm-2e10", "electra15-2e10"}
    e, m = rows["electra-2e10"], rows["mlm-2e10"]
    for r in (e, m):  # both stop at the first step past the budget: equal compute up to one step
        assert 2e10 <= r["flops"] < 2e10 * 1.5 and r["steps"] >= 1
        assert 0 <= r["gen_acc"] <= 1
        assert r["cls_probe"]["n_inputs"] > 1 and r["cls_probe"]["cls_std"] >= 0
    for k in ("replace_rate", "disc_acc", "disc_precision", "disc_recall"):
        assert 0 <= e[k] <= 1
    assert e["all_original_acc"] == pytest.approx(1 - e["replace_rate"])
    assert m["disc_recall"] is None  # MLM has no discriminator
    assert rep["random_init_probe"]["cls_relative_std"] > 0
    assert set(rep["collapse"]) == {"electra-2e10", "mlm-2e10", "electra15-2e10"}
    e15 = rows["electra15-2e10"]  # the ablation: same generator/discriminator, same FLOPs per step as ELECTRA
    assert e15["steps"] == e["steps"] and e15["flops"] == pytest.approx(e["flops"], rel=0.05)
    assert all(isinstance(v, bool) for f in rep["collapse"].values() for v in f.values())


def test_second_run_skips_every_stage(experiment, capsys):
    out, argv, first = experiment
    before = (out / "finetune" / "random" / "route" / "seed-0" / "result.json").stat().st_mtime_ns
    capsys.readouterr()
    t0 = time.perf_counter()
    assert main(argv) == 0
    second = time.perf_counter() - t0
    text = capsys.readouterr().out
    assert "already finished" in text and text.count("(cached)") == 8
    assert (out / "finetune" / "random" / "route" / "seed-0" / "result.json").stat().st_mtime_ns == before
    assert second < max(15.0, first / 3), (first, second)


def test_changed_settings_are_refused_and_bad_tasks_named(experiment, tmp_path, capsys):
    out, argv, _ = experiment
    changed = list(argv)
    changed[changed.index("--epochs") + 1] = "2"
    assert main(changed) == 2
    assert "other settings" in capsys.readouterr().err
    bad = list(argv)
    bad[bad.index("--out") + 1] = str(tmp_path / "o")
    bad += ["--tasks", "livedoor-title", "--data-dir", str(tmp_path / "nowhere")]
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert "livedoor_train.jsonl.gz" in err and "not found" in err
    assert main(bad[:-4] + ["--tasks", "no-such-task"]) == 2
    assert "unknown task" in capsys.readouterr().err


def test_a_task_pointing_at_other_data_is_fine_tuned_again(experiment, capsys):
    out, argv, _ = experiment
    spec = next(a for a in argv if a.startswith("route="))
    dev = spec.split(":")[2]
    rows = open(dev, encoding="utf-8").read().splitlines()
    dev2 = dev.replace("route_dev", "route_dev_small")
    with open(dev2, "w", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in rows[:30]))
    capsys.readouterr()
    assert main([spec.replace(dev, dev2) if a == spec else a for a in argv]) == 0
    text = capsys.readouterr().out
    assert text.count("now points at other data") == 4 and text.count("(cached)") == 4  # the QA cells stay
    rep = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert all(r["data"]["dev"] == dev2 for r in rep["per_seed"] if r["task"] == "route")


def test_objectives_subset_and_pretraining_variant(experiment, tmp_path, capsys):
    """`--objectives electra --embeddings separate --pretrain-dropout 0 --mask-prob 0.25`: only that encoder is pretrained (with
    those settings, recorded), the report says them; a wrong objective name is a clear error."""
    _, argv, _ = experiment
    a = _routing_only(argv, tmp_path / "variant")
    a += ["--objectives", "electra", "--embeddings", "separate", "--pretrain-dropout", "0", "--mask-prob", "0.25",
          "--no-random-init"]
    assert main(a) == 0
    rep = json.loads((tmp_path / "variant" / "report.json").read_text(encoding="utf-8"))
    assert set(rep["results"]["route"]["cells"]) == {"electra-2e10"}
    ident = json.loads((tmp_path / "variant" / "pretrain" / "electra-2e10" / "run.json").read_text())["identity"]
    assert ident["embeddings"] == "separate" and ident["dropout"] == 0.0 and ident["mask_prob"] == 0.25
    assert "mask rate 0.25, ELECTRA λ 50.0, embeddings separate, dropout 0.0" in (tmp_path / "variant" / "report.md").read_text()
    capsys.readouterr()
    assert main(a[:-9] + ["--objectives", "electra,bert"]) == 2
    assert "--objectives" in capsys.readouterr().err


def test_jobs_run_stages_in_parallel_with_the_serial_results(experiment, tmp_path, capsys):
    """`--jobs 2`: the pretraining runs and then the fine-tuning runs go to 2 worker processes; every cell's
    score equals the serial run's (same seeds, one thread each), and the report is complete."""
    out, argv, _ = experiment
    a = _routing_only(argv, tmp_path / "jobs")
    capsys.readouterr()
    assert main(a + ["--jobs", "2"]) == 0
    text = capsys.readouterr().out
    assert "in parallel, 2 at a time" in text and text.count("(started, 2 at a time)") == 3
    rep = json.loads((tmp_path / "jobs" / "report.json").read_text(encoding="utf-8"))
    assert rep["finetune_runs_done"] == rep["finetune_runs_planned"] == 3
    for m in ("electra-2e10", "mlm-2e10", "random"):
        par = json.loads((tmp_path / "jobs" / "finetune" / m / "route" / "seed-0" / "result.json").read_text())
        ser = json.loads((out / "finetune" / m / "route" / "seed-0" / "result.json").read_text())
        assert (par["macro_f1"], par["accuracy"]) == (ser["macro_f1"], ser["accuracy"]), m
    assert main(a + ["--jobs", "0"]) == 2
    assert "--jobs" in capsys.readouterr().err
