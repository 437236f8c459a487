"""Continued pretraining (``denki pretrain --init-from BUNDLE``): the models a run starts from when it does not
start from random weights.

The bundle is a ``pretrained`` bundle — from ``denki import`` (a public ELECTRA/BERT) or from an earlier
``denki pretrain``. Its tokenizer is the run's tokenizer; its ``config.json`` is the run's architecture.

* **RTD** (``electra`` / ``electra15``; ELECTRA bundles only — a BERT has no discriminator to continue):
  the discriminator is the bundle's ``ElectraForPreTraining`` (its RTD head kept; a bundle without one, e.g.
  ``ElectraModel`` or an MLM ``ElectraForMaskedLM``, gets a new head with the prior-bias init). The generator:

  - ``bundle`` (default when the bundle has ``generator/``, e.g. ``denki import --generator``): that generator;
  - ``copy`` (default otherwise): an ``ElectraForMaskedLM`` of the discriminator's width and its bottom
    ``gen_layers`` layers (default ``max(1, L // 4)``), those layers and the embeddings copied from the
    checkpoint; only the small MLM head (hidden → embedding + LayerNorm; the output layer is tied to the token
    embeddings) is new — and taken from the bundle too when it is an MLM (``ElectraForMaskedLM``). Why: a
    random generator proposes random tokens, which a trained discriminator tells apart trivially, so the first
    steps of continued RTD would teach it little and pull it towards an easy task; the copied layers already
    model the language, so the generator gives plausible replacements after a few steps (measured in
    docs/import.md). Cost: a full-width generator of ``L/4`` layers costs about ``1/4`` of the discriminator per
    step (the paper's ¼-width generator about 1/16); the FLOPs counter counts it;
  - ``random``: a fresh generator as a fresh run builds it (``gen_size`` × the discriminator's width, same depth,
    random layers); only the embeddings come from the checkpoint (shared, or copied for ``separate``).

* **MLM**: ``ElectraForMaskedLM`` (an ELECTRA bundle; the MLM head is new unless the bundle is an MLM) or the
  BERT's own ``BertForPreTraining`` / ``BertForMaskedLM`` with its pretrained MLM head (a ``BertModel`` gets
  ``BertForMaskedLM`` with a new head).

:func:`model_config_for` records the classes and configs in each checkpoint, so :func:`rebuild` makes the same
modules again (for a resume and for ``denki pretrain export``), after which the checkpoint's tensors fill them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from denki.models.io.errors import DenkiError

GEN_INITS = ("bundle", "copy", "random")


def bundle_architecture(bundle: Path) -> tuple[str, str]:
    """``(model_type, architecture)`` from the bundle's ``config.json``."""
    cfg = json.loads((bundle / "config.json").read_text(encoding="utf-8"))
    arch = (cfg.get("architectures") or [""])[0]
    return cfg.get("model_type", ""), arch


def resolve_init(init_from: str | os.PathLike) -> tuple[Path, dict]:
    """The verified ``pretrained`` bundle and its identity record ``{"path", "sha256" (model.safetensors),
    "kind", "architecture", "flops" (pretraining FLOPs already in it, when recorded), "source"}``."""
    from denki.models.bundle.format import resolve_bundle, verify_bundle

    bundle = resolve_bundle(init_from)
    manifest = verify_bundle(bundle, kinds=("pretrained",))
    if "model.safetensors" not in manifest.get("files", {}):
        raise DenkiError(f"{bundle}: no model.safetensors (denki loads weights only from safetensors)")
    model_type, arch = bundle_architecture(bundle)
    src = manifest.get("source") or {}
    # a continued run's bundle records the total (its checkpoint's included); an imported one only when it came
    # from a denki bundle (hub checkpoints: unknown, None)
    if src.get("init_from"):
        flops = src.get("total_flops")
    elif src.get("init") == "import":
        flops = src.get("import", {}).get("pretraining_flops")
    else:
        flops = (manifest.get("metrics") or {}).get("flops")
    return bundle, {"path": str(bundle.resolve()), "sha256": manifest["files"]["model.safetensors"],
                    "model_type": model_type, "architecture": arch, "flops": flops,
                    "origin": src.get("import", {}).get("from") if src.get("init") == "import" else
                    {"objective": src.get("objective"), "corpus": src.get("corpus")}}


def _quiet_load(cls, path, **kw):
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # new heads are expected and reported by the caller
    try:
        model, info = cls.from_pretrained(str(path), use_safetensors=True, local_files_only=True,
                                          output_loading_info=True, **kw)
    finally:
        hf_logging.set_verbosity(verbosity)
    return model, sorted(info.get("missing_keys") or [])


def _dropout_kw(dropout: float | None) -> dict:
    return {} if dropout is None else {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}


def default_gen_layers(n_layers: int) -> int:
    return max(1, n_layers // 4)


def build_from_bundle(objective: str, bundle: Path, *, gen_init: str | None = None, gen_layers: int | None = None,
                      gen_size: float = 0.25, disc_weight: float = 50.0, mask_prob: float = 0.15,
                      share_embeddings: bool = True, dropout: float | None = None):
    """The pretrainer of a continued run → ``(pretrainer, record)``; ``record`` says what was loaded and what is
    new (``gen_init``, ``gen_layers``, ``new_parameters``)."""
    import transformers

    from denki.models.bundle.importer import generator_of
    from denki.models.bundle.presets import generator_config

    from .model import RTD_OBJECTIVES, MLMPretrainer, RTDPretrainer, rtd_options

    model_type, arch = bundle_architecture(bundle)
    drop = _dropout_kw(dropout)
    record: dict = {"architecture": arch}
    if objective in RTD_OBJECTIVES:
        if model_type != "electra":
            raise DenkiError(f"{bundle}: a {arch} has no replaced-token-detection discriminator; continue it with "
                             "--objective mlm (RTD needs an ELECTRA bundle)")
        disc, missing = _quiet_load(transformers.ElectraForPreTraining, bundle, **drop)
        new_head = any(k.startswith("discriminator_predictions.") for k in missing)
        record["new_parameters"] = {"discriminator": missing}
        g_dir = generator_of(bundle)
        if gen_init is None:
            gen_init = "bundle" if g_dir is not None else "copy"
        if gen_init not in GEN_INITS:
            raise DenkiError(f"--gen-init {gen_init!r}: choose one of {', '.join(GEN_INITS)}")
        if gen_init == "bundle":
            if g_dir is None:
                raise DenkiError(f"{bundle}: --gen-init bundle, but the bundle has no generator/ (import one with "
                                 "`denki import --generator`, or use --gen-init copy|random)")
            gen, gmissing = _quiet_load(transformers.ElectraForMaskedLM, g_dir, **drop)
        elif gen_init == "copy":
            n = int(gen_layers or default_gen_layers(disc.config.num_hidden_layers))
            if not 1 <= n <= disc.config.num_hidden_layers:
                raise DenkiError(f"--gen-layers {n}: choose 1..{disc.config.num_hidden_layers} (the "
                                 "discriminator's depth)")
            # from_pretrained with fewer layers loads the embeddings and the bottom n layers (and an MLM
            # bundle's head); the upper layers' tensors are simply not used
            gen, gmissing = _quiet_load(transformers.ElectraForMaskedLM, bundle, num_hidden_layers=n, **drop)
            record["gen_layers"] = n
        else:
            gcfg = generator_config(disc.config, gen_size)
            gen = transformers.ElectraForMaskedLM(gcfg)
            # the checkpoint's embeddings (same embedding_size): shared below, or copied for "separate"
            gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
            gmissing = sorted(k for k in gen.state_dict() if not k.startswith("electra.embeddings."))
            record["gen_size"] = gen_size
        if gen.config.vocab_size != disc.config.vocab_size:
            raise DenkiError(f"{bundle}: generator vocabulary {gen.config.vocab_size} ≠ discriminator's "
                             f"{disc.config.vocab_size}")
        gen.config.architectures = ["ElectraForMaskedLM"]
        record["gen_init"] = gen_init
        record["new_parameters"]["generator"] = gmissing
        model = RTDPretrainer(disc.config, gen.config, disc_weight, **rtd_options(objective),
                              prior=mask_prob, share_embeddings=share_embeddings, discriminator=disc, generator=gen,
                              init_prior=new_head)
        return model, record
    if objective != "mlm":
        raise ValueError(objective)
    if model_type == "electra":
        cls = transformers.ElectraForMaskedLM
    elif model_type == "bert":
        cls = transformers.BertForPreTraining if arch == "BertForPreTraining" else transformers.BertForMaskedLM
    else:
        raise DenkiError(f"{bundle}: model_type {model_type!r}; continued pretraining supports electra and bert")
    mlm, missing = _quiet_load(cls, bundle, **drop)
    record["new_parameters"] = {"mlm": missing}
    return MLMPretrainer(mlm.config, model=mlm), record


def model_config_for(pretrainer, objective: str, disc_weight: float, share_embeddings: bool) -> dict:
    """What a checkpoint stores to rebuild the modules: configs and class names (the tensors come from it)."""
    if objective == "mlm":
        m = pretrainer.mlm
        return {"disc": m.config.to_dict(), "gen": None, "objective": objective, "disc_weight": disc_weight,
                "share_embeddings": share_embeddings, "classes": {"mlm": type(m).__name__}}
    return {"disc": pretrainer.discriminator.config.to_dict(), "gen": pretrainer.generator.config.to_dict(),
            "objective": objective, "disc_weight": disc_weight, "share_embeddings": share_embeddings,
            "classes": {"disc": "ElectraForPreTraining", "gen": "ElectraForMaskedLM"}}


def config_from_dict(d: dict):
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[d.get("model_type", "electra")](**{k: v for k, v in d.items() if k != "model_type"})


def rebuild(model_config: dict):
    """Empty modules of the shape a checkpoint was saved from (random values; the checkpoint overwrites all)."""
    import transformers

    from .model import MLMPretrainer, RTDPretrainer, rtd_options

    disc_cfg = config_from_dict(model_config["disc"])
    classes = model_config.get("classes") or {}
    if model_config["objective"] == "mlm":
        mlm = getattr(transformers, classes.get("mlm", "ElectraForMaskedLM"))(disc_cfg)
        return MLMPretrainer(disc_cfg, model=mlm)
    gen_cfg = config_from_dict(model_config["gen"])
    return RTDPretrainer(disc_cfg, gen_cfg, model_config.get("disc_weight", 50.0),
                         **rtd_options(model_config["objective"]),
                         share_embeddings=model_config.get("share_embeddings", True))
