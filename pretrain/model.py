"""The two pretraining objectives, built from transformers' ELECTRA pieces so that export is ``save_pretrained``.

* :class:`RTDPretrainer` (ELECTRA): a small generator (``ElectraForMaskedLM`` at ``gen_size`` × the
  discriminator's hidden/heads/FFN, same depth) and the discriminator (``ElectraForPreTraining``). With
  ``share_embeddings=True`` (the paper's choice) the generator's embeddings module *is* the discriminator's
  (token + position + type embeddings and their LayerNorm); with ``False`` ("separate", the paper's "no weight
  tying" row) each has its own, and the discriminator's embeddings learn from the RTD loss only. Either way the
  generator's output layer is tied to the generator's token embeddings.
* :class:`MLMPretrainer` (baseline): an ``ElectraForMaskedLM`` of the discriminator's size, BERT-style MLM.

Both also take ready-made models (``denki pretrain --init-from BUNDLE``, :mod:`pretrain.init_from`): an imported
or denki discriminator and generator for RTD, or an ``ElectraForMaskedLM`` / ``BertForMaskedLM`` /
``BertForPreTraining`` for MLM (a BERT's pooler and NSP head are kept but frozen: MLM does not train them).

Losses (choices follow the official implementation; "mean" everywhere):

* generator / MLM loss: cross-entropy averaged over the masked positions of the batch;
* discriminator loss: sigmoid cross-entropy averaged over all non-pad positions of the batch ([CLS]/[SEP]
  included, as the official code which weights by the input mask);
* total = mlm + λ · disc (λ = ``disc_weight``, 50 in the paper).

Objective ``electra15`` is the paper's "ELECTRA 15%" ablation (Table 5): the same model, but the discriminator
loss is averaged over the masked positions only, so it learns from 15% of the tokens as MLM does.

Objective ``electra-mlm`` (a hybrid, not in the paper): ELECTRA as above, plus a *corrective* MLM loss on the
discriminator — at the masked positions it also predicts the original token from the corrupted input (a tied LM
head on the discriminator's embeddings, ``disc_mlm_head``, dropped at export). Why: at CPU budgets (≤ 2e14 FLOPs)
every pure-RTD recipe measured fine-tuned below random init while MLM paid off (docs/pretrain.md), so the
discriminator gets MLM's per-token signal as well as RTD's on every token. Close in spirit to TEAMS (Shen et al.
2021), whose discriminator also picks the original token at the masked positions (among a few candidates there;
over the whole vocabulary here). total = gen_mlm + λ·disc + disc_mlm.

The generator's LM head runs only on the masked positions (``(M, V)`` logits instead of ``(B·L, V)``), which is
what makes the RTD step cheap. Replacements are drawn from the generator's softmax by inverse-CDF sampling on
fp32 logits under ``torch.no_grad`` (exactly the distribution the Gumbel-max trick samples, at one uniform draw
per row instead of one per logit) — no gradient flows from the discriminator into the generator, as in the paper.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .masking import candidate_mask
from .settings import OBJECTIVES, RTD_OBJECTIVES  # noqa: F401  (the objectives' names live in settings.py)


def at_positions(x: torch.Tensor, positions: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` ``(B, L, ...)`` at the masked positions → ``(M, ...)``, row-major. ``positions``: ``(B, L)`` bool;
    ``index``: the same positions as ``(M,)`` flat indices into ``B·L`` when the caller knows them (the training loop
    computes them on the host): then no device→host sync is needed for the output's size, as boolean indexing has."""
    if index is None:
        return x[positions]
    return x.reshape(-1, *x.shape[2:]).index_select(0, index)


def gumbel_sample(logits: torch.Tensor) -> torch.Tensor:
    """One sample per row of ``(M, V)`` logits: ``argmax(logits + Gumbel noise)`` in fp32, no gradient.

    The reference sampler (the official code's); :func:`inverse_cdf_sample` draws from the same distribution."""
    with torch.no_grad():
        logits = logits.detach().float()
        u = torch.rand_like(logits).clamp_(1e-9, 1.0 - 1e-7)  # keep both logs finite
        gumbel = -torch.log(-torch.log(u))
        return (logits + gumbel).argmax(dim=-1)


def inverse_cdf_sample(logits: torch.Tensor) -> torch.Tensor:
    """One sample per row of ``(M, V)`` logits from ``softmax(logits)``: ``(M,)`` int64, no gradient.

    Inverse-CDF: ``cdf = cumsum(softmax)`` per row, one uniform ``u ∈ [0, cdf[-1])`` per row, the first index with
    ``cdf > u``. Same distribution as :func:`gumbel_sample` (tested statistically in tests/test_pretrain.py) but
    one random draw per row and no logs: ~5× cheaper on CPU for ``(620, 8000)`` (bench/sampler.py)."""
    with torch.no_grad():
        cdf = torch.softmax(logits.detach().float(), dim=-1).cumsum_(dim=-1)    # (M, V), non-decreasing
        u = torch.rand(cdf.shape[0], 1, device=cdf.device) * cdf[:, -1:]      # (M, 1); scale: fp32 sum ≈ 1
        return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)


class RTDPretrainer(nn.Module):
    """Generator + discriminator with shared embeddings. ``forward`` returns a dict of scalar tensors."""

    objective = "electra"

    def __init__(self, disc_config, gen_config, disc_weight: float = 50.0, masked_only: bool = False,
                 prior: float = 0.15, share_embeddings: bool = True, *, discriminator=None, generator=None,
                 init_prior: bool = True, disc_mlm: bool = False):
        """``discriminator`` / ``generator``: ready-made ``ElectraForPreTraining`` / ``ElectraForMaskedLM``
        (continued pretraining) instead of fresh ones from the configs; ``init_prior=False`` keeps a loaded
        discriminator head's bias. ``disc_mlm``: objective ``electra-mlm`` (module docstring)."""
        super().__init__()
        from transformers import ElectraForMaskedLM, ElectraForPreTraining
        from transformers.models.electra.modeling_electra import ElectraGeneratorPredictions

        self.discriminator = discriminator if discriminator is not None else ElectraForPreTraining(disc_config)
        self.generator = generator if generator is not None else ElectraForMaskedLM(gen_config)
        self.share_embeddings = bool(share_embeddings)
        if self.share_embeddings:
            # share the embeddings module (token, position, type embeddings + LayerNorm) ...
            self.generator.electra.embeddings = self.discriminator.electra.embeddings
        # ... and tie the generator's output layer to the (shared or its own) token embeddings. Why "separate"
        # exists: through this tie a weak generator's softmax pushes every rarely-predicted token's embedding the
        # same way (representation degeneration, Gao et al. 2019); shared, that reaches the discriminator.
        self.generator.generator_lm_head.weight = self.generator.electra.embeddings.word_embeddings.weight
        self.disc_weight = float(disc_weight)
        self.masked_only = bool(masked_only)  # "ELECTRA 15%": disc loss on the masked positions only
        if masked_only and disc_mlm:
            raise ValueError("electra15 and electra-mlm are separate objectives")
        self.objective = "electra15" if masked_only else "electra-mlm" if disc_mlm else "electra"
        self.disc_mlm_head = None
        if disc_mlm:
            # hidden → embedding transform (+ GELU, LayerNorm) as the generator's; the output layer is the
            # discriminator's word embeddings (tied, as MLM's) plus its own bias: (M, H) → (M, V)
            dcfg = self.discriminator.config
            self.disc_mlm_head = ElectraGeneratorPredictions(dcfg)
            self.disc_mlm_bias = nn.Parameter(torch.zeros(dcfg.vocab_size))
        self.sampler = inverse_cdf_sample  # replaceable in tests
        #: the generator's sampling temperature in training (``--gen-temperature``): > 1 flattens its distribution,
        #: so replacements are less plausible and easier to detect; 1 = the paper's. The probe always samples at 1.
        self.gen_temperature = 1.0
        #: weight of the [CLS] contrastive loss (:meth:`enable_cls_contrast`); 0 = the paper's objective
        self.cls_contrast = 0.0
        self.cls_proj_disc = self.cls_proj_gen = None
        #: ids whose positions the discriminator loss skips (:meth:`skip_in_disc_loss`); empty = the paper's
        self.unscored_ids: tuple[int, ...] = ()
        if init_prior:
            self.init_disc_prior(prior)

    def init_disc_prior(self, prior: float) -> None:
        """Start the discriminator's output bias at the log-odds of the replaced share (``prior`` ≈ the mask rate).

        With the default zero bias every token starts at p(replaced) = 0.5 while ~14% are replaced, so the first
        updates are one large, input-independent push towards "original" through every layer (×λ = 50). At
        CPU budgets that push wins: the tiny discriminator's outputs collapse to one vector for every input and it
        never learns (measured: docs/pretrain.md). Starting at the prior removes the
        push — the standard bias initialisation for a rare positive class (Lin et al. 2017, focal loss).
        """
        import math

        p = min(max(float(prior), 1e-4), 0.5)
        with torch.no_grad():
            self.discriminator.discriminator_predictions.dense_prediction.bias.fill_(math.log(p / (1 - p)))

    def skip_in_disc_loss(self, ids) -> None:
        """Leave the positions holding these token ids (``denki pretrain --disc-skip-special``: [CLS], [SEP]) out
        of the discriminator loss. Why: their label is always "original", a trivial target that the official code
        still scores; it pulls the top-layer [CLS] state to one input-independent point — the state the
        classification head reads. Measured at 1e14 FLOPs: [CLS] spread 0.13 (ELECTRA) / 0.18 (electra-mlm) vs
        0.68 for MLM, which never scores [CLS] (docs/pretrain.md)."""
        self.unscored_ids = tuple(int(i) for i in ids)

    def enable_cls_contrast(self, weight: float, dim: int = 128, temperature: float = 0.1) -> None:
        """Add a sequence-level loss at [CLS] (``denki pretrain --cls-contrast W``): in-batch InfoNCE between the
        discriminator's [CLS] state on the corrupted sequence and the generator's on the masked one — two views
        of the same text that the step computes anyway, so it costs two small projections, no extra forward.

        Why: RTD gives [CLS] no target but a trivial one, and the router reads [CLS]; at 1e14 FLOPs the RTD
        encoders' [CLS] barely varied across inputs (spread 0.13 vs MLM's 0.68) and dropping that trivial target
        (``--disc-skip-special``) lifted livedoor titles by 4–9 points. This gives [CLS] a target that depends on
        the whole sequence instead, close to COCO-LM's sequence contrastive loss (Meng et al. 2021), whose second
        view costs a forward pass more. The projections ``(H_disc → dim)``, ``(H_gen → dim)`` are dropped at export.
        """
        dev = next(self.parameters()).device
        self.cls_contrast = float(weight)
        self.cls_temperature = float(temperature)
        self.cls_proj_disc = nn.Linear(self.discriminator.config.hidden_size, dim).to(dev)
        self.cls_proj_gen = nn.Linear(self.generator.config.hidden_size, dim).to(dev)

    @property
    def export_model(self):
        return self.discriminator

    def _generator(self, input_ids, attention_mask, positions, index=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(M, V)`` logits at the ``M`` masked positions (row-major order of ``positions``) and the generator's
        ``(B, H_gen)`` [CLS] states."""
        hidden = self.generator.electra(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        h = at_positions(hidden, positions, index)  # (M, H_gen)
        return self.generator.generator_lm_head(self.generator.generator_predictions(h)), hidden[:, 0]

    def generator_logits(self, input_ids, attention_mask, positions) -> torch.Tensor:
        """``(M, V)`` logits at the ``M`` masked positions only (row-major order of ``positions``)."""
        return self._generator(input_ids, attention_mask, positions)[0]

    def cls_contrast_loss(self, disc_cls: torch.Tensor, gen_cls: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Symmetric in-batch InfoNCE of ``(B, H_disc)`` vs ``(B, H_gen)`` [CLS] states (row i of each is the same
        text): ``(loss, number of rows whose nearest generator view is their own)``."""
        zd = F.normalize(self.cls_proj_disc(disc_cls).float(), dim=-1)    # (B, P)
        zg = F.normalize(self.cls_proj_gen(gen_cls).float(), dim=-1)      # (B, P)
        sim = zd @ zg.T / self.cls_temperature                             # (B, B)
        target = torch.arange(sim.shape[0], device=sim.device)
        loss = (F.cross_entropy(sim, target) + F.cross_entropy(sim.T, target)) / 2
        return loss, (sim.detach().argmax(-1) == target).sum()

    def forward(self, original_ids, masked_ids, positions, attention_mask, index=None) -> dict[str, torch.Tensor]:
        """All ``(B, L)``: original ids, generator input, bool masked positions, attention mask (1 = token);
        ``index``: optionally the positions as ``(M,)`` flat indices (:func:`at_positions`)."""
        targets = at_positions(original_ids, positions, index)  # (M,)
        logits, gen_cls = self._generator(masked_ids, attention_mask, positions, index)
        # (M, V) fp32 once, for the loss, the sampling and the logged accuracy: under bf16 autocast the LM head's
        # output is bf16 (3 significant digits, and a CPU argmax over bf16 is 4× slower than the cast + fp32 argmax)
        logits32 = logits.float()
        mlm_loss = F.cross_entropy(logits32, targets)
        # (M,), no grad; at --gen-temperature T ≠ 1 from softmax(logits / T)
        sampled = self.sampler(logits32 / self.gen_temperature if self.gen_temperature != 1.0 else logits32)
        disc_input = original_ids.clone()
        if index is None:
            disc_input[positions] = sampled
        else:
            disc_input.view(-1).index_copy_(0, index, sampled)
        # a sampled token equal to the original is labelled "original"
        nonpad = attention_mask.bool()
        labels = (disc_input != original_ids) & nonpad          # (B, L) bool
        hidden = self.discriminator.electra(input_ids=disc_input, attention_mask=attention_mask).last_hidden_state
        disc_logits = self.discriminator.discriminator_predictions(hidden)  # (B, L)
        per_tok = F.binary_cross_entropy_with_logits(disc_logits.float(), labels.float(), reduction="none")
        # (B, L) bool: the tokens the discriminator is trained and judged on (all non-pad, the paper's) ...
        judged = nonpad & candidate_mask(original_ids, self.unscored_ids) if self.unscored_ids else nonpad
        scored = positions if self.masked_only else judged  # ... and those its loss averages over
        disc_loss = (per_tok * scored).sum() / scored.sum().clamp(min=1)
        loss = mlm_loss + self.disc_weight * disc_loss
        extra = {}
        if self.disc_mlm_head is not None:
            # corrective MLM: the original token at every masked position, from the discriminator's view of the
            # corrupted sequence (a sampled replacement, or the original where the generator drew it)
            dlogits = self.disc_mlm_logits(at_positions(hidden, positions, index)).float()        # (M, V)
            disc_mlm_loss = F.cross_entropy(dlogits, targets)
            loss = loss + disc_mlm_loss
            extra = {"disc_mlm_loss": disc_mlm_loss.detach(),
                     "disc_mlm_correct": (dlogits.detach().argmax(-1) == targets).sum()}
        if self.cls_contrast:
            cls_loss, cls_correct = self.cls_contrast_loss(hidden[:, 0], gen_cls)
            loss = loss + self.cls_contrast * cls_loss
            extra.update(cls_loss=cls_loss.detach(), cls_correct=cls_correct,
                         n_seqs=torch.tensor(original_ids.shape[0], device=loss.device))
        with torch.no_grad():
            # the logged accuracy/precision/recall cover the tokens the loss can train: with --disc-skip-special
            # the untrained [CLS]/[SEP] outputs would otherwise count as false positives
            pred = (disc_logits > 0) & judged
            stats = {
                "n_masked": positions.sum(), "gen_correct": (logits32.argmax(-1) == targets).sum(),
                "n_nonpad": nonpad.sum(), "n_judged": judged.sum(), "n_replaced": labels.sum(),
                "disc_correct": ((pred == labels) & judged).sum(), "disc_tp": (pred & labels).sum(),
                "disc_pred_pos": pred.sum(),
            }
        return {"loss": loss, "mlm_loss": mlm_loss.detach(), "disc_loss": disc_loss.detach(), **stats, **extra}

    def disc_mlm_logits(self, h: torch.Tensor) -> torch.Tensor:
        """``(M, H)`` discriminator states at the masked positions → ``(M, V)`` logits (``electra-mlm`` only)."""
        w = self.discriminator.electra.embeddings.word_embeddings.weight   # (V, E)
        return self.disc_mlm_head(h) @ w.T + self.disc_mlm_bias


class MLMPretrainer(nn.Module):
    """BERT-style MLM on an encoder of the discriminator's size (``ElectraForMaskedLM``, head tied), or on a
    ready-made ``model`` (``ElectraForMaskedLM``, ``BertForMaskedLM``, ``BertForPreTraining``)."""

    objective = "mlm"

    def __init__(self, disc_config, *, model=None):
        super().__init__()
        from transformers import ElectraForMaskedLM

        self.mlm = model if model is not None else ElectraForMaskedLM(disc_config)
        self.is_bert = self.mlm.config.model_type == "bert"
        if self.is_bert:
            # MLM trains neither the pooler nor the NSP head of a BertForPreTraining: frozen (no optimizer state,
            # no unused-parameter error under DDP), saved unchanged with the rest
            for name, p in self.mlm.named_parameters():
                if ".pooler." in f".{name}" or "seq_relationship" in name:
                    p.requires_grad_(False)
        else:
            self.mlm.generator_lm_head.weight = self.mlm.electra.embeddings.word_embeddings.weight

    @property
    def export_model(self):
        return self.mlm

    def mlm_logits(self, hidden_at_positions: torch.Tensor) -> torch.Tensor:
        """``(M, H)`` hidden states at the masked positions → ``(M, V)`` logits (the model's tied LM head)."""
        if self.is_bert:
            return self.mlm.cls.predictions(hidden_at_positions)
        return self.mlm.generator_lm_head(self.mlm.generator_predictions(hidden_at_positions))

    def forward(self, original_ids, masked_ids, positions, attention_mask, index=None) -> dict[str, torch.Tensor]:
        targets = at_positions(original_ids, positions, index)
        encoder = getattr(self.mlm, self.mlm.base_model_prefix)  # .electra / .bert
        hidden = encoder(input_ids=masked_ids, attention_mask=attention_mask).last_hidden_state  # (B, L, H)
        logits = self.mlm_logits(at_positions(hidden, positions, index)).float()  # (M, V) fp32: the loss and the accuracy (see RTD's)
        loss = F.cross_entropy(logits, targets)
        with torch.no_grad():
            stats = {"n_masked": positions.sum(), "gen_correct": (logits.argmax(-1) == targets).sum(),
                     "n_nonpad": attention_mask.sum()}
        return {"loss": loss, "mlm_loss": loss.detach(), **stats}


def rtd_options(objective: str) -> dict:
    """The :class:`RTDPretrainer` switches an RTD objective name stands for."""
    return {"masked_only": objective == "electra15", "disc_mlm": objective == "electra-mlm"}


def build_pretrainer(objective: str, disc_config, gen_config=None, disc_weight: float = 50.0,
                     mask_prob: float = 0.15, share_embeddings: bool = True) -> nn.Module:
    """``mask_prob`` sets the discriminator's initial output bias (see :meth:`RTDPretrainer.init_disc_prior`);
    ``share_embeddings`` (RTD only): one embeddings module for generator and discriminator, or one each."""
    if objective in RTD_OBJECTIVES:
        return RTDPretrainer(disc_config, gen_config, disc_weight, prior=mask_prob,
                             share_embeddings=share_embeddings, **rtd_options(objective))
    if objective == "mlm":
        return MLMPretrainer(disc_config)
    raise ValueError(f"unknown objective {objective!r}")
