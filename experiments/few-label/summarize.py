"""experiments/few-label: the tables of README.md from the runs under runs/few-label/k{K}-s{S}/ → result.json.

Per cell: TF-IDF (models/classify/baseline.py: char 1–3-grams, C = 10, the report's baseline) fitted on the labelled
train rows and scored here on the full inquiry dev set (855 rows; a run's report.json scores it on its tune-dev);
the self-trained TF-IDF alone (refitted exactly as --unlabelled does, for reference); and `denki evaluate classify`
(dev855.json: macro-F1 of the router's decision at full coverage) of each run:

    without      the default router (no --unlabelled)
    with         --unlabelled, the shipped recipe (cap 100 pseudo rows per class, labelled rows repeated to half)
    with-cap300  the same with --unlabelled-cap 300 (the first default)
    with-cap1000 the same with --unlabelled-cap 1000
    with-v1      cap 300, labelled rows not repeated (selftrain.LABELLED_SHARE = 0: the first recipe)

Nothing here feeds back into a run.

    python experiments/few-label/summarize.py [--runs runs/few-label] [--no-selftrained]
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEV = "../shared/data/inquiry_route_dev.jsonl.gz"
MARGIN = 0.05  # the rule: mean at 10 per desk ≥ TF-IDF + 5 points
VARIANTS = ("without", "with", "with-cap300", "with-cap1000", "with-v1")
SELECTION_DRAWS = (0, 1, 2)  # the draws the cap and the repeats were chosen on; 3-5 were drawn afterwards


def jsonl(path):
    op = gzip.open if str(path).endswith(".gz") else open
    with op(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def cell(d: Path, dev, selftrained: bool) -> dict:
    from denki.models.classify.baseline import tfidf_baseline

    train, tune = jsonl(d / "train.jsonl"), jsonl(d / "tune_dev.jsonl")
    labels = sorted({r["label"] for r in train})
    g = np.array([labels.index(r["label"]) for r in train])
    dg = np.array([labels.index(r["label"]) for r in dev])
    dt = [r["text"] for r in dev]
    k, s = re.match(r"k(\w+)-s(\d+)", d.name).groups()
    out = {"cell": d.name, "k": k, "draw": int(s), "train": len(train), "tune_dev": len(tune),
           "tfidf": tfidf_baseline([r["text"] for r in train], g, dt, dg, labels)["macro_f1"]}
    if selftrained and (d / "unlabelled.jsonl").exists():
        from denki.models.classify.selftrain import self_train_files

        st = self_train_files([d / "unlabelled.jsonl"], "text", [r["text"] for r in train], g,
                              [r["text"] for r in tune], labels)
        out["tfidf_selftrained"] = tfidf_baseline([r["text"] for r in train] + st.lexical_texts,
                                                  np.concatenate([g, st.lexical_gold]), dt, dg, labels)["macro_f1"]
    for v in VARIANTS:
        if not (d / v / "dev855.json").exists():
            continue
        rep = json.loads((d / v / "report.json").read_text(encoding="utf-8"))
        fu = rep.get("fusion") or {}
        st = rep.get("self_training") or {}
        sd = rep["seeds"][0]
        out[v] = {"macro_f1": json.loads((d / v / "dev855.json").read_text(encoding="utf-8"))["macro_f1"],
                  "shipped": "fused" if fu.get("shipped") else "encoder",
                  "fusion": f"{fu.get('mode')} w {fu.get('weight')}" if fu else None,
                  "best_epoch": sd["best_epoch"], "epochs_run": sd["epochs_run"],
                  "training_seconds": rep["training_seconds"], "total_seconds": rep["total_seconds"],
                  **({"pool": st["pool"], "kept": st["kept"], "cap": st["encoder_cap_per_class"],
                      "encoder_pseudo_rows": st["encoder_rows"], "labelled_repeats": st.get("labelled_repeats", 1),
                      "encoder_rows_per_epoch": st["encoder_rows"] + len(train) * st.get("labelled_repeats", 1)}
                     if st else {"encoder_rows_per_epoch": len(train)})}
    if "with" not in out and "without" in out and not (d / "unlabelled.jsonl").exists():
        out["with"] = {**out["without"], "note": "no pool at k = all: the same run"}
    return out


def agg(xs):
    xs = [x for x in xs if x is not None]
    return None if not xs else {"mean": statistics.mean(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt(s, scale=1.0, sign=False, nd=3):
    if s is None:
        return "–"
    one = (lambda x: f"{x * scale:+.{nd}f}") if sign else (lambda x: f"{x * scale:.{nd}f}")
    return one(s["mean"]) + (f" ({one(s['min'])} to {one(s['max'])})" if sign and s["n"] > 1 else
                             f" ({one(s['min'])}–{one(s['max'])})" if s["n"] > 1 else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="runs/few-label")
    ap.add_argument("--no-selftrained", action="store_true")
    a = ap.parse_args()
    dev = jsonl(DEV)
    cells = [cell(d, dev, not a.no_selftrained) for d in sorted(Path(a.runs).glob("k*-s*"))
             if any((d / v / "dev855.json").exists() for v in VARIANTS)]
    gain = lambda c, v: c[v]["macro_f1"] - c["tfidf"] if c.get(v) else None  # noqa: E731
    table = []
    for k in ("10", "30", "100", "all"):
        cs = [c for c in cells if c["k"] == k and c.get("with")]
        if cs:
            table.append({"k": k, "draws": [c["draw"] for c in cs], "tfidf": agg([c["tfidf"] for c in cs]),
                          **{v: agg([(c.get(v) or {}).get("macro_f1") for c in cs]) for v in VARIANTS},
                          "tfidf_selftrained": agg([c.get("tfidf_selftrained") for c in cs]),
                          "with_minus_tfidf": agg([gain(c, "with") for c in cs]),
                          "without_minus_tfidf": agg([gain(c, "without") for c in cs]),
                          "with_minus_without": agg([c["with"]["macro_f1"] - c["without"]["macro_f1"] for c in cs])})
    ten = [c for c in cells if c["k"] == "10" and c.get("with")]
    fresh = [c for c in ten if c["draw"] not in SELECTION_DRAWS]
    sel = [c for c in ten if c["draw"] in SELECTION_DRAWS]
    worst = min((gain(c, "with") for c in cells if c.get("with")), default=None)
    rule = {"text": "ships as the documented default for few labels if its mean over 3 draws at 10 per desk is ≥ "
                    "TF-IDF + 5 macro-F1 points and it is ≥ TF-IDF in every draw at 10, 30, 100 and all",
            "mean_gain_at_10_fresh_draws": (agg([gain(c, "with") for c in fresh]) or {}).get("mean"),
            "fresh_draws": [c["draw"] for c in fresh],
            "mean_gain_at_10_selection_draws": (agg([gain(c, "with") for c in sel]) or {}).get("mean"),
            "mean_gain_at_10_all_draws": (agg([gain(c, "with") for c in ten]) or {}).get("mean"),
            "mean_gain_at_10_first_recipe_v1": (agg([gain(c, "with-v1") for c in sel]) or {}).get("mean"),
            "mean_gain_at_10_cap300": (agg([gain(c, "with-cap300") for c in sel]) or {}).get("mean"),
            "worst_gain_any_cell": worst}
    rule["met"] = bool(len(fresh) >= 3 and rule["mean_gain_at_10_fresh_draws"] >= MARGIN and worst is not None
                       and worst >= 0)
    caps = []  # the encoder's cap on pseudo rows per class at 10 per desk, selection draws
    for c in sel:
        for v in ("with", "with-cap300", "with-cap1000"):
            if c.get(v):
                caps.append({"cell": c["cell"], "variant": v, **{x: c[v][x] for x in (
                    "cap", "macro_f1", "encoder_rows_per_epoch", "training_seconds", "epochs_run")}})
    (HERE / "result.json").write_text(json.dumps({"cells": cells, "table": table, "caps": caps, "rule": rule},
                                                 indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("| labels per desk | draws | TF-IDF (labelled rows) | default router | with --unlabelled | with − TF-IDF "
          "| with − default | self-trained TF-IDF alone |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in table:
        print(f"| {r['k']} | {len(r['draws'])} | {fmt(r['tfidf'])} | {fmt(r['without'])} | {fmt(r['with'])} | "
              f"{fmt(r['with_minus_tfidf'], 100, True, 1)} | {fmt(r['with_minus_without'], 100, True, 1)} | "
              f"{fmt(r['tfidf_selftrained'])} |")
    print()
    print("| draw (10 per desk) | TF-IDF | default router | with --unlabelled | cap 300 | cap 1,000 | v1 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for c in ten:
        g = lambda v: f"{c[v]['macro_f1']:.3f}" if c.get(v) else "–"  # noqa: E731
        print(f"| {c['draw']}{'' if c['draw'] in SELECTION_DRAWS else ' (fresh)'} | {c['tfidf']:.3f} | {g('without')} | "
              f"{g('with')} | {g('with-cap300')} | {g('with-cap1000')} | {g('with-v1')} |")
    print()
    print("| cap per class | draws | encoder rows per epoch | macro-F1 mean (range) | s per epoch, mean | training s, mean |")
    print("|---:|---:|---:|---:|---:|---:|")
    for cap in sorted({c["cap"] for c in caps}):
        cs = [c for c in caps if c["cap"] == cap]
        print(f"| {cap:,} | {len(cs)} | {'/'.join(f'{x:,}' for x in sorted({c['encoder_rows_per_epoch'] for c in cs}))} | "
              f"{fmt(agg([c['macro_f1'] for c in cs]))} | "
              f"{statistics.mean(c['training_seconds'] / max(c['epochs_run'], 1) for c in cs):.0f} | "
              f"{statistics.mean(c['training_seconds'] for c in cs):.0f} |")
    print()
    for c in cells:
        print(c["cell"], f"tfidf {c['tfidf']:.4f}", *(f"{v} {c[v]['macro_f1']:.4f} [{c[v]['shipped']}, "
                                                      f"{c[v]['training_seconds']:.0f}s]" for v in VARIANTS if c.get(v)))
    print("rule:", json.dumps(rule, ensure_ascii=False))


if __name__ == "__main__":
    main()
