"""ELECTRA RTD pretraining (issue #3): masking, generator sampling, labels, sharing, FLOPs, token cache, resume,
NaN stop, export, CLI, DDP on gloo. Tiny sizes, short sequences, the shipped sample corpus."""
from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from denki.models.io.errors import DenkiError, InputError
from denki.pretrain import train_state as ck
from denki.pretrain.data import PackedSequences, build_token_cache
from denki.pretrain.flops import step_flops
from denki.pretrain.masking import BERT_SPLIT, ELECTRA_SPLIT, mask_tokens
from denki.pretrain.model import MLMPretrainer, RTDPretrainer, build_pretrainer, gumbel_sample, inverse_cdf_sample
from denki.pretrain.runlog import read_metrics
from denki.pretrain.train import PretrainConfig, run_pretrain

from .conftest import free_port

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIAL = (PAD, CLS, SEP, MASK)
SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "samples" / "corpus_ja.txt"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("corpus_cache")


def _configs(vocab_size: int, gen_size: float = 0.25):
    from denki.models.bundle.presets import electra_config, generator_config

    d = electra_config("tiny", vocab_size, num_hidden_layers=2)
    return d, generator_config(d, gen_size)


def _batch(B=6, L=32, V=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, L), generator=g)
    ids[:, 0] = CLS
    ids[:, L // 2] = SEP
    ids[:, 3] = MASK           # a literal [MASK] in the input is never a candidate
    ids[0, L - 6:] = PAD       # one padded row
    ids[0, L - 7] = SEP
    ids[:, -1] = torch.where(ids[:, -1] == PAD, ids[:, -1], torch.full_like(ids[:, -1], SEP))
    return ids, (ids != PAD).long()


def _cfg(tok_dir, out, cache_dir, **kw):
    base = dict(corpus=[str(SAMPLE_CORPUS)], tokenizer=str(tok_dir), out=str(out), size="tiny", steps=6,
                batch_size=4, seq_len=32, seed=3, device="cpu", log_every=1, save_every=3, cache_dir=str(cache_dir),
                progress=False, export=False)
    base.update(kw)
    return PretrainConfig(**base)


# ------------------------------------------------------------------------------------------------ masking
def test_masking_candidates_counts_and_electra_split():
    torch.manual_seed(0)
    ids, _ = _batch(B=64, L=64)
    m = mask_tokens(ids, mask_prob=0.15, mask_id=MASK, special_ids=SPECIAL, vocab_size=300, split=ELECTRA_SPLIT)
    special = (ids == PAD) | (ids == CLS) | (ids == SEP) | (ids == MASK)
    assert not (m.positions & special).any(), "specials must never be masked"
    n_cand = (~special).sum(1)
    assert torch.equal(m.positions.sum(1), torch.clamp(torch.round(n_cand * 0.15).long(), min=1))
    # unmasked positions untouched; masked ones are [MASK] (≈85%) or the original (≈15%), never random
    assert torch.equal(m.input_ids[~m.positions], ids[~m.positions])
    masked_in, masked_orig = m.input_ids[m.positions], ids[m.positions]
    assert ((masked_in == MASK) | (masked_in == masked_orig)).all()
    frac_mask = (masked_in == MASK).float().mean().item()
    assert 0.79 < frac_mask < 0.91, frac_mask
    assert torch.equal(m.labels[m.positions], masked_orig) and (m.labels[~m.positions] == -100).all()
    # dynamic: a new draw per call
    m2 = mask_tokens(ids, mask_prob=0.15, mask_id=MASK, special_ids=SPECIAL, vocab_size=300, split=ELECTRA_SPLIT)
    assert not torch.equal(m.positions, m2.positions)


def test_masking_bert_split_replaces_some_with_random_tokens():
    torch.manual_seed(1)
    ids, _ = _batch(B=64, L=64)
    m = mask_tokens(ids, mask_prob=0.15, mask_id=MASK, special_ids=SPECIAL, vocab_size=300, split=BERT_SPLIT)
    masked_in, masked_orig = m.input_ids[m.positions], ids[m.positions]
    other = (masked_in != MASK) & (masked_in != masked_orig)
    assert 0.04 < other.float().mean().item() < 0.16
    assert (masked_in[other] >= 5).all(), "random replacements are never special tokens"


# ------------------------------------------------------------------------------------------------ model
def test_embeddings_shared_and_generator_head_tied():
    d, g = _configs(300)
    m = RTDPretrainer(d, g)
    assert m.generator.electra.embeddings is m.discriminator.electra.embeddings
    emb = m.discriminator.electra.embeddings
    assert m.generator.generator_lm_head.weight is emb.word_embeddings.weight
    names = [n for n, _ in m.named_parameters()]
    assert sum("word_embeddings" in n for n in names) == 1
    assert sum("position_embeddings" in n for n in names) == 1
    assert sum("embeddings.LayerNorm.weight" in n for n in names) == 1
    assert g.hidden_size == d.hidden_size // 4 and g.num_hidden_layers == d.num_hidden_layers


def test_separate_embeddings_each_own_and_generator_head_tied_to_its_own():
    d, g = _configs(300)
    m = build_pretrainer("electra", d, g, share_embeddings=False)
    ge, de = m.generator.electra.embeddings, m.discriminator.electra.embeddings
    assert ge is not de and ge.word_embeddings.weight is not de.word_embeddings.weight
    assert m.generator.generator_lm_head.weight is ge.word_embeddings.weight
    names = [n for n, _ in m.named_parameters()]
    assert sum("word_embeddings" in n for n in names) == 2
    # the discriminator's embeddings get no gradient from the generator's loss
    ids, am = _batch()
    mk = mask_tokens(ids, mask_prob=0.15, mask_id=MASK, special_ids=SPECIAL, vocab_size=300)
    m.disc_weight = 0.0
    m(ids, mk.input_ids, mk.positions, am)["loss"].backward()
    assert de.word_embeddings.weight.grad is None or not de.word_embeddings.weight.grad.any()
    assert ge.word_embeddings.weight.grad.abs().sum() > 0


def test_inverse_cdf_sampler_draws_the_softmax_distribution():
    """Same distribution as Gumbel-max: a chi-square test per sampler against the exact softmax, and the two
    samplers' histograms against each other (fixed seeds, so deterministic)."""
    from scipy.stats import chi2, chi2_contingency

    torch.manual_seed(1)
    V, N = 40, 60000
    logits = torch.randn(V) * 2.0
    probs = torch.softmax(logits, -1).double()
    rows = logits.expand(N, V)
    hists = {}
    for name, sampler in (("inverse_cdf", inverse_cdf_sample), ("gumbel", gumbel_sample)):
        s = sampler(rows)
        assert s.shape == (N,) and s.dtype == torch.long and not s.requires_grad
        obs = torch.bincount(s, minlength=V).double()
        hists[name] = obs
        exp = probs * N
        keep = exp >= 5  # the usual chi-square validity rule; lump the rare cells together
        stat = (((obs[keep] - exp[keep]) ** 2) / exp[keep]).sum() + \
            (obs[~keep].sum() - exp[~keep].sum()) ** 2 / max(float(exp[~keep].sum()), 1e-9)
        dof = int(keep.sum()) - (0 if (~keep).any() else 1)
        assert chi2.sf(float(stat), dof) > 1e-3, (name, float(stat), dof)
    table = torch.stack([hists["inverse_cdf"], hists["gumbel"]]).numpy()
    table = table[:, table.sum(0) > 0]
    assert chi2_contingency(table)[1] > 1e-3
    # zero-probability tokens are never drawn; a dominant logit is always drawn, also from bf16 logits
    masked = torch.tensor([0.0, -float("inf"), 1.0, -float("inf")]).expand(5000, 4)
    assert set(inverse_cdf_sample(masked).unique().tolist()) <= {0, 2}
    big = torch.full((5, 300), -30.0, dtype=torch.bfloat16)
    big[torch.arange(5), torch.tensor([7, 8, 9, 10, 11])] = 30.0
    assert inverse_cdf_sample(big).tolist() == [7, 8, 9, 10, 11]
    # rows are independent: different rows, different distributions
    two = torch.stack([torch.tensor([9.0, 0.0, 0.0]), torch.tensor([0.0, 0.0, 9.0])]).repeat(1000, 1)
    s = inverse_cdf_sample(two).view(1000, 2)
    assert (s[:, 0] == 0).float().mean() > 0.99 and (s[:, 1] == 2).float().mean() > 0.99


def test_separate_embeddings_and_pretrain_dropout_run_resume_and_export(tiny_tokenizer_dir, cache_dir, tmp_path):
    from denki.models.bundle.format import verify_bundle
    from denki.pretrain.export import export_from_checkpoint

    a = _cfg(tiny_tokenizer_dir, tmp_path / "sep", cache_dir, export=True, share_embeddings=False, dropout=0.0)
    s = run_pretrain(a)
    assert s["finished"]
    run = json.loads((tmp_path / "sep" / "run.json").read_text())
    assert run["identity"]["embeddings"] == "separate" and run["identity"]["dropout"] == 0.0
    p = load_file(str(ck.latest_train_state(a.out) / "model.safetensors"))
    gw = p["generator.electra.embeddings.word_embeddings.weight"]
    dw = p["discriminator.electra.embeddings.word_embeddings.weight"]
    assert not torch.equal(gw, dw)
    bundle = tmp_path / "sep" / "bundle"
    man = verify_bundle(bundle, kinds=("pretrained",))
    assert man["source"]["embeddings"] == "separate" and man["source"]["pretrain_dropout"] == 0.0
    cfg = json.loads((bundle / "config.json").read_text())
    assert cfg["hidden_dropout_prob"] == 0.1 and cfg["attention_probs_dropout_prob"] == 0.1  # fine-tuning's
    w = load_file(str(bundle / "model.safetensors"))
    assert torch.equal(w["electra.embeddings.word_embeddings.weight"], dw)  # the discriminator's own
    # the checkpoint re-exports to the same weights (the model is rebuilt with separate embeddings)
    again = tmp_path / "again"
    export_from_checkpoint(ck.latest_train_state(a.out), again)
    w2 = load_file(str(again / "model.safetensors"))
    assert w.keys() == w2.keys() and all(torch.equal(w[k], w2[k]) for k in w)
    # a different embeddings setting on the same --out is refused, naming it
    with pytest.raises(DenkiError, match="embeddings"):
        run_pretrain(replace(a, share_embeddings=True))
    with pytest.raises(DenkiError, match="dropout"):
        run_pretrain(replace(a, dropout=None))


def test_electra_mlm_runs_resumes_and_exports_the_discriminator_only(tiny_tokenizer_dir, cache_dir, tmp_path):
    from denki.models.bundle.format import verify_bundle
    from denki.pretrain.export import export_from_checkpoint

    a = _cfg(tiny_tokenizer_dir, tmp_path / "a", cache_dir, export=True, objective="electra-mlm")
    b = _cfg(tiny_tokenizer_dir, tmp_path / "b", cache_dir, objective="electra-mlm")
    sa = run_pretrain(a)
    assert not run_pretrain(b, stop_after=4)["finished"]
    sb = run_pretrain(b)
    assert sa["flops"] == sb["flops"] and sa["steps"] == sb["steps"] == 6
    pa = load_file(str(ck.latest_train_state(a.out) / "model.safetensors"))
    pb = load_file(str(ck.latest_train_state(b.out) / "model.safetensors"))
    assert any(k.startswith("disc_mlm_head.") for k in pa) and "disc_mlm_bias" in pa
    assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
    rows = read_metrics(a.out)
    assert all(0 <= r["disc_mlm_acc"] <= 1 and r["disc_mlm_loss"] > 0 and r["disc_recall"] is not None for r in rows)
    # the same batches cost more than ELECTRA's: the discriminator's MLM head is counted
    e = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "e", cache_dir, objective="electra"))
    assert sa["flops"] > e["flops"]
    bundle = tmp_path / "a" / "bundle"
    man = verify_bundle(bundle, kinds=("pretrained",))
    assert man["source"]["objective"] == "electra-mlm"
    assert json.loads((bundle / "config.json").read_text())["architectures"] == ["ElectraForPreTraining"]
    w = load_file(str(bundle / "model.safetensors"))
    assert not any("disc_mlm" in k for k in w)  # a training device only, as the generator
    assert torch.equal(w["electra.embeddings.word_embeddings.weight"],
                       pa["discriminator.electra.embeddings.word_embeddings.weight"])
    again = tmp_path / "again"
    export_from_checkpoint(ck.latest_train_state(a.out), again)
    w2 = load_file(str(again / "model.safetensors"))
    assert w.keys() == w2.keys() and all(torch.equal(w[k], w2[k]) for k in w)


def test_generator_logits_only_at_masked_positions_and_no_grad_sampling():
    torch.manual_seed(0)
    d, g = _configs(300)
    m = RTDPretrainer(d, g)
    ids, am = _batch()
    mk = mask_tokens(ids, mask_prob=0.15, mask_id=MASK, special_ids=SPECIAL, vocab_size=300)
    seen = {}

    def record(mod, inp, out):
        seen["shape"] = tuple(out.shape)

    m.generator.generator_lm_head.register_forward_hook(record)
    sampled_box = {}

    def spy(logits):
        s = gumbel_sample(logits)
        sampled_box["s"] = s
        return s

    m.sampler = spy
    out = m(ids, mk.input_ids, mk.positions, am)
    M = int(mk.positions.sum())
    assert seen["shape"] == (M, 300), "LM head runs only at the masked positions"
    assert not sampled_box["s"].requires_grad and sampled_box["s"].dtype == torch.long
    out["loss"].backward()
    # Gumbel-max in fp32 picks the argmax when one logit dominates, even from bf16 logits
    logits = torch.full((5, 300), -30.0, dtype=torch.bfloat16)
    logits[torch.arange(5), torch.tensor([7, 8, 9, 10, 11])] = 30.0
    assert gumbel_sample(logits).tolist() == [7, 8, 9, 10, 11]
    # and samples from the softmax otherwise
    probs = torch.tensor([0.6, 0.3, 0.1])
    freq = torch.bincount(gumbel_sample(probs.log().expand(20000, 3)), minlength=3) / 20000
    assert torch.allclose(freq, probs, atol=0.02), freq


def test_labels_sampled_equal_to_original_are_original_and_loss_is_mlm_plus_lambda_disc():
    import torch.nn.functional as F

    torch.manual_seed(0)
    d, g = _configs(300)
    m = RTDPretrainer(d, g, disc_weight=50.0).eval()  # eval: no dropout, so the loss can be recomputed
    ids, am = _batch()
    mk = mask_tokens(ids, mask_prob=0.3, mask_id=MASK, special_ids=SPECIAL, vocab_size=300)
    orig = ids[mk.positions]
    # half of the "samples" equal the original, half differ
    fake = orig.clone()
    fake[1::2] = torch.where(orig[1::2] + 1 < 300, orig[1::2] + 1, torch.full_like(orig[1::2], 5))
    m.sampler = lambda logits: fake
    out = m(ids, mk.input_ids, mk.positions, am)
    assert int(out["n_replaced"]) == len(fake[1::2])
    assert int(out["n_masked"]) == len(orig) and int(out["n_nonpad"]) == int(am.sum())
    disc_in = ids.clone()
    disc_in[mk.positions] = fake
    labels = ((disc_in != ids) & am.bool()).float()
    logits = m.discriminator(input_ids=disc_in, attention_mask=am).logits
    per = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    disc = (per * am).sum() / am.sum()
    assert torch.allclose(out["disc_loss"], disc, atol=1e-5)
    assert torch.allclose(out["loss"], out["mlm_loss"] + 50.0 * disc, atol=1e-4)
    # all samples equal to the originals → nothing is labelled replaced
    m.sampler = lambda logits: orig
    assert int(m(ids, mk.input_ids, mk.positions, am)["n_replaced"]) == 0


def _shifted_replacements(objective: str):
    """A 2-layer RTD pretrainer whose "generator" replaces every masked token by its id + 1 (fixed, no sampling),
    run once on a fixed batch: ``(model, ids, attention_mask, masked, outputs, discriminator_input)``."""
    from denki.pretrain.model import build_pretrainer

    torch.manual_seed(0)
    d, g = _configs(300)
    m = build_pretrainer(objective, d, g, 50.0).eval()
    ids, am = _batch()
    mk = mask_tokens(ids, mask_prob=0.3, mask_id=MASK, special_ids=SPECIAL, vocab_size=300)
    orig = ids[mk.positions]
    fake = torch.where(orig + 1 < 300, orig + 1, torch.full_like(orig, 5))
    m.sampler = lambda logits: fake
    out = m(ids, mk.input_ids, mk.positions, am)
    disc_in = ids.clone()
    disc_in[mk.positions] = fake
    return m, ids, am, mk, out, disc_in


def test_electra15_disc_loss_averages_over_masked_positions_only():
    """The paper's "ELECTRA 15%" ablation: same labels, loss over the masked positions only."""
    import torch.nn.functional as F

    m, ids, am, mk, out, disc_in = _shifted_replacements("electra15")
    assert m.objective == "electra15" and m.masked_only
    labels = ((disc_in != ids) & am.bool()).float()
    per = F.binary_cross_entropy_with_logits(m.discriminator(input_ids=disc_in, attention_mask=am).logits, labels,
                                             reduction="none")
    masked = mk.positions.float()
    assert torch.allclose(out["disc_loss"], (per * masked).sum() / masked.sum(), atol=1e-5)
    assert not torch.allclose(out["disc_loss"], (per * am).sum() / am.sum(), atol=1e-3)


def test_disc_skip_special_leaves_cls_and_sep_out_of_the_disc_loss_only():
    """``--disc-skip-special``: the discriminator loss averages over the non-pad tokens other than [CLS]/[SEP];
    the generator's loss and the diagnostics' counts are unchanged."""
    import torch.nn.functional as F

    m, ids, am, mk, out, disc_in = _shifted_replacements("electra")
    m.skip_in_disc_loss((CLS, SEP))
    skipped = m(ids, mk.input_ids, mk.positions, am)
    labels = ((disc_in != ids) & am.bool()).float()
    per = F.binary_cross_entropy_with_logits(m.discriminator(input_ids=disc_in, attention_mask=am).logits, labels,
                                             reduction="none")
    scored = (am.bool() & (ids != CLS) & (ids != SEP)).float()
    assert scored.sum() < am.sum()  # the batch has [CLS] and [SEP]s to skip
    assert torch.allclose(skipped["disc_loss"], (per * scored).sum() / scored.sum(), atol=1e-5)
    assert not torch.allclose(skipped["disc_loss"], out["disc_loss"], atol=1e-4)
    assert torch.allclose(skipped["loss"], skipped["mlm_loss"] + 50.0 * skipped["disc_loss"], atol=1e-4)
    for k in ("mlm_loss", "n_nonpad", "n_replaced", "disc_tp"):
        assert torch.equal(skipped[k], out[k]), k
    # the logged accuracy/precision judge only the tokens the loss trains: the untrained [CLS]/[SEP] outputs of a
    # skipping run would otherwise count as false positives (they halved the logged precision on a synthetic corpus)
    judged = scored.bool()
    logits = m.discriminator(input_ids=disc_in, attention_mask=am).logits
    assert int(out["n_judged"]) == int(am.sum()) and int(skipped["n_judged"]) == int(judged.sum())
    assert int(skipped["disc_pred_pos"]) == int(((logits > 0) & judged).sum())
    assert int(out["disc_pred_pos"]) == int(((logits > 0) & am.bool()).sum())


def test_probe_auc_leaves_out_the_tokens_the_disc_loss_skips():
    """``rtd_auc`` judges every non-pad token but [CLS] — and, with ``--disc-skip-special``, not [SEP] either."""
    from denki.pretrain.diagnostics import roc_auc, rtd_auc

    m, ids, am, mk, _, disc_in = _shifted_replacements("electra")
    scores = m.discriminator(input_ids=disc_in, attention_mask=am).logits.detach()
    labels = (disc_in != ids) & am.bool()

    def want(keep):
        return roc_auc(scores[keep].numpy(), labels[keep].numpy())

    keep = am.bool().clone()
    keep[:, 0] = False
    assert rtd_auc(m, ids, mk.input_ids, mk.positions, am)["disc_auc"] == pytest.approx(want(keep))
    m.skip_in_disc_loss((CLS, SEP))
    with_sep = want(keep)
    keep &= ids != SEP
    assert want(keep) != pytest.approx(with_sep)  # the [SEP]s' scores move the AUC: the check below can fail
    assert (ids[am.bool()] == SEP).sum() > 0  # the batch has [SEP]s to leave out
    assert rtd_auc(m, ids, mk.input_ids, mk.positions, am)["disc_auc"] == pytest.approx(want(keep))


def test_probe_recall_is_the_share_of_replaced_tokens_scored_replaced():
    from denki.pretrain.diagnostics import rtd_auc

    m, ids, am, mk, _, disc_in = _shifted_replacements("electra")
    logits = m.discriminator(input_ids=disc_in, attention_mask=am).logits.detach()
    replaced = (disc_in != ids) & am.bool()
    replaced[:, 0] = False
    with torch.no_grad():  # a bias that puts some replaced tokens on each side of 0.5
        m.discriminator.discriminator_predictions.dense_prediction.bias -= float(logits[replaced].median())
    logits = m.discriminator(input_ids=disc_in, attention_mask=am).logits.detach()
    want = float((logits[replaced] > 0).float().mean())
    assert 0.2 < want < 0.8
    assert rtd_auc(m, ids, mk.input_ids, mk.positions, am)["probe_recall"] == pytest.approx(want)


def test_gen_temperature_flattens_the_training_samples_but_not_the_probes():
    """``--gen-temperature T``: the generator's replacements in training come from softmax(logits / T); the probe
    corrupts at T = 1 whatever T is, so that runs compare on the paper's corruption."""
    from denki.pretrain.diagnostics import rtd_auc
    from denki.pretrain.model import build_pretrainer

    torch.manual_seed(0)
    d, g = _configs(300)
    m = build_pretrainer("electra", d, g, 50.0).eval()
    ids, am = _batch()
    mk = mask_tokens(ids, mask_prob=0.3, mask_id=MASK, special_ids=SPECIAL, vocab_size=300)
    seen = []
    sampler = m.sampler
    m.sampler = lambda logits: (seen.append(logits), sampler(logits))[1]
    m(ids, mk.input_ids, mk.positions, am)
    m.gen_temperature = 4.0
    m(ids, mk.input_ids, mk.positions, am)
    assert torch.allclose(seen[1] * 4.0, seen[0], atol=1e-5)  # the same logits, divided by T
    d = rtd_auc(m, ids, mk.input_ids, mk.positions, am)
    assert torch.allclose(seen[2], seen[0], atol=1e-5)  # the probe samples at T = 1 ...
    assert torch.allclose(seen[3] * 4.0, seen[0], atol=1e-5)  # ... and again at the run's own T
    assert 0 <= d["disc_auc_own_t"] <= 1
    m.gen_temperature = 1.0
    assert "disc_auc_own_t" not in rtd_auc(m, ids, mk.input_ids, mk.positions, am)


def test_reprobe_from_the_last_checkpoint_reproduces_the_logged_probe(tiny_tokenizer_dir, cache_dir, tmp_path):
    """``load_run_probe`` (docs/*/reprobe.py) rebuilds a finished run's probe: same batch, same corruption, same
    figures as its summary — here for a run trained at --gen-temperature 2, which also gets ``disc_auc_own_t``, in bf16 (a bf16 encoder re-probed in fp32 differs in the 5th decimal)."""
    from denki.pretrain.diagnostics import load_run_probe

    s = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "p", cache_dir, steps=4, gen_temperature=2.0,
                          precision="bf16"))
    assert json.loads((tmp_path / "p" / "run.json").read_text())["precision"] == "bf16"
    model, last, probe = load_run_probe(tmp_path / "p")  # re-probes at the run's precision
    assert last.name.endswith("4") and model.gen_temperature == 2.0 and probe.ids.shape[0] > 0
    again = probe()
    assert set(again) == set(s["diagnostics"]) and "disc_auc_own_t" in again
    for k, v in s["diagnostics"].items():
        assert again[k] == pytest.approx(v, abs=1e-6), k


def test_health_check_judges_a_tempered_run_on_its_own_corruption():
    from denki.models.training.pretrain_health import verdict

    # measured at T = 3, 1e14 FLOPs: AUC 0.596 on the paper's corruption, above random init after fine-tuning
    assert "AUC 0.58" in verdict({"cls_spread": 0.7, "mean_spread": 0.4, "disc_auc": 0.58})
    assert verdict({"cls_spread": 0.7, "mean_spread": 0.4, "disc_auc": 0.58, "disc_auc_own_t": 0.71}) is None
    w = verdict({"cls_spread": 0.7, "mean_spread": 0.4, "disc_auc": 0.70, "disc_auc_own_t": 0.55})
    assert "AUC 0.55 on replacements drawn at its --gen-temperature" in w


def test_gen_temperature_is_part_of_the_run_identity_and_manifest(tiny_tokenizer_dir, cache_dir, tmp_path):
    a = _cfg(tiny_tokenizer_dir, tmp_path / "a", cache_dir, steps=2, export=True, gen_temperature=2.0)
    assert run_pretrain(a)["finished"]
    assert json.loads((tmp_path / "a" / "run.json").read_text())["identity"]["gen_temperature"] == 2.0
    assert json.loads((tmp_path / "a" / "bundle" / "manifest.json").read_text())["source"]["gen_temperature"] == 2.0
    with pytest.raises(DenkiError, match="gen_temperature"):
        run_pretrain(replace(a, gen_temperature=1.0))  # another run
    with pytest.raises(DenkiError, match="gen-temperature"):
        run_pretrain(replace(a, out=str(tmp_path / "z"), gen_temperature=0.0))
    with pytest.raises(DenkiError, match="gen-temperature"):
        run_pretrain(replace(a, out=str(tmp_path / "m"), objective="mlm", gen_temperature=2.0))


def test_disc_skip_special_is_part_of_the_run_identity_and_manifest(tiny_tokenizer_dir, cache_dir, tmp_path):
    a = _cfg(tiny_tokenizer_dir, tmp_path / "a", cache_dir, steps=2, export=True, disc_skip_special=True)
    assert run_pretrain(a)["finished"]
    assert json.loads((tmp_path / "a" / "run.json").read_text())["identity"]["disc_skip_special"] is True
    man = json.loads((tmp_path / "a" / "bundle" / "manifest.json").read_text())
    assert man["source"]["disc_skip_special"] is True
    with pytest.raises(DenkiError, match="disc_skip_special"):
        run_pretrain(replace(a, disc_skip_special=False))  # the paper's scoring is another run
    b = replace(a, out=str(tmp_path / "b"), disc_skip_special=False, export=False)
    assert run_pretrain(b)["finished"]
    assert json.loads((tmp_path / "b" / "run.json").read_text())["identity"]["disc_skip_special"] is None
    with pytest.raises(DenkiError, match="disc-skip-special"):
        run_pretrain(replace(a, out=str(tmp_path / "m"), objective="mlm", disc_skip_special=True))


def test_electra_mlm_adds_the_discriminators_corrective_mlm_at_masked_positions():
    """``electra-mlm``: ELECTRA's loss + the discriminator's cross-entropy on the original token at each masked
    position, from its view of the corrupted input, through an LM head tied to its own word embeddings."""
    import torch.nn.functional as F

    m, ids, am, mk, out, disc_in = _shifted_replacements("electra-mlm")
    d, g = m.discriminator.config, m.generator.config
    orig = ids[mk.positions]
    assert m.objective == "electra-mlm" and not m.masked_only and m.disc_mlm_head is not None
    h = m.discriminator.electra(input_ids=disc_in, attention_mask=am).last_hidden_state[mk.positions]  # (M, H)
    w = m.discriminator.electra.embeddings.word_embeddings.weight
    want = F.cross_entropy(m.disc_mlm_head(h) @ w.T + m.disc_mlm_bias, orig)
    assert torch.allclose(out["disc_mlm_loss"], want, atol=1e-5)
    assert torch.allclose(out["loss"], out["mlm_loss"] + 50.0 * out["disc_loss"] + want, atol=1e-4)
    assert 0 <= int(out["disc_mlm_correct"]) <= len(orig)
    # the corrective loss alone reaches the discriminator's encoder (not only its new head)
    m.zero_grad()
    F.cross_entropy(m.disc_mlm_logits(m.discriminator.electra(input_ids=disc_in, attention_mask=am)
                                      .last_hidden_state[mk.positions]), orig).backward()
    assert m.discriminator.electra.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError):
        RTDPretrainer(d, g, masked_only=True, disc_mlm=True)


@pytest.mark.parametrize("objective", ["electra", "mlm", "electra-mlm"])
def test_analytic_flops_match_flop_counter(objective):
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    from denki.models.bundle.presets import electra_config, generator_config

    d = electra_config("tiny", 4000)
    g = generator_config(d, 0.25)
    m = build_pretrainer(objective, d, g)
    ids, am = _batch(B=8, L=64, V=4000)
    mk = mask_tokens(ids, mask_prob=0.15, mask_id=MASK, special_ids=SPECIAL, vocab_size=4000,
                     split=BERT_SPLIT if objective == "mlm" else ELECTRA_SPLIT)
    with FlopCounterMode(display=False) as fc:
        m(ids, mk.input_ids, mk.positions, am)["loss"].backward()
    measured = fc.get_total_flops()
    analytic = step_flops(objective, d, g, 8, 64, int(mk.positions.sum()))
    assert abs(analytic - measured) / measured < 0.10, (analytic, measured)


# ------------------------------------------------------------------------------------------------ data
def test_token_cache_packing_and_reuse(tiny_tokenizer, cache_dir, monkeypatch):
    cache = build_token_cache([SAMPLE_CORPUS], tiny_tokenizer, cache_dir, progress=False)
    lines = [t for t in SAMPLE_CORPUS.read_text(encoding="utf-8").splitlines() if t.strip()]
    first = tiny_tokenizer.token_ids(lines[0]) + [tiny_tokenizer.sep_id]
    assert cache.tokens[:cache.paragraph_ends[0]].tolist() == first
    assert cache.meta["n_paragraphs"] == len(lines) and cache.tokens.dtype == np.uint16
    assert int(cache.paragraph_ends[-1]) == cache.n_tokens
    # second call: served from the cache, no tokenization
    monkeypatch.setattr(type(tiny_tokenizer), "token_ids", lambda *a: (_ for _ in ()).throw(AssertionError))
    again = build_token_cache([SAMPLE_CORPUS], tiny_tokenizer, cache_dir, progress=False)
    assert again.dir == cache.dir
    seqs = PackedSequences(cache, 32, cls_id=CLS, pad_id=PAD, seed=0)
    b = seqs.batch(0, 4)
    assert b.shape == (4, 32) and (b[:, 0] == CLS).all()
    assert np.array_equal(seqs.batch(5, 4, rank=1, world=2), seqs.batch(5, 4, rank=1, world=2))
    assert not np.array_equal(seqs.batch(5, 4, rank=0, world=2), seqs.batch(5, 4, rank=1, world=2))
    # one epoch visits every packed sequence exactly once; the stream (minus [CLS]s) is the cache
    n = len(seqs)
    rows = np.concatenate([seqs.batch(s, 1) for s in range(n)])
    body = np.sort(rows[:, 1:].reshape(-1))
    body = body[body != PAD]
    assert np.array_equal(body, np.sort(np.asarray(cache.tokens, dtype=np.int64)))


def test_corpus_errors_name_file_and_line(tiny_tokenizer, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(InputError, match="empty.txt.*empty"):
        build_token_cache([empty], tiny_tokenizer, tmp_path / "c1", progress=False)
    bad = tmp_path / "bad.txt"
    bad.write_bytes("一行目\n二行目\n".encode() + "三行目".encode("cp932") + b"\n")
    with pytest.raises(InputError, match=r"bad.txt:3"):
        build_token_cache([bad], tiny_tokenizer, tmp_path / "c2", progress=False)
    assert not any((tmp_path / "c2").glob("*")), "no half-written cache is left behind"


# ------------------------------------------------------------------------------------------------ loop
def test_resume_after_kill_gives_identical_parameters_and_export_loads(tiny_tokenizer_dir, cache_dir, tmp_path):
    from transformers import AutoModel, ElectraForSequenceClassification

    from denki.models.bundle.format import verify_bundle

    a = _cfg(tiny_tokenizer_dir, tmp_path / "a", cache_dir, export=True)
    b = _cfg(tiny_tokenizer_dir, tmp_path / "b", cache_dir, export=True)
    sa = run_pretrain(a)
    killed = run_pretrain(b, stop_after=4)  # "killed" after step 4; newest checkpoint is step 3
    assert not killed["finished"] and ck.latest_train_state(b.out).name == "step-00000003"
    sb = run_pretrain(b)
    assert sa["steps"] == sb["steps"] == 6 and sa["tokens"] == sb["tokens"] and sa["flops"] == sb["flops"]
    pa = load_file(str(ck.latest_train_state(a.out) / "model.safetensors"))
    pb = load_file(str(ck.latest_train_state(b.out) / "model.safetensors"))
    assert pa.keys() == pb.keys()
    for k in pa:
        assert torch.equal(pa[k], pb[k]), k
    ra, rb = read_metrics(a.out), read_metrics(b.out)
    assert [r["step"] for r in rb] == [1, 2, 3, 4, 5, 6]
    assert [r["loss"] for r in ra] == [r["loss"] for r in rb]
    need = {"step", "tokens", "flops", "loss", "mlm_loss", "disc_loss", "gen_acc", "replace_rate", "disc_acc",
            "disc_precision", "disc_recall", "lr", "tokens_per_s"}
    assert need <= set(ra[-1])
    assert 0 < ra[-1]["replace_rate"] <= 0.15 and 0 <= ra[-1]["disc_recall"] <= 1
    assert (tmp_path / "a" / "curves.png").stat().st_size > 1000
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["finished"] and summary["steps"] == 6
    assert len(ck.list_train_states(a.out)) <= a.keep

    bundle = tmp_path / "a" / "bundle"
    man = verify_bundle(bundle, kinds=("pretrained",))
    assert man["source"]["corpus"][0]["sha256"] and man["source"]["tokenizer"] and man["source"]["steps"] == 6
    assert man["source"]["flops"] == sa["flops"] and "gen_acc" in man["metrics"]["final"]
    assert "torch" in man["versions"] and "transformers" in man["versions"]
    assert json.loads((bundle / "config.json").read_text())["architectures"] == ["ElectraForPreTraining"]
    enc = AutoModel.from_pretrained(bundle)
    assert type(enc).__name__ == "ElectraModel"
    clf = ElectraForSequenceClassification.from_pretrained(bundle, num_labels=3)
    assert torch.equal(clf.electra.embeddings.word_embeddings.weight, pa["discriminator.electra.embeddings.word_embeddings.weight"])

    # finished run + same args: reports done and re-exports a missing bundle
    import shutil

    shutil.rmtree(bundle)
    again = run_pretrain(a)
    assert again["finished"] and verify_bundle(bundle)["kind"] == "pretrained"
    # changed args on the same --out: clear error
    with pytest.raises(DenkiError, match="objective"):
        run_pretrain(replace(a, objective="mlm"))
    with pytest.raises(DenkiError, match="size"):
        run_pretrain(replace(a, size="small"))


def _poison_loss_from_call(monkeypatch, first: int) -> None:
    """Make ``RTDPretrainer.forward`` return a NaN loss from its ``first``-th call on."""
    orig = RTDPretrainer.forward
    calls = {"n": 0}

    def poisoned(self, *a, **kw):
        out = orig(self, *a, **kw)
        calls["n"] += 1
        if calls["n"] >= first:
            out["loss"] = out["loss"] * float("nan")
        return out

    monkeypatch.setattr(RTDPretrainer, "forward", poisoned)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tiny_tokenizer_dir, cache_dir, tmp_path, monkeypatch):
    _poison_loss_from_call(monkeypatch, 3)
    cfg = _cfg(tiny_tokenizer_dir, tmp_path / "nan", cache_dir, save_every=2)
    with pytest.raises(DenkiError, match=r"NaN.*step-00000002"):
        run_pretrain(cfg)
    assert [p.name for p in ck.list_train_states(cfg.out)] == ["step-00000002"]


def test_default_objective_per_size():
    from denki.pretrain.settings import default_objective

    assert default_objective("tiny") == "electra"  # it ties MLM on routing and wins QA at 2e14 (experiments/anshead)
    assert default_objective("small") == "electra" and default_objective("base") == "electra"
    assert default_objective("tiny", init_from="runs/imported") == "electra"  # an imported discriminator: RTD


def test_default_mask_prob_per_objective():
    """MLM from scratch at tiny masks 40 % (measured, experiments/qsm40); everything else the paper's 15 %."""
    from denki.pretrain.settings import default_mask_prob

    assert default_mask_prob("tiny", "mlm") == 0.4
    assert default_mask_prob("tiny", "electra") == default_mask_prob("tiny", "electra15") == 0.15
    assert default_mask_prob("small", "mlm") == default_mask_prob("base", "mlm") == 0.15  # unmeasured: the paper's
    assert default_mask_prob("tiny", "mlm", init_from="runs/imported") == 0.15  # a checkpoint pretrained at 15 %


def test_tiny_electra_defaults_depend_on_the_planned_run_length():
    """lr 1e-3 + --cls-contrast 1 + --gen-temperature 2 for a long tiny ELECTRA, lr 3e-4, no contrast and T = 1 for
    a short one (measured, experiments/cc1e14, experiments/anshead); everything else keeps its per-size lr, no
    contrast and T = 1."""
    from denki.pretrain.settings import (TINY_RTD_LONG_STEPS, default_cls_contrast, default_gen_temperature,
                                         default_pretrain_lr)

    long, short = TINY_RTD_LONG_STEPS, TINY_RTD_LONG_STEPS - 1
    assert default_pretrain_lr("tiny", "electra", long) == 1e-3 and default_cls_contrast("tiny", "electra", long) == 1.0
    assert default_pretrain_lr("tiny", "electra", short) == 3e-4 and default_cls_contrast("tiny", "electra", short) == 0.0
    assert default_pretrain_lr("tiny", "electra", None) == 3e-4  # --init-from: no plan, the old default
    assert default_pretrain_lr("tiny", "electra15", long) == 3e-4 and default_cls_contrast("tiny", "electra15", long) == 0.0
    assert default_pretrain_lr("tiny", "mlm", long) == 1e-3 and default_cls_contrast("tiny", "mlm", long) == 0.0
    assert default_pretrain_lr("small", "electra", long) == 5e-4 and default_cls_contrast("small", "electra", long) == 0.0
    assert default_gen_temperature("tiny", "electra", long) == 2.0
    assert default_gen_temperature("tiny", "electra", short) == 1.0
    assert default_gen_temperature("tiny", "electra", None) == 1.0  # --init-from
    assert default_gen_temperature("tiny", "electra-mlm", long) == 1.0
    assert default_gen_temperature("small", "electra", long) == 1.0


def test_long_tiny_electra_run_gets_and_records_the_long_run_defaults(tiny_tokenizer_dir, cache_dir, tmp_path,
                                                                    monkeypatch, capsys):
    import denki.pretrain.settings as tr

    monkeypatch.setattr(tr, "TINY_RTD_LONG_STEPS", 2)  # so that a 2-step run counts as long
    assert run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "long", cache_dir, steps=2))["finished"]
    ident = json.loads((tmp_path / "long" / "run.json").read_text())["identity"]
    assert ident["cls_contrast"] == 1.0 and ident["lr"] == 1e-3 and ident["gen_temperature"] == 2.0
    assert "long-run defaults --lr 0.001 --cls-contrast 1 --gen-temperature 2 (" in capsys.readouterr().err
    # at T ≠ 1 the probe also scores the task the run trains on (the health check judges that AUC)
    assert 0.0 <= json.loads((tmp_path / "long" / "summary.json").read_text())["diagnostics"]["disc_auc_own_t"] <= 1.0
    # a given value wins over the default (here: contrast off), and the message names only what it chose
    assert run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "off", cache_dir, steps=2, cls_contrast=0.0))["finished"]
    ident = json.loads((tmp_path / "off" / "run.json").read_text())["identity"]
    assert ident["cls_contrast"] is None and ident["lr"] == 1e-3 and ident["gen_temperature"] == 2.0
    assert "long-run defaults --lr 0.001 --gen-temperature 2 (" in capsys.readouterr().err
    # a short run keeps lr 3e-4 and the paper's loss
    monkeypatch.setattr(tr, "TINY_RTD_LONG_STEPS", 3)
    assert run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "short", cache_dir, steps=2))["finished"]
    ident = json.loads((tmp_path / "short" / "run.json").read_text())["identity"]
    assert ident["cls_contrast"] is None and ident["lr"] == 3e-4 and ident["gen_temperature"] is None
    assert "long-run" not in capsys.readouterr().err


def test_cli_mlm_run_and_export_subcommand(tiny_tokenizer_dir, cache_dir, tmp_path, capsys):
    from transformers import AutoModel, ElectraForSequenceClassification

    from denki.app.cli import main

    out = tmp_path / "mlm"
    rc = main(["pretrain", "--corpus", str(SAMPLE_CORPUS), "--tokenizer", str(tiny_tokenizer_dir), "--size", "tiny",
               "--objective", "mlm", "--out", str(out), "--steps", "3", "--batch-size", "4", "--seq-len", "32",
               "--device", "cpu", "--log-every", "1", "--cache-dir", str(cache_dir), "--no-progress",
               "--save-every", "2"])
    printed = capsys.readouterr().out
    assert rc == 0 and "mlm-tiny 3 steps" in printed
    # no --mask-prob: tiny MLM's measured default, resolved before anything uses it (identity, FLOPs, bundle)
    assert json.loads((out / "run.json").read_text())["identity"]["mask_prob"] == 0.4
    # --no-progress: one plain line per checkpoint (steps 2 and 3, the last), for logs of background jobs
    lines = [ln for ln in printed.splitlines() if ln.startswith("pretrain: step ")]
    assert [ln.split()[2] for ln in lines] == ["2/3,", "3/3,"] and "gen_acc" in lines[-1]
    rows = read_metrics(out)
    assert rows[-1]["replace_rate"] is None and rows[-1]["gen_acc"] >= 0
    assert json.loads((out / "bundle" / "config.json").read_text())["architectures"] == ["ElectraForMaskedLM"]
    assert type(AutoModel.from_pretrained(out / "bundle")).__name__ == "ElectraModel"
    ElectraForSequenceClassification.from_pretrained(out / "bundle", num_labels=2)
    rc = main(["pretrain", "export", "--checkpoint", str(out), "--out", str(tmp_path / "exp")])
    assert rc == 0
    from denki.models.bundle.format import verify_bundle

    assert verify_bundle(tmp_path / "exp")["source"]["steps"] == 3
    # missing arguments: a clear error, no traceback
    assert main(["pretrain", "--out", str(tmp_path / "x")]) == 2
    assert "--corpus" in capsys.readouterr().err
    # a budget in FLOPs: stops as soon as the cumulative count reaches it; no --objective: tiny defaults to ELECTRA
    # (pretrain.train.DEFAULT_OBJECTIVE) and says so
    out2 = tmp_path / "budget"
    rc = main(["pretrain", "--corpus", str(SAMPLE_CORPUS), "--tokenizer", str(tiny_tokenizer_dir),
               "--out", str(out2), "--max-flops", "2e9", "--batch-size", "4", "--seq-len", "32", "--device",
               "cpu", "--cache-dir", str(cache_dir), "--no-export"])
    s = json.loads((out2 / "summary.json").read_text())
    assert rc == 0 and s["flops"] >= 2e9 and s["steps"] >= 2
    assert s["objective"] == "electra" and "objective electra (the default for --size tiny" in capsys.readouterr().err
    per_step = s["flops"] / s["steps"]
    assert s["flops"] - per_step < 2e9


def test_ddp_two_cpu_processes_gloo(tiny_tokenizer_dir, cache_dir, tmp_path):
    from denki.pretrain.train import spawn_local

    cfg = _cfg(tiny_tokenizer_dir, tmp_path / "ddp", cache_dir, steps=3, batch_size=2, log_every=1, save_every=3)
    build_token_cache(cfg.corpus, __import__("denki.models.text.tokenizer", fromlist=["x"]).JapaneseTokenizer.load(
        tiny_tokenizer_dir), cache_dir, progress=False)
    spawn_local(cfg, world=2, port=free_port())
    s = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert s["finished"] and s["world_size"] == 2 and s["steps"] == 3
    rows = read_metrics(tmp_path / "ddp")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert 0.8 * 384 < rows[-1]["tokens"] <= 3 * 2 * 2 * 32  # 3 steps × 2 ranks × 2 sequences × ≤32 tokens


# ------------------------------------------------------------------------------------------------ health probe
def test_roc_auc_matches_sklearn_with_ties():
    from sklearn.metrics import roc_auc_score

    from denki.pretrain.diagnostics import roc_auc

    rng = np.random.default_rng(0)
    labels = rng.random(500) < 0.15
    scores = np.round(rng.normal(size=500) + labels * 0.8, 1)  # rounding makes ties
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert np.isnan(roc_auc(scores, np.zeros(500, bool)))


def test_verdict_names_collapse_and_chance_auc_and_finetune_warns(capsys):
    from denki.models.training.pretrain_health import verdict, warn_if_unlearned

    assert verdict({"cls_spread": 0.03, "mean_spread": 0.02, "disc_auc": 0.81}) is None
    assert verdict(None) is None and verdict({}) is None
    w = verdict({"cls_spread": 0.0, "mean_spread": 0.0002, "disc_auc": 0.52})
    assert "collapsed" in w and "AUC 0.52" in w and "worse than random init" in w
    man = {"kind": "pretrained", "metrics": {"diagnostics": {"cls_spread": 0.0, "mean_spread": 0.0}}}
    assert warn_if_unlearned(man) and "WARNING" in capsys.readouterr().err
    assert warn_if_unlearned({**man, "kind": "classifier"}) is None  # only pretrained bundles are judged


def test_probe_logged_at_checkpoints_kept_in_summary_and_manifest(tiny_tokenizer_dir, cache_dir, tmp_path):
    from denki.models.bundle.format import read_manifest

    s = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "p", cache_dir, export=True, log_every=5))
    rows = read_metrics(tmp_path / "p")
    probed = [r["step"] for r in rows if "cls_spread" in r]
    assert probed == [3, 6]  # save_every=3 and the last step, even where log_every=5 would not log
    d = s["diagnostics"]
    assert set(d) == {"cls_spread", "mean_spread", "disc_auc", "probe_recall", "probe_replace_rate"}
    assert d["cls_spread"] >= 0 and 0 <= d["disc_auc"] <= 1 and 0 < d["probe_replace_rate"] < 0.2
    assert 0 <= d["probe_recall"] <= 1
    assert read_manifest(tmp_path / "p" / "bundle")["metrics"]["diagnostics"] == d
    # MLM: spreads only (no discriminator)
    m = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "m", cache_dir, objective="mlm"))
    assert set(m["diagnostics"]) == {"cls_spread", "mean_spread"}


def test_probe_does_not_change_training(tiny_tokenizer_dir, cache_dir, tmp_path, monkeypatch):
    """The probe restores the global RNG: a run probed at every step trains exactly like one probed once."""
    a = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "a", cache_dir, save_every=1, keep=1))
    b = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "b", cache_dir, save_every=100))
    assert [r["loss"] for r in read_metrics(tmp_path / "a")] == [r["loss"] for r in read_metrics(tmp_path / "b")]
    assert a["diagnostics"] == b["diagnostics"]


def test_adam_eps_reaches_the_optimizer_and_is_part_of_the_run_identity(tiny_tokenizer_dir, cache_dir, tmp_path,
                                                                        monkeypatch):
    """``--adam-eps`` (the official ELECTRA code's 1e-6 vs torch's 1e-8): used by the optimizer, kept in run.json
    and the manifest, and a resume with another ε is refused; without it the identity holds None (older runs)."""
    import denki.models.training.loop as loop

    seen = []
    real = loop.build_optimizer
    monkeypatch.setattr(loop, "build_optimizer", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    a = _cfg(tiny_tokenizer_dir, tmp_path / "a", cache_dir, steps=2, export=True, adam_eps=1e-6)
    assert run_pretrain(a)["finished"]
    assert {g["eps"] for g in seen[-1].param_groups} == {1e-6}
    assert json.loads((tmp_path / "a" / "run.json").read_text())["identity"]["adam_eps"] == 1e-6
    assert json.loads((tmp_path / "a" / "bundle" / "manifest.json").read_text())["source"]["adam_eps"] == 1e-6
    with pytest.raises(DenkiError, match="adam_eps"):
        run_pretrain(replace(a, adam_eps=None))
    b = replace(a, out=str(tmp_path / "b"), adam_eps=None, export=False)
    assert run_pretrain(b)["finished"]
    assert {g["eps"] for g in seen[-1].param_groups} == {1e-8}
    assert json.loads((tmp_path / "b" / "run.json").read_text())["identity"]["adam_eps"] is None


def test_cls_contrast_adds_an_in_batch_infonce_between_the_two_views_cls_states():
    """``--cls-contrast W``: total = ELECTRA's loss + W · symmetric InfoNCE of the discriminator's [CLS] (corrupted
    text) vs the generator's [CLS] (masked text), through projections that are not part of the exported model."""
    import torch.nn.functional as F

    m, ids, am, mk, out, disc_in = _shifted_replacements("electra")
    m.enable_cls_contrast(2.0, dim=16, temperature=0.1)
    res = m(ids, mk.input_ids, mk.positions, am)
    d_cls = m.discriminator.electra(input_ids=disc_in, attention_mask=am).last_hidden_state[:, 0]
    g_cls = m.generator.electra(input_ids=mk.input_ids, attention_mask=am).last_hidden_state[:, 0]
    zd = F.normalize(m.cls_proj_disc(d_cls), dim=-1)
    zg = F.normalize(m.cls_proj_gen(g_cls), dim=-1)
    sim = zd @ zg.T / 0.1
    t = torch.arange(len(ids))
    want = (F.cross_entropy(sim, t) + F.cross_entropy(sim.T, t)) / 2
    assert torch.allclose(res["cls_loss"], want, atol=1e-5)
    assert torch.allclose(res["loss"], out["loss"] + 2.0 * want, atol=1e-4)  # the rest of the loss is unchanged
    assert int(res["cls_correct"]) == int((sim.argmax(-1) == t).sum()) and int(res["n_seqs"]) == len(ids)
    m.zero_grad()
    m.cls_contrast_loss(d_cls, g_cls)[0].backward()  # the [CLS] target reaches both encoders
    assert m.discriminator.electra.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert m.generator.electra.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert not any("cls_proj" in k for k in m.export_model.state_dict())


def test_cls_contrast_is_part_of_the_run_identity_and_goes_with_rtd_only(tiny_tokenizer_dir, cache_dir, tmp_path):
    a = _cfg(tiny_tokenizer_dir, tmp_path / "a", cache_dir, steps=2, export=True, cls_contrast=0.5)
    assert run_pretrain(a)["finished"]
    assert json.loads((tmp_path / "a" / "run.json").read_text())["identity"]["cls_contrast"] == 0.5
    assert json.loads((tmp_path / "a" / "bundle" / "manifest.json").read_text())["source"]["cls_contrast"] == 0.5
    rows = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert all(0 <= r["cls_acc"] <= 1 and r["cls_loss"] > 0 for r in rows)
    from denki.pretrain.export import export_from_checkpoint  # `denki pretrain export`: rebuilds the projections too

    export_from_checkpoint(tmp_path / "a", tmp_path / "x")
    assert json.loads((tmp_path / "x" / "manifest.json").read_text())["source"]["cls_contrast"] == 0.5
    with pytest.raises(DenkiError, match="cls_contrast"):
        run_pretrain(replace(a, cls_contrast=0.0))
    with pytest.raises(DenkiError, match="cls-contrast"):
        run_pretrain(replace(a, out=str(tmp_path / "m"), objective="mlm"))


# ------------------------------------------------------------------------------------------------ precision
def test_resolve_precision_and_cpu_bf16_flags(tmp_path, monkeypatch):
    import denki.models.training.precision as train
    from denki.pretrain.settings import cpu_bf16_flags, resolve_precision  # re-exported from models.training.precision

    assert resolve_precision("auto", "cuda") == "bf16"
    # auto on a CPU follows its flags (bf16 measured downstream on an avx512_bf16 core: experiments/bf16-pretraining)
    monkeypatch.setattr(train, "cpu_bf16_flags", lambda: ["avx512_bf16"])
    assert resolve_precision("auto", "cpu") == "bf16"
    monkeypatch.setattr(train, "cpu_bf16_flags", lambda: [])
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("auto", "mps") == "fp32"
    monkeypatch.undo()
    assert resolve_precision("fp32", "cuda") == "fp32"
    with pytest.raises(DenkiError, match="--precision"):
        resolve_precision("fp16", "cpu")
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile amx_bf16\n")
    assert cpu_bf16_flags(str(info)) == ["avx512_bf16", "amx_bf16"]
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n")
    assert cpu_bf16_flags(str(info)) == []
    assert cpu_bf16_flags(str(tmp_path / "missing")) == []


def test_bf16_autocast_run_tracks_fp32_and_records_its_precision(tiny_tokenizer_dir, cache_dir, tmp_path):
    """bf16 autocast (forward/backward; weights, optimizer, losses and sampling fp32) follows the fp32 run over the
    same data and seed: the losses of each step within 2 % (measured on the shared corpora over 500 steps:
    docs/pretrain.md)."""
    runs = {}
    for prec in ("fp32", "bf16"):
        out = tmp_path / prec
        s = run_pretrain(_cfg(tiny_tokenizer_dir, out, cache_dir, objective="electra", steps=6, precision=prec))
        assert s["precision"] == prec
        runs[prec] = read_metrics(out)
    for a, b in zip(runs["fp32"], runs["bf16"], strict=True):
        for k in ("loss", "mlm_loss", "disc_loss"):
            assert b[k] == pytest.approx(a[k], rel=0.02), (a["step"], k)


def test_pretrain_export_generator_lets_a_continued_run_use_it(tiny_tokenizer_dir, cache_dir, tmp_path):
    from denki.app.cli import main
    from denki.models.bundle.importer import generator_of

    out = tmp_path / "rtd"
    run_pretrain(_cfg(tiny_tokenizer_dir, out, cache_dir, objective="electra", steps=3))
    assert main(["pretrain", "export", "--checkpoint", str(out), "--out", str(tmp_path / "plain")]) == 0
    assert generator_of(tmp_path / "plain") is None  # a run from scratch keeps no generator by default
    assert main(["pretrain", "export", "--checkpoint", str(out), "--out", str(tmp_path / "gen"), "--generator"]) == 0
    gen = generator_of(tmp_path / "gen")
    assert gen is not None and json.loads((gen / "config.json").read_text())["architectures"] == \
        ["ElectraForMaskedLM"]
    cont = tmp_path / "cont"
    run_pretrain(replace(_cfg(tiny_tokenizer_dir, cont, cache_dir, objective="electra", steps=2,
                              init_from=str(tmp_path / "gen")), tokenizer=None))
    assert json.loads((cont / "run.json").read_text())["identity"]["gen_init"] == "bundle"


def test_speed_is_reported_as_flop_rate_and_mfu_against_the_devices_peak(tiny_tokenizer_dir, cache_dir, tmp_path):
    from denki.pretrain.speed import gpu_peak, measured_matmul_peak, mfu

    assert gpu_peak("NVIDIA H100 80GB HBM3", "bf16") == 989e12 and gpu_peak("NVIDIA H200", "fp32") == 67e12
    assert gpu_peak("Some Future GPU", "bf16") is None and mfu(1e12, None) is None
    assert measured_matmul_peak("fp32", n=128, reps=2) > 0
    out = tmp_path / "speed"
    s = run_pretrain(_cfg(tiny_tokenizer_dir, out, cache_dir, objective="electra", steps=4))
    rows = read_metrics(out)
    assert all(r["flops_per_s"] > 0 and 0 < r["mfu"] for r in rows)
    sp = s["speed"]
    assert sp["flops_per_s"] == pytest.approx(s["flops"] / sp["seconds"]) and 0 < sp["mfu"] == pytest.approx(
        sp["flops_per_s"] / sp["peak_flops"]) and "matmul" in sp["peak_source"]
    assert json.loads((out / "summary.json").read_text())["speed"]["tokens_per_s"] > 0


# ------------------------------------------------------------------------------------------------ fast paths
def test_a_failing_torch_compile_falls_back_to_eager_with_a_warning(tiny_tokenizer_dir, cache_dir, tmp_path,
                                                                     monkeypatch, capsys):
    """--compile on a machine where compiling fails (no compiler, an unsupported op): the run warns once and trains
    on uncompiled, to the same end as a run without --compile."""
    calls = []

    def broken_compile(model, **kw):
        def compiled(*a, **k):
            calls.append(1)
            raise RuntimeError("inductor: no C++ compiler")
        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    s = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "c", cache_dir, steps=3, compile=True))
    assert s["finished"] and s["steps"] == 3 and len(calls) == 1
    assert capsys.readouterr().err.count("torch.compile failed (RuntimeError: inductor: no C++ compiler)") == 1
    ref = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "e", cache_dir, steps=3))
    assert s["final"]["loss"] == pytest.approx(ref["final"]["loss"], rel=1e-5)  # nothing drawn before it failed


def test_sdpa_attention_and_torch_dropout_masks_are_options_that_train(tiny_tokenizer_dir, cache_dir, tmp_path):
    """--attention sdpa and --dropout-masks torch run the same loop (the default masks are the cheaper ones,
    experiments/cpu-dropout); a bad value is refused by name."""
    for kw in ({"attention": "sdpa"}, {"dropout_masks": "torch"}):
        s = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / next(iter(kw.values())), cache_dir, steps=2, **kw))
        assert s["finished"] and math.isfinite(s["final"]["loss"])
    with pytest.raises(DenkiError, match="--dropout-masks"):
        run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "bad", cache_dir, steps=1, dropout_masks="fast"))


def test_micro_batches_accumulate_to_the_whole_batch_step(tiny_tokenizer_dir, cache_dir, tmp_path):
    """--micro-batch: the same batch in chunks, gradients accumulated, one optimizer step — the same losses and
    weights as the whole batch at once (MLM, dropout 0: nothing random inside the forward; the masks are drawn for
    the whole batch before it is chunked)."""
    from safetensors.torch import load_file as load

    runs = {}
    for micro in (None, 2, 3):
        out = tmp_path / f"m{micro}"
        # fp32: under bf16 the chunks' matrix products round differently (2.5e-5 of the loss)
        run_pretrain(_cfg(tiny_tokenizer_dir, out, cache_dir, objective="mlm", steps=3, dropout=0.0,
                          micro_batch=micro, precision="fp32"))
        runs[micro] = (read_metrics(out), load(next(out.glob("checkpoints/step-*/model.safetensors"))))
    ref_rows, ref_w = runs[None]
    for micro in (2, 3):  # 3 does not divide the batch of 4: a chunk of 3 and one of 1
        rows, w = runs[micro]
        for a, b in zip(ref_rows, rows, strict=True):
            assert b["loss"] == pytest.approx(a["loss"], rel=1e-5) and b["tokens"] == a["tokens"]
            assert b["flops"] == a["flops"]  # the same masked positions counted
            assert b["gen_acc"] == pytest.approx(a["gen_acc"], abs=1e-9)
        for k in ref_w:
            assert torch.allclose(w[k], ref_w[k], atol=1e-5), k
    s = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "rtd", cache_dir, steps=2, micro_batch=2))
    assert s["finished"] and math.isfinite(s["final"]["loss"])
    with pytest.raises(DenkiError, match="--micro-batch"):
        run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "bad", cache_dir, steps=1, micro_batch=0))


def test_outputs_read_back_at_log_steps_only_log_what_a_per_step_read_back_does(tiny_tokenizer_dir, cache_dir,
                                                                               tmp_path, monkeypatch):
    """On one GPU the step's outputs are summed on the device and read back at log / save steps only
    (``_sync_each_step``); forced here on CPU, the logged lines and the weights are those of the per-step path."""
    import denki.pretrain.loop as train
    from safetensors.torch import load_file as load

    def run(name):
        out = tmp_path / name
        run_pretrain(_cfg(tiny_tokenizer_dir, out, cache_dir, steps=7, log_every=3, save_every=7))
        return read_metrics(out), load(next(out.glob("checkpoints/step-*/model.safetensors")))

    every_rows, every_w = run("every")
    monkeypatch.setattr(train, "_sync_each_step", lambda device, world: False)
    late_rows, late_w = run("late")
    assert [r["step"] for r in late_rows] == [r["step"] for r in every_rows] == [3, 6, 7]
    for a, b in zip(every_rows, late_rows):
        for k, v in a.items():
            if k not in ("tokens_per_s", "flops_per_s", "mfu", "wall_s", "lr") and isinstance(v, float):
                assert b[k] == pytest.approx(v, rel=1e-12, abs=1e-12), (a["step"], k)
        assert (b["tokens"], b["flops"]) == (a["tokens"], a["flops"])
    assert all(torch.equal(every_w[k], late_w[k]) for k in every_w)


def test_a_late_read_back_still_stops_on_nan_before_saving(tiny_tokenizer_dir, cache_dir, tmp_path, monkeypatch):
    """Read back only at log / save steps, a NaN at step 3 is caught at step 4, before step 4 is saved: the error
    names the steps and the last good checkpoint."""
    import denki.pretrain.loop as train

    _poison_loss_from_call(monkeypatch, 3)
    monkeypatch.setattr(train, "_sync_each_step", lambda device, world: False)
    cfg = _cfg(tiny_tokenizer_dir, tmp_path / "nan", cache_dir, save_every=2, log_every=4)
    with pytest.raises(DenkiError, match=r"between steps 3 and 4 \(NaN/inf\).*step-00000002"):
        run_pretrain(cfg)
    assert [p.name for p in ck.list_train_states(cfg.out)] == ["step-00000002"]


def test_compiled_training_matches_eager(tiny_tokenizer_dir, cache_dir, tmp_path, monkeypatch, capsys):
    """--compile traces the whole pretrainer (cheaper dropout masks and host-computed indices included) without
    falling back, and trains as eager does: the losses of each step within 1e-4. The compiler backend here is
    ``aot_eager`` (dynamo's graph capture + AOT autograd, no code generation: what fails or breaks graphs on a GPU
    fails here too, in seconds instead of an inductor build)."""
    import functools

    # fp32: under bf16 the traced graph rounds some products differently (3e-4 of the loss by step 4)
    eager = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "eager", cache_dir, steps=4, precision="fp32"))
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    capsys.readouterr()
    compiled = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "compiled", cache_dir, steps=4, compile=True,
                                 precision="fp32"))
    assert "torch.compile failed" not in capsys.readouterr().err
    assert compiled["finished"]
    for a, b in zip(read_metrics(tmp_path / "eager"), read_metrics(tmp_path / "compiled"), strict=True):
        for k in ("loss", "mlm_loss", "disc_loss"):
            assert b[k] == pytest.approx(a[k], rel=1e-4), (a["step"], k)
    assert eager["steps"] == compiled["steps"] == 4


def test_torchrun_with_one_process_takes_the_ddp_path(tiny_tokenizer_dir, cache_dir, tmp_path):
    """Under torchrun even one process initialises the process group and trains through DDP (gloo here, NCCL on a
    GPU), so that a one-GPU machine proves the distributed path; a plain run does not."""
    import subprocess
    import sys

    out = tmp_path / "ddp1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "-m", "denki.app.cli",
           "pretrain", "--corpus", str(SAMPLE_CORPUS), "--tokenizer", str(tiny_tokenizer_dir), "--size", "tiny",
           "--steps", "3", "--batch-size", "4", "--seq-len", "32", "--save-every", "3", "--no-export",
           "--no-progress", "--device", "cpu", "--cache-dir", str(cache_dir), "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1],
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "DDP over gloo, 1 process(es)" in r.stderr
    assert json.loads((out / "summary.json").read_text())["steps"] == 3


def test_out_of_memory_halves_the_sequences_per_pass_and_trains_the_same(tiny_tokenizer_dir, cache_dir, tmp_path,
                                                                        monkeypatch, capsys):
    """The batch scaled to the device: when a pass runs out of memory, the run goes on with half the sequences per
    pass (gradients accumulated, the same masks) — the same training as asking for that --micro-batch."""
    orig = MLMPretrainer.forward

    def small_device(self, original_ids, *a, **kw):
        if original_ids.shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return orig(self, original_ids, *a, **kw)

    asked = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "asked", cache_dir, objective="mlm", steps=3,
                              micro_batch=2))
    monkeypatch.setattr(MLMPretrainer, "forward", small_device)
    capsys.readouterr()
    scaled = run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "scaled", cache_dir, objective="mlm", steps=3))
    assert capsys.readouterr().err.count("out of memory; continuing with --micro-batch 2") == 1
    assert scaled["micro_batch"] == 2 and asked["micro_batch"] == 2
    for a, b in zip(read_metrics(tmp_path / "asked"), read_metrics(tmp_path / "scaled"), strict=True):
        assert b["loss"] == a["loss"] and b["flops"] == a["flops"]

    def no_memory(self, *a, **kw):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(MLMPretrainer, "forward", no_memory)
    with pytest.raises(DenkiError, match="one sequence per forward/backward"):
        run_pretrain(_cfg(tiny_tokenizer_dir, tmp_path / "none", cache_dir, objective="mlm", steps=1))
