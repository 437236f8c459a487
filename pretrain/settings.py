"""The settings of one pretraining run (:class:`PretrainConfig`) and every default `denki pretrain` chooses.

Each default lives here once: a fixed one is the dataclass field's default (the CLI's ``--help`` reads it through
:func:`field_default`); one that depends on the run (size, objective, planned length, ``--init-from``) is a field
left ``None`` and resolved by one ``default_*`` function when the run starts. Why each value was chosen (the
measurements behind it): docs/pretrain.md.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from denki.models.io.errors import DenkiError

#: the objectives with a generator and a discriminator (replaced-token detection), and all of them (pretrain.model
#: builds each; they live here so that the CLI reads these settings without importing torch)
RTD_OBJECTIVES = ("electra", "electra15", "electra-mlm")
OBJECTIVES = (*RTD_OBJECTIVES, "mlm")


@dataclass
class PretrainConfig:
    """The settings of one pretraining run, named as `denki pretrain`'s options (``--batch-size`` →
    ``batch_size``); build it once per command (:meth:`from_args`, or ``dataclasses.replace`` of another)."""
    corpus: list[str]
    tokenizer: str | None  # None/"" with init_from: the bundle's tokenizer
    out: str
    size: str = "tiny"
    objective: str | None = None  # None: default_objective(size, init_from)
    max_flops: float | None = None
    steps: int | None = None
    batch_size: int = 32
    seq_len: int = 128
    lr: float | None = None  # None: default_pretrain_lr(size, objective, planned steps)
    seed: int = 0
    device: str = "auto"
    mask_prob: float | None = None  # None: default_mask_prob(size, objective, init_from)
    gen_size: float = 0.25
    disc_weight: float = 50.0
    #: RTD: one embeddings module for generator and discriminator (paper) or one each ("separate")
    share_embeddings: bool = True
    #: RTD: the discriminator loss skips [CLS] and [SEP] (always "original"); False = the paper's (scores them).
    #: Opt-in (docs/pretrain.md)
    disc_skip_special: bool = False
    #: AdamW's ε; None = torch's 1e-8 (the official ELECTRA code uses 1e-6, which damps the updates of parameters
    #: whose gradients are tiny — rare tokens' embeddings)
    adam_eps: float | None = None
    #: RTD: weight of a [CLS] contrastive loss between the discriminator's and the generator's views
    #: (model.RTDPretrainer.enable_cls_contrast); 0 = off, the paper's objective; None = default_cls_contrast
    cls_contrast: float | None = None
    #: RTD: the generator's sampling temperature in training (model.RTDPretrainer.gen_temperature); 1 = the paper's;
    #: None = default_gen_temperature
    gen_temperature: float | None = None
    #: dropout during pretraining (hidden and attention); None = the preset's 0.1. The exported bundle always
    #: carries the fine-tuning dropout (models.bundle.presets.FINETUNE_DROPOUT), whatever was used here.
    dropout: float | None = None
    warmup_steps: int | None = None  # None: default_warmup(total steps)
    weight_decay: float = 0.01
    log_every: int = 10
    save_every: int = 200
    keep: int = 3
    cache_dir: str | None = None  # None: models.io.cache.cache_root() / "corpus" ($DENKI_CACHE)
    compile: bool = False
    progress: bool = True
    export: bool = True
    #: continued pretraining: a ``pretrained`` bundle (or run directory) to start from (see pretrain.init_from)
    init_from: str | None = None
    #: RTD from a bundle: bundle | copy | random (None: bundle when it has generator/, else copy)
    gen_init: str | None = None
    #: gen_init copy: generator depth (None: max(1, L // 4) of the discriminator's L layers)
    gen_layers: int | None = None
    #: autocast precision of the forward/backward: auto | fp32 | bf16 (``resolve_precision``); master weights, the
    #: optimizer, the losses and the generator's sampling stay fp32 either way
    precision: str = "auto"
    #: dropout keep-masks: "cheap" (pretrain.kernels.CheapMaskDropout: a quarter of the random numbers on CPUs,
    #: torch's dropout elsewhere) or "torch"
    dropout_masks: str = "cheap"
    #: sequences per forward/backward; the optimizer steps once per --batch-size (gradient accumulation, for a
    #: batch larger than the device's memory); None = the whole batch at once
    micro_batch: int | None = None
    #: attention kernel: auto (sdpa on CUDA, eager on CPUs) | eager | sdpa (pretrain.kernels.resolve_attention)
    attention: str = "auto"
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_args(cls, args) -> "PretrainConfig":
        """The settings of `denki pretrain`'s parsed ``args``: every option named as its field, plus the three the
        CLI spells differently (``--embeddings``, ``--no-progress``, ``--no-export``)."""
        kw = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
        kw.update(corpus=list(args.corpus), share_embeddings=args.embeddings == "shared",
                  progress=not args.no_progress, export=not args.no_export)
        return cls(**kw)


def field_default(name: str):
    """The default of :class:`PretrainConfig`'s field ``name`` (what the CLI's options default to)."""
    return PretrainConfig.__dataclass_fields__[name].default


# ------------------------------------------------------------------------------------------------ objective
#: `denki pretrain`'s objective when --objective is not given: ELECTRA at every size; --init-from keeps ELECTRA
#: too (an imported discriminator continues RTD; give --objective mlm for a BERT). Evidence: docs/pretrain.md.
DEFAULT_OBJECTIVE = {"tiny": "electra", "mini": "electra", "small": "electra", "base": "electra"}


def default_objective(size: str, init_from=None) -> str:
    """The objective `denki pretrain` uses when none is given (see :data:`DEFAULT_OBJECTIVE`)."""
    return "electra" if init_from else DEFAULT_OBJECTIVE[size]


# ------------------------------------------------------------------------------------------------ learning rate
DEFAULT_LR = {"tiny": 1e-3, "mini": 5e-4, "small": 5e-4, "base": 2e-4}
#: replaced-token detection at size tiny: 1e-3 collapses the discriminator at CPU budgets, 3e-4 (with the prior
#: bias init of model.RTDPretrainer) learns; MLM keeps 1e-3 (docs/pretrain.md)
DEFAULT_LR_RTD = {"tiny": 3e-4}


def default_pretrain_lr(size: str, objective: str, planned_steps: int | None = None) -> float:
    """The peak LR a run gets without ``--lr`` (per size; per objective where measurements differ; for a tiny
    ELECTRA from scratch, per run length: :func:`long_tiny_rtd`)."""
    if long_tiny_rtd(size, objective, planned_steps):
        return TINY_RTD_LONG["lr"]
    if objective in RTD_OBJECTIVES and size in DEFAULT_LR_RTD:
        return DEFAULT_LR_RTD[size]
    return DEFAULT_LR[size]


def lr_size_of(hidden_size: int) -> str:
    """The size whose default LR a bundle continued with --init-from gets (by its width)."""
    return "tiny" if hidden_size <= 128 else "small" if hidden_size <= 256 else "base"


def default_warmup(total_steps: int) -> int:
    """Warmup steps without ``--warmup-steps``: 10 % of the steps, at most 10,000."""
    return min(10000, max(1, total_steps // 10))


# ------------------------------------------------------------------------------------------------ long tiny RTD
#: A tiny ELECTRA from scratch that plans at least this many steps gets :data:`TINY_RTD_LONG` for whatever of
#: --lr / --cls-contrast / --gen-temperature is not given; shorter runs keep lr 3e-4 and the paper's loss, because
#: lr 1e-3 collapses them. The switch sits at the shortest long run measured (docs/pretrain.md).
TINY_RTD_LONG_STEPS = 1000
TINY_RTD_LONG = {"lr": 1e-3, "cls_contrast": 1.0, "gen_temperature": 2.0}


def long_tiny_rtd(size: str, objective: str, planned_steps: int | None) -> bool:
    """Whether a run gets the long-run recipe :data:`TINY_RTD_LONG` (tiny, objective ``electra``, from scratch —
    ``planned_steps`` is None for --init-from — planning ≥ :data:`TINY_RTD_LONG_STEPS` steps)."""
    return size == "tiny" and objective == "electra" and planned_steps is not None \
        and planned_steps >= TINY_RTD_LONG_STEPS


def needs_early_plan(cfg: PretrainConfig, from_scratch: bool) -> bool:
    """Whether the run's length must be planned before its defaults are chosen (a tiny ELECTRA from scratch with
    one of :data:`TINY_RTD_LONG`'s options unset)."""
    return from_scratch and cfg.size == "tiny" and cfg.objective == "electra" \
        and any(getattr(cfg, k) is None for k in TINY_RTD_LONG)


def long_run_note(cfg: PretrainConfig, planned: int | None) -> str | None:
    """The words that say which long-run defaults a run got (None when it gets none), the options named as the
    CLI spells them (TINY_RTD_LONG's keys are PretrainConfig fields)."""
    if not long_tiny_rtd(cfg.size, cfg.objective, planned):
        return None
    chosen = [f"--{k.replace('_', '-')} {v:g}" for k, v in TINY_RTD_LONG.items() if getattr(cfg, k) is None]
    return (f"a tiny ELECTRA run of {planned:,} steps (≥ {TINY_RTD_LONG_STEPS:,}) gets the long-run defaults "
            f"{' '.join(chosen)} (docs/pretrain.md; give them to choose)")


def chosen_settings_line(given: PretrainConfig, cfg: PretrainConfig, *, lr: float, total_steps: int, warmup: int,
                         precision: str, planned: int | None) -> str:
    """One line naming the run's settings that matter most, each marked ``(default)`` where the option was not
    given and the run chose it (``given``: the settings as passed; ``cfg``: resolved)."""
    def d(text: str, option: str) -> str:
        return f"{text} (default)" if getattr(given, option) is None else text

    if given.objective is None:
        why = "--init-from" if cfg.init_from else f"--size {cfg.size}"
        objective = f"objective {cfg.objective} (the default for {why}; --objective to choose)"
    else:
        objective = f"objective {cfg.objective}"
    budget = f"planned to spend --max-flops {cfg.max_flops:.3g}" if cfg.max_flops is not None \
        and (cfg.steps is None or total_steps < cfg.steps) else "--steps"
    parts = [objective, d(f"lr {lr:g}", "lr"), f"batch {cfg.batch_size} × {cfg.seq_len} tokens",
             f"{total_steps:,} steps ({budget})", d(f"warmup {warmup:,} steps", "warmup_steps"),
             d(f"mask rate {cfg.mask_prob:g}", "mask_prob"),
             f"precision {precision}" + (" (--precision auto)" if cfg.precision == "auto" else "")]
    if cfg.objective in RTD_OBJECTIVES:
        parts += [d(f"cls-contrast {cfg.cls_contrast:g}", "cls_contrast"),
                  d(f"gen-temperature {cfg.gen_temperature:g}", "gen_temperature")]
    note = long_run_note(dataclasses.replace(given, objective=cfg.objective), planned)
    return "pretrain: " + ", ".join(parts) + (f"; {note}" if note else "")


def default_cls_contrast(size: str, objective: str, planned_steps: int | None) -> float:
    """The --cls-contrast weight a run gets when none is given: 1 for a long tiny ELECTRA, else 0 (off)."""
    return TINY_RTD_LONG["cls_contrast"] if long_tiny_rtd(size, objective, planned_steps) else 0.0


def default_gen_temperature(size: str, objective: str, planned_steps: int | None) -> float:
    """The --gen-temperature a run gets when none is given: ``TINY_RTD_LONG["gen_temperature"]`` (2) for a long tiny
    ELECTRA, else 1, the paper's."""
    return TINY_RTD_LONG["gen_temperature"] if long_tiny_rtd(size, objective, planned_steps) else 1.0


# ------------------------------------------------------------------------------------------------ mask rate
#: MLM's mask rate from scratch at size tiny: 40 % (it fine-tuned better than 15 %); everything else keeps the
#: paper's 15 % (a checkpoint continued with --init-from was pretrained at 15 %). Evidence: docs/pretrain.md.
MLM_TINY_MASK_PROB = 0.4
DEFAULT_MASK_PROB = 0.15


def default_mask_prob(size: str, objective: str, init_from=None) -> float:
    """The mask rate a run gets without ``--mask-prob`` (see :data:`MLM_TINY_MASK_PROB`)."""
    return MLM_TINY_MASK_PROB if objective == "mlm" and size == "tiny" and not init_from else DEFAULT_MASK_PROB


# ------------------------------------------------------------------------------------------------ precision
# models.training.precision owns the rule (QA fine-tuning shares it); re-exported for the pretraining code and tests
from denki.models.training.precision import PRECISIONS, cpu_bf16_flags, resolve_precision  # noqa: E402,F401


# ------------------------------------------------------------------------------------------------ checks
def check_size_and_objective(cfg: PretrainConfig) -> PretrainConfig:
    """Refuse an unknown size, objective, mask rate or dropout; resolve the objective and the mask rate (once, here:
    the identity, FLOP count, masking and bundle all see the values)."""
    from denki.models.bundle.presets import SIZES

    if cfg.size not in SIZES:
        raise DenkiError(f"unknown size {cfg.size!r}; choose one of {sorted(SIZES)}")
    if cfg.objective is None:
        cfg = dataclasses.replace(cfg, objective=default_objective(cfg.size, cfg.init_from))
    if cfg.objective not in OBJECTIVES:
        raise DenkiError(f"unknown objective {cfg.objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if cfg.mask_prob is None:
        cfg = dataclasses.replace(cfg, mask_prob=default_mask_prob(cfg.size, cfg.objective, cfg.init_from))
    if not 0 < cfg.mask_prob < 1:
        raise DenkiError("--mask-prob must be in (0, 1)")
    if cfg.dropout is not None and not 0 <= cfg.dropout < 1:
        raise DenkiError("--dropout must be in [0, 1)")
    return cfg


def resolve_rtd_options(cfg: PretrainConfig, planned: int | None) -> PretrainConfig:
    """Resolve --cls-contrast and --gen-temperature (once, here: identity, model and bundle all see the values) and
    refuse the RTD options on an objective without a discriminator."""
    if cfg.cls_contrast is None:
        cfg = dataclasses.replace(cfg, cls_contrast=default_cls_contrast(cfg.size, cfg.objective, planned))
    if cfg.gen_temperature is None:
        cfg = dataclasses.replace(cfg, gen_temperature=default_gen_temperature(cfg.size, cfg.objective, planned))
    rtd = cfg.objective in RTD_OBJECTIVES
    if cfg.disc_skip_special and not rtd:
        raise DenkiError("--disc-skip-special goes with a replaced-token-detection objective (electra*)")
    if cfg.cls_contrast and not rtd:
        raise DenkiError("--cls-contrast goes with a replaced-token-detection objective (electra*): it pairs the "
                         "generator's and the discriminator's views")
    if not (cfg.cls_contrast >= 0 and math.isfinite(cfg.cls_contrast)):
        raise DenkiError(f"--cls-contrast {cfg.cls_contrast}: give a weight ≥ 0")
    if not (cfg.gen_temperature > 0 and math.isfinite(cfg.gen_temperature)):
        raise DenkiError(f"--gen-temperature {cfg.gen_temperature}: give a temperature > 0")
    if cfg.gen_temperature != 1.0 and not rtd:
        raise DenkiError("--gen-temperature goes with a replaced-token-detection objective (electra*): MLM samples "
                         "nothing")
    return cfg
