"""The README's main job as a test: `denki quickstart --no-demo` end to end on the shipped sample (smaller
pretraining budget to stay fast), then a re-run that skips every stage."""
from __future__ import annotations

import json
import time

from denki.app.quickstart_ask import ASK_EXAMPLES
from denki.models.bundle.format import verify_bundle


def test_quickstart_pipeline_end_to_end_and_rerun_skips(tmp_path, capsys):
    from denki.app.cli import main

    out = tmp_path / "qs"
    assert main(["quickstart", "--no-demo", "--out", str(out), "--pretrain-flops", "1e12", "--from-checkpoint",
                 "none"]) == 0
    printed = capsys.readouterr().out
    assert "denki quickstart summary" in printed and "TF-IDF baseline" in printed
    for d, kind in (("pretrain/bundle", "pretrained"), ("classifier/bundle", "classifier"),
                    ("classifier-random-init/bundle", "classifier"), ("qa/bundle", "qa"),
                    ("classifier-onnx", "onnx-classifier"), ("qa-onnx", "onnx-qa")):
        assert verify_bundle(out / d)["kind"] == kind, d
    s = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    # the budget is spent, up to a few tenths of a percent (the step plan counts every row as full; docs/pretrain.md)
    assert s["pretrain"]["flops"] >= 0.995e12
    # the default objective is MLM (the measured choice, app/cmd_quickstart.QUICKSTART_OBJECTIVE), said on its row;
    # the pretraining health probe (models/training/pretrain_health.py) is in the summary and printed there too
    assert s["pretrain"]["objective"] == "mlm" and "| pretraining (tiny MLM, mask 40%) |" in printed
    assert s["pretrain"]["mask_prob"] == 0.4  # tiny MLM's default (pretrain.train.MLM_TINY_MASK_PROB)
    assert "masked-token accuracy" in printed and "from tiny MLM:" in printed
    d = s["pretrain"]["diagnostics"]
    assert d["cls_spread"] >= 0 and "disc_auc" not in d and "probe: [CLS] spread" in printed
    r = s["routing"]
    for part in ("onnx", "pytorch", "pytorch_random_init", "tfidf_baseline"):
        assert 0.0 <= r[part]["accuracy"] <= 1.0, part
    assert r["deployed"] in ("pretrained", "random-init control")
    # the deployed router is fused with its TF-IDF model where finetune's --fusion auto shipped that, and is then
    # served with its lexical part; the summary says which, with the cross-fitted figure that chose it
    fused = r["fusion"]["shipped"]
    assert ("TF-IDF fused" in printed) == fused
    assert (out / "classifier-onnx" / "lexical.safetensors").is_file() == fused
    if fused:
        assert r["deployed_macro_f1_estimate"] == r["fusion"]["crossfit_macro_f1"]
    # best effort: a variant that failed its parity gate is left out (and said once in the summary), never fatal
    left_out = {part: [lo["variant"] for lo in s["left_out"][part]] for part in ("classifier", "qa")}
    assert set(s["latency_p50_ms_batch1"]) == {"fp32", "o2", "int8"} - set(left_out["classifier"])
    for part, name in (("classifier", "router"), ("qa", "QA")):
        for v in left_out[part]:
            assert v != "fp32" and s["parity"][part][v]["left_out"] and not s["parity"][part][v]["passed"]
            assert not (out / f"{part}-onnx" / f"model.{v}.onnx").exists()
            assert printed.count(f"| {name} ONNX {v}: left out |") == 1
    assert s["parity"]["classifier"]["fp32"]["passed"] and s["parity"]["qa"]["fp32"]["passed"]
    for k in ("exact", "f1", "total"):
        assert s["qa"]["onnx"][k] is not None
    # the sample manual indexed and asked (stage 7): every example question answered or 回答なし with its reason; the
    # one about something the manual never mentions shares no word with it
    a = s["ask"]
    assert a["passages"] == 7 and [r["question"] for r in a["questions"]] == ASK_EXAMPLES
    assert all(r["has_answer"] == (r["reason"] == "answer") and r["ms"] > 0 for r in a["questions"])
    assert a["questions"][2]["reason"] == "no_passage" and "| asking samples/manual.md (7 passages, k=5" in printed
    assert "denki ask --index" in printed and (out / "manual-index" / "manifest.json").is_file()
    t0 = time.perf_counter()
    assert main(["quickstart", "--no-demo", "--out", str(out), "--pretrain-flops", "1e12", "--from-checkpoint",
                 "none"]) == 0
    assert capsys.readouterr().out.count("done already (skipped)") == 8
    assert time.perf_counter() - t0 < 60


def test_stages_rerun_when_their_inputs_change(tmp_path, capsys):
    """A stage is skipped only when its outputs exist and its inputs (file hashes, settings, upstream keys) are the
    ones it was made from; otherwise its stale outputs are removed, it runs again and the reason is printed."""
    from denki.app.cmd_quickstart import _Stages

    made = []

    def stage(tag):
        def fn():
            (tmp_path / "o").mkdir(exist_ok=True)
            (tmp_path / "o" / "x").write_text(tag)
            made.append(tag)
        return fn

    def run(inputs, tag):
        st = _Stages(1, tmp_path)
        return st.run("s", (tmp_path / "o" / "x").is_file(), stage(tag), sid="s", inputs=inputs,
                      outputs=(tmp_path / "o",))

    k1 = run({"sample": "aaa", "seed": 0}, "first")
    assert made == ["first"] and run({"sample": "aaa", "seed": 0}, "again") == k1 and made == ["first"]
    assert "done already (skipped)" in capsys.readouterr().out
    k2 = run({"sample": "bbb", "seed": 0}, "second")  # a pulled sample
    assert k2 != k1 and made == ["first", "second"] and (tmp_path / "o" / "x").read_text() == "second"
    assert "its inputs changed (sample): running it again" in capsys.readouterr().out
    (tmp_path / _Stages.KEYS).unlink()  # outputs of a quickstart from before stages were keyed
    run({"sample": "bbb", "seed": 0}, "third")
    assert made[-1] == "third" and "made before stages were keyed" in capsys.readouterr().out


def test_quickstart_refuses_to_reuse_a_pretraining_of_the_other_objective(tmp_path, capsys):
    """A finished ELECTRA pretraining under --out is not silently reused for --objective mlm (or the reverse)."""
    from denki.app.cli import main

    out = tmp_path / "qs"
    (out / "pretrain").mkdir(parents=True)
    (out / "pretrain" / "summary.json").write_text(json.dumps({"finished": True, "objective": "electra"}))
    (out / "tokenizer").mkdir()
    (out / "tokenizer" / "vocab.txt").write_text("[PAD]\n")  # the tokenizer stage counts as done
    assert main(["quickstart", "--no-demo", "--out", str(out), "--objective", "mlm", "--from-checkpoint", "none"]) == 2
    err = capsys.readouterr().err
    assert "holds a finished electra pretraining" in err and "--objective electra" in err


def test_quickstart_continues_a_shipped_checkpoint(tmp_path, capsys, monkeypatch, tiny_tokenizer_dir, qa_bundle):
    """--from-checkpoint NAME: the checkpoint's tokenizer, RTD continued on the sample (domain-adaptive), the routers
    from it and from random init on its vocabulary, QA from the QA checkpoint whose parent it is; a pretraining from
    scratch under --out is not reused for it."""
    import shutil

    from denki.app.cli import main
    from denki.models.registry.checkpoints import write_sums

    shelf = tmp_path / "shelf"
    run = tmp_path / "general"
    sample = "samples/corpus_ja.txt"
    assert main(["pretrain", "--corpus", sample, "--tokenizer", str(tiny_tokenizer_dir), "--objective", "electra",
                 "--out", str(run), "--steps", "3", "--batch-size", "4", "--seq-len", "32", "--device", "cpu",
                 "--cache-dir", str(tmp_path / "cache"), "--no-progress", "--no-export"]) == 0
    ck = shelf / "stand-in"
    assert main(["pretrain", "export", "--checkpoint", str(run), "--out", str(ck), "--generator"]) == 0
    (ck / "card.json").write_text(json.dumps({"name": "stand-in", "kind": "pretrained"}), encoding="utf-8")
    write_sums(ck)
    qa_ck = shelf / "stand-in-qa"  # conftest's tiny QA bundle (same vocabulary), as the QA checkpoint of stand-in
    shutil.copytree(qa_bundle, qa_ck)
    (qa_ck / "card.json").write_text(json.dumps({"name": "stand-in-qa", "kind": "qa", "parent": "stand-in"}),
                                     encoding="utf-8")
    write_sums(qa_ck)
    monkeypatch.setenv("DENKI_CHECKPOINTS", str(shelf))
    capsys.readouterr()
    out = tmp_path / "qs"
    assert main(["quickstart", "--no-demo", "--out", str(out), "--pretrain-flops", "1e12", "--from-checkpoint",
                 "stand-in"]) == 0
    printed = capsys.readouterr().out
    assert "tokenizer: the checkpoint's (stand-in): done already" in printed
    s = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert s["pretrain"]["init_from"] == "stand-in" and s["pretrain"]["objective"] == "electra"
    assert "| pretraining (stand-in continued on the sample: ELECTRA" in printed
    assert "from stand-in + the sample" in printed
    assert json.loads((out / "pretrain" / "run.json").read_text())["init_from"]["path"] == str(ck)
    assert s["qa"]["from"] == "stand-in-qa" and "| QA from stand-in-qa, dev EM / F1" in printed
    assert json.loads((out / "qa" / "bundle" / "manifest.json").read_text())["source"]["pretrained"] == str(qa_ck)
    assert verify_bundle(out / "classifier-onnx")["kind"] == "onnx-classifier"
    # the vocabulary of every model is the checkpoint's
    for d in ("classifier/bundle", "classifier-random-init/bundle", "qa/bundle"):
        assert (out / d / "vocab.txt").read_bytes() == (ck / "vocab.txt").read_bytes(), d
    assert main(["quickstart", "--no-demo", "--out", str(out), "--from-checkpoint", "none"]) == 2
    assert "holds a finished electra pretraining continued from" in capsys.readouterr().err
