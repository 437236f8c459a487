"""Dynamic masking for the RTD generator and for the MLM baseline.

As the official ELECTRA ``pretrain_helpers.mask``: every sequence gets exactly ``round(n_candidates · p)``
masked positions (at least 1), chosen uniformly without replacement among the candidates; candidates exclude
[CLS], [SEP], [MASK] and [PAD]. A fixed count per sequence (rather than a Bernoulli draw per token) also keeps the
FLOPs of the generator's LM head predictable.

Of the masked positions:

* ELECTRA (``random_prob=0``): 85% become [MASK], 15% keep the original token; no random replacement (the
  generator supplies the replacements).
* BERT-style MLM baseline: 80% [MASK], 10% a random non-special token, 10% the original.

Masking is redrawn every step from the global torch RNG (whose state is checkpointed), so it is dynamic and yet
exactly reproducible on resume.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

ELECTRA_SPLIT = (0.85, 0.0)  # (mask_prob_of_masked, random_prob_of_masked); the rest keep the original
BERT_SPLIT = (0.8, 0.1)


@dataclass
class Masked:
    """``input_ids``: ``(B, L)`` ids fed to the generator/MLM; ``positions``: ``(B, L)`` bool, True where a
    prediction is made; ``labels``: ``(B, L)`` the original ids (-100 where not masked)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    labels: torch.Tensor


def candidate_mask(input_ids: torch.Tensor, special_ids: tuple[int, ...]) -> torch.Tensor:
    """``(B, L)`` bool: positions that may be masked (not a special token)."""
    cand = torch.ones_like(input_ids, dtype=torch.bool)
    for sid in special_ids:
        cand &= input_ids != sid
    return cand


def mask_tokens(input_ids: torch.Tensor, *, mask_prob: float, mask_id: int, special_ids: tuple[int, ...],
                vocab_size: int, split: tuple[float, float] = ELECTRA_SPLIT,
                first_regular_id: int = 5) -> Masked:
    """Choose and corrupt the positions to predict (see module docstring). ``input_ids``: ``(B, L)`` int64."""
    cand = candidate_mask(input_ids, special_ids)
    n_cand = cand.sum(dim=1)
    n_mask = torch.clamp(torch.round(n_cand.float() * mask_prob).long(), min=1)
    n_mask = torch.minimum(n_mask, n_cand)
    # uniform choice without replacement: random scores, candidates first, take the top n_mask per row
    scores = torch.rand(input_ids.shape, device=input_ids.device)
    scores = torch.where(cand, scores, torch.full_like(scores, -1.0))
    order = scores.argsort(dim=1, descending=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(order))
    positions = (ranks < n_mask[:, None]) & cand

    p_mask, p_random = split
    u = torch.rand(input_ids.shape, device=input_ids.device)
    to_mask = positions & (u < p_mask)
    to_random = positions & (u >= p_mask) & (u < p_mask + p_random)
    corrupted = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    if p_random > 0:
        rand_ids = torch.randint(first_regular_id, vocab_size, input_ids.shape, device=input_ids.device)
        corrupted = torch.where(to_random, rand_ids, corrupted)
    labels = torch.where(positions, input_ids, torch.full_like(input_ids, -100))
    return Masked(corrupted, positions, labels)
