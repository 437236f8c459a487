"""Collect the class-weight comparison (experiments/cw/run.sh: --class-weights balanced; the unweighted reports of the lever
scripts: runs/hybrid/ft-*, runs/top/ft-*) into experiments/cw/report.md|json and copy the balanced runs' reports there.
    python experiments/cw/summarize.py        (missing cells are shown as "—")"""
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
ENCODERS = [  # (label, name in runs/cw, unweighted fine-tuning dir prefix)
    ("random init", "random", "runs/hybrid/ft-random"),
    ("ELECTRA --cls-contrast 1, 1e14, pretraining seed 0", "electra-cc1-1e14", "runs/hybrid/ft-electra-cc1-1e14"),
    ("ELECTRA --cls-contrast 1, 1e14, pretraining seed 1", "electra-cc1-1e14-s1",
     "runs/hybrid/ft-electra-cc1-1e14-s1"),
    ("ELECTRA --cls-contrast 1, 1e14, pretraining seed 2", "electra-cc1-1e14-s2",
     "runs/hybrid/ft-electra-cc1-1e14-s2"),
    ("ELECTRA --cls-contrast 1, 2e14, pretraining seed 0", "electra-cc1-2e14",
     "runs/hybrid/ft-electra-cc1-lr1e3-2e14"),
    ("ELECTRA --cls-contrast 1, 2e14, pretraining seed 1", "electra-cc1-lr1e3s1-2e14",
     "runs/hybrid/ft-electra-cc1-lr1e3s1-2e14"),
    ("ELECTRA --cls-contrast 1 --batch-size 16 --lr 7e-4, 1e14", "electra-cc1-b16-1e14",
     "runs/hybrid/ft-electra-cc1-b16-1e14"),
    ("MLM 40 % (the tiny default), 2e14", "mlm-m40-2e14", "runs/top/ft-mlm-m40-2e14"),
]
TASKS = ["jaquad-qtype", "livedoor-title"]


def cell(path: Path):
    p = ROOT / path / "report.json"
    if not p.is_file():
        return None
    r = json.loads(p.read_text(encoding="utf-8"))
    s = r["seed_summary"]
    return {"median": s["macro_f1_median"], "min": s["macro_f1_min"], "max": s["macro_f1_max"],
            "std": s["macro_f1_std"], "accuracy_median": s["accuracy_median"],
            "seeds": [x["macro_f1"] for x in r["seeds"]], "class_weights": r["config"].get("class_weights"),
            "rare_f1": {k: v["f1"] for k, v in r["dev"]["per_class"].items() if k in ("Cause", "Manner")},
            "command": r.get("command")}


def fmt(c):
    return "—" if c is None else f"{c['median']:.3f} ({c['min']:.3f}–{c['max']:.3f})"


def main() -> int:
    rows, lines = [], ["| encoder (tiny) | jaquad-qtype, none | jaquad-qtype, **balanced** | livedoor-title, none | "
                       "livedoor-title, balanced |", "|---|---|---|---|---|"]
    for label, name, prefix in ENCODERS:
        row = {"encoder": label}
        for t in TASKS:
            row[f"{t}/none"] = cell(Path(f"{prefix}-{t}"))
            row[f"{t}/balanced"] = cell(Path(f"runs/cw/{name}-{t}"))
            for w in ("none", "balanced"):
                c = row[f"{t}/{w}"]
                if c is not None and c["class_weights"] not in (w, None):
                    sys.exit(f"{label} {t}: the report says class_weights {c['class_weights']}, expected {w}")
            # the balanced reports, and the unweighted ones that no other experiments/ folder keeps (runs/top)
            pairs = [(ROOT / f"runs/cw/{name}-{t}", OUT / f"{name}-{t}")]
            if prefix.startswith("runs/top"):  # runs/hybrid's unweighted reports are in experiments/cc1e14 already
                pairs.append((ROOT / f"{prefix}-{t}", OUT / f"{name}-{t}-none"))
            for src, dst in pairs:
                if (src / "report.json").is_file():
                    dst.mkdir(exist_ok=True)
                    for f in ("report.json", "report.md"):
                        shutil.copy(src / f, dst / f)
        rows.append(row)
        lines.append(f"| {label} | {fmt(row['jaquad-qtype/none'])} | {fmt(row['jaquad-qtype/balanced'])} | "
                     f"{fmt(row['livedoor-title/none'])} | {fmt(row['livedoor-title/balanced'])} |")
    (OUT / "report.json").write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    md = "# Class-balanced fine-tuning loss (dev macro-F1, median (min–max) of 3 fine-tuning seeds)\n\n" + \
        "\n".join(lines) + "\n"
    (OUT / "report.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
