"""The end of a pretraining run: ``summary.json`` (what was spent, how fast, the last metrics and the health
probe's verdict), ``curves.png`` and the exported ``bundle/`` with its provenance."""
from __future__ import annotations

import os
from pathlib import Path

from denki.models.io.fileio import atomic_write_json
from denki.models.training.pretrain_health import verdict

from . import train_state
from .runlog import bundle_metrics, last_diagnostics, read_metrics
from .settings import RTD_OBJECTIVES, PretrainConfig
from .speed import mfu


def speed(flops: float, tokens: int, seconds: float, peak: float | None, peak_source: str) -> dict:
    """A session's speed: tokens/s, FLOP/s and MFU against the device's ``peak``."""
    fs = flops / max(seconds, 1e-9)
    return {"tokens_per_s": tokens / max(seconds, 1e-9), "flops_per_s": fs, "peak_flops": peak,
            "peak_source": peak_source, "mfu": mfu(fs, peak), "seconds": seconds}


def build_summary(cfg: PretrainConfig, out: Path, loop, *, world: int, init_rec: dict | None, main: bool) -> dict:
    """``summary.json``'s content after the last step of ``loop`` (a :class:`~pretrain.loop.TrainingLoop`).
    ``size`` is the preset's name, or ``init`` for a run continued with --init-from (the bundle's architecture)."""
    import time

    p, start = loop.progress, loop.start
    session = time.perf_counter() - loop.t_start
    rows = read_metrics(out) if main else []
    init_flops = init_rec.get("flops") if init_rec else None
    return {"finished": True, "objective": cfg.objective, "size": "init" if init_rec else cfg.size,
            "steps": p.step, "tokens": p.tokens, "flops": p.flops, "max_flops": cfg.max_flops,
            "wall_s": p.wall_before + session, "world_size": world, "precision": loop.precision,
            "micro_batch": loop.micro,
            # this session's speed (a resumed run: since the resume), against the device's peak
            "speed": speed(p.flops - start.flops, p.tokens - start.tokens, time.perf_counter() - loop.t_start,
                           loop.peak, loop.peak_source),
            "init_from": init_rec, "init_flops": init_flops,
            # pretraining FLOPs in the model, the checkpoint's included (unknown for an imported checkpoint)
            "total_flops": (p.flops + init_flops) if init_flops is not None else (None if init_rec else p.flops),
            "device": str(loop.device), "final": rows[-1] if rows else loop.last_row,
            "bundle": str(out / "bundle") if cfg.export else None,
            "checkpoint": str(train_state.latest_train_state(out))}


def finish_run(cfg: PretrainConfig, out: Path, summary: dict, loop, *, model, model_config: dict, shas: list[str],
               tok_fp: str, init_record: dict | None) -> None:
    """Rank 0: the health verdict (printed as a WARNING when it fails), ``curves.png``, the bundle (``--no-export``:
    none) and ``summary.json``, written last."""
    rows = read_metrics(out)
    summary["diagnostics"] = loop.last_diag or last_diagnostics(rows)
    warning = verdict(summary["diagnostics"])
    summary["health_warning"] = warning
    if warning:
        print(f"pretrain: WARNING: {warning}", flush=True)
    plot_curves(rows, out / "curves.png", title=f"{cfg.objective} {cfg.size}: {out.name}")
    if cfg.export:
        from .export import save_pretrained_bundle

        gen = model.generator if summary["init_from"] and cfg.objective in RTD_OBJECTIVES else None
        save_pretrained_bundle(model.export_model, out / "tokenizer", out / "bundle",
                               source=bundle_source(cfg, shas, tok_fp, summary, init_record),
                               metrics=bundle_metrics(summary), dropout=model_config.get("export_dropout"),
                               generator=gen)
    atomic_write_json(out / "summary.json", summary)


def bundle_source(cfg: PretrainConfig, shas, tok_fp, summary, init_record: dict | None = None) -> dict:
    """The bundle manifest's ``source``: how the weights were made (settings, corpus hashes, FLOPs, the bundle a
    continued run started from)."""
    from denki.models.bundle.format import command_line

    rtd = cfg.objective in RTD_OBJECTIVES
    init = {}
    if summary.get("init_from"):
        init = {"init_from": {**summary["init_from"], **(init_record or {})}, "init_flops": summary.get("init_flops"),
                "total_flops": summary.get("total_flops")}
    return {**init, "objective": cfg.objective, "size": summary.get("size", cfg.size),
            "corpus": [{"path": str(p), "sha256": s} for p, s in zip(cfg.corpus, shas)],
            "tokenizer": tok_fp, "seed": cfg.seed, "steps": summary["steps"], "tokens": summary["tokens"],
            "flops": summary["flops"], "max_flops": cfg.max_flops, "batch_size": cfg.batch_size,
            "seq_len": cfg.seq_len, "mask_prob": cfg.mask_prob,
            "gen_size": cfg.gen_size if rtd else None,
            "disc_weight": cfg.disc_weight if rtd else None,
            "embeddings": ("shared" if cfg.share_embeddings else "separate") if rtd else None,
            "disc_skip_special": bool(cfg.disc_skip_special) if rtd else None,
            "adam_eps": cfg.adam_eps, "cls_contrast": cfg.cls_contrast or None,
            "gen_temperature": cfg.gen_temperature if rtd else None,
            "pretrain_dropout": cfg.dropout, "command": command_line()}


def plot_curves(rows: list[dict], path: str | os.PathLike, title: str = "") -> None:
    """``curves.png``: losses, generator accuracy, replace rate and the discriminator's P/R/accuracy (and the
    probe's AUC) against training FLOPs."""
    from denki.models.io.plotting import setup_matplotlib

    plt = setup_matplotlib()

    if not rows:
        return
    x = [r["flops"] for r in rows]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    ax = axes[0][0]
    ax.plot(x, [r["mlm_loss"] for r in rows], label="mlm_loss")
    if rows[-1].get("disc_loss") is not None:
        ax.plot(x, [r["disc_loss"] for r in rows], label="disc_loss")
    ax.set_yscale("log")
    ax.set_title("loss")
    ax = axes[0][1]
    ax.plot(x, [r["gen_acc"] for r in rows], label="gen_acc (masked positions)")
    ax.set_title("generator / MLM accuracy")
    ax = axes[1][0]
    if rows[-1].get("replace_rate") is not None:
        ax.plot(x, [r["replace_rate"] for r in rows], label="replace_rate")
    ax.set_title("replace rate (of non-pad tokens)")
    ax = axes[1][1]
    if rows[-1].get("disc_precision") is not None:
        for k in ("disc_precision", "disc_recall", "disc_acc"):
            ax.plot(x, [r[k] for r in rows], label=k)
        # the trivial "everything is original" answer, for scale
        ax.plot(x, [1 - r["replace_rate"] for r in rows], "k:", label="acc of 'all original'")
        probed = [r for r in rows if r.get("disc_auc") is not None]
        if probed:
            ax.plot([r["flops"] for r in probed], [r["disc_auc"] for r in probed], "o-", label="AUC (probe)")
    ax.set_title("discriminator (replaced = positive)")
    for a in axes.flat:
        a.set_xlabel("training FLOPs")
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8)
        a.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    tmp = Path(path).with_name(Path(path).name + ".partial.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
