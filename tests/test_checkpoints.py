"""Shipped general checkpoints (models/registry/checkpoints.py, `denki checkpoints`): listing, --json, --verify, and
names accepted wherever a bundle path is. A stand-in checkpoint is built from a tiny pretraining run in a temporary
folder given as $DENKI_CHECKPOINTS; the repository's own checkpoints are verified too."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from denki.models.registry.checkpoints import (list_checkpoints, read_card, resolve_model_arg, verify_checkpoint,
                                       write_sums)
from denki.models.io.errors import DenkiError

SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "samples" / "corpus_ja.txt"
SAMPLE_ROUTING = Path(__file__).resolve().parents[1] / "samples"


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory, tiny_tokenizer_dir):
    """A folder of checkpoints holding one pretrained ELECTRA (3 steps, exported with its generator)."""
    from denki.app.cli import main

    tmp = tmp_path_factory.mktemp("ckpts")
    run = tmp / "run"
    assert main(["pretrain", "--corpus", str(SAMPLE_CORPUS), "--tokenizer", str(tiny_tokenizer_dir), "--objective",
                 "electra", "--out", str(run), "--steps", "3", "--batch-size", "4", "--seq-len", "32", "--device",
                 "cpu", "--cache-dir", str(tmp / "cache"), "--no-progress", "--no-export"]) == 0
    folder = tmp / "shelf" / "test-electra-tiny"
    assert main(["pretrain", "export", "--checkpoint", str(run), "--out", str(folder), "--generator"]) == 0
    (folder / "card.json").write_text(json.dumps({
        "name": "test-electra-tiny", "kind": "pretrained", "size": "tiny", "parameters": 1234567, "flops": 2.2e9,
        "corpus": [{"name": "sample", "sha256": "0" * 64}], "licence": "CC BY-SA 4.0",
        "dev_scores": {"livedoor titles macro-F1": 0.5}, "command": "denki pretrain ..."}), encoding="utf-8")
    (folder / "README.md").write_text("# test-electra-tiny\n", encoding="utf-8")
    write_sums(folder)
    return folder


@pytest.fixture()
def shelf(stand_in, monkeypatch):
    monkeypatch.setenv("DENKI_CHECKPOINTS", str(stand_in.parent))
    return stand_in


def test_list_json_and_table_name_the_checkpoint(shelf, capsys):
    from denki.app.cli import main

    assert main(["checkpoints", "--json"]) == 0
    cards = [c for c in json.loads(capsys.readouterr().out) if c["name"] == "test-electra-tiny"]
    assert len(cards) == 1 and cards[0]["kind"] == "pretrained" and cards[0]["path"] == str(shelf)
    assert main(["checkpoints"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("test-electra-tiny"))
    assert "pretrained" in line and "1.2M" in line and "2.2e+09" in line and "CC BY-SA 4.0" in line
    assert max(len(ln) for ln in capsys.readouterr().out.splitlines() or [""]) <= 100 and len(line) <= 100, \
        "the table fits a terminal (corpora and scores are in --json and the model card)"


def test_verify_passes_then_names_a_modified_and_an_unlisted_file(shelf, tmp_path, monkeypatch, capsys):
    from denki.app.cli import main

    assert main(["checkpoints", "--verify"]) == 0
    assert "verify test-electra-tiny: OK" in capsys.readouterr().err
    copy = tmp_path / "shelf" / "test-electra-tiny"
    shutil.copytree(shelf, copy)
    monkeypatch.setenv("DENKI_CHECKPOINTS", str(copy.parent))
    with open(copy / "vocab.txt", "a", encoding="utf-8") as f:
        f.write("改竄\n")
    (copy / "extra.bin").write_bytes(b"x")
    assert main(["checkpoints", "--verify"]) == 1
    err = capsys.readouterr().err
    assert "vocab.txt does not match its sha256" in err and "extra.bin is not listed" in err


def test_names_work_as_model_and_init_from(shelf, tmp_path, capsys):
    from denki.app.cli import main

    assert resolve_model_arg("test-electra-tiny") == str(shelf)
    assert resolve_model_arg(str(tmp_path)) == str(tmp_path)  # an existing path stays a path
    out = tmp_path / "cont"
    assert main(["pretrain", "--init-from", "test-electra-tiny", "--corpus", str(SAMPLE_CORPUS), "--out", str(out),
                 "--steps", "2", "--batch-size", "4", "--seq-len", "32", "--device", "cpu", "--no-progress",
                 "--no-export", "--cache-dir", str(tmp_path / "cache")]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["init_from"]["path"] == str(shelf) and run["identity"]["gen_init"] == "bundle"
    assert main(["finetune", "classify", "--model", "test-electra-tiny", "--train",
                 str(SAMPLE_ROUTING / "routing_train.jsonl"), "--dev", str(SAMPLE_ROUTING / "routing_dev.jsonl"),
                 "--out", str(tmp_path / "router"), "--epochs", "1", "--max-train-examples", "40", "--no-progress",
                 "--no-baseline"]) == 0
    from denki.models.bundle.format import read_manifest, resolve_bundle

    assert read_manifest(resolve_bundle(tmp_path / "router"))["kind"] == "classifier"
    capsys.readouterr()
    assert main(["finetune", "classify", "--model", "no-such-checkpoint", "--train", "x", "--dev", "y", "--out",
                 str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err
    assert "--model no-such-checkpoint: not found" in err and "test-electra-tiny" in err


def test_card_errors_name_file_and_field(tmp_path):
    (tmp_path / "card.json").write_text(json.dumps({"name": "x", "kind": "weird"}), encoding="utf-8")
    with pytest.raises(DenkiError, match=r"card.json: field 'kind' is 'weird'"):
        read_card(tmp_path)
    (tmp_path / "card.json").write_text(json.dumps({"kind": "qa"}), encoding="utf-8")
    with pytest.raises(DenkiError, match=r"card.json: field 'name' is missing"):
        read_card(tmp_path)


def test_shipped_checkpoints_verify_and_load_in_plain_transformers(monkeypatch):
    """Every checkpoint in the repository's checkpoints/ matches its SHA256SUMS and loads with transformers."""
    from transformers import AutoModel

    from denki.models.registry.checkpoints import SHIPPED_DIR

    monkeypatch.delenv("DENKI_CHECKPOINTS", raising=False)
    cards = list_checkpoints()
    if not cards:
        pytest.skip(f"no checkpoint shipped in {SHIPPED_DIR} yet")
    for card in cards:
        assert verify_checkpoint(card) == [], card["name"]
        for key in ("name", "kind", "parameters", "flops", "corpus", "licence", "dev_scores", "command"):
            assert key in card, (card["name"], key)
        model = AutoModel.from_pretrained(card["path"])
        assert sum(p.numel() for p in model.parameters()) <= card["parameters"]


def test_the_quickstart_finds_the_reader_of_its_checkpoint_or_of_a_continuation(monkeypatch):
    """`denki quickstart` starts its QA from the shipped reader whose parent is the start checkpoint or a pretrained
    checkpoint continued from it in legs (the same tokenizer); a direct child wins; a reader of another lineage,
    or of a later leg than the start, is not taken."""
    import denki.models.registry.checkpoints as registry
    from denki.app.cmd_quickstart import qa_checkpoint_for

    base = {"name": "base", "kind": "pretrained"}
    leg = {"name": "base-2e15", "kind": "pretrained", "legs": [{"name": "base"}, {"name": "base-2e15"}]}
    other = {"name": "other", "kind": "pretrained"}
    from_leg = {"name": "qa-leg", "kind": "qa", "parent": "base-2e15"}
    cards = [base, leg, other, from_leg, {"name": "qa-other", "kind": "qa", "parent": "other"}]
    monkeypatch.setattr(registry, "list_checkpoints", lambda: cards)
    assert qa_checkpoint_for(base)["name"] == "qa-leg"
    assert qa_checkpoint_for(leg)["name"] == "qa-leg"
    assert qa_checkpoint_for(other)["name"] == "qa-other" and qa_checkpoint_for(None) is None
    cards.append({"name": "qa-direct", "kind": "qa", "parent": "base"})
    assert qa_checkpoint_for(base)["name"] == "qa-direct"
    cards[:] = [base, leg, {"name": "qa-later", "kind": "qa", "parent": "base-3e15"},
                {"name": "base-3e15", "kind": "pretrained", "legs": [{"name": "base"}, {"name": "base-3e15"}]}]
    assert qa_checkpoint_for(leg) is None
