"""Analytic training FLOPs per step (forward + backward), as :class:`torch.utils.flop_counter.FlopCounterMode`
counts them: matrix multiplications only (2 FLOPs per multiply-add), backward = 2 × forward (gradients with
respect to inputs and weights). Attention is counted as computed (the full ``L × L`` score matrix, padding
included), the LM head only at the ``M`` masked positions where it runs. Embedding lookups, LayerNorm, softmax,
GELU and the Gumbel sampling are not counted (they are elementwise and a few percent at most).
"""
from __future__ import annotations


def encoder_forward_flops(cfg, batch: int, seq_len: int) -> int:
    """Forward FLOPs of an ``ElectraModel`` / ``BertModel`` (embedding projection + transformer layers) on
    ``(batch, seq_len)`` (a BERT pooler's ``2·batch·h²`` is left out: < 0.1% of a step)."""
    n = batch * seq_len
    # BERT has no embedding_size: its embeddings are hidden-wide, no projection
    h, f, e = cfg.hidden_size, cfg.intermediate_size, getattr(cfg, "embedding_size", cfg.hidden_size)
    total = 0
    if e != h:
        total += 2 * n * e * h                     # embeddings_project
    per_layer = (
        4 * 2 * n * h * h                          # Q, K, V, output projections
        + 2 * 2 * batch * seq_len * seq_len * h    # QK^T and attention·V (all heads)
        + 2 * 2 * n * h * f                        # FFN in + out
    )
    return total + cfg.num_hidden_layers * per_layer


def mlm_head_forward_flops(cfg, n_masked: int) -> int:
    """``ElectraGeneratorPredictions`` (hidden → embedding) + tied LM head (embedding → vocab) at M positions
    (BERT: the transform hidden → hidden + the decoder hidden → vocab: the same formula with embedding = hidden)."""
    e = getattr(cfg, "embedding_size", cfg.hidden_size)
    return 2 * n_masked * cfg.hidden_size * e + 2 * n_masked * e * cfg.vocab_size


def disc_head_forward_flops(cfg, batch: int, seq_len: int) -> int:
    n = batch * seq_len
    return 2 * n * cfg.hidden_size * cfg.hidden_size + 2 * n * cfg.hidden_size


def step_flops(objective: str, disc_cfg, gen_cfg, batch: int, seq_len: int, n_masked: int) -> int:
    """Training FLOPs of one optimizer step (forward + backward = 3 × forward) on one ``(batch, seq_len)`` batch
    with ``n_masked`` predicted positions."""
    if objective in ("electra", "electra15", "electra-mlm"):  # electra15: only which tokens the disc loss averages
        fwd = (encoder_forward_flops(gen_cfg, batch, seq_len) + mlm_head_forward_flops(gen_cfg, n_masked)
               + encoder_forward_flops(disc_cfg, batch, seq_len) + disc_head_forward_flops(disc_cfg, batch, seq_len))
        if objective == "electra-mlm":  # the discriminator's own (corrective) MLM head at the masked positions
            fwd += mlm_head_forward_flops(disc_cfg, n_masked)
    elif objective == "mlm":
        fwd = encoder_forward_flops(disc_cfg, batch, seq_len) + mlm_head_forward_flops(disc_cfg, n_masked)
    else:
        raise ValueError(objective)
    return 3 * fwd


def expected_masked(batch: int, seq_len: int, mask_prob: float, fill: float = 1.0) -> int:
    """Expected masked positions per batch for planning (full sequences minus [CLS] and ~1 [SEP] per row)."""
    cand = max(1, int(round((seq_len - 2) * fill)))
    return batch * max(1, int(round(cand * mask_prob)))
