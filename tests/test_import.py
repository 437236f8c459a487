"""`denki import` and the whole chain on imported checkpoints.

No hub here, so the "public" checkpoints are built in the test the way a hub repository holds them: tiny
``BertForPreTraining`` / ``ElectraForPreTraining`` (+ ``ElectraForMaskedLM`` generator) weights written by
``save_pretrained`` (safetensors) beside tokenizer files written by transformers' own
``BertJapaneseTokenizer.save_pretrained``, with the vocabularies of the tokenizer flavours (unidic-lite, ipadic,
lower-cased ipadic). Then: import (directory and cached hub id) → fine-tune classify + QA → export (fp32 parity
≤ 1e-4) → `denki classify` → `denki serve` (a real server on 127.0.0.1) → demo handlers, for BERT and ELECTRA.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from denki.app.cli import main
from denki.models.bundle.format import read_task, verify_bundle
from denki.models.io.fileio import sha256_file
from denki.models.text.tokenizer import JapaneseTokenizer

from .conftest import (REPO, SAMPLE_CORPUS, SAMPLE_QA_DEV, SAMPLE_QA_TRAIN, free_port, read_jsonl, routing_rows,
                       wait_ready, write_split)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=256)
#: (architecture, tokenizer flavour, mecab_kwargs, do_lower_case) of each locally built checkpoint
CHECKPOINTS = {
    "bert-unidic-lite": ("bert", "unidic-lite", {"mecab_dic": "unidic_lite"}, False),   # like bert-base-japanese-v3
    "electra-ipadic": ("electra", "ipadic", {"mecab_dic": "ipadic"}, False),           # like izumi-lab's ELECTRA
    "bert-ipadic-lower": ("bert", "ipadic-lower", {"mecab_dic": "ipadic"}, True),
    "electra-unidic-lite": ("electra", "unidic-lite", {"mecab_dic": "unidic_lite"}, False),
}


def _build_checkpoint(out, arch: str, vocab_dir, mecab_kwargs: dict, lower: bool, *, seed: int = 0):
    """A hub-style checkpoint directory: config.json + model.safetensors + BertJapaneseTokenizer files.
    ELECTRA also gets a generator directory ``<out>-generator``."""
    import torch
    from transformers import (BertConfig, BertForPreTraining, BertJapaneseTokenizer, ElectraConfig,
                              ElectraForMaskedLM, ElectraForPreTraining)

    n = len((vocab_dir / "vocab.txt").read_text(encoding="utf-8").splitlines())
    torch.manual_seed(seed)
    if arch == "bert":
        BertForPreTraining(BertConfig(vocab_size=n, **TINY)).save_pretrained(out)
    else:
        ElectraForPreTraining(ElectraConfig(vocab_size=n, embedding_size=32, **TINY)).save_pretrained(out)
        gen = dict(TINY, hidden_size=16, num_attention_heads=1, intermediate_size=32)
        ElectraForMaskedLM(ElectraConfig(vocab_size=n, embedding_size=32, **gen)).save_pretrained(
            out.with_name(out.name + "-generator"))
    tok = BertJapaneseTokenizer(vocab_file=str(vocab_dir / "vocab.txt"), do_lower_case=lower,
                                word_tokenizer_type="mecab", mecab_kwargs=mecab_kwargs, model_max_length=256)
    tok.save_pretrained(str(out))
    if arch == "electra":  # hub generator repositories carry the same tokenizer files
        tok.save_pretrained(str(out.with_name(out.name + "-generator")))
    return out


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, flavour_tokenizer_dirs):
    root = tmp_path_factory.mktemp("hub")
    return {name: _build_checkpoint(root / name, arch, flavour_tokenizer_dirs[flav], mk, lower)
            for name, (arch, flav, mk, lower) in CHECKPOINTS.items()}


@pytest.fixture(scope="module")
def imported(checkpoints, tmp_path_factory):
    """Each checkpoint imported with the CLI (ELECTRA with its generator)."""
    root = tmp_path_factory.mktemp("imported")
    out = {}
    for name, ck in checkpoints.items():
        args = ["import", "--model", str(ck), "--out", str(root / name)]
        if CHECKPOINTS[name][0] == "electra":
            args += ["--generator", str(ck.with_name(ck.name + "-generator"))]
        assert main(args) == 0
        out[name] = root / name
    return out


def _texts(n=300):
    lines = SAMPLE_CORPUS.read_text(encoding="utf-8").splitlines()
    return lines[:n] + [r["question"] for r in read_jsonl(SAMPLE_QA_DEV)[:50]]


@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_import_gives_an_equivalent_pretrained_bundle(name, checkpoints, imported):
    """Same weights, same tokenizer ids as transformers on the original directory, provenance recorded."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    ck, bundle = checkpoints[name], imported[name]
    manifest = verify_bundle(bundle, kinds=("pretrained",))
    imp = manifest["source"]["import"]
    arch, flavour, _, lower = CHECKPOINTS[name]
    assert imp["architecture"] == ("BertForPreTraining" if arch == "bert" else "ElectraForPreTraining")
    assert imp["from"] == {"path": str(ck.resolve())}
    assert imp["files"]["model.safetensors"] == sha256_file(ck / "model.safetensors")
    met = manifest["metrics"]["import"]
    assert met["tokenizer_identical"] == met["tokenizer_probe_texts"] >= 28
    # the tokenizer: denki in the bundle == transformers on the original checkpoint, on real text
    tok, hf = JapaneseTokenizer.load(bundle), AutoTokenizer.from_pretrained(str(ck))
    assert tok.settings.mecab_dic == ("ipadic" if "ipadic" in flavour else "unidic_lite")
    assert tok.settings.do_lower_case is lower and tok.model_max_length == 256
    bad = [t for t in _texts() if tok.encode(t, truncation=False).ids != hf(t, truncation=False)["input_ids"]]
    assert not bad, bad[:3]
    # and transformers reads the bundle's rewritten tokenizer files the same way
    again = AutoTokenizer.from_pretrained(str(bundle))
    assert all(again(t)["input_ids"] == hf(t)["input_ids"] for t in _texts(100))
    # the weights: the encoder loads from the bundle exactly as from the checkpoint
    a, b = AutoModel.from_pretrained(str(ck)).state_dict(), AutoModel.from_pretrained(str(bundle)).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    if arch == "electra":
        assert "generator/model.safetensors" in manifest["files"] and imp["generator"]["hidden_size"] == 16
    else:
        assert imp["generator"] is None and not (bundle / "generator").exists()


def test_a_raw_checkpoint_given_to_finetune_points_to_import(checkpoints, tmp_path, capsys):
    rows = tmp_path / "r.jsonl"
    rows.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in routing_rows(n=12)), encoding="utf-8")
    ck = checkpoints["bert-unidic-lite"]
    assert main(["finetune", "classify", "--model", str(ck), "--train", str(rows), "--dev", str(rows),
                 "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert f"denki import --model {ck}" in capsys.readouterr().err


def test_bin_only_checkpoint_is_refused_with_the_conversion_command(checkpoints, tmp_path, capsys):
    import torch
    from transformers import BertForPreTraining

    d = tmp_path / "binonly"
    shutil.copytree(checkpoints["bert-unidic-lite"], d)
    model = BertForPreTraining.from_pretrained(str(d))
    (d / "model.safetensors").unlink()
    torch.save(model.state_dict(), d / "pytorch_model.bin")
    assert main(["import", "--model", str(d), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "pytorch_model.bin" in err and "safetensors" in err
    assert "from transformers import BertForPreTraining as M" in err and "safe_serialization=True" in err
    assert not (tmp_path / "out").exists()


def _fake_hub_cache(cache, repo_id: str, src, commit: str = "0123456789abcdef0123456789abcdef01234567"):
    """The layout huggingface_hub keeps: models--ORG--NAME/{refs/main, snapshots/COMMIT/…}."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(src, repo / "snapshots" / commit)
    return commit


def test_hub_id_only_from_the_local_cache(checkpoints, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the command forces offline whatever the environment says
    cache = tmp_path / "hub"
    commit = _fake_hub_cache(cache, "example-org/tiny-bert-ja", checkpoints["bert-unidic-lite"])
    out = tmp_path / "from-hub"
    assert main(["import", "--model", "example-org/tiny-bert-ja", "--cache-dir", str(cache), "--out", str(out)]) == 0
    origin = verify_bundle(out)["source"]["import"]["from"]
    assert origin["hub_id"] == "example-org/tiny-bert-ja" and origin["revision"] == commit
    capsys.readouterr()
    assert main(["import", "--model", "example-org/not-cached", "--cache-dir", str(cache),
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "not in the local Hugging Face cache" in err and "never downloads" in err
    assert not (tmp_path / "x").exists()


def test_unsupported_checkpoints_are_refused(checkpoints, tmp_path, capsys):
    from transformers import BertConfig, BertForSequenceClassification

    base = checkpoints["bert-unidic-lite"]
    # another architecture
    d1 = tmp_path / "seqcls"
    shutil.copytree(base, d1)
    cfg = json.loads((d1 / "config.json").read_text())
    BertForSequenceClassification(BertConfig(**{k: v for k, v in cfg.items() if k != "architectures"})
                                  ).save_pretrained(d1)
    # a tokenizer denki cannot reproduce (transformers' default BasicTokenizer)
    d2 = tmp_path / "basic"
    shutil.copytree(base, d2)
    tc = json.loads((d2 / "tokenizer_config.json").read_text())
    tc.pop("word_tokenizer_type")
    (d2 / "tokenizer_config.json").write_text(json.dumps(tc))
    # weights that lack tensors the architecture needs
    d3 = tmp_path / "truncated"
    shutil.copytree(base, d3)
    from safetensors.torch import load_file, save_file

    w = load_file(d3 / "model.safetensors")
    save_file({k: v for k, v in w.items() if ".layer.1." not in k}, d3 / "model.safetensors",
              metadata={"format": "pt"})
    for d, msg in ((d1, "'architectures'"), (d2, "word_tokenizer_type"), (d3, "lack")):
        capsys.readouterr()
        assert main(["import", "--model", str(d), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert msg in err and str(d) in err, err
        assert not (tmp_path / "out").exists()
    # a generator with another vocabulary
    capsys.readouterr()
    assert main(["import", "--model", str(checkpoints["electra-ipadic"]), "--generator",
                 str(checkpoints["electra-ipadic"].with_name("electra-unidic-lite-generator")),
                 "--out", str(tmp_path / "out")]) == 2
    assert "vocabulary" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ the chain, BERT and ELECTRA
FT = ["--seeds", "1", "--epochs", "1", "--max-length", "64", "--threads", "1", "--no-progress", "--no-baseline"]


@pytest.fixture(scope="module")
def routing_split(tmp_path_factory):
    import random

    rows = routing_rows(per_label=30)
    random.Random(0).shuffle(rows)
    return write_split(tmp_path_factory.mktemp("routing"), rows, 120)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert-unidic-lite", "electra-ipadic"])
def test_chain_finetune_export_classify_serve_demo(name, imported, routing_split, tmp_path):
    import httpx

    from denki.serve.runtime import Predictor

    bundle = imported[name]
    arch = CHECKPOINTS[name][0]
    # fine-tune: router (calibration + abstention fitted on dev) and QA
    assert main(["finetune", "classify", "--model", str(bundle), "--train", str(routing_split / "train.jsonl"),
                 "--dev", str(routing_split / "dev.jsonl"), "--out", str(tmp_path / "cls"),
                 "--target-precision", "0.5", *FT]) == 0
    cls_bundle = tmp_path / "cls" / "bundle"
    assert json.loads((cls_bundle / "config.json").read_text())["model_type"] == arch
    task = read_task(cls_bundle)
    assert task["temperature"] > 0 and "threshold" in task and task["abstention"]
    assert main(["finetune", "qa", "--model", str(bundle), "--train", str(SAMPLE_QA_TRAIN), "--dev",
                 str(SAMPLE_QA_DEV), "--out", str(tmp_path / "qa"), "--max-length", "128", "--doc-stride", "32",
                 "--max-steps", "6", "--batch-size", "16", "--max-dev-examples", "30", "--no-progress",
                 "--threads", "1"]) == 0
    qa_bundle = tmp_path / "qa" / "bundle"
    assert json.loads((qa_bundle / "config.json").read_text())["model_type"] == arch

    # export behind the parity gate (BERT also through the O2 fusions + int8)
    extra = ["--optimize", "O2", "--quantize", "int8", "--min-agreement", "0.5", "--max-drop", "1"] \
        if arch == "bert" else []
    assert main(["export", "--model", str(tmp_path / "cls"), "--out", str(tmp_path / "cls-onnx"), *extra]) == 0
    assert main(["export", "--model", str(tmp_path / "qa"), "--out", str(tmp_path / "qa-onnx")]) == 0
    for d in ("cls-onnx", "qa-onnx"):
        parity = verify_bundle(tmp_path / d)["metrics"]["parity"]
        assert parity["fp32"]["passed"] and parity["fp32"]["max_abs_diff"] <= 1e-4, parity["fp32"]
        if arch == "bert" and d == "cls-onnx":
            assert parity["o2"]["passed"] and parity["o2"]["max_abs_diff"] <= 1e-3

    # the torch-free runtime: same tokenizer (the checkpoint's dictionary), exact QA spans
    pred = Predictor(tmp_path / "cls-onnx", backend="fp32", device="cpu", threads=1)
    assert pred.tokenizer.settings == JapaneseTokenizer.load(bundle).settings
    qa = Predictor(tmp_path / "qa-onnx", backend="fp32", device="cpu", threads=1)
    ctx = "定例会議は毎週月曜の10時から第二会議室で始まる。"
    a = qa.answer("会議は何時から?", ctx)
    assert a["span_answer"] == ctx[a["span_start"]:a["span_end"]]

    # `denki classify`: every row accounted for
    rows = routing_rows(n=12)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}, ensure_ascii=False) + "\n"
                           for r in rows), encoding="utf-8")
    assert main(["classify", "--model", str(tmp_path / "cls-onnx"), "--input", str(inp), "--output",
                 str(tmp_path / "out.jsonl"), "--backend", "fp32", "--threads", "1"]) == 0
    out = read_jsonl(tmp_path / "out.jsonl")
    assert len(out) == len(rows)
    assert all(o["label"] in task["labels"] for o in out)
    direct = pred.classify([r["text"] for r in rows])
    assert [o["label"] for o in out] == [d["label"] for d in direct]

    # `denki serve`: a real server process on 127.0.0.1
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "denki.app.cli", "serve", "--classifier", str(tmp_path / "cls-onnx"),
                             "--qa", str(tmp_path / "qa-onnx"), "--port", str(port), "--backend", "fp32",
                             "--threads", "1", "--log-level", "warning"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base, 120, lambda: proc.poll() is None or pytest.fail(proc.stdout.read()), "denki serve", 0.5)
        texts = [r["text"] for r in rows[:4]]
        r = httpx.post(base + "/v1/classify", json={"texts": texts}, timeout=30)
        assert r.status_code == 200, r.text
        assert [x["label"] for x in r.json()["results"]] == [d["label"] for d in direct[:4]]
        r = httpx.post(base + "/v1/answer", json={"question": "会議は何時から?", "context": ctx}, timeout=30)
        assert r.status_code == 200, r.text
        assert (r.json()["answer"], r.json()["start"]) == (a["answer"], a["start"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    # the demo's handlers on the same bundles
    from denki.app.demo import DemoModels, answer_question, route_text

    models = DemoModels(str(tmp_path / "cls-onnx"), str(tmp_path / "qa-onnx"))
    head, scores, _, timing = route_text(models, rows[0]["text"], "ORT fp32 (CPU)")
    assert head.startswith("### 振り分け先") and scores and timing["backend"] == "fp32"
    spans, _, _ = answer_question(models, "会議は何時から?", ctx, "ORT fp32 (CPU)")
    assert "".join(s for s, _ in spans) == ctx
