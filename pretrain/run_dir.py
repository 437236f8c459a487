"""A pretraining run's directory ``OUT``: the settings that define the run (``run.json``'s identity; a resume with
different ones is refused), the record of the run's start, the metrics log cut back to a resumed state, and a
finished run found again (its bundle re-exported when missing)."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from denki.models.io.errors import DenkiError
from denki.models.io.fileio import atomic_write_json, atomic_write_text

from . import train_state
from .settings import RTD_OBJECTIVES, PretrainConfig

# settings that define a run: changing any of them on resume is an error
IDENTITY_KEYS = ("corpus_sha256", "tokenizer", "size", "objective", "batch_size", "seq_len", "lr", "seed",
                 "mask_prob", "gen_size", "disc_weight", "max_flops", "steps", "warmup_steps", "weight_decay",
                 "world_size", "embeddings", "dropout", "init_from", "gen_init", "gen_layers", "disc_skip_special",
                 "adam_eps", "cls_contrast", "gen_temperature")


def run_identity(cfg: PretrainConfig, shas: list[str], tok_fp: str, world: int, lr: float, warmup: int | None,
                 init: dict | None = None) -> dict:
    """The settings that define the run (:data:`IDENTITY_KEYS`). ``init``: continued pretraining —
    ``{"init_from": {"path", "sha256"}, "gen_init", "gen_layers"}`` (the architecture is the bundle's, so ``size``
    is None); absent keys stay None, so older runs still resume."""
    init = init or {}
    rtd = cfg.objective in RTD_OBJECTIVES
    return {"corpus_sha256": shas, "tokenizer": tok_fp, "size": None if init else cfg.size,
            "objective": cfg.objective, "init_from": init.get("init_from"), "gen_init": init.get("gen_init"),
            "gen_layers": init.get("gen_layers"),
            "batch_size": cfg.batch_size, "seq_len": cfg.seq_len, "lr": lr, "seed": cfg.seed,
            "mask_prob": cfg.mask_prob, "gen_size": cfg.gen_size if rtd else None,
            "disc_weight": cfg.disc_weight if rtd else None,
            "max_flops": cfg.max_flops, "steps": cfg.steps, "warmup_steps": warmup, "weight_decay": cfg.weight_decay,
            "world_size": world,
            # None for the defaults, so that runs made before these settings existed still resume
            "embeddings": None if cfg.share_embeddings or not rtd else "separate",
            "dropout": cfg.dropout,
            "disc_skip_special": True if cfg.disc_skip_special else None,  # RTD only: checked before
            "adam_eps": cfg.adam_eps, "cls_contrast": cfg.cls_contrast or None,
            "gen_temperature": cfg.gen_temperature if cfg.gen_temperature != 1.0 else None}


def check_same_run(out: Path, ident: dict) -> None:
    """Refuse ``out`` when it holds a run with other settings (a resume must repeat them)."""
    p = out / "run.json"
    if not p.is_file():
        return
    prev = json.loads(p.read_text(encoding="utf-8")).get("identity", {})
    diffs = [f"{k}: {prev.get(k)!r} → {ident.get(k)!r}" for k in IDENTITY_KEYS if prev.get(k) != ident.get(k)]
    if diffs:
        raise DenkiError(f"{out} holds a run with different settings ({'; '.join(diffs)}); "
                         "use a new --out directory (or the original settings to resume)")


def write_run_json(out: Path, cfg: PretrainConfig, ident: dict, tok_dir, init_rec: dict | None,
                   precision: str) -> None:
    """``run.json``: the identity, the settings, the tokenizer it was started with, the bundle it continues and the
    resolved precision this (re)start trains and probes at (diagnostics.load_run_probe re-probes at it). Its
    ``config.size`` says ``init`` for a run continued with --init-from (the bundle's architecture; --size is
    ignored), as ``summary.json`` does."""
    out.mkdir(parents=True, exist_ok=True)
    config = asdict(cfg)
    if init_rec:
        config["size"] = "init"
    atomic_write_json(out / "run.json", {"identity": ident, "corpus": [str(p) for p in cfg.corpus],
                                         "tokenizer_dir": str(tok_dir), "config": config,
                                         "init_from": init_rec, "precision": precision})


def truncate_metrics(path: Path, max_step: int) -> None:
    """Drop lines logged after the training state we resume from (they will be logged again)."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line)["step"] <= max_step:
                keep.append(line)
        except (json.JSONDecodeError, KeyError):
            break  # a torn last line from a kill
    atomic_write_text(path, "".join(k + "\n" for k in keep))


def finished_summary(out: Path, cfg: PretrainConfig, main: bool) -> dict | None:
    """The summary of a run in ``out`` that has already finished (its bundle re-exported when missing), else
    None."""
    summary_path = out / "summary.json"
    if not summary_path.is_file():
        return None
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    if not summary.get("finished"):
        return None
    if main:
        _ensure_bundle(out, cfg)
        print(f"pretrain: {out} already finished ({summary['steps']} steps, {summary['flops']:.3g} FLOPs); "
              f"bundle: {summary.get('bundle')}")
    return summary


def _ensure_bundle(out: Path, cfg: PretrainConfig) -> None:
    """A finished run whose bundle is missing or damaged is exported again from its last training state."""
    from denki.models.bundle.format import verify_bundle

    from .export import export_from_checkpoint

    if not cfg.export:
        return
    bundle = out / "bundle"
    try:
        verify_bundle(bundle, kinds=("pretrained",))
        return
    except DenkiError:
        pass
    last = train_state.latest_train_state(out)
    if last is None:
        raise DenkiError(f"{out}: finished run without a checkpoint; cannot re-export the bundle")
    print(f"pretrain: bundle missing or damaged; exporting again from {last}")
    export_from_checkpoint(last, bundle)
