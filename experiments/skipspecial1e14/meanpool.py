"""Scratch probe (not in the kit): `denki finetune classify` with the classification head reading the mean of the
last hidden states over the non-pad tokens instead of the [CLS] state.

Why: the RTD encoders' [CLS] state barely varies across inputs (spread 0.13–0.18 at 1e14 FLOPs vs MLM's 0.68)
while their mean-pooled states do (0.25–0.47); if the router's loss comes from reading a collapsed [CLS], mean
pooling recovers it without changing pretraining. Runs the kit's CLI with ``ElectraClassificationHead`` patched.

    python experiments/skipspecial1e14/meanpool.py finetune classify --model … (the usual arguments)
"""
import sys

import torch
from transformers.models.electra import modeling_electra as me

_mask: list[torch.Tensor | None] = [None]
_seq_forward = me.ElectraForSequenceClassification.forward


def seq_forward(self, input_ids=None, attention_mask=None, *a, **kw):
    _mask[0] = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
    return _seq_forward(self, input_ids, attention_mask, *a, **kw)


def head_forward(self, features, **kwargs):
    """features: (B, L, H) → (B, C) logits from the masked mean over L."""
    m = _mask[0].to(features.dtype).unsqueeze(-1)              # (B, L, 1)
    x = (features * m).sum(1) / m.sum(1).clamp(min=1.0)         # (B, H)
    x = self.dropout(x)
    x = self.activation(self.dense(x))
    return self.out_proj(self.dropout(x))


me.ElectraForSequenceClassification.forward = seq_forward
me.ElectraClassificationHead.forward = head_forward

if __name__ == "__main__":
    from denki.app.cli import main

    sys.exit(main(sys.argv[1:]))
