"""Drop-in modules that make a pretraining step cheaper without changing what it computes.

* :class:`CheapMaskDropout` — dropout whose keep-mask costs a quarter of the random numbers on a CPU. torch's CPU
  dropout draws one Bernoulli per element from its Mersenne Twister (``aten::bernoulli_``): 24.8 % of a tiny bf16
  RTD step and 22.8 % of a Small one (docs/pretrain.md). Here one 64-bit draw gives four 16-bit
  uniforms, each compared with a threshold: the same Bernoulli(1 − p) keep-mask, with 1 − p rounded to a multiple of
  1/65,536 (0.9 → 0.899994). On CUDA (fused Philox dropout, already cheap) it is torch's own dropout.
  :func:`use_cheap_mask_dropout` swaps every ``nn.Dropout`` of a model for one (no parameters: state dicts, exports
  and checkpoints are untouched).
"""
from __future__ import annotations

import torch
from torch import nn

#: 16-bit uniforms per 64-bit draw
_LANES = 4


def keep_threshold(p: float) -> int:
    """The int16 threshold ``t`` for which ``P(u < t) = round((1 − p) · 65536) / 65536`` when ``u`` is uniform on
    [−32768, 32767]."""
    return round((1.0 - p) * 65536) - 32768


def cheap_keep_mask(shape: torch.Size | tuple[int, ...], p: float, device=None,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """A bool keep-mask of ``shape``: each element True with probability 1 − p (to 1/65,536), independent.

    ``ceil(n / 4)`` int64 draws over the full 64-bit range, viewed as ``4 · ceil(n / 4)`` int16 lanes (each lane
    uniform: the draw is uniform over 2^64 values up to a bias of 2^-64), the first n compared with
    :func:`keep_threshold`."""
    n = 1
    for s in shape:
        n *= int(s)
    # empty + random_ rather than randint: the same draws, and torch.compile accepts a symbolic size for it
    draws = torch.empty((n + _LANES - 1) // _LANES, dtype=torch.int64, device=device).random_(
        -2**63, 2**63 - 1, generator=generator)
    return (draws.view(torch.int16)[:n] < keep_threshold(p)).view(shape)


class CheapMaskDropout(nn.Dropout):
    """``nn.Dropout`` with :func:`cheap_keep_mask` on CPU tensors (inverted dropout: kept values scaled by
    ``1 / (1 − p)`` as torch's; the mask's keep rate is 1 − p to 1/65,536)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu":
            return super().forward(x)
        if self.p == 1.0:
            return x * 0.0
        keep = cheap_keep_mask(x.shape, self.p)
        # x · keep saves only the bool mask for the backward; the scalar scale saves nothing
        return x.mul(keep).mul_(1.0 / (1.0 - self.p))


def use_cheap_mask_dropout(model: nn.Module) -> int:
    """Replace every plain ``nn.Dropout`` under ``model`` by a :class:`CheapMaskDropout` of the same ``p``, in
    place; returns how many were replaced."""
    swaps = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child) is nn.Dropout]
    for parent, name, child in swaps:
        setattr(parent, name, CheapMaskDropout(child.p, inplace=False))
    return len(swaps)


# ------------------------------------------------------------------------------------------------ attention
def _sdpa_self_attention_class():
    """``ElectraSelfAttention`` with its plain-encoder path through ``F.scaled_dot_product_attention`` (flash /
    memory-efficient kernels on CUDA; the attention dropout inside the kernel). Built lazily: transformers is only
    imported when a model is swapped."""
    import torch.nn.functional as F
    from transformers.models.electra.modeling_electra import ElectraSelfAttention

    class SdpaElectraSelfAttention(ElectraSelfAttention):
        """Same parameters and state dict as ``ElectraSelfAttention``; cross-attention, caches, relative positions,
        head masks and returned attention maps take the eager path."""

        def forward(self, hidden_states, attention_mask=None, head_mask=None, encoder_hidden_states=None,
                    past_key_values=None, output_attentions=False, cache_position=None, **kw):
            if (encoder_hidden_states is not None or past_key_values is not None or head_mask is not None
                    or output_attentions or kw or self.position_embedding_type != "absolute"):
                return super().forward(hidden_states, attention_mask, head_mask, encoder_hidden_states,
                                       past_key_values, output_attentions, cache_position, **kw)
            B, L, _ = hidden_states.shape

            def heads(x):  # (B, L, H) → (B, heads, L, d)
                return x.view(B, L, self.num_attention_heads, self.attention_head_size).transpose(1, 2)

            q, k, v = heads(self.query(hidden_states)), heads(self.key(hidden_states)), heads(self.value(hidden_states))
            # attention_mask: the model's additive (B, 1, 1, L) mask (0 / dtype-min), broadcast over heads and queries
            mask = attention_mask.to(q.dtype) if attention_mask is not None else None
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                 dropout_p=self.dropout.p if self.training else 0.0)
            return ctx.transpose(1, 2).reshape(B, L, self.all_head_size), None

    return SdpaElectraSelfAttention


ATTENTIONS = ("auto", "eager", "sdpa")


def resolve_attention(attention: str, device_type: str) -> str:
    """``auto`` → ``sdpa`` on CUDA (fused kernels), ``eager`` on CPUs: there SDPA measured 0.81× (tiny) / 0.82×
    (Small) the eager step under bf16 with dropout (docs/pretrain.md)."""
    if attention not in ATTENTIONS:
        raise ValueError(f"attention {attention!r}: choose one of {', '.join(ATTENTIONS)}")
    if attention == "auto":
        return "sdpa" if device_type == "cuda" else "eager"
    return attention


def use_sdpa_attention(model: nn.Module) -> int:
    """Switch every ``ElectraSelfAttention`` under ``model`` to :func:`F.scaled_dot_product_attention`, in place
    (the class changes, the parameters stay); returns how many were switched."""
    from transformers.models.electra.modeling_electra import ElectraSelfAttention

    cls = _sdpa_self_attention_class()
    mods = [m for m in model.modules() if type(m) is ElectraSelfAttention]
    for m in mods:
        m.__class__ = cls
    return len(mods)
