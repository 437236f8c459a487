"""``report.json`` + ``report.md`` + PNGs of ``denki finetune classify`` (torch-free)."""
from __future__ import annotations

from pathlib import Path

from denki.models.io.fileio import atomic_write_json, atomic_write_text


def _f(x, nd: int = 3) -> str:
    return "–" if x is None else f"{x:.{nd}f}"


def verdict(report: dict) -> str:
    """One honest sentence comparing the deployed router with the TF-IDF baseline on dev macro-F1 (a fused
    router by its cross-fitted figure: its fusion weight was not tuned on the rows that score it)."""
    base = report.get("baseline")
    if not base:
        return "No baseline was run (--no-baseline)."
    fusion = report.get("fusion") or {}
    if fusion.get("shipped"):
        ours, theirs = fusion["crossfit"]["macro_f1"], base["macro_f1"]
        enc = fusion["encoder_macro_f1"]
        rel = "beats" if ours > theirs + 0.005 else "is level with" if ours >= theirs - 0.005 else "trails"
        return (f"Deployed: **the encoder fused with the TF-IDF model** ({fusion['mode']}, encoder weight "
                f"{fusion['weight']:.1f}); cross-fitted dev macro-F1 {_f(ours)} vs the encoder alone {_f(enc)} and "
                f"TF-IDF alone {_f(theirs)}: it {rel} the baseline.")
    ours, theirs = report["dev"]["macro_f1"], base["macro_f1"]
    spread = report["seed_summary"]["macro_f1_max"] - report["seed_summary"]["macro_f1_min"]
    diff = ours - theirs
    if abs(diff) <= max(0.005, spread / 2):
        return (f"The fine-tuned model and the TF-IDF baseline are level on dev macro-F1 ({_f(ours)} vs "
                f"{_f(theirs)}; seed spread {_f(spread)}).")
    if diff < 0:
        hint = ("fine-tune with --fusion auto (the default) to deploy them fused" if fusion.get("requested") is None
                else "fusion did not beat the encoder on cross-fitted dev")
        return (f"**The TF-IDF + logistic-regression baseline wins** on dev macro-F1 by {diff * -100:.1f} points "
                f"({_f(theirs)} vs {_f(ours)}); {hint}.")
    return f"The fine-tuned model beats the TF-IDF baseline on dev macro-F1 by {diff * 100:.1f} points ({_f(ours)} vs {_f(theirs)})."


def _fusion_lines(r: dict) -> list[str]:
    f = r.get("fusion")
    if not f:
        return []
    seeds = ", ".join(f"seed {p['seed']}: {_f(p['encoder_macro_f1'])} → {_f(p['fused_crossfit_macro_f1'])}"
                      for p in f["per_seed"])
    return ["## Fusion with the TF-IDF model (dev macro-F1)", "",
            "| encoder alone (kept seed) | TF-IDF alone | fused, cross-fitted | fused, setting chosen on all dev |",
            "|---:|---:|---:|---:|",
            f"| {_f(f['encoder_macro_f1'])} | {_f(f['lexical_macro_f1'])} | {_f(f['crossfit']['macro_f1'])} | "
            f"{_f(f['dev_macro_f1'])} |", "",
            f"Setting: {f['mode']}, encoder weight {f['weight']:.1f} (grid {f['grid']['weights'][0]}–"
            f"{f['grid']['weights'][-1]} × {', '.join(f['grid']['modes'])}); cross-fitted over "
            f"{f['crossfit']['folds']} stratified folds of dev (each fold scored with the setting chosen on the "
            f"others). Every seed, encoder → fused (cross-fitted): {seeds}; fused median "
            f"{_f(f['fused_crossfit_median'])}. Shipped: **{'the fused router' if f['shipped'] else 'the encoder alone'}**"
            f" (--fusion {f['requested']}; auto ships it when the cross-fitted fused figure beats the encoder).", ""]


def _selftrain_lines(r: dict) -> list[str]:
    st = r.get("self_training")
    if not st:
        return []
    files = ", ".join(f"`{f['path']}` ({f['n']:,} texts)" for f in st["files"])
    labels = list(st["kept_per_class"])
    lines = ["## Self-training on unlabelled texts (`--unlabelled`)", "",
             f"Read {files}; only the text field (a label field is never read). Dropped {st['empty_rows']:,} empty, "
             f"{st['dropped_equal_to_train_or_dev']:,} equal to a training or dev text, {st['dropped_repeats']:,} "
             f"repeats: pool **{st['pool']:,}**. Each round predicts the pool with the TF-IDF model fitted on the "
             "labelled rows plus the rows kept so far and keeps that share of each predicted class, most confident "
             "first.", "",
             "| round | share kept | kept | " + " | ".join(labels) + " |",
             "|---:|---:|---:|" + "---:|" * len(labels)]
    for rd in st["rounds"]:
        lines.append(f"| {rd['round']} | {rd['fraction']:.1f} | {rd['kept']:,} | "
                     + " | ".join(f"{rd['kept_per_class'][lab]:,}" for lab in labels) + " |")
    cap = st["encoder_cap_per_class"]
    lines += ["", f"The encoder trained on the labelled rows (each ×{st.get('labelled_repeats', 1)} an epoch) + "
              f"{st['encoder_rows']:,} pseudo-labelled rows (at most {cap if cap is not None else 'all'} per class); "
              f"the TF-IDF half of the router on the labelled rows + all {st['lexical_rows']:,}."]
    if st.get("lexical_dev") and r.get("baseline"):
        lines.append(f"Dev macro-F1 of TF-IDF on the labelled rows only (the baseline) {_f(r['baseline']['macro_f1'])},"
                     f" self-trained {_f(st['lexical_dev']['macro_f1'])} (the fusion table's TF-IDF).")
    return lines + [""]


def _model_name(m: dict) -> str:
    if m.get("path"):
        return f"`{m['path']}` ({m.get('kind')})"
    return f"random init ({m.get('size')})"


def _thin(curve: dict | None, points: int = 200) -> dict | None:
    """Keep about ``points`` evenly spaced points of a coverage curve for report.json (the PNG has them all)."""
    if not curve or len(curve["coverage"]) <= points:
        return curve
    n = len(curve["coverage"])
    idx = sorted({round(i * (n - 1) / (points - 1)) for i in range(points)})
    return {k: [v[i] for i in idx] for k, v in curve.items()}


def _train_files(r: dict) -> str:
    """"file", or "N files" when the training data came from several (``--train A B``)."""
    n = len(r["data"]["train"].get("files") or [])
    return f"{n} files" if n > 1 else "file"


def _markdown(r: dict) -> str:
    dev, base, task, ss = r["dev"], r.get("baseline"), r["task"], r["seed_summary"]
    lines = ["# Routing classifier — dev report", "", f"`{r['command']}`", "",
             f"Model: {_model_name(r['model'])} · labels: {len(r['labels'])} · train {r['data']['train']['n']} "
             f"(of {r['data']['train']['n_in_file']} in the {_train_files(r)}) · dev {r['data']['dev']['n']} · "
             f"max_length {r['config']['max_length']} (truncated: train {r['data']['train']['truncated']}, dev "
             f"{r['data']['dev']['truncated']}) · lr {r['config']['lr']:g} · device {r['device']}", "",
             verdict(r), "",
             "Dev figures: the dev set also chose the epoch, the median seed, the temperature, the threshold and "
             "the offsets, so they are optimistic; judge on a held-out file with `denki evaluate classify`.", "",
             "## Summary (dev)", "",
             f"| | {'fused router' if (r.get('fusion') or {}).get('shipped') else 'fine-tuned'} (median seed) | "
             "TF-IDF char 1–3 + LR |", "|---|---:|---:|",
             f"| accuracy | {_f(dev['accuracy'])} | {_f(base['accuracy']) if base else '–'} |",
             f"| macro-F1 | {_f(dev['macro_f1'])} | {_f(base['macro_f1']) if base else '–'} |",
             f"| ECE (T=1 → fitted T) | {_f(dev['ece_uncalibrated'])} → {_f(dev['ece'])} | "
             f"{_f(base['ece']) if base else '–'} |",
             f"| training time (s) | {r['training_seconds']:.1f} (all seeds) | "
             f"{_f(base['train_seconds'], 1) if base else '–'} |", "",
             f"Seeds {[s['seed'] for s in r['seeds']]}: macro-F1 median {_f(ss['macro_f1_median'])} "
             f"(min {_f(ss['macro_f1_min'])}, max {_f(ss['macro_f1_max'])}, std {_f(ss['macro_f1_std'])}); "
             f"accuracy median {_f(ss['accuracy_median'])}; kept seed {ss['chosen_seed']}. (Seed figures are the plain "
             "argmax; the table above applies the bundle's rule, i.e. also any --min-recall offsets.)", "",
             *_fusion_lines(r),
             *_selftrain_lines(r),
             "## Routing rule (stored in `bundle/task.json`)", "",
             f"`{task['decision_rule']}`", "",
             f"- temperature T = {task['temperature']:.3f}: NLL {_f(dev['nll_uncalibrated'])} → {_f(dev['nll'])}, "
             f"ECE {_f(dev['ece_uncalibrated'])} → {_f(dev['ece'])} (`reliability.png`)"
             + (f"; fallback: {r['temperature_fit']['fallback']}" if (r.get("temperature_fit") or {}).get("fallback")
                else "")]
    if r.get("pretrained_health_warning"):
        lines[2:2] = [f"**Warning:** {r['pretrained_health_warning']}", ""]
    ab = task["abstention"]
    if ab["mode"] == "none":
        lines.append("- abstention: none requested (threshold 0); see `coverage.png` for what a threshold would buy")
    else:
        lines.append(f"- abstention: target {ab['mode']} {ab['target']} → threshold {ab['threshold']:.4f}; "
                     f"dev coverage {_f(ab['coverage'])}, accuracy on the routed part {_f(ab['precision'])}"
                     + ("" if ab["reached"] else " — **target not reached on dev** (best achievable shown)"))
    lines.append(f"- on dev: abstain rate {_f(dev['abstain_rate'])}, accuracy on the non-abstained part "
                 f"{_f(dev['accuracy_non_abstained'])}")
    if task.get("min_recall"):
        cost = r.get("min_recall_cost") or {}
        for lab, m in task["min_recall"].items():
            lines.append(f"- must-not-miss `{lab}`: floor {m['floor']}, offset {m['offset']:.3f}, "
                         f"{'reached' if m['reached_on_dev'] else '**not reached**'} on dev")
        if cost:
            lines.append(f"- cost of the offsets (full coverage): accuracy {_f(cost['accuracy_before'])} → "
                         f"{_f(cost['accuracy_after'])}, macro-F1 {_f(cost['macro_f1_before'])} → "
                         f"{_f(cost['macro_f1_after'])}")
            lines += ["", "| class | recall before → after | precision before → after |", "|---|---|---|"]
            for lab in r["labels"]:
                b, a = cost["per_class_before"][lab], cost["per_class_after"][lab]
                lines.append(f"| {lab} | {_f(b['recall'])} → {_f(a['recall'])} | "
                             f"{_f(b['precision'])} → {_f(a['precision'])} |")
    lines += ["", "## Per class (dev, full coverage)", "",
              "| class | support | precision | recall | F1 | sent to human | routed wrong | baseline F1 |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for lab in r["labels"]:
        p = dev["per_class"][lab]
        bf = base["per_class"][lab]["f1"] if base else None
        lines.append(f"| {lab} | {p['support']} | {_f(p['precision'])} | {_f(p['recall'])} | {_f(p['f1'])} | "
                     f"{_f(p['abstained'])} | {_f(p['routed_wrong'])} | {_f(bf)} |")
    lines += ["", "Figures: `confusion.png`, `reliability.png`, `coverage.png`.", ""]
    return "\n".join(lines)


def write_report(out_dir, report: dict) -> None:
    """Write the PNGs, ``report.json`` (curves included) and ``report.md`` into ``out_dir``; adds the verdict to
    ``report``."""
    from denki.models.classify.plots import plot_confusion, plot_coverage, plot_reliability

    out = Path(out_dir)
    dev, task = report["dev"], report["task"]
    plot_confusion(dev["confusion_matrix"], report["labels"], out / "confusion.png")
    plot_reliability(dev["reliability_uncalibrated"], dev["reliability"], out / "reliability.png",
                     ece_before=dev["ece_uncalibrated"], ece_after=dev["ece"], temperature=task["temperature"])
    ab = task["abstention"]
    plot_coverage(dev["coverage_curve"], out / "coverage.png",
                  threshold_point=None if ab["mode"] == "none" else ab,
                  baseline=(report.get("baseline") or {}).get("coverage_curve"))
    report["verdict"] = verdict(report)
    dev["coverage_curve"] = _thin(dev.get("coverage_curve"))
    if report.get("baseline"):
        report["baseline"]["coverage_curve"] = _thin(report["baseline"].get("coverage_curve"))
    atomic_write_json(out / "report.json", report)
    atomic_write_text(out / "report.md", _markdown(report))
