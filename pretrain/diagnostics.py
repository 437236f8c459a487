"""Health checks of a pretraining run: is the discriminator learning, and are its representations input-dependent?

Two failure modes were seen in this kit at CPU budgets (docs/pretrain.md):

* the discriminator answers "original" everywhere (precision/recall 0 at the 0.5 threshold) — thresholded P/R
  cannot tell "learning slowly" from "not learning", so the probe reports the **AUC** of the discriminator's
  scores on fresh replaced tokens (0.5 = chance, whatever the base rate);
* **representation collapse**: the encoder maps every input to (nearly) the same vector, so a task head has
  nothing to read. The probe reports the spread of the [CLS] vector and of the mean-pooled vector over a fixed
  batch of probe sequences (mean over hidden units of the standard deviation across sequences, after the final
  LayerNorm). A random-init tiny encoder gives ≈ 0.01–0.05; a collapsed one ≈ 0.000.

All functions run in eval mode under ``torch.no_grad`` and restore the training mode afterwards.
"""
from __future__ import annotations

import numpy as np
import torch

from denki.models.training.precision import autocast
from .masking import candidate_mask


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for binary ``labels`` (ties count half); NaN if one class."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    labels = np.asarray(labels).astype(bool).ravel()
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s), dtype=np.float64)
    # average ranks over ties
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1.0
        i = j + 1
    r = np.empty_like(ranks)
    r[order] = ranks
    return float((r[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def representation_spread(encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, float]:
    """Spread of the encoder's final hidden states over the probe batch.

    ``input_ids``/``attention_mask``: ``(B, L)``. ``encoder``: an ``ElectraModel`` / ``BertModel`` (``.electra`` /
    ``.bert`` of a head model).
    Returns ``{"cls_spread", "mean_spread"}``: mean over the hidden units of the std across the ``B`` sequences
    of the [CLS] vector ``(B, H)`` and of the attention-masked mean-pooled vector ``(B, H)``.
    """
    was = encoder.training
    encoder.eval()
    with torch.no_grad():
        h = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state.float()  # (B, L, H)
        m = attention_mask.unsqueeze(-1).float()
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)  # (B, H)
        out = {"cls_spread": float(h[:, 0].std(0).mean()), "mean_spread": float(pooled.std(0).mean())}
    encoder.train(was)
    return out


def rtd_auc(pretrainer, original_ids: torch.Tensor, masked_ids: torch.Tensor, positions: torch.Tensor,
            attention_mask: torch.Tensor) -> dict[str, float]:
    """Discriminator AUC on replaced tokens of one fresh corruption of the probe batch (all ``(B, L)``).

    The generator fills the masked positions by sampling (as in training); the discriminator scores every
    non-pad, non-[CLS] token, and none the loss skips (``pretrainer.unscored_ids``). Returns ``{"disc_auc",
    "probe_recall", "probe_replace_rate"}``: recall = the share of replaced tokens scored above 0.5 (AUC and recall
    NaN when nothing was replaced). The generator samples at temperature 1 whatever ``--gen-temperature`` trains
    with, so that runs compare on the paper's corruption; a run trained at T ≠ 1 also gets ``disc_auc_own_t``, the
    AUC on a second corruption drawn at its own T (the task it learns, which the health check judges).
    """
    was = pretrainer.training
    pretrainer.eval()
    keep = attention_mask.bool().clone()
    keep[:, 0] = False  # [CLS] is never replaced: a free "original"
    keep &= candidate_mask(original_ids, getattr(pretrainer, "unscored_ids", ()))  # --disc-skip-special
    k = keep.cpu().numpy()

    def judge(logits):  # (M, V) generator logits → (scores, labels) of the judged tokens, 1-D numpy
        disc_input = original_ids.clone()
        disc_input[positions] = pretrainer.sampler(logits)
        labels = (disc_input != original_ids) & attention_mask.bool()
        hidden = pretrainer.discriminator.electra(input_ids=disc_input,
                                                  attention_mask=attention_mask).last_hidden_state
        scores = pretrainer.discriminator.discriminator_predictions(hidden).float()  # (B, L)
        return scores.cpu().numpy()[k], labels.cpu().numpy()[k]

    t = float(getattr(pretrainer, "gen_temperature", 1.0))
    with torch.no_grad():
        logits = pretrainer.generator_logits(masked_ids, attention_mask, positions)
        s, y = judge(logits)
        own = judge(logits / t) if t != 1.0 else None
    pretrainer.train(was)
    out = {"disc_auc": roc_auc(s, y), "probe_recall": float((s[y] > 0).mean()) if y.any() else float("nan"),
           "probe_replace_rate": float(y.sum()) / max(1, int(k.sum()))}
    if own is not None:
        out["disc_auc_own_t"] = roc_auc(*own)
    return out


PROBE_SEED = 20_201  # fixed: the probe batch and its corruption are the same at every step of every run


def probe_batch(cache, seq_len: int, *, cls_id: int, pad_id: int, n: int = 32) -> torch.Tensor:
    """``(n, L)`` int64 probe sequences of the token ``cache``: the first ``n`` of a permutation with a seed of
    their own (:data:`PROBE_SEED`), so the probe does not depend on the run's seed or step."""
    from .data import PackedSequences

    seqs = PackedSequences(cache, seq_len, cls_id=cls_id, pad_id=pad_id, seed=PROBE_SEED)
    return torch.from_numpy(seqs.batch(0, min(n, len(seqs))))


def run_probe(pretrainer, ids: torch.Tensor, *, pad_id: int, mask_fn) -> dict[str, float]:
    """All diagnostics on the probe batch ``ids`` ``(B, L)``; the global torch RNG is left as it was, so a
    probed run and an unprobed one train identically. ``mask_fn(ids) -> Masked`` corrupts the batch."""
    state = torch.get_rng_state()
    try:
        torch.manual_seed(PROBE_SEED)
        am = (ids != pad_id).long()
        encoder = getattr(pretrainer, "discriminator", None) or pretrainer.export_model
        out = representation_spread(getattr(encoder, encoder.base_model_prefix), ids, am)  # .electra / .bert
        if hasattr(pretrainer, "discriminator"):
            mk = mask_fn(ids)
            out.update(rtd_auc(pretrainer, ids, mk.input_ids, mk.positions, am))
        return out
    finally:
        torch.set_rng_state(state)


def load_run_probe(run):
    """A finished (or stopped) run's probe, rebuilt from its newest checkpoint: ``(model, checkpoint_dir, probe)``
    where ``probe()`` runs :func:`run_probe` on the run's own probe batch (``probe.ids``, ``(n, L)``) and
    corruption (its corpus cache, tokenizer, sequence length and mask rate). For re-probing runs that finished before a probe field existed
    (docs/*/reprobe.py); ``model`` is the whole pretrainer, with the run's ``gen_temperature``; ``probe()`` runs at the
    run's precision."""
    import json
    from pathlib import Path

    from denki.models.text.tokenizer import JapaneseTokenizer

    from .data import build_token_cache
    from .export import load_pretrainer
    from .masking import ELECTRA_SPLIT, mask_tokens

    run = Path(run)
    meta = json.loads((run / "run.json").read_text(encoding="utf-8"))
    c, ident = meta["config"], meta["identity"]
    tok = JapaneseTokenizer.load(run / "tokenizer")
    cache = build_token_cache(c["corpus"], tok, c["cache_dir"], progress=False, corpus_shas=ident["corpus_sha256"])
    model, last, _ = load_pretrainer(run)
    ids = probe_batch(cache, c["seq_len"], cls_id=tok.cls_id, pad_id=tok.pad_id)
    special = (tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id)

    def mask_fn(x):
        return mask_tokens(x, mask_prob=ident["mask_prob"], mask_id=tok.mask_id, special_ids=special,
                           vocab_size=tok.vocab_size, split=ELECTRA_SPLIT, first_regular_id=len(tok.special_ids))

    # the precision the run probed at (run.json; runs from before it was recorded trained in fp32 unless their
    # summary says otherwise): a bf16 encoder's figures re-probed in fp32 differ in the 5th decimal
    precision = meta.get("precision")
    if precision is None and (run / "summary.json").is_file():
        precision = json.loads((run / "summary.json").read_text(encoding="utf-8")).get("precision")
    amp = autocast(precision, "cpu")

    def probe() -> dict[str, float]:
        with amp:
            return run_probe(model, ids, pad_id=tok.pad_id, mask_fn=mask_fn)

    probe.ids = ids  # (n, L) the probe batch
    return model, last, probe
