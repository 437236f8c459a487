"""The top CPU budget (2e14 FLOPs) over pretraining seeds: tiny ELECTRA --cls-contrast 1 (seeds 0, 1, 2 on machine A / B, and seeds 0, 1 again on machine B) and MLM 40 %
(seeds 0, 1) against random init, on both routing tasks, plus jaquad-qtype scored on its full dev file
(experiments/qtypefull/run.sh), and livedoor-title with fewer labels under both fine-tuning schedules (experiments/labels/run.sh).
Earlier machines' cells are read from the copies kept in experiments/ (experiments/cc1e14, experiments/cw,
experiments/top2e14/m40); this machine's from runs/, copied here. Writes experiments/seeds2e14/report.md|json.
    python experiments/seeds2e14/summarize.py        (missing cells are shown as "—")"""
import json
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "twostage"))
from summarize import pretrain_summary  # noqa: E402  (reads runs/, else the copy an earlier summarize kept)

ROOT, OUT = Path(__file__).resolve().parents[2], Path(__file__).resolve().parent
H, CW, QF = "runs/hybrid", "runs/cw", "runs/qtypefull"
COLS = ["livedoor-title", "jaquad-qtype none", "jaquad-qtype balanced", "full dev none", "full dev balanced"]
# (encoder, pretraining seed, machine, pretraining run as (runs folder, folder of its kept copy, name) or None,
#  {column: report candidates}); a runs/ candidate is copied to OUT/<key>.json, so the next machine reads the copy
A, B = "A: Intel Xeon (AMX)", "B: AMD EPYC (AVX-512, no AMX)"
ROWS = [
    ("random init", "–", A, None, {
        "livedoor-title": ["experiments/cc1e14/ft-random-livedoor-title.json"],
        "jaquad-qtype none": ["experiments/cc1e14/ft-random-jaquad-qtype.json"],
        "jaquad-qtype balanced": ["experiments/cw/random-jaquad-qtype/report.json"]}),
    ("random init", "–", B, None, {
        "livedoor-title": [f"{H}/ft-random-livedoor-title/report.json"],
        "jaquad-qtype none": [f"{H}/ft-random-jaquad-qtype/report.json"],
        "jaquad-qtype balanced": [f"{CW}/random-jaquad-qtype/report.json"],
        "full dev none": [f"{QF}/random-none/report.json"],
        "full dev balanced": [f"{QF}/random-balanced/report.json"]}),
    ("ELECTRA --cls-contrast 1", "0", A, (H, "experiments/cc1e14", "electra-cc1-lr1e3-2e14"), {
        "livedoor-title": ["experiments/cc1e14/ft-electra-cc1-lr1e3-2e14-livedoor-title.json"],
        "jaquad-qtype none": ["experiments/cc1e14/ft-electra-cc1-lr1e3-2e14-jaquad-qtype.json"],
        "jaquad-qtype balanced": ["experiments/cw/electra-cc1-2e14-jaquad-qtype/report.json"]}),
    ("ELECTRA --cls-contrast 1", "1", A, (H, "experiments/cc1e14", "electra-cc1-lr1e3s1-2e14"), {
        "livedoor-title": ["experiments/cc1e14/ft-electra-cc1-lr1e3s1-2e14-livedoor-title.json"],
        "jaquad-qtype none": ["experiments/cc1e14/ft-electra-cc1-lr1e3s1-2e14-jaquad-qtype.json"],
        "jaquad-qtype balanced": ["experiments/cw/electra-cc1-lr1e3s1-2e14-jaquad-qtype/report.json"]}),
    ("ELECTRA --cls-contrast 1", "2", B, (H, "experiments/seeds2e14", "electra-cc1-lr1e3s2-2e14"), {
        "livedoor-title": [f"{H}/ft-electra-cc1-lr1e3s2-2e14-livedoor-title/report.json"],
        "jaquad-qtype none": [f"{H}/ft-electra-cc1-lr1e3s2-2e14-jaquad-qtype/report.json"],
        "jaquad-qtype balanced": [f"{CW}/electra-cc1-lr1e3s2-2e14-jaquad-qtype/report.json"],
        "full dev none": [f"{QF}/electra-cc1-2e14-s2-none/report.json"],
        "full dev balanced": [f"{QF}/electra-cc1-2e14-s2-balanced/report.json"]}),
    # seeds 0 and 1 again on machine B (the same commands under new names: BUDGET=2e14 … run.sh lr1e3s0b,
    # … run.sh lr1e3s1b --seed 1), so that machine B has three ELECTRA pretraining seeds beside its own random init
    *[("ELECTRA --cls-contrast 1", seed, B, (H, "experiments/seeds2e14", f"electra-cc1-lr1e3s{seed}b-2e14"), {
        "livedoor-title": [f"{H}/ft-electra-cc1-lr1e3s{seed}b-2e14-livedoor-title/report.json"],
        "jaquad-qtype none": [f"{H}/ft-electra-cc1-lr1e3s{seed}b-2e14-jaquad-qtype/report.json"],
        "jaquad-qtype balanced": [f"{CW}/electra-cc1-lr1e3s{seed}b-2e14-jaquad-qtype/report.json"],
        "full dev none": [f"{QF}/electra-cc1-2e14-s{seed}b-none/report.json"],
        "full dev balanced": [f"{QF}/electra-cc1-2e14-s{seed}b-balanced/report.json"]}) for seed in "01"],
    ("MLM 40 %", "0", A, ("runs/top", "experiments/top2e14/m40", "mlm-m40-2e14"), {
        "livedoor-title": ["experiments/cw/mlm-m40-2e14-livedoor-title-none/report.json"],
        "jaquad-qtype none": ["experiments/cw/mlm-m40-2e14-jaquad-qtype-none/report.json"],
        "jaquad-qtype balanced": ["experiments/cw/mlm-m40-2e14-jaquad-qtype/report.json"]}),
    ("MLM 40 %", "1", B, ("runs/top", "experiments/seeds2e14", "mlm-m40-2e14-s1"), {
        "livedoor-title": ["runs/top/ft-mlm-m40-2e14-s1-livedoor-title/report.json"],
        "jaquad-qtype none": ["runs/top/ft-mlm-m40-2e14-s1-jaquad-qtype/report.json"],
        "jaquad-qtype balanced": [f"{CW}/mlm-m40-2e14-s1-jaquad-qtype/report.json"],
        "full dev none": [f"{QF}/mlm-m40-2e14-s1-none/report.json"],
        "full dev balanced": [f"{QF}/mlm-m40-2e14-s1-balanced/report.json"]}),
    # MLM 40 % seeds 0 (again, as s0b) and 2 on machine B: TAG=s0b SEED=0 / SEED=2 bash experiments/top2e14/m40.sh
    *[("MLM 40 %", seed, B, ("runs/top", "experiments/seeds2e14", f"mlm-m40-2e14-{tag}"), {
        "livedoor-title": [f"runs/top/ft-mlm-m40-2e14-{tag}-livedoor-title/report.json"],
        "jaquad-qtype none": [f"runs/top/ft-mlm-m40-2e14-{tag}-jaquad-qtype/report.json"],
        "jaquad-qtype balanced": [f"{CW}/mlm-m40-2e14-{tag}-jaquad-qtype/report.json"],
        "full dev none": [f"{QF}/mlm-m40-2e14-{tag}-none/report.json"],
        "full dev balanced": [f"{QF}/mlm-m40-2e14-{tag}-balanced/report.json"]}) for seed, tag in (("0", "s0b"), ("2", "s2"))],
]

LABELS = (250, 500, 1000, 2000)
LABEL_ROWS = [  # (encoder, name in runs/labels, the 2,000-label cell: the lever scripts' report)
    ("random init", "random", [f"{H}/ft-random-livedoor-title/report.json"]),
    ("ELECTRA --cls-contrast 1, seed 2", "electra-cc1-2e14-s2",
     [f"{H}/ft-electra-cc1-lr1e3s2-2e14-livedoor-title/report.json"]),
    *[(f"ELECTRA --cls-contrast 1, seed {seed}", f"electra-cc1-2e14-s{seed}b",
       [f"{H}/ft-electra-cc1-lr1e3s{seed}b-2e14-livedoor-title/report.json"]) for seed in "01"],
    ("MLM 40 %, seed 1", "mlm-m40-2e14-s1", ["runs/top/ft-mlm-m40-2e14-s1-livedoor-title/report.json"]),
    *[(f"MLM 40 %, seed {seed}", f"mlm-m40-2e14-{tag}", [f"runs/top/ft-mlm-m40-2e14-{tag}-livedoor-title/report.json"])
      for seed, tag in (("0", "s0b"), ("2", "s2"))],
]


def kept(src: str) -> Path:
    """Where a runs/ file is copied: OUT/<its path below runs/, '/' → '__'>."""
    return OUT / src.removeprefix("runs/").replace("/", "__")


def find(candidates: list[str]) -> Path | None:
    for c in candidates:
        p = ROOT / c
        if p.is_file():
            if c.startswith("runs/"):
                shutil.copyfile(p, kept(c))
            return p
        if c.startswith("runs/") and kept(c).is_file():
            return kept(c)
    return None


def cell(candidates: list[str]):
    p = find(candidates)
    if p is None:
        return None
    r = json.loads(p.read_text(encoding="utf-8"))
    s = r["seed_summary"]
    return {"median": s["macro_f1_median"], "min": s["macro_f1_min"], "max": s["macro_f1_max"],
            "seeds": [x["macro_f1"] for x in r["seeds"]], "best_epochs": [x["best_epoch"] for x in r["seeds"]],
            "class_weights": r["config"].get("class_weights"),
            "dev_n": sum(v.get("support", 0) for v in r["dev"]["per_class"].values()),
            "rare_f1": {k: v["f1"] for k, v in r["dev"]["per_class"].items() if k in ("Cause", "Manner")},
            "source": str(p.relative_to(ROOT))}


def fmt(c):
    return "—" if c is None else f"{c['median']:.3f} ({c['min']:.3f}–{c['max']:.3f})"


def main() -> int:
    f3 = lambda x: "–" if x is None else f"{x:.3f}"  # noqa: E731
    lines = ["| encoder (tiny, 2e14) | pretraining seed | machine | steps | gen / MLM acc | disc recall, AUC | "
             "[CLS] spread | " + " | ".join(COLS) + " |", "|---|---|---|---:|---:|---|---:|" + "---|" * len(COLS)]
    rows = []
    for enc, seed, machine, run, cols in ROWS:
        p = pretrain_summary(run[2], ROOT / run[0], ROOT / run[1]) if run else None
        cells = {c: cell(cols.get(c, [])) for c in COLS}
        rows.append({"encoder": enc, "pretraining_seed": seed, "machine": machine, "pretraining": p, "cells": cells})
        p = p or {}
        disc = "–" if p.get("disc_recall") is None else f"{p['disc_recall']:.3f}, {f3(p.get('disc_auc'))}"
        lines.append(f"| {enc} | {seed} | {machine} | {p.get('steps', '–')} | {f3(p.get('gen_acc'))} | {disc} | "
                     f"{f3(p.get('cls_spread'))} | " + " | ".join(fmt(cells[c]) for c in COLS) + " |")
    # the mean over pretraining seeds of each encoder's medians (what a user gets from one pretraining, on average)
    means = ["", "| encoder | pretraining seeds | " + " | ".join(COLS) + " |", "|---|---:|" + "---|" * len(COLS)]
    summary = {}
    for enc in dict.fromkeys(r["encoder"] for r in rows):
        mine = [r for r in rows if r["encoder"] == enc]
        row = {}
        for c in COLS:
            v = [r["cells"][c]["median"] for r in mine if r["cells"][c]]
            row[c] = {"mean": statistics.fmean(v), "n": len(v), "values": v} if v else None
        summary[enc] = row
        means.append(f"| {enc} (mean of medians) | {len(mine) if enc != 'random init' else '– (2 machines)'} | " +
                     " | ".join("—" if row[c] is None else f"{row[c]['mean']:.3f} (n={row[c]['n']})" for c in COLS)
                     + " |")
    # machine B alone: every encoder beside its own machine's random init, so the margins are not mixed with the
    # numerics of two machines (the goal: ELECTRA ≥ random init + 3)
    rand_b = next(r for r in rows if r["encoder"] == "random init" and r["machine"] == B)["cells"]
    means_b = ["", "| machine B only | pretraining seeds | " + " | ".join(COLS) + " |", "|---|---:|" + "---|" * len(COLS)]
    summary_b = {}
    for enc in dict.fromkeys(r["encoder"] for r in rows if r["encoder"] != "random init"):
        mine = [r for r in rows if r["encoder"] == enc and r["machine"] == B]
        row, txt = {}, []
        for c in COLS:
            v = [r["cells"][c]["median"] for r in mine if r["cells"][c]]
            if not v or rand_b[c] is None:
                row[c] = None
                txt.append("—")
                continue
            d = [x - rand_b[c]["median"] for x in v]
            row[c] = {"mean": statistics.fmean(v), "n": len(v), "margins": d,
                      "seeds_at_least_plus_3": sum(x >= 0.03 - 1e-9 for x in d)}
            row[c]["sd"] = statistics.stdev(v) if len(v) > 1 else None
            sd = "" if row[c]["sd"] is None else f" ± {row[c]['sd']:.3f}"
            txt.append(f"{row[c]['mean']:.3f}{sd} ({statistics.fmean(d) * 100:+.1f}; "
                       f"{row[c]['seeds_at_least_plus_3']}/{len(v)} ≥ +3)")
        summary_b[enc] = row
        means_b.append(f"| {enc} (mean ± SD of medians; margin over random init; seeds ≥ +3) | {len(mine)} | "
                       + " | ".join(txt) + " |")
    means += means_b
    # fewer labels (experiments/labels/run.sh): livedoor-title on N of the 2,000 training titles, machine B's encoders
    lab = ["", "| livedoor-title, machine B | " + " | ".join(f"{n} labels" for n in LABELS) + " |",
           "|---|" + "---:|" * len(LABELS)]
    labels = {}
    for enc, name, full in LABEL_ROWS:
        for sched, sfx in (("fixed 10 epochs / patience 3", ""), ("**default schedule** (≥ 630 updates)", "-auto")):
            # 2,000 labels: both schedules are 10 / 3 there, so the lever scripts' cell serves both rows
            cells = {n: cell([f"runs/labels/{name}-n{n}{sfx}/report.json"] if n != 2000 else full) for n in LABELS}
            if not any(cells[n] for n in LABELS if n != 2000):
                continue  # a schedule not run for this encoder (the re-run seeds: the default schedule only)
            labels[f"{enc}, {sched}"] = cells
            lab.append(f"| {enc}, {sched} | " + " | ".join(fmt(cells[n]) for n in LABELS) + " |")
    # the default schedule over each objective's pretraining seeds: mean of medians and its margin over random init
    rand = labels.get("random init, **default schedule** (≥ 630 updates)", {})
    for prefix, enc in (("ELECTRA", "ELECTRA --cls-contrast 1"), ("MLM", "MLM 40 %")):
        mine = [v for k, v in labels.items() if k.startswith(prefix) and "default" in k]
        txt, labels_mean = [], {}
        for n in LABELS:
            v = [c[n]["median"] for c in mine if c[n]]
            if not v or not rand.get(n):
                txt.append("—")
                continue
            d = [x - rand[n]["median"] for x in v]
            labels_mean[n] = {"mean": statistics.fmean(v), "margins": d}
            txt.append(f"{statistics.fmean(v):.3f} ({statistics.fmean(d) * 100:+.1f}; "
                       f"{sum(x >= 0.03 - 1e-9 for x in d)}/{len(v)} ≥ +3)")
        lab.append(f"| {enc}, **default schedule**, mean over pretraining seeds (margin over random init; "
                   "seeds ≥ +3) | " + " | ".join(txt) + " |")
        labels[f"{prefix} mean, default schedule"] = labels_mean
    # the longer schedule at 2,000 labels
    ep = ["", "| livedoor-title, 2,000 labels, machine B | 10 epochs / patience 3 (default) | 20 epochs / patience 6 "
          "| change | best epochs at 20 |", "|---|---:|---:|---:|---|"]
    epochs = {}
    for enc, name, full in LABEL_ROWS:  # 20 epochs (experiments/epochs/run.sh) beside the lever scripts' 10-epoch cell
        c10, c20 = cell(full), cell([f"runs/epochs/{name}-e20/report.json"])
        if c20 is None:
            continue
        best = c20["best_epochs"]
        epochs[enc] = {"e10": c10, "e20": c20, "best_epochs_e20": best}
        change = "—" if c10 is None else f"{(c20['median'] - c10['median']) * 100:+.1f}"
        ep.append(f"| {enc} | {fmt(c10)} | {fmt(c20)} | {change} | {' / '.join(map(str, best))} |")
    if len(ep) > 3:
        lab += ep
    (OUT / "report.json").write_text(json.dumps({"rows": rows, "means": summary, "means_machine_b": summary_b,
                                                 "labels": labels, "epochs": epochs},
                                                ensure_ascii=False, indent=1)
                                     + "\n", encoding="utf-8")
    md = ("# The top CPU budget (2e14 FLOPs) over pretraining seeds (experiments/seeds2e14)\n\nDev macro-F1, median (min–max)"
          " of 3 fine-tuning seeds. \"full dev\": jaquad-qtype on all 2,612 dev questions (experiments/qtypefull/run.sh).\n\n"
          + "\n".join(lines + means + lab) + "\n")
    (OUT / "report.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
