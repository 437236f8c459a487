"""`--position-init tile`: the position rows pretraining never trained take copies of the trained ones
(models/training/positions.py), and `denki finetune qa` records what it did."""
from __future__ import annotations

import json

import pytest

from denki.app.cli import main

from .conftest import SAMPLE_QA_DEV, SAMPLE_QA_TRAIN


def _tiny_electra(max_positions: int = 40):
    import torch
    from transformers import ElectraConfig, ElectraForQuestionAnswering

    torch.manual_seed(0)
    cfg = ElectraConfig(vocab_size=50, embedding_size=8, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=max_positions)
    return ElectraForQuestionAnswering(cfg)


def test_tile_copies_rows_1_to_L_minus_1_over_the_untrained_rows():
    import torch

    from denki.models.training.positions import tile_positions

    model = _tiny_electra(40)
    w = model.electra.embeddings.position_embeddings.weight
    before = w.detach().clone()
    assert tile_positions(model, 10) == 30
    assert torch.equal(w[:10], before[:10])  # the trained rows are untouched
    for i in range(10, 40):  # row 0 ([CLS]'s slot in pretraining) is never a source
        assert torch.equal(w[i], before[1 + (i - 10) % 9]), i
    assert w.requires_grad  # still a trainable parameter


def test_tile_is_a_no_op_when_nothing_is_untrained():
    from denki.models.training.positions import tile_positions, trained_positions

    model = _tiny_electra(40)
    assert tile_positions(model, 40) == 0 and tile_positions(model, 64) == 0 and tile_positions(model, 1) == 0
    assert trained_positions({"source": {"seq_len": 128}}) == 128
    assert trained_positions({"source": {"init": "random"}}) is None and trained_positions({}) is None


def test_finetune_qa_tiles_from_the_bundles_seq_len_and_records_it(tiny_tokenizer_dir, tmp_path, capsys):
    import torch
    from transformers import ElectraForPreTraining

    from denki.models.bundle.presets import electra_config
    from denki.models.bundle.pytorch import save_bundle
    from denki.models.text.tokenizer import JapaneseTokenizer

    tok = JapaneseTokenizer.load(tiny_tokenizer_dir)
    torch.manual_seed(0)
    enc = ElectraForPreTraining(electra_config("tiny", tok.vocab_size))
    save_bundle(enc, tiny_tokenizer_dir, tmp_path / "pre", "pretrained", source={"seq_len": 64, "size": "tiny"})
    base = ["finetune", "qa", "--model", str(tmp_path / "pre"), "--train", str(SAMPLE_QA_TRAIN), "--dev",
            str(SAMPLE_QA_DEV), "--max-length", "192", "--doc-stride", "64", "--max-steps", "1", "--batch-size", "8",
            "--max-train-examples", "20", "--max-dev-examples", "10", "--no-progress", "--threads", "1"]
    assert main(base + ["--out", str(tmp_path / "tiled"), "--position-init", "tile"]) == 0
    rep = json.loads((tmp_path / "tiled" / "report.json").read_text(encoding="utf-8"))
    assert rep["settings"]["position_init"] == "tile" and rep["settings"]["pretrained_positions"] == 64
    assert rep["seeds"][0]["positions_tiled"] == enc.config.max_position_embeddings - 64
    assert main(base + ["--out", str(tmp_path / "kept")]) == 0  # the default leaves the rows alone
    rep = json.loads((tmp_path / "kept" / "report.json").read_text(encoding="utf-8"))
    assert rep["settings"]["position_init"] == "keep" and rep["seeds"][0]["positions_tiled"] == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):  # argparse refuses anything else
        main(base + ["--out", str(tmp_path / "x"), "--position-init", "random"])
