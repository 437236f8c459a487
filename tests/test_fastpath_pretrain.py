"""pretrain.kernels: the cheaper CPU dropout draws the same Bernoulli keep-mask as torch's dropout (each 16-bit lane
at the keep rate, lanes independent), scales like it, and leaves eval, p = 0 and state dicts alone
(experiments/cpu-dropout, rule 2)."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from denki.pretrain.kernels import CheapMaskDropout, cheap_keep_mask, keep_threshold, use_cheap_mask_dropout


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_every_lane_keeps_one_minus_p_and_neighbours_are_uncorrelated(p):
    torch.manual_seed(0)
    n = 4_000_000
    keep = cheap_keep_mask((n,), p).view(-1, 4).float()  # column j = lane j of each 64-bit draw
    target = (keep_threshold(p) + 32768) / 65536
    assert abs(target - (1 - p)) < 1 / 65536
    se = math.sqrt(target * (1 - target) / (n // 4))
    for lane in range(4):
        assert abs(keep[:, lane].mean().item() - target) < 5 * se, lane
    c = torch.corrcoef(keep.T)
    off = c[~torch.eye(4, dtype=torch.bool)]
    assert off.abs().max().item() < 0.005
    # and across draws: element i and element i + 4 (the same lane of the next draw)
    flat = keep.flatten()
    r = torch.corrcoef(torch.stack([flat[:-4], flat[4:]]))[0, 1].item()
    assert abs(r) < 0.005


def test_shape_odd_sizes_and_seeded_reproducibility():
    torch.manual_seed(1)
    a = cheap_keep_mask((3, 5, 7), 0.1)
    torch.manual_seed(1)
    b = cheap_keep_mask((3, 5, 7), 0.1)
    assert a.shape == (3, 5, 7) and a.dtype == torch.bool and torch.equal(a, b)


def test_cheap_dropout_scales_kept_values_and_backpropagates_through_the_same_mask():
    torch.manual_seed(2)
    d = CheapMaskDropout(0.1)
    x = torch.randn(64, 128, requires_grad=True)
    y = d(x)
    kept = y != 0
    assert torch.allclose(y[kept], x[kept] / 0.9)
    y.backward(torch.ones_like(y))
    assert torch.allclose(x.grad, kept.float() / 0.9)
    # bf16 in, bf16 out (what autocast hands it)
    assert d(torch.randn(8, 8, dtype=torch.bfloat16)).dtype == torch.bfloat16
    d.eval()
    assert torch.equal(d(x), x)
    assert torch.equal(CheapMaskDropout(0.0)(x), x)
    assert torch.count_nonzero(CheapMaskDropout(1.0)(x)) == 0


def test_swap_replaces_every_dropout_of_an_electra_pretrainer_and_keeps_its_state_dict():
    from denki.models.bundle.presets import electra_config, generator_config
    from denki.pretrain.model import build_pretrainer

    d = electra_config("tiny", 300)
    m = build_pretrainer("electra", d, generator_config(d, 0.25))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    n = use_cheap_mask_dropout(m)
    assert n > 0 and not any(type(x) is nn.Dropout for x in m.modules())
    assert sum(isinstance(x, CheapMaskDropout) for x in m.modules()) == n
    assert all(x.p == pytest.approx(d.hidden_dropout_prob) for x in m.modules() if isinstance(x, CheapMaskDropout))
    after = m.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert use_cheap_mask_dropout(m) == 0  # idempotent


def test_sdpa_attention_matches_eager_with_padding_in_values_and_gradients():
    """The SDPA path computes what the eager attention does (eval: no dropout), padding mask included, and the
    parameters' gradients agree; the state dict is the same module's."""
    import copy

    from denki.models.bundle.presets import electra_config
    from denki.pretrain.kernels import resolve_attention, use_sdpa_attention
    from transformers import ElectraModel

    torch.manual_seed(3)
    eager = ElectraModel(electra_config("tiny", 300)).eval()
    sdpa = copy.deepcopy(eager)
    assert use_sdpa_attention(sdpa) == 4 and use_sdpa_attention(sdpa) == 0
    assert sdpa.state_dict().keys() == eager.state_dict().keys()
    ids = torch.randint(5, 300, (3, 17))
    am = torch.ones_like(ids)
    am[1, 9:] = 0  # a padded row
    outs = []
    for m in (eager, sdpa):
        h = m(input_ids=ids, attention_mask=am).last_hidden_state
        (h[am.bool()] ** 2).mean().backward()
        outs.append((h.detach(), m.embeddings.word_embeddings.weight.grad.clone(),
                     m.encoder.layer[0].attention.self.query.weight.grad.clone()))
    for a, b in zip(*outs):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    assert resolve_attention("auto", "cuda") == "sdpa" and resolve_attention("auto", "cpu") == "eager"
    with pytest.raises(ValueError):
        resolve_attention("flash", "cpu")
