"""A new task is one package plus one registry line (issue 60): the toy task of tests/toy_task.py, registered here,
goes through the generic fine-tuning loop, `denki export` (the parity gate) and serving (the Python API, the
batch of any task and the HTTP-free runtime) without any change to those layers."""
from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import routing_rows
from .toy_task import SCORER, scorer_records


@pytest.fixture(scope="module")
def scorer_registered():
    from denki.models.registry.tasks import register, task_for, unregister

    register(SCORER)  # the one registry line
    assert task_for("scorer") is SCORER and task_for("onnx-scorer") is SCORER
    yield SCORER
    unregister("scorer")


@pytest.fixture(scope="module")
def scorer_bundles(scorer_registered, tiny_tokenizer_dir, tmp_path_factory):
    from denki.models.bundle.pytorch import random_init_bundle
    from denki.models.export.onnx import export_bundle
    from denki.models.task.finetune import GenericFinetuneConfig, finetune_task

    root = tmp_path_factory.mktemp("scorer")
    random_init_bundle("tiny", tiny_tokenizer_dir, root / "pretrained", seed=0)
    train = root / "train.jsonl"
    train.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in scorer_records(routing_rows(96))),
                     encoding="utf-8")
    cfg = GenericFinetuneConfig(train_file=str(train), model=str(root / "pretrained"), out_dir=str(root / "torch"),
                                epochs=4, lr=5e-4, batch_size=16, max_length=64)
    man = finetune_task(SCORER, cfg)
    onnx = export_bundle(root / "torch", root / "onnx", optimize="O2", progress=False)
    return {"root": root, "torch_manifest": man, "onnx_manifest": onnx}


def test_toy_task_fine_tunes_with_the_generic_loop(scorer_bundles):
    man = scorer_bundles["torch_manifest"]
    assert man["kind"] == "scorer"
    losses = man["metrics"]["train_loss_by_epoch"]
    assert len(losses) == 4 and losses[-1] < losses[0]  # it learned something


def test_toy_task_exports_behind_the_parity_gate(scorer_bundles):
    man = scorer_bundles["onnx_manifest"]
    assert man["kind"] == "onnx-scorer"
    assert man["metrics"]["parity"]["fp32"]["passed"] and man["metrics"]["parity"]["o2"]["passed"]
    golden = (scorer_bundles["root"] / "onnx" / "golden_tokenization.jsonl").read_text(encoding="utf-8")
    assert golden == ""  # the toy declares no golden records: the base's default


def test_toy_task_serves_through_the_runtime(scorer_bundles):
    from denki.serve.runtime import Predictor

    p = Predictor(scorer_bundles["root"] / "onnx", backend="fp32", device="cpu")
    assert p.task_spec is SCORER and p.describe().startswith("onnx-scorer")
    texts = ["短い", "これはとても長いお問い合わせの文章で、ホテルの予約と観光案内の両方について伺いたいのですが"]
    out = p.predict(texts)
    assert [set(r) for r in out] == [{"value"}, {"value"}] and all(np.isfinite(r["value"]) for r in out)
    with pytest.raises(Exception, match="not a classifier"):  # the router's API refuses another task's bundle
        p.classify(texts)
