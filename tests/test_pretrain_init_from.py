"""`denki pretrain --init-from BUNDLE`: continued RTD / MLM from imported (and denki) bundles — what is loaded,
what is new, the tokenizer kept, provenance and FLOPs recorded, resume and `pretrain export` as for a fresh run.
Tiny checkpoints (hidden 32, 2 layers; built as in tests/test_import.py), a few steps each."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from denki.app.cli import main
from denki.models.bundle.format import verify_bundle
from denki.models.text.tokenizer import JapaneseTokenizer
from denki.pretrain.train import PretrainConfig, run_pretrain

from .conftest import SAMPLE_CORPUS
from .test_import import CHECKPOINTS, _build_checkpoint

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, flavour_tokenizer_dirs):
    """Imported bundles: ELECTRA (ipadic) with its generator, ELECTRA (unidic-lite) without, BERT (unidic-lite)."""
    root = tmp_path_factory.mktemp("init")
    out = {}
    for name, with_gen in (("electra-ipadic", True), ("electra-unidic-lite", False), ("bert-unidic-lite", False)):
        arch, flav, mk, lower = CHECKPOINTS[name]
        ck = _build_checkpoint(root / name, arch, flavour_tokenizer_dirs[flav], mk, lower)
        args = ["import", "--model", str(ck), "--out", str(root / f"{name}-bundle")]
        if with_gen:
            args += ["--generator", str(ck.with_name(ck.name + "-generator"))]
        assert main(args) == 0
        out[name] = root / f"{name}-bundle"
    return out


def _cfg(tmp_path, bundle, name, **kw):
    base = dict(corpus=[str(SAMPLE_CORPUS)], tokenizer=None, out=str(tmp_path / name), init_from=str(bundle),
                objective="electra", steps=4, batch_size=4, seq_len=64, save_every=2, log_every=1, keep=5,
                device="cpu", progress=False, cache_dir=str(tmp_path / "cache"))
    base.update(kw)
    return PretrainConfig(**base)


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_rtd_starts_from_the_bundle_and_its_generator(bundles):
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    from denki.pretrain.init_from import build_from_bundle

    b = bundles["electra-ipadic"]
    model, rec = build_from_bundle("electra", b)
    assert rec["gen_init"] == "bundle" and rec["new_parameters"] == {"discriminator": [], "generator": []}
    disc, gen = ElectraForPreTraining.from_pretrained(str(b)), ElectraForMaskedLM.from_pretrained(str(b / "generator"))
    for k, v in disc.state_dict().items():  # every tensor, the RTD head's bias included (no prior reset)
        assert torch.equal(model.discriminator.state_dict()[k], v), k
    g = model.generator.state_dict()
    # all but the embeddings (and the output layer tied to them): shared with the discriminator below
    bad = [k for k, v in gen.state_dict().items() if not torch.equal(g[k], v)]
    assert set(bad) <= {k for k in g if k.startswith("electra.embeddings.")} | {"generator_lm_head.weight"}, bad
    # shared embeddings: the generator reads the discriminator's
    assert model.generator.electra.embeddings is model.discriminator.electra.embeddings


def test_generator_inits_without_a_generator(bundles):
    """copy: the checkpoint's bottom layers and embeddings, only the MLM head new; random: fresh narrow layers."""
    from denki.pretrain.init_from import build_from_bundle

    b = bundles["electra-unidic-lite"]
    model, rec = build_from_bundle("electra", b)
    assert rec["gen_init"] == "copy" and rec["gen_layers"] == 1  # max(1, 2 // 4)
    gen, disc = model.generator, model.discriminator
    assert gen.config.hidden_size == disc.config.hidden_size and gen.config.num_hidden_layers == 1
    for k, v in disc.electra.encoder.layer[0].state_dict().items():
        assert torch.equal(gen.electra.encoder.layer[0].state_dict()[k], v)
    assert {k.split(".")[0] for k in rec["new_parameters"]["generator"]} <= {"generator_predictions",
                                                                             "generator_lm_head"}
    assert rec["new_parameters"]["discriminator"] == []  # an imported ElectraForPreTraining keeps its RTD head
    with pytest.raises(Exception, match="--gen-layers 3"):
        build_from_bundle("electra", b, gen_init="copy", gen_layers=3)
    with pytest.raises(Exception, match="no generator/"):
        build_from_bundle("electra", b, gen_init="bundle")
    rnd, rec = build_from_bundle("electra", b, gen_init="random", gen_size=0.5, share_embeddings=False)
    assert rnd.generator.config.hidden_size == 16 and rnd.generator.config.num_hidden_layers == 2
    # separate embeddings: a copy of the checkpoint's, not the same module
    assert rnd.generator.electra.embeddings is not rnd.discriminator.electra.embeddings
    assert torch.equal(rnd.generator.electra.embeddings.word_embeddings.weight,
                       rnd.discriminator.electra.embeddings.word_embeddings.weight)


def test_continued_rtd_run_records_init_keeps_tokenizer_and_resumes(bundles, tmp_path):
    b = bundles["electra-ipadic"]
    a = _cfg(tmp_path, b, "a")
    sa = run_pretrain(a)
    assert sa["finished"] and sa["steps"] == 4 and sa["flops"] > 0
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    man_in = verify_bundle(b)
    assert run["identity"]["init_from"] == {"path": str(b.resolve()), "sha256": man_in["files"]["model.safetensors"]}
    assert run["identity"]["gen_init"] == "bundle" and run["identity"]["size"] is None
    out = verify_bundle(tmp_path / "a" / "bundle", kinds=("pretrained",))
    src = out["source"]
    assert src["init_from"]["sha256"] == man_in["files"]["model.safetensors"]
    assert src["init_from"]["gen_init"] == "bundle"
    assert src["init_flops"] is None and src["total_flops"] is None  # an imported checkpoint's FLOPs are unknown
    assert "generator/model.safetensors" in out["files"]  # kept for a further continued run
    assert json.loads((tmp_path / "a" / "bundle" / "config.json").read_text())["architectures"] == [
        "ElectraForPreTraining"]
    # the checkpoint's tokenizer, unchanged
    assert JapaneseTokenizer.load(tmp_path / "a" / "bundle").settings.mecab_dic == "ipadic"
    assert JapaneseTokenizer.load(tmp_path / "a" / "bundle").fingerprint() == JapaneseTokenizer.load(b).fingerprint()
    assert (sa["diagnostics"] or {}).get("disc_auc") is not None
    # killed after step 2 and resumed: the same weights as the uninterrupted run
    bcfg = replace(a, out=str(tmp_path / "b"))
    assert not run_pretrain(bcfg, stop_after=2)["finished"]
    sb = run_pretrain(bcfg)
    assert sb["steps"] == 4 and sb["flops"] == pytest.approx(sa["flops"])
    from safetensors.torch import load_file

    wa = load_file(str(tmp_path / "a" / "bundle" / "model.safetensors"))
    wb = load_file(str(tmp_path / "b" / "bundle" / "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # and it moved away from the checkpoint
    w0 = load_file(str(b / "model.safetensors"))
    assert any(not torch.equal(wa[k], w0[k]) for k in wa)
    # `denki pretrain export` from the run's checkpoint gives the same bundle weights (and the generator)
    assert main(["pretrain", "export", "--checkpoint", str(tmp_path / "a"), "--out", str(tmp_path / "exp")]) == 0
    we = load_file(str(tmp_path / "exp" / "model.safetensors"))
    assert all(torch.equal(wa[k], we[k]) for k in wa)
    assert verify_bundle(tmp_path / "exp")["source"]["init_from"]["path"] == str(b.resolve())
    assert (tmp_path / "exp" / "generator" / "model.safetensors").is_file()
    # another setting on the same --out is refused, as for a fresh run
    with pytest.raises(Exception, match="gen_init"):
        run_pretrain(replace(a, gen_init="copy"))


def test_copy_generator_costs_more_flops_than_a_random_narrow_one(bundles, tmp_path):
    """The FLOPs counter follows the generator actually built (full width × 1 layer vs ¼ width × 2 layers)."""
    from denki.pretrain.flops import step_flops
    from denki.pretrain.init_from import build_from_bundle

    b = bundles["electra-unidic-lite"]
    s_copy = run_pretrain(_cfg(tmp_path, b, "copy", steps=2))
    s_rand = run_pretrain(_cfg(tmp_path, b, "rand", steps=2, gen_init="random"))
    assert s_copy["flops"] > s_rand["flops"] > 0
    m, _ = build_from_bundle("electra", b)
    one = step_flops("electra", m.discriminator.config, m.generator.config, 4, 64, 0)
    assert s_copy["flops"] >= 2 * one  # at least the masked-free cost of two steps


def test_continued_mlm_from_bert_keeps_its_heads_and_the_chain_adds_flops(bundles, tmp_path):
    from safetensors.torch import load_file

    b = bundles["bert-unidic-lite"]
    with pytest.raises(Exception, match="--objective mlm"):
        run_pretrain(_cfg(tmp_path, b, "rtd"))
    s = run_pretrain(_cfg(tmp_path, b, "mlm", objective="mlm"))
    bundle = tmp_path / "mlm" / "bundle"
    cfg = json.loads((bundle / "config.json").read_text())
    assert cfg["architectures"] == ["BertForPreTraining"] and cfg["model_type"] == "bert"
    w0, w1 = load_file(str(b / "model.safetensors")), load_file(str(bundle / "model.safetensors"))
    pooler = [k for k in w0 if ".pooler." in k or "seq_relationship" in k]
    assert pooler and all(torch.equal(w0[k], w1[k]) for k in pooler)  # frozen: MLM does not train them
    assert not torch.equal(w0["bert.encoder.layer.0.attention.self.query.weight"],
                           w1["bert.encoder.layer.0.attention.self.query.weight"])
    assert s["diagnostics"]["cls_spread"] > 0
    # a continued run's bundle is a valid --init-from too; FLOPs add up once the first one's are known
    s2 = run_pretrain(_cfg(tmp_path, bundle, "mlm2", objective="mlm", steps=2))
    assert s2["init_flops"] is None  # the imported BERT's own pretraining FLOPs are unknown
    # from a denki bundle whose FLOPs are known: total = before + after
    tok = tmp_path / "tok"
    JapaneseTokenizer.load(b).save(tok)
    fresh = run_pretrain(PretrainConfig(corpus=[str(SAMPLE_CORPUS)], tokenizer=str(tok), out=str(tmp_path / "fresh"),
                                        objective="mlm", steps=2, batch_size=4, seq_len=64, device="cpu",
                                        progress=False, cache_dir=str(tmp_path / "cache"), save_every=2))
    s3 = run_pretrain(_cfg(tmp_path, tmp_path / "fresh", "cont", objective="mlm", steps=2))
    assert s3["init_flops"] == pytest.approx(fresh["flops"])
    assert s3["total_flops"] == pytest.approx(fresh["flops"] + s3["flops"])
    assert verify_bundle(tmp_path / "cont" / "bundle")["source"]["total_flops"] == pytest.approx(s3["total_flops"])


def test_cli_init_from_and_tokenizer_check(bundles, tmp_path, capsys, flavour_tokenizer_dirs):
    b = bundles["electra-ipadic"]
    common = ["pretrain", "--corpus", str(SAMPLE_CORPUS), "--steps", "2", "--batch-size", "4", "--seq-len", "64",
              "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "--save-every", "2"]
    # a --tokenizer that is not the checkpoint's is refused
    assert main(common + ["--init-from", str(b), "--tokenizer", str(flavour_tokenizer_dirs["unidic-lite"]),
                          "--out", str(tmp_path / "x")]) == 2
    assert "not the tokenizer of --init-from" in capsys.readouterr().err
    # the same tokenizer given explicitly is fine; --gen-init from the command line
    assert main(common + ["--init-from", str(b), "--tokenizer", str(b), "--gen-init", "copy",
                          "--out", str(tmp_path / "ok")]) == 0
    out = capsys.readouterr().out
    assert "continued from" in out and "unknown" in out
    assert json.loads((tmp_path / "ok" / "run.json").read_text())["identity"]["gen_layers"] == 1
    # --gen-init without --init-from
    assert main(common + ["--tokenizer", str(b), "--gen-init", "copy", "--out", str(tmp_path / "y")]) == 2
    assert "--init-from" in capsys.readouterr().err


def test_a_denki_bundle_imported_keeps_its_pretraining_flops(tmp_path, tiny_tokenizer_dir):
    """The evidence protocol (docs/import.md): a denki run exported, imported like a hub checkpoint, continued —
    the total FLOPs stay known."""
    fresh = run_pretrain(PretrainConfig(corpus=[str(SAMPLE_CORPUS)], tokenizer=str(tiny_tokenizer_dir),
                                        out=str(tmp_path / "general"), steps=2, batch_size=4, seq_len=64,
                                        device="cpu", progress=False, cache_dir=str(tmp_path / "cache"),
                                        save_every=2))
    assert main(["import", "--model", str(tmp_path / "general" / "bundle"), "--out", str(tmp_path / "imp")]) == 0
    imp = verify_bundle(tmp_path / "imp")["source"]["import"]
    assert imp["architecture"] == "ElectraForPreTraining" and imp["pretraining_flops"] == pytest.approx(fresh["flops"])
    s = run_pretrain(_cfg(tmp_path, tmp_path / "imp", "dapt", steps=2))
    assert s["init_flops"] == pytest.approx(fresh["flops"])
    assert s["total_flops"] == pytest.approx(fresh["flops"] + s["flops"])
