"""Export the discriminator (ELECTRA) or the encoder (MLM baseline) as a ``pretrained`` bundle.

* ELECTRA → ``ElectraForPreTraining`` (keeps the replaced-token-detection head; ``architectures`` =
  ``["ElectraForPreTraining"]``).
* MLM → ``ElectraForMaskedLM`` of the discriminator's size (``architectures`` = ``["ElectraForMaskedLM"]``).

Both load with ``transformers.AutoModel.from_pretrained(BUNDLE)`` (→ ``ElectraModel``) and
``ElectraForSequenceClassification.from_pretrained(BUNDLE)`` (its ``electra.*`` weights; the head is new).
The generator is not exported at the end of a run from scratch (it is a training device only), but continued RTD
pretraining (``--init-from``) keeps it in ``generator/`` (as ``denki import --generator`` does), so that a further
continued run can start from it too; ``denki pretrain export --generator`` keeps it for any RTD checkpoint (the
shipped general checkpoints carry theirs, so that users can continue RTD on their own corpus).
"""
from __future__ import annotations

import os
from pathlib import Path

from denki.models.io.errors import DenkiError


def save_pretrained_bundle(model, tokenizer_dir, out_dir, *, source: dict, metrics: dict, dropout: dict | None = None,
                  generator=None) -> dict:
    """``model``: the HF model to export (``pretrainer.export_model``). ``dropout``: the config values the bundle
    carries (default: the fine-tuning preset's; a continued run passes its checkpoint's own). ``generator``: an
    ``ElectraForMaskedLM`` saved in ``generator/`` (continued RTD). Returns the manifest."""
    from denki.models.bundle.importer import GENERATOR_DIR
    from denki.models.bundle.presets import FINETUNE_DROPOUT
    from denki.models.bundle.pytorch import save_bundle

    model.config.architectures = [type(model).__name__]
    # the bundle is a starting point for fine-tuning: it carries the fine-tuning dropout, not the (maybe lower)
    # one used in pretraining (`denki pretrain --dropout`)
    dropout = {k: v for k, v in (dropout or {}).items() if v is not None}
    for m in (model, generator) if generator is not None else (model,):
        m.config.hidden_dropout_prob = dropout.get("hidden_dropout_prob", FINETUNE_DROPOUT)
        m.config.attention_probs_dropout_prob = dropout.get("attention_probs_dropout_prob", FINETUNE_DROPOUT)
    if generator is not None:
        generator.config.architectures = [type(generator).__name__]
    return save_bundle(model, tokenizer_dir, out_dir, "pretrained", source=source, metrics=metrics,
                       submodels={GENERATOR_DIR: generator} if generator is not None else None)


def _resolve_checkpoint(path: Path) -> Path:
    from .train_state import STATE, latest_train_state

    if (path / STATE).is_file():
        return path
    last = latest_train_state(path)
    if last is None:
        raise DenkiError(f"{path}: neither a checkpoint (no state.json) nor a run directory with checkpoints")
    return last


def load_pretrainer(checkpoint: str | os.PathLike):
    """Rebuild the whole pretrainer (generator, discriminator, any extra heads) from a checkpoint (a ``step-…``
    directory, or a run directory → its newest checkpoint): ``(model, checkpoint_dir, state)``."""
    from transformers import ElectraConfig

    from .train_state import load_train_state, read_state
    from .model import build_pretrainer

    ckpt = _resolve_checkpoint(Path(checkpoint))
    state = read_state(ckpt)
    mc = state["model_config"]
    if mc.get("classes"):  # continued pretraining: the classes and configs of the bundle it started from
        from .init_from import rebuild

        model = rebuild(mc)
    else:
        disc_cfg = ElectraConfig(**{k: v for k, v in mc["disc"].items() if k != "model_type"})
        gen_cfg = ElectraConfig(**{k: v for k, v in mc["gen"].items() if k != "model_type"}) if mc["gen"] else None
        model = build_pretrainer(mc["objective"], disc_cfg, gen_cfg, mc.get("disc_weight", 50.0),
                                 share_embeddings=mc.get("share_embeddings", True))
    cls_contrast = state.get("identity", {}).get("cls_contrast")
    if cls_contrast:  # --cls-contrast: its projections are in the checkpoint (not in the bundle)
        model.enable_cls_contrast(cls_contrast)
    if hasattr(model, "gen_temperature"):  # --gen-temperature: a training setting, kept in the run's identity
        model.gen_temperature = float(state.get("identity", {}).get("gen_temperature") or 1.0)
    load_train_state(ckpt, model, restore_rng_states=False)
    return model, ckpt, state


def export_from_checkpoint(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, *,
                           generator: bool | None = None) -> dict:
    """Rebuild the model from a checkpoint (a ``step-…`` directory, or a run directory → its newest checkpoint)
    and export it. The tokenizer comes from the run directory's ``tokenizer/`` copy. ``generator``: keep an RTD
    run's generator in ``generator/`` (None: only for a continued run, as at the end of training)."""
    import json

    from .runlog import bundle_metrics, last_diagnostics, read_metrics

    model, ckpt, state = load_pretrainer(checkpoint)
    run_dir = ckpt.parent.parent
    mc = state["model_config"]
    ident = state.get("identity", {})
    tok_dir = run_dir / "tokenizer"
    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8")) if (run_dir / "run.json").is_file() else {}
    if not (tok_dir / "vocab.txt").is_file():
        tok_dir = Path(run.get("tokenizer_dir", ""))
    rows = [r for r in read_metrics(run_dir) if r["step"] <= state["step"]]
    summary = {"steps": state["step"], "tokens": state["tokens"], "flops": state["flops"], "wall_s": state["wall_s"],
               "final": rows[-1] if rows else {}, "diagnostics": last_diagnostics(rows)}
    from denki.models.bundle.format import command_line

    init = run.get("init_from")
    init_keys = {"init_from": init, "init_flops": init.get("flops"),
                 "total_flops": state["flops"] + init["flops"] if init.get("flops") is not None else None} \
        if init else {}
    source = {**init_keys, "objective": mc["objective"], "size": ident.get("size") or ("init" if init else None),
              "checkpoint": str(ckpt),
              "corpus": [{"path": p, "sha256": s} for p, s in zip(run.get("corpus", []),
                                                                  ident.get("corpus_sha256", []))],
              "tokenizer": ident.get("tokenizer"), "seed": ident.get("seed"), "steps": state["step"],
              "tokens": state["tokens"], "flops": state["flops"], "max_flops": ident.get("max_flops"),
              **{k: ident.get(k) for k in ("disc_skip_special", "adam_eps", "cls_contrast", "gen_temperature")
                 if ident.get(k)},
              "command": command_line()}
    rtd = mc["objective"] != "mlm"
    if generator and not rtd:
        raise DenkiError(f"{ckpt}: an MLM run has no generator to export")
    gen = model.generator if rtd and (generator or (generator is None and init)) else None
    return save_pretrained_bundle(model.export_model, tok_dir, out_dir, source=source, metrics=bundle_metrics(summary),
                         dropout=mc.get("export_dropout"), generator=gen)
