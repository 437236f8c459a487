"""The experiment's report: per (model, task) medians over seeds, ELECTRA − MLM judged against seed noise, the
trivial constant-answer reference, collapse flags, and ``report.json`` / ``report.md`` / ``score_vs_flops.png``."""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from denki.models.io.fileio import atomic_write_json, atomic_write_text

from .plan import QA_SPAN_METRIC, ExperimentConfig, Model, TaskSpec, budget_tag

# ------------------------------------------------------------------------------------------------ report
def _pretrain_row(m: Model) -> dict:
    s = json.loads((m.run_dir / "summary.json").read_text(encoding="utf-8"))
    f = s.get("final") or {}
    return {"model": m.id, "objective": m.objective, "budget": m.budget, "flops": s["flops"], "steps": s["steps"],
            "tokens": s["tokens"], "wall_s": s["wall_s"], "gen_acc": f.get("gen_acc"),
            "mlm_loss": f.get("mlm_loss"), "disc_loss": f.get("disc_loss"),
            "replace_rate": f.get("replace_rate"), "disc_acc": f.get("disc_acc"),
            "all_original_acc": None if f.get("replace_rate") is None else 1 - f["replace_rate"],
            "disc_precision": f.get("disc_precision"), "disc_recall": f.get("disc_recall")}


def _stats(vals: list[float]) -> dict:
    a = np.asarray(vals, dtype=float)
    return {"n": len(a), "median": float(np.median(a)), "min": float(a.min()), "max": float(a.max()),
            "mean": float(a.mean()), "sd": float(a.std(ddof=1)) if len(a) > 1 else None,
            "values": [float(x) for x in a]}


def compare(e: dict, m: dict) -> dict:
    """ELECTRA − MLM on the median, judged against seed noise (pooled per-seed SD; 1 seed → unknown)."""
    diff = e["median"] - m["median"]
    sds = [x["sd"] for x in (e, m) if x["sd"] is not None]
    noise = math.sqrt(sum(s * s for s in sds) / len(sds)) if len(sds) == 2 else None
    if noise is None:
        verdict = "ELECTRA ahead" if diff > 0 else ("MLM ahead" if diff < 0 else "tie")
        verdict += " (1 seed: seed noise not measured)"
    elif abs(diff) <= 2 * noise:
        verdict = "within seed noise"
    else:
        verdict = "ELECTRA wins" if diff > 0 else "MLM wins"
    return {"electra_minus_mlm": diff, "seed_sd_pooled": noise,
            "diff_over_sd": (diff / noise) if noise else None, "verdict": verdict}


def trivial_reference(task: TaskSpec) -> dict:
    """The score of a constant answer on the (subsampled) dev set — what a model that learnt nothing gets:
    the train-majority label (classification macro-F1), or "no answer" everywhere (SQuAD 2.0 F1)."""
    rows = [json.loads(x) for x in Path(task.dev).read_text(encoding="utf-8").splitlines() if x.strip()]
    if task.is_qa:
        no_ans = sum(1 for r in rows if r.get("is_impossible"))
        return {"answer": "always no answer", "score": 100.0 * no_ans / max(1, len(rows))}
    train = [json.loads(x)[task.label_field]
             for x in Path(task.train).read_text(encoding="utf-8").splitlines() if x.strip()]
    labels = sorted(set(train))
    major = max(labels, key=train.count)
    prec = sum(1 for r in rows if r[task.label_field] == major) / max(1, len(rows))
    f1 = 2 * prec / (prec + 1) if prec else 0.0
    return {"answer": f"always {major!r}", "score": f1 / len(labels)}


def build_report(cfg: ExperimentConfig, models: list[Model], tasks: list[TaskSpec], results: list[dict],
                 probes: dict) -> dict:
    from denki.models.bundle.format import command_line

    by = {}
    for r in results:
        by.setdefault((r["model"], r["task"]), []).append(r)
    pre = {m.id: _pretrain_row(m) for m in models if m.run_dir is not None}
    for mid, row in pre.items():
        row["cls_probe"] = probes.get(mid)
    table = {}
    # QA gets a second table: the best non-null span's F1 on answerable questions (null decision off), the
    # number that still separates encoders while every tiny model answers "no answer" to everything
    views = [(t.name, t, t.metric) for t in tasks]
    views += [(f"{t.name} (span F1)", t, QA_SPAN_METRIC) for t in tasks if t.is_qa]
    for name, t, metric in views:
        cells = {}
        for m in models:
            rs = [r for r in by.get((m.id, t.name), []) if r.get(metric) is not None]
            if rs:
                cells[m.id] = {**_stats([r[metric] for r in rs]), "objective": m.objective, "budget": m.budget,
                               "pretrain_flops": pre[m.id]["flops"] if m.id in pre else 0.0}
        comps = {}
        for b in cfg.budgets:
            e, mm = cells.get(f"electra-{budget_tag(b)}"), cells.get(f"mlm-{budget_tag(b)}")
            if e and mm:
                comps[budget_tag(b)] = compare(e, mm)
        abl = {}
        for b in cfg.budgets:
            e, e15 = cells.get(f"electra-{budget_tag(b)}"), cells.get(f"electra15-{budget_tag(b)}")
            if e and e15:
                abl[budget_tag(b)] = compare(e, e15)
        table[name] = {"kind": t.kind, "metric": metric, "cells": cells, "electra_vs_mlm": comps,
                       "electra_vs_electra15": abl,
                       "trivial": trivial_reference(t) if metric == t.metric else None}
    planned = len(models) * len(tasks) * cfg.seeds
    return {"kind": "experiment-electra-vs-mlm", "command": command_line(), "size": cfg.size,
            "finetune_runs_done": len(results), "finetune_runs_planned": planned,
            "complete": len(results) == planned,
            "budgets": cfg.budgets, "seeds": cfg.seeds, "corpus": list(cfg.corpus), "tokenizer": cfg.tokenizer,
            "settings": {k: v for k, v in asdict(cfg).items() if k not in ("tasks", "extra")},
            "tasks": [asdict(t) for t in tasks], "pretraining": list(pre.values()),
            "random_init_probe": probes.get("random"), "results": table, "per_seed": results,
            "ablation_electra_15": ("included" if cfg.electra15 else
                                    "not run (add --electra15 to pretrain it at every budget)"),
            "plot": "score_vs_flops.png"}


LABELS = {"electra": "ELECTRA", "mlm": "MLM", "electra15": "ELECTRA 15%"}


def plot_score_vs_flops(report: dict, path: Path) -> None:
    """One panel per task: median dev score (bars = min..max over seeds) against pretraining FLOPs, per objective;
    the random-init control as a dashed line."""
    from matplotlib.ticker import NullFormatter

    from denki.models.io.plotting import setup_matplotlib

    plt = setup_matplotlib()

    names = list(report["results"])
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        res = report["results"][name]
        for obj, style in (("electra", "o-"), ("mlm", "s--"), ("electra15", "^-.")):
            cells = sorted((c for c in res["cells"].values() if c["objective"] == obj),
                           key=lambda c: c["pretrain_flops"])
            if not cells:
                continue
            x = [c["pretrain_flops"] for c in cells]
            y = [c["median"] for c in cells]
            err = [[c["median"] - c["min"] for c in cells], [c["max"] - c["median"] for c in cells]]
            ax.errorbar(x, y, yerr=err, fmt=style, capsize=3, label=LABELS[obj])
        rnd = res["cells"].get("random")
        if rnd:
            ax.axhline(rnd["median"], color="gray", ls=":", label="random init")
        if res.get("trivial"):
            ax.axhline(res["trivial"]["score"], color="red", ls=":", lw=1, label="constant answer")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide when the budgets are close
        budgets = report.get("budgets") or []
        if budgets:  # label the budgets themselves: with two close budgets a log axis may show one decade tick
            ax.set_xticks(budgets, [f"{b:.2g}" for b in budgets])
        ax.set_xlabel("pretraining FLOPs")
        ax.set_ylabel(f"dev {res['metric']} (median over seeds)")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"ELECTRA vs MLM ({report['size']}): downstream score vs pretraining compute")
    fig.tight_layout()
    tmp = path.with_name(path.name + ".partial.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def _noise_text(c: dict) -> str:
    if c.get("diff_over_sd") is not None:
        return f"{c['diff_over_sd']:+.1f} seed SDs"
    if c.get("seed_sd_pooled") == 0:
        return "every seed gave the same score"
    return "seed noise not measured"


def _f(v, nd=3) -> str:
    if v is None:
        return "—"
    return f"{v:.{nd}f}"


def collapse_flags(report: dict) -> dict:
    """Per pretrained encoder: has its [CLS] (or every) output collapsed to an input-independent vector?
    Judged against the random-init control (final LayerNorm outputs, so absolute stds compare across models);
    without the control, against fixed floors measured on tiny random-init encoders (CLS ≈ 0.014, tokens ≈ 0.8)."""
    ref = report.get("random_init_probe") or {}
    cls_ref, tok_ref = ref.get("cls_std") or 0.014, ref.get("token_std") or 0.8
    out = {}
    for r in report["pretraining"]:
        p = r.get("cls_probe") or {}
        if p.get("cls_std") is None:
            continue
        out[r["model"]] = {"cls_collapsed": p["cls_std"] < 0.2 * cls_ref,
                           "tokens_collapsed": p["token_std"] < 0.1 * tok_ref}
    return out


def render_markdown(report: dict) -> str:
    """``report.md``: the settings, one table per task, the verdicts, the pretraining diagnostics and the ablation."""
    L = _md_header(report)
    verdicts = []
    for name, res in report["results"].items():
        L += _md_task_table(report, name, res, verdicts)
    L += _md_verdicts(verdicts)
    L += _md_trivial_cells(report)
    L += _md_diagnostics(report)
    L += _md_ablation(report)
    L.append("")
    return "\n".join(L)


def _md_header(report: dict) -> list[str]:
    """Title, command, sizes, budgets, seeds, corpus and the pretraining settings (and a partial report's note)."""
    st = report["settings"]
    L = ["# ELECTRA vs MLM at equal pretraining compute", "",
         f"Command: `{report['command']}`", "",
         f"Size `{report['size']}`, budgets {', '.join(f'{b:.3g}' for b in report['budgets'])} FLOPs, "
         f"{report['seeds']} fine-tuning seed(s) per cell; corpus: {', '.join(f'`{c}`' for c in report['corpus'])}. "
         "Cells: median over seeds (min–max). Fine-tuning uses the [CLS] representation.", "",
         "Pretraining: batch {batch_size} × {seq_len}, lr {lr}, mask rate {mask}, ELECTRA λ {lam}, embeddings {emb}, "
         "dropout {drop}.".format(lam=st.get("disc_weight", 50.0), mask=st.get("mask_prob", 0.15),
                                  batch_size=st.get("batch_size"), seq_len=st.get("seq_len"),
                                  lr=st.get("pretrain_lr") or "per-size default",
                                  emb=st.get("embeddings", "shared"),
                                  drop=st.get("pretrain_dropout") if st.get("pretrain_dropout") is not None
                                  else "0.1"), ""]
    if not report.get("complete", True):
        L += [f"**Partial report: {report['finetune_runs_done']} of {report['finetune_runs_planned']} fine-tuning "
              "runs done (re-run the command to continue).**", ""]
    return L


def _md_task_table(report: dict, name: str, res: dict, verdicts: list) -> list[str]:
    """One task's table: a row per budget (ELECTRA, MLM, [ELECTRA 15%], random init, the difference, seed SD,
    verdict); each budget's comparison is appended to ``verdicts``."""
    has15 = any(c["objective"] == "electra15" for c in res["cells"].values())
    L = [f"## {name} ({res['kind']}, dev {res['metric']})", "",
         "| budget (FLOPs) | ELECTRA | MLM | " + ("ELECTRA 15% | " if has15 else "") +
         "random init | ELECTRA − MLM | seed SD | verdict |",
         "|---|---|---|---|---|---|---|" + ("---|" if has15 else "")]
    rnd = res["cells"].get("random")
    nd = 3 if res["metric"] == "macro_f1" else 1  # macro-F1 in [0, 1]; SQuAD F1 in [0, 100]

    def cell(x):
        return "—" if not x else f"{x['median']:.{nd}f} ({x['min']:.{nd}f}–{x['max']:.{nd}f})"

    for b in report["budgets"]:
        tag = budget_tag(b)
        e, m = res["cells"].get(f"electra-{tag}"), res["cells"].get(f"mlm-{tag}")
        c = res["electra_vs_mlm"].get(tag, {})
        e15 = f"{cell(res['cells'].get(f'electra15-{tag}'))} | " if has15 else ""
        L.append(f"| {b:.3g} | {cell(e)} | {cell(m)} | {e15}{cell(rnd)} | {_f(c.get('electra_minus_mlm'), nd)} | "
                 f"{_f(c.get('seed_sd_pooled'), nd)} | {c.get('verdict', '—')} |")
        if c:
            verdicts.append((name, b, c))
    if res["metric"] == QA_SPAN_METRIC:
        L += ["", "F1 of the best non-null span on the answerable dev questions, as if the model always "
                  "answered (the null decision switched off): it separates encoders even when all of them "
                  "still answer \"no answer\" everywhere and the headline best_f1 equals the no-answer share."]
    if res.get("trivial"):
        L += ["", f"Reference: a constant answer ({res['trivial']['answer']}) scores "
                  f"{res['trivial']['score']:.{3 if res['metric'] == 'macro_f1' else 1}f} on this dev set."]
    L.append("")
    return L


def _md_verdicts(verdicts: list) -> list[str]:
    """"Does ELECTRA win at this scale?": each task × budget comparison and the count of wins."""
    L = ["## Does ELECTRA win at this scale?", ""]
    wins = [v for v in verdicts if v[2]["verdict"] == "ELECTRA wins"]
    losses = [v for v in verdicts if v[2]["verdict"] == "MLM wins"]
    for name, b, c in verdicts:
        noise = _noise_text(c)
        L.append(f"- {name} at {b:.3g} FLOPs: ELECTRA − MLM = {c['electra_minus_mlm']:+.3g} ({noise}) → "
                 f"{c['verdict']}.")
    L += ["", (f"**ELECTRA wins (by more than 2 seed SDs) in {len(wins)} of {len(verdicts)} task×budget "
               f"comparisons; MLM wins in {len(losses)}; the rest are within seed noise or unmeasured.**"), ""]
    return L


def _md_trivial_cells(report: dict) -> list[str]:
    """How many cells are no better than a constant answer."""
    n_cells, n_trivial = 0, 0
    for res in report["results"].values():
        if not res.get("trivial"):
            continue
        tol = 0.01 if res["metric"] == "macro_f1" else 1.0
        for c in res["cells"].values():
            n_cells += 1
            n_trivial += c["median"] <= res["trivial"]["score"] + tol
    if not n_cells:
        return []
    return [f"{n_trivial} of {n_cells} cells (medians) are no better than a constant answer (within 0.01 "
            "macro-F1 / 1 F1 point): " + ("at this scale the comparison says nothing about the objectives "
                                           "beyond that." if n_trivial == n_cells else "see the tables."), ""]


def _md_diagnostics(report: dict) -> list[str]:
    """The plot, the end-of-pretraining diagnostics table (with the [CLS] probe) and what it says."""
    L = ["![score vs FLOPs](score_vs_flops.png)", "",
         "## Replaced-token-detection diagnostics (end of pretraining)", "",
         "gen_acc = generator (ELECTRA) or MLM accuracy on masked positions; replace rate = fraction of non-pad "
         "tokens the generator's sample changed; 'all original' = the discriminator accuracy of always answering "
         "*original*; precision/recall with *replaced* = positive. [CLS] probe: std of the final-layer [CLS] "
         "vector across 64 corpus lines (mean over hidden dims), the same for all token vectors, and their ratio. "
         "These are final-LayerNorm outputs, so the stds compare across models: a collapsed, input-independent "
         "[CLS] (std ≈ 0) gives a CLS classifier nothing to start from. Even a random-init encoder's [CLS] varies "
         "little (the same token at the same position everywhere), so compare with its row.", "",
         "| model | steps | FLOPs | wall s | gen/MLM acc | replace rate | disc acc | 'all original' | disc P | "
         "disc R | [CLS] std | token std | ratio |",
         "|" + "---|" * 13]
    rows = list(report["pretraining"])
    if report.get("random_init_probe"):
        rows.append({"model": "random", "cls_probe": report["random_init_probe"]})
    for r in rows:
        p = r.get("cls_probe") or {}
        L.append(f"| {r['model']} | {r.get('steps', '—')} | "
                 f"{'—' if r.get('flops') is None else format(r['flops'], '.3g')} | "
                 f"{'—' if r.get('wall_s') is None else format(r['wall_s'], '.0f')} | {_f(r.get('gen_acc'))} | "
                 f"{_f(r.get('replace_rate'))} | {_f(r.get('disc_acc'))} | {_f(r.get('all_original_acc'))} | "
                 f"{_f(r.get('disc_precision'))} | {_f(r.get('disc_recall'))} | {_f(p.get('cls_std'), 4)} | "
                 f"{_f(p.get('token_std'), 4)} | {_f(p.get('cls_relative_std'), 4)} |")
    L.append("")
    return L + _md_collapse_notes(report)


def _md_collapse_notes(report: dict) -> list[str]:
    """Plain-words notes on stuck discriminators and collapsed [CLS] / output vectors."""
    L = []
    stuck = [r["model"] for r in report["pretraining"]
             if r.get("disc_recall") is not None and (r["disc_recall"] or 0) < 0.05]
    flags = collapse_flags(report)
    collapsed = [m for m, f in flags.items() if f["cls_collapsed"]]
    all_collapsed = [m for m, f in flags.items() if f["tokens_collapsed"]]
    if stuck:
        L.append(f"At these budgets the discriminator of {', '.join(stuck)} has recall < 5% on replaced tokens: "
                 "it has (nearly) not left the trivial 'everything is original' answer, so replaced-token "
                 "detection has not started to teach it much yet.")
    if collapsed:
        L.append(f"The [CLS] vector of {', '.join(collapsed)} has collapsed: its std across inputs is below a "
                 "fifth of the random-init encoder's, so CLS-based fine-tuning starts from a nearly "
                 "input-independent representation there.")
    if all_collapsed:
        L.append(f"In {', '.join(all_collapsed)} every output vector has collapsed (token std below a tenth of the "
                 "random-init encoder's): the encoder maps all inputs to (almost) the same output, the state a "
                 "discriminator reaches when it answers 'original' everywhere.")
    return L


def _md_ablation(report: dict) -> list[str]:
    """The ELECTRA 15% ablation's comparisons, or a note that it was not run."""
    if report["ablation_electra_15"] != "included":
        return ["", "## Not included", "",
                "- The paper's *ELECTRA 15%* ablation (discriminator loss only on the masked positions; paper Table "
                "5: 82.4 vs 85.0 GLUE): " + report["ablation_electra_15"] + ".", ""]
    L = ["", "## Ablation: ELECTRA 15%", "",
         "The discriminator loss averaged over the masked positions only (paper Table 5: ELECTRA 85.0 vs "
         "ELECTRA 15% 82.4 GLUE, i.e. most of ELECTRA's gain comes from learning from all tokens).", ""]
    for name, res in report["results"].items():
        for tag, c in res.get("electra_vs_electra15", {}).items():
            noise = _noise_text(c)
            verdict = c["verdict"].replace("MLM", "ELECTRA 15%")
            L.append(f"- {name} at {tag} FLOPs: ELECTRA − ELECTRA 15% = {c['electra_minus_mlm']:+.3g} "
                     f"({noise}) → {verdict}.")
    return L


def write_experiment_report(out_dir: Path, report: dict) -> None:
    """``OUT/report.json``, ``OUT/report.md`` and ``OUT/score_vs_flops.png`` (with the collapse flags added)."""
    report["collapse"] = collapse_flags(report)
    plot_score_vs_flops(report, out_dir / "score_vs_flops.png")
    atomic_write_json(out_dir / "report.json", report)
    atomic_write_text(out_dir / "report.md", render_markdown(report))
