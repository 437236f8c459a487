"""The fused-router table: per task and encoder, the encoder alone, the TF-IDF model alone and the fused router
(cross-fitted dev macro-F1; median / min / max over the fine-tuning seeds a report has), the setting chosen, and the
deployed router (what --fusion auto shipped) against the better of the other two. Reads the runs (run.sh); writes
report.json and report.md beside this file, keeping the figures of runs that are not on this machine.

    python experiments/fused-router/summarize.py
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = HERE.parents[1] / "runs"
CELLS = {  # (task, encoder): the run holding its report.json
    ("livedoor-title", "denki-electra-tiny-ja"): "general-routers/general-livedoor-title",
    ("jaquad-qtype", "denki-electra-tiny-ja"): "general-routers/general-jaquad-qtype",
    ("manpages-section", "denki-electra-tiny-ja"): "general-dapt/ft-checkpoint",
    ("livedoor-title", "random init"): "fusion/random-livedoor-title",
    ("jaquad-qtype", "random init"): "fusion/random-jaquad-qtype",
    ("manpages-section", "random init"): "general-dapt/ft-random",
}


def cell(report: dict) -> dict:
    fu, base = report["fusion"], report["baseline"]
    enc = [p["encoder_macro_f1"] for p in fu["per_seed"]]
    fused = [p["fused_crossfit_macro_f1"] for p in fu["per_seed"]]
    deployed = [f if fu["shipped"] else e for e, f in zip(enc, fused)]
    return {"seeds": len(enc), "encoder": enc, "tfidf": base["macro_f1"], "fused_crossfit": fused,
            "mode": fu["mode"], "weight": fu["weight"], "shipped": fu["shipped"],
            "deployed_median": statistics.median(deployed),
            "deployed_vs_better": statistics.median(deployed) - max(statistics.median(enc), base["macro_f1"])}


def main() -> None:
    kept = json.loads((HERE / "report.json").read_text(encoding="utf-8")) if (HERE / "report.json").is_file() else {}
    cells = kept.get("cells", {})
    for (task, enc), run in CELLS.items():
        p = RUNS / run / "report.json"
        if p.is_file():
            r = json.loads(p.read_text(encoding="utf-8"))
            if r.get("fusion"):
                cells[f"{task}/{enc}"] = cell(r)
    (HERE / "report.json").write_text(json.dumps({"cells": cells}, indent=2) + "\n", encoding="utf-8")

    def span(xs):
        return f"{statistics.median(xs):.3f}" + (f" ({min(xs):.3f}–{max(xs):.3f})" if len(xs) > 1 else "")

    lines = ["| task | encoder | seeds | encoder alone | TF-IDF | fused (cross-fitted) | setting | shipped | "
             "deployed − better of the two |", "|---|---|---:|---:|---:|---:|---|---|---:|"]
    for key, c in cells.items():
        task, enc = key.split("/", 1)
        lines.append(f"| {task} | {enc} | {c['seeds']} | {span(c['encoder'])} | {c['tfidf']:.3f} | "
                     f"{span(c['fused_crossfit'])} | {c['mode']}, w {c['weight']:.1f} | "
                     f"{'fused' if c['shipped'] else 'encoder'} | {100 * c['deployed_vs_better']:+.1f} |")
    (HERE / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
