"""``report.json`` + ``report.md`` + PNGs of ``denki finetune qa`` (torch-free): the dev metrics at threshold 0 and
at the tuned null threshold, the seeds, the data, examples of each kind of error and two figures (the null score
difference of answerable vs unanswerable questions; dev F1 against the threshold).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from denki.models.io.fileio import atomic_write_json, atomic_write_text
from denki.models.qa.data import QAExample
from denki.models.qa.metrics import f1_vs_threshold, max_over_golds


def jsonable(x):
    """Replace non-finite floats (``inf`` = "no span at all") by ``None`` and numpy scalars by Python ones."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def golds_of(examples: list[QAExample]) -> dict[str, list[str]]:
    """``{qid: gold answer texts}`` (empty for an unanswerable question), as the metrics take them."""
    return {ex.id: ex.answer_texts for ex in examples}


def error_examples(examples: list[QAExample], results: dict[str, dict], k: int = 8) -> dict[str, list[dict]]:
    """Up to ``k`` of each error kind: wrong span, false no-answer, false answer."""
    out: dict[str, list[dict]] = {"wrong_span": [], "false_no_answer": [], "false_answer": []}
    for ex in examples:
        r = results[ex.id]
        em, f1 = max_over_golds(r["answer"], ex.answer_texts)
        if em:
            continue
        if ex.is_impossible:
            kind = "false_answer"
        elif not r["answer"]:
            kind = "false_no_answer"
        else:
            kind = "wrong_span"
        if len(out[kind]) >= k:
            continue
        a = r["start"] if r["start"] is not None else (ex.answers[0][1] if ex.answers else 0)
        out[kind].append({"id": ex.id, "question": ex.question, "gold": ex.answer_texts, "prediction": r["answer"],
                          "null_score_diff": r["null_score_diff"], "f1": round(100 * f1, 1),
                          "context_excerpt": ex.context[max(0, a - 40):a + 60]})
    return out


def plot_report(out_dir: Path, examples: list[QAExample], results: dict[str, dict], threshold: float) -> list[str]:
    """Two PNGs: histogram of ``null_score_diff`` for HasAns vs NoAns; overall F1 vs threshold."""
    from denki.models.io.plotting import setup_matplotlib

    plt = setup_matplotlib()

    has = [results[e.id]["null_score_diff"] for e in examples if not e.is_impossible]
    no = [results[e.id]["null_score_diff"] for e in examples if e.is_impossible]
    fin = [d for d in has + no if math.isfinite(d)]
    files = []
    if not fin:
        return files
    lo, hi = min(fin), max(fin)
    if hi <= lo:
        hi = lo + 1.0
    bins = np.linspace(lo, hi, 41)
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.hist([d for d in has if math.isfinite(d)], bins=bins, alpha=0.6, label=f"HasAns (n={len(has)})")
    ax.hist([d for d in no if math.isfinite(d)], bins=bins, alpha=0.6, label=f"NoAns (n={len(no)})")
    ax.axvline(threshold, color="k", ls="--", label=f"threshold {threshold:.3f}")
    ax.set_xlabel("null score − best span score  (> threshold ⇒ no answer)")
    ax.set_ylabel("questions")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "score_diff_hist.png", dpi=100)
    plt.close(fig)
    files.append("score_diff_hist.png")
    ts = np.linspace(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo), 121).tolist()
    golds = golds_of(examples)
    f1s = f1_vs_threshold(golds, results, ts)
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.plot(ts, f1s)
    ax.axvline(threshold, color="k", ls="--", label=f"chosen {threshold:.3f}")
    ax.set_xlabel("null threshold")
    ax.set_ylabel("dev F1 (%)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "f1_vs_threshold.png", dpi=100)
    plt.close(fig)
    files.append("f1_vs_threshold.png")
    return files


_METRIC_ROWS = ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "best_exact", "best_f1", "best_f1_thresh",
                "HasAns_span_exact", "HasAns_span_f1", "total", "HasAns_total", "NoAns_total")


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) >= 0.01 or v == 0 else f"{v:.4f}"
    return str(v)


def write_report(out_dir: Path, report: dict, examples: list[QAExample], results: dict[str, dict]) -> None:
    """``report.json`` + ``report.md`` (+ PNGs) in ``out_dir``; ``examples`` / ``results``: the dev questions and
    their predictions at the tuned threshold (for the figures)."""
    thr = report["null_threshold"]
    images = plot_report(out_dir, examples, results, thr)
    if report.get("selective"):
        plot_coverage(report["selective"], out_dir / "coverage.png")
        images.append("coverage.png")
    report["images"] = images
    atomic_write_json(out_dir / "report.json", jsonable(report))
    m_t, m_0 = report["dev_metrics"], report["dev_metrics_threshold0"]
    lines = [f"# QA fine-tuning report — {out_dir.name}", "",
             (f"Pretrained bundle: `{report['source']['pretrained']}`  " if "pretrained" in report["source"] else
              f"Random init ({report['source']['size']}): the control, no pretraining  "),
             f"Train: `{report['data']['train']['path']}` ({report['data']['train']['examples']} questions used), "
             f"dev: `{report['data']['dev']['path']}` ({report['data']['dev']['examples']} questions)  ",
             f"Settings: {json.dumps(report['settings'], ensure_ascii=False)}", "",
             "## Dev metrics (kept seed)", "",
             "The null threshold is tuned on this same dev set (SQuAD 2.0 `best_f1_thresh`, placed in the middle of "
             "the gap between neighbouring score differences), so the tuned column is optimistic by construction; "
             "evaluate on another file for an unbiased number.", "",
             "| metric | threshold 0 (untuned, HF default) | tuned threshold |", "|---|---:|---:|"]
    for k in _METRIC_ROWS:
        lines.append(f"| {k} | {_fmt(m_0.get(k))} | {_fmt(m_t.get(k))} |")
    lines += ["", f"NoAns accuracy (= NoAns_exact) at the tuned threshold: {_fmt(m_t.get('NoAns_exact'))} %.  ",
              f"Chosen null threshold: **{thr:.4f}**, null rule `{report['null_rule']}` (stored in `task.json`); "
              f"margin to the nearest dev score difference {_fmt(report.get('null_threshold_margin'))}, "
              f"{_fmt(report.get('dev_within_0_1_of_threshold'))} of {m_t.get('total')} dev questions within 0.1 "
              "of it (a small margin with many questions near it means decisions flip under int8 or other "
              "rounding).",
              ""]
    kept = next(s for s in report["seeds"] if s["seed"] == report["kept_seed"])
    if len(kept.get("dev_metrics_by_null_rule", {})) > 1:
        lines += ["## Null rule: plain [CLS] score vs answerable head (kept seed, dev)", "",
                  "| rule | best_f1 | best_f1_thresh | f1 @ 0 | HasAns_f1 @ 0 | NoAns_exact @ 0 |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r, mm in kept["dev_metrics_by_null_rule"].items():
            lines.append(f"| {r} | {_fmt(mm['best_f1'])} | {_fmt(mm['best_f1_thresh'])} | {_fmt(mm['f1'])} | "
                         f"{_fmt(mm.get('HasAns_f1'))} | {_fmt(mm.get('NoAns_exact'))} |")
        lines.append("")
    if kept.get("epoch_scores"):
        lines += ["## Dev after each epoch (kept seed; `--eval-each-epoch`)", "",
                  "Scores before the last epoch are mid-schedule (the learning rate has not decayed to 0 yet).", "",
                  "| epoch | step | best_f1 | f1 @ 0 | HasAns_f1 @ 0 | NoAns_f1 @ 0 | null rule |",
                  "|---:|---:|---:|---:|---:|---:|---|"]
        for e in kept["epoch_scores"]:
            lines.append(f"| {e['epoch']} | {e['step']} | {_fmt(e['best_f1'])} | {_fmt(e['f1'])} | "
                         f"{_fmt(e.get('HasAns_f1'))} | {_fmt(e.get('NoAns_f1'))} | {e['null_rule']} |")
        lines.append("")
    if len(report["seeds"]) > 1:
        lines += ["## Seeds", "", "| seed | best_f1 | best_f1_thresh | HasAns_f1 | NoAns_exact | steps | train s |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for s in report["seeds"]:
            mm = s["dev_metrics"]
            lines.append(f"| {s['seed']} | {_fmt(mm['best_f1'])} | {_fmt(mm['best_f1_thresh'])} | "
                         f"{_fmt(mm.get('HasAns_f1'))} | {_fmt(mm.get('NoAns_exact'))} | {s['steps']} | "
                         f"{s['train_seconds']} |")
        lines += ["", f"Kept seed (median best_f1): {report['kept_seed']}; best_f1 mean ± sd over seeds: "
                      f"{report['best_f1_mean']:.2f} ± {report['best_f1_sd']:.2f}", ""]
    sel = report.get("selective")
    if sel:
        from denki.models.qa.selective import format_rows

        lines += ["## Selective answering (dev, kept seed)", "",
                  "Answers kept by falling `confidence` (a calibrated probability that the answer is right: "
                  "character F1 ≥ 0.5, a 「回答なし」 right on an unanswerable question). The calibration and any "
                  "`min_confidence` are fitted on these same questions, so the table is optimistic: `denki evaluate "
                  "qa` on another file gives the unbiased one.", "", *format_rows(sel), ""]
    fs = report["features"]["train"]
    rt = fs["gold_span_roundtrip"]
    lines += ["## Data", "",
              f"- train windows: {fs['windows']} ({fs['windows_with_answer']} contain their answer); gold token spans "
              f"decoded from offsets: {rt['exact']} exact, {rt['superstring']} superstrings (a token straddles the "
              f"answer boundary), {rt['other']} other; answerable questions whose answer no window holds "
              f"whole: {fs['answerable_without_aligned_window']}",
              f"- skipped: train {len(report['skipped']['train'])}, dev {len(report['skipped']['dev'])} "
              "(listed in report.json `skipped`)", ""]
    for kind, title in (("wrong_span", "Wrong span"), ("false_no_answer", "False no-answer"),
                        ("false_answer", "False answer (question is unanswerable)")):
        errs = report["errors"][kind]
        lines += [f"## {title} ({len(errs)} shown)", ""]
        for e in errs:
            lines.append(f"- `{e['id']}` Q: {e['question']} — gold: {e['gold'] or '(none)'} — predicted: "
                         f"{e['prediction']!r} (diff {_fmt(e['null_score_diff'])})")
        lines.append("")
    for img in images:
        lines += [f"![{img}]({img})", ""]
    atomic_write_text(out_dir / "report.md", "\n".join(lines))


def plot_coverage(report: dict, path) -> None:
    """Precision (right; exact match) against coverage, with the operating point."""
    from denki.models.io.plotting import setup_matplotlib

    plt = setup_matplotlib()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    ax.plot(report["curve"]["coverage"], report["curve"]["accuracy"], color="tab:blue", label="right (F1 ≥ 0.5)")
    ax.plot(report["curve_exact"]["coverage"], report["curve_exact"]["accuracy"], color="tab:green", ls="--",
            label="exact match")
    op = report.get("operating_point")
    if op and op["right"] is not None:
        ax.scatter([op["coverage"]], [op["right"]], color="tab:red", zorder=3,
                   label=f"min_confidence {op['min_confidence']:.3f}")
    ax.set_xlabel("coverage (fraction of questions answered)")
    ax.set_ylabel("share of the given answers that are right")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title("selective answering", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
