"""Everything a pretraining run builds before its first step, one helper per piece, in the order
:func:`pretrain.train.run_pretrain` calls them: where it starts (a tokenizer, or a bundle to continue:
:func:`resolve_start`), how long it plans to run (:func:`plan_steps`), its token data, its model, optimizer and
schedule, the training state it resumes from, the modules it trains through, and its masking."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from denki.models.io.errors import DenkiError

from . import train_state
from .data import PackedSequences, build_token_cache
from .distributed import barrier, distributed
from .flops import expected_masked, step_flops
from .kernels import resolve_attention, use_cheap_mask_dropout, use_sdpa_attention
from .loop import Progress
from .masking import BERT_SPLIT, ELECTRA_SPLIT, mask_tokens
from .run_dir import truncate_metrics
from .settings import RTD_OBJECTIVES, PretrainConfig, default_warmup, lr_size_of, needs_early_plan


# ------------------------------------------------------------------------------------------------ start
@dataclass
class Start:
    """Where a run starts: its tokenizer (``tok``, loaded from ``tok_dir``) and, for continued pretraining, the
    bundle (``init_bundle``, its ``config.json`` as ``bundle_config``), its record (``init_rec``: path, sha256,
    FLOPs) and the identity keys it adds (``init_ident``). ``lr_size``: the size whose default LR the run gets."""
    tok: object
    tok_dir: object
    lr_size: str
    init_bundle: Path | None = None
    init_rec: dict | None = None
    init_ident: dict = field(default_factory=dict)
    bundle_config: dict = field(default_factory=dict)


def resolve_start(cfg: PretrainConfig) -> Start:
    """The tokenizer of a run from scratch, or the bundle (and its tokenizer) a run continued with --init-from
    starts from; the options that go with neither are refused."""
    from denki.models.text.tokenizer import JapaneseTokenizer

    if cfg.init_from:
        return _start_from_bundle(cfg)
    if not cfg.tokenizer:
        raise DenkiError("pretrain needs --tokenizer DIR (or --init-from BUNDLE, whose tokenizer it keeps)")
    if cfg.gen_init or cfg.gen_layers:
        raise DenkiError("--gen-init / --gen-layers go with --init-from")
    return Start(tok=JapaneseTokenizer.load(cfg.tokenizer), tok_dir=cfg.tokenizer, lr_size=cfg.size)


def _start_from_bundle(cfg: PretrainConfig) -> Start:
    """--init-from: the bundle, its tokenizer (a different --tokenizer is refused) and its generator's start."""
    from denki.models.bundle.importer import generator_of
    from denki.models.text.tokenizer import JapaneseTokenizer

    from .init_from import bundle_architecture, default_gen_layers, resolve_init

    init_bundle, init_rec = resolve_init(cfg.init_from)
    tok = JapaneseTokenizer.load(init_bundle)
    if cfg.tokenizer and JapaneseTokenizer.load(cfg.tokenizer).fingerprint() != tok.fingerprint():
        raise DenkiError(f"--tokenizer {cfg.tokenizer} is not the tokenizer of --init-from {init_bundle} "
                         "(continued pretraining keeps the checkpoint's vocabulary); leave --tokenizer out")
    bcfg = json.loads((init_bundle / "config.json").read_text(encoding="utf-8"))
    gen_init = gen_layers = None
    if cfg.objective in RTD_OBJECTIVES:
        gen_init = cfg.gen_init or ("bundle" if generator_of(init_bundle) is not None else "copy")
        if gen_init == "copy":
            gen_layers = int(cfg.gen_layers or default_gen_layers(int(bcfg["num_hidden_layers"])))
    elif cfg.gen_init or cfg.gen_layers:
        raise DenkiError("--gen-init / --gen-layers apply to RTD (--objective electra) only")
    init_ident = {"init_from": {"path": init_rec["path"], "sha256": init_rec["sha256"]}, "gen_init": gen_init,
                  "gen_layers": gen_layers}
    if bundle_architecture(init_bundle)[0] == "bert" and cfg.objective in RTD_OBJECTIVES:
        raise DenkiError(f"{init_bundle}: a BERT has no replaced-token-detection discriminator; continue it "
                         "with --objective mlm")
    return Start(tok=tok, tok_dir=init_bundle, lr_size=lr_size_of(int(bcfg["hidden_size"])),
                 init_bundle=init_bundle, init_rec=init_rec, init_ident=init_ident, bundle_config=bcfg)


# ------------------------------------------------------------------------------------------------ planning
def plan_steps(cfg: PretrainConfig, disc_cfg, gen_cfg, world: int) -> int:
    """Number of optimizer steps the LR schedule spans: ``--steps``, or enough to spend ``--max-flops``."""
    if cfg.steps is None and cfg.max_flops is None:
        raise DenkiError("give --steps N and/or --max-flops F (the training budget)")
    candidates = []
    if cfg.steps is not None:
        candidates.append(int(cfg.steps))
    if cfg.max_flops is not None:
        per = step_flops(cfg.objective, disc_cfg, gen_cfg, cfg.batch_size * world, cfg.seq_len,
                         expected_masked(cfg.batch_size * world, cfg.seq_len, cfg.mask_prob))
        candidates.append(max(1, math.ceil(cfg.max_flops / per)))
    return max(1, min(candidates))


def _scratch_configs(cfg: PretrainConfig, vocab_size: int, dropout: dict | None = None):
    """``(discriminator, generator or None)`` configs of a run from scratch at ``cfg.size``."""
    from denki.models.bundle.presets import electra_config, generator_config

    disc = electra_config(cfg.size, vocab_size, max_position_embeddings=max(512, cfg.seq_len), **(dropout or {}))
    return disc, generator_config(disc, cfg.gen_size) if cfg.objective in RTD_OBJECTIVES else None


def early_plan(cfg: PretrainConfig, start: Start, world: int) -> int | None:
    """The planned steps of a tiny ELECTRA from scratch, which its default lr, --cls-contrast and
    --gen-temperature depend on (None for every other run: their defaults do not)."""
    if not needs_early_plan(cfg, start.init_bundle is None):
        return None
    return plan_steps(cfg, *_scratch_configs(cfg, start.tok.vocab_size), world)


# ------------------------------------------------------------------------------------------------ data
def prepare_data(cfg: PretrainConfig, tok, shas: list[str], rank: int, world: int):
    """``(token cache, packed sequences)``: rank 0 tokenizes the corpus (once per corpus and tokenizer); the others
    then find the cache."""
    if rank == 0:
        cache = build_token_cache(cfg.corpus, tok, cfg.cache_dir, progress=cfg.progress, corpus_shas=shas)
    barrier(world)
    if rank != 0:
        cache = build_token_cache(cfg.corpus, tok, cfg.cache_dir, progress=False, corpus_shas=shas)
    return cache, PackedSequences(cache, cfg.seq_len, cls_id=tok.cls_id, pad_id=tok.pad_id, seed=cfg.seed)


# ------------------------------------------------------------------------------------------------ model
@dataclass
class Built:
    """The pretrainer and what the loop and the summary need of it: the discriminator's / generator's configs
    (FLOP counts), ``model_config`` (kept in every training state), the planned ``total_steps`` and, for a
    continued run, ``init_record`` (how its generator and heads were initialised)."""
    model: torch.nn.Module
    disc_cfg: object
    gen_cfg: object
    model_config: dict
    total_steps: int
    init_record: dict | None = None


def build_model(cfg: PretrainConfig, start: Start, device, world: int, planned: int | None) -> Built:
    """The pretrainer on ``device`` (seeded from ``cfg.seed``), from the --init-from bundle or from scratch, with
    the --cls-contrast projections and the generator's temperature."""
    built = _model_from_bundle(cfg, start, device, world) if start.init_bundle is not None \
        else _model_from_scratch(cfg, start, device, world, planned)
    if cfg.cls_contrast:  # new parameters: before the optimizer is built and a training state is loaded
        built.model.enable_cls_contrast(cfg.cls_contrast)
    if cfg.objective in RTD_OBJECTIVES:
        built.model.gen_temperature = float(cfg.gen_temperature)
    return built


def _model_from_bundle(cfg: PretrainConfig, start: Start, device, world: int) -> Built:
    from denki.models.training.loop import set_seed

    from .init_from import build_from_bundle, model_config_for

    set_seed(cfg.seed)  # new heads (and a random generator) are initialised from it
    model, init_record = build_from_bundle(cfg.objective, start.init_bundle, gen_init=start.init_ident["gen_init"],
                                           gen_layers=start.init_ident["gen_layers"], gen_size=cfg.gen_size,
                                           disc_weight=cfg.disc_weight, mask_prob=cfg.mask_prob,
                                           share_embeddings=cfg.share_embeddings, dropout=cfg.dropout)
    rtd = cfg.objective in RTD_OBJECTIVES
    disc_cfg = model.discriminator.config if rtd else model.mlm.config
    gen_cfg = model.generator.config if rtd else None
    if cfg.seq_len > disc_cfg.max_position_embeddings:
        raise DenkiError(f"--seq-len {cfg.seq_len} exceeds the checkpoint's {disc_cfg.max_position_embeddings} "
                         "positions")
    model = model.to(device)
    model_config = model_config_for(model, cfg.objective, cfg.disc_weight, cfg.share_embeddings)
    # the bundle keeps the checkpoint's own dropout (not the fine-tuning preset's)
    model_config["export_dropout"] = {k: start.bundle_config.get(k) for k in ("hidden_dropout_prob",
                                                                             "attention_probs_dropout_prob")}
    return Built(model, disc_cfg, gen_cfg, model_config, plan_steps(cfg, disc_cfg, gen_cfg, world), init_record)


def _model_from_scratch(cfg: PretrainConfig, start: Start, device, world: int, planned: int | None) -> Built:
    from denki.models.training.loop import set_seed

    from .model import build_pretrainer

    # pretraining dropout (a bundle continued with --init-from takes it through build_from_bundle instead)
    drop = {} if cfg.dropout is None else {"hidden_dropout_prob": cfg.dropout,
                                           "attention_probs_dropout_prob": cfg.dropout}
    disc_cfg, gen_cfg = _scratch_configs(cfg, start.tok.vocab_size, drop)
    # the early plan (tiny ELECTRA's defaults) counted the same FLOPs: dropout does not change them
    total_steps = planned if planned is not None else plan_steps(cfg, disc_cfg, gen_cfg, world)
    set_seed(cfg.seed)
    model = build_pretrainer(cfg.objective, disc_cfg, gen_cfg, cfg.disc_weight, cfg.mask_prob,
                             share_embeddings=cfg.share_embeddings).to(device)
    model_config = {"disc": disc_cfg.to_dict(), "gen": gen_cfg.to_dict() if gen_cfg else None,
                    "objective": cfg.objective, "disc_weight": cfg.disc_weight,
                    "share_embeddings": cfg.share_embeddings}
    return Built(model, disc_cfg, gen_cfg, model_config, total_steps)


def build_optimizer(cfg: PretrainConfig, model, lr: float, total_steps: int, device):
    """``(AdamW, linear warmup/decay schedule, warmup steps)`` peaking at ``lr``."""
    from denki.models.training.loop import build_optimizer as adamw, warmup_linear_schedule

    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else default_warmup(total_steps)
    optimizer = adamw(model, lr, weight_decay=cfg.weight_decay, fused=device.type == "cuda", eps=cfg.adam_eps)
    return optimizer, warmup_linear_schedule(optimizer, warmup, total_steps), warmup


def resume(out: Path, model, optimizer, scheduler, rank: int, world: int) -> Progress:
    """Load the newest training state of ``out`` (if any) into model, optimizer, schedule and RNGs; cut the
    metrics log back to it. Returns where the run stands."""
    progress = Progress()
    last = train_state.latest_train_state(out)
    if last is not None:
        state = train_state.load_train_state(last, model, optimizer, scheduler)
        progress = Progress(state["step"], state["tokens"], state["flops"], state["wall_s"])
        if rank == 0:
            truncate_metrics(out / "metrics.jsonl", progress.step)
            print(f"pretrain: resuming {out} from step {progress.step} ({progress.flops:.3g} FLOPs)")
    barrier(world)
    return progress


# ------------------------------------------------------------------------------------------------ training modules
def training_modules(model, cfg: PretrainConfig, tok, device, world: int):
    """``(train_model, eager_model)``: the pretrainer with the RTD loss's skipped tokens, the fast kernels chosen
    by ``cfg`` (pretrain/kernels.py: SDPA attention, cheaper CPU dropout masks; neither adds parameters, so training
    states and bundles are the same either way), wrapped in DDP under torchrun, compiled with --compile
    (``eager_model``: the same uncompiled, the fallback when compiling fails)."""
    if cfg.disc_skip_special:  # an RTD objective (checked before)
        model.skip_in_disc_loss((tok.cls_id, tok.sep_id))
    if cfg.micro_batch is not None and cfg.micro_batch < 1:
        raise DenkiError(f"--micro-batch {cfg.micro_batch}: give a number of sequences ≥ 1")
    if resolve_attention(cfg.attention, device.type) == "sdpa":
        use_sdpa_attention(model)
    if cfg.dropout_masks == "cheap":
        use_cheap_mask_dropout(model)
    elif cfg.dropout_masks != "torch":
        raise DenkiError(f"--dropout-masks {cfg.dropout_masks!r}: choose cheap or torch")
    train_model = model
    if world > 1 or distributed():
        from torch.nn.parallel import DistributedDataParallel as DDP

        train_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    eager_model = train_model
    if cfg.compile:
        train_model = torch.compile(train_model, dynamic=True)
    return train_model, eager_model


def masking(cfg: PretrainConfig, tok):
    """``mask_fn(ids)``: the run's corruption of a ``(B, L)`` batch (BERT's or ELECTRA's split of the masked
    positions; never the special tokens)."""
    split = ELECTRA_SPLIT if cfg.objective in RTD_OBJECTIVES else BERT_SPLIT
    special = (tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id)
    special += tuple(tok.vocab[t] for t in tok.settings.extra_tokens)  # a checkpoint's extra added tokens
    # random replacements skip the special tokens when they lead the vocabulary (denki's layout, and that of
    # the public Japanese BERTs); elsewhere they are drawn from the whole vocabulary
    first_regular = len(tok.special_ids) if tok.special_ids == tuple(range(len(tok.special_ids))) else 0

    def mask_fn(x):
        return mask_tokens(x, mask_prob=cfg.mask_prob, mask_id=tok.mask_id, special_ids=special,
                           vocab_size=tok.vocab_size, split=split, first_regular_id=first_regular)

    return mask_fn
