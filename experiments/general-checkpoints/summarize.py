"""The general checkpoints' table: routers (median / min / max of 3 fine-tuning seeds, dev macro-F1) from each encoder
on the full train splits, the TF-IDF baseline of the same reports, and the pretraining summary. Reads runs/ (the
scripts here write it); writes report.md and report.json beside this file, keeping the previous figures of a run
that is not on this machine.

    python experiments/general-checkpoints/summarize.py
"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = HERE.parents[1] / "runs"
TASKS = ("livedoor-title", "jaquad-qtype")
ENCODERS = {"random": "random init (same vocabulary)", "general": "denki-electra-tiny-ja"}


def router_cell(name: str, task: str) -> dict | None:
    p = RUNS / "general-routers" / f"{name}-{task}" / "report.json"
    if not p.is_file():
        return None
    r = json.loads(p.read_text(encoding="utf-8"))
    s = r["seed_summary"]
    return {"median": s["macro_f1_median"], "min": s["macro_f1_min"], "max": s["macro_f1_max"],
            "tfidf": (r.get("baseline") or {}).get("macro_f1")}


def main() -> None:
    kept = json.loads((HERE / "report.json").read_text(encoding="utf-8")) if (HERE / "report.json").is_file() else {}
    routers = kept.get("routers", {})
    for name in ENCODERS:
        for task in TASKS:
            cell = router_cell(name, task)
            if cell is not None:
                routers[f"{name}/{task}"] = cell
    summary = RUNS / "general" / "electra-tiny-8e14" / "summary.json"
    pre = kept.get("pretraining")
    if summary.is_file():
        s = json.loads(summary.read_text(encoding="utf-8"))
        f = s.get("final") or {}
        pre = {k: s.get(k) for k in ("steps", "tokens", "flops", "wall_s", "precision")} | {
            k: f.get(k) for k in ("disc_precision", "disc_recall", "disc_auc_own_t", "cls_spread", "gen_acc")} | {
            "tokens_per_s": (s.get("speed") or {}).get("tokens_per_s", s["tokens"] / s["wall_s"])}
    report = {"routers": routers, "pretraining": pre}
    (HERE / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    def fmt(c):
        return "—" if c is None else f"{c['median']:.3f} ({c['min']:.3f}–{c['max']:.3f})"

    lines = ["| dev macro-F1, median (min–max) of 3 seeds | " + " | ".join(TASKS) + " |",
             "|---|" + "---|" * len(TASKS)]
    for name, label in ENCODERS.items():
        lines.append(f"| {label} | " + " | ".join(fmt(routers.get(f"{name}/{t}")) for t in TASKS) + " |")
    tf = [next((routers[f"{n}/{t}"]["tfidf"] for n in ENCODERS if routers.get(f"{n}/{t}", {}).get("tfidf")), None)
          for t in TASKS]
    lines.append("| TF-IDF + logistic regression (same reports) | " +
                 " | ".join("—" if x is None else f"{x:.3f}" for x in tf) + " |")
    if pre:
        lines += ["", f"Pretraining: {pre['steps']:,} steps, {pre['tokens']:,} tokens, {pre['flops']:.3g} FLOPs, "
                      f"{pre['wall_s'] / 3600:.2f} h ({pre['precision']}, {pre['tokens_per_s']:,.0f} tokens/s); "
                      f"discriminator P / R {pre['disc_precision']:.3f} / {pre['disc_recall']:.3f}, "
                      f"[CLS] spread {pre['cls_spread']:.3f}."]
    (HERE / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
