"""Collect the two-stage experiment's outputs (experiments/twostage/run.sh) into experiments/twostage/: report.md, report.json,
each fine-tuning report and each pretraining run's summary.json and metrics.jsonl.
    python experiments/twostage/summarize.py            (reads runs/twostage; missing cells are shown as "—")
A run no longer in runs/ (a new machine) is read from the copies kept here by an earlier summarize.
Other experiments call :func:`summarize` with their own run folder, output folder and rows (experiments/hybrid1e14)."""
import json
import shutil
import sys
from pathlib import Path

R, OUT = Path("runs/twostage"), Path(__file__).resolve().parent
TASKS = ("livedoor-title", "jaquad-qtype")
ENCODERS = [  # (name, pretraining run dirs whose summaries are kept, fine-tuning dir prefix)
    ("random init (re-run on this machine)", [], "ft-random"),
    ("MLM 40 %, 5e13 (stage 1 only)", ["mlm-5e13"], None),
    ("MLM 5e13 → MLM +2.5e13 (control)", ["mlm-then-mlm"], "ft-mlm-then-mlm"),
    ("MLM 5e13 → ELECTRA +2.5e13 (two-stage)", ["mlm-then-electra"], "ft-mlm-then-electra"),
]


def cell(prefix, task, R=R, OUT=OUT):
    if prefix is None:
        return None
    p, kept = R / f"{prefix}-{task}" / "report.json", OUT / f"{prefix}-{task}.json"
    if p.is_file():
        shutil.copyfile(p, kept)
    elif kept.is_file():  # runs/ is gone (a new machine): the copy kept here by an earlier summarize
        p = kept
    else:
        return None
    rep = json.loads(p.read_text(encoding="utf-8"))
    s = rep["seed_summary"]
    return {"median": s["macro_f1_median"], "min": s["macro_f1_min"], "max": s["macro_f1_max"], "sd": s["macro_f1_std"],
            "seeds": [x["macro_f1"] for x in rep["seeds"]]}


def pretrain_summary(run, R=R, OUT=OUT):
    d = R / run
    metrics, summ = OUT / f"{run}.metrics.jsonl", OUT / f"{run}.summary.json"
    if (d / "metrics.jsonl").is_file():
        shutil.copyfile(d / "metrics.jsonl", metrics)
        if (d / "summary.json").is_file():  # written when the run finished
            shutil.copyfile(d / "summary.json", summ)
    elif not metrics.is_file():  # neither the run nor an earlier summarize's copy here
        return None
    rows = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    last = rows[-1]
    summary = json.loads(summ.read_text(encoding="utf-8")) if summ.is_file() else {}
    probe = summary.get("diagnostics") or {}
    return {"finished": bool(summary.get("finished")), "steps": last["step"], "flops": last["flops"],
            "total_flops": summary.get("total_flops"), "gen_acc": last.get("gen_acc"),
            "disc_recall": last.get("disc_recall"), "disc_precision": last.get("disc_precision"),
            "disc_auc": probe.get("disc_auc"), "cls_spread": probe.get("cls_spread"),
            "health_warning": summary.get("health_warning")}


def fmt(c):
    return "—" if c is None else f"{c['median']:.3f} ({c['min']:.3f}–{c['max']:.3f})"


def main():
    return summarize(R, OUT, ENCODERS, "Two-stage pretraining (experiments/twostage/run.sh)")


def summarize(R: Path, OUT: Path, ENCODERS: list, title: str) -> int:
    """Write OUT/report.md|json from R's fine-tuning reports (``PREFIX-TASK/report.json``) and pretraining runs;
    print the table."""
    report = []
    lines = ["| encoder | steps | gen / MLM acc (end) | disc recall, probe AUC (end) | [CLS] spread | livedoor-title | jaquad-qtype |",
             "|---|---:|---:|---|---:|---|---|"]
    for name, runs, prefix in ENCODERS:
        pre = {r: pretrain_summary(r, R, OUT) for r in runs}
        cells = {t: cell(prefix, t, R, OUT) for t in TASKS}
        report.append({"encoder": name, "pretraining": pre, "dev_macro_f1": cells})
        p = next(iter(pre.values()), None) or {}
        g, rc, auc, cs = (p.get(k) for k in ("gen_acc", "disc_recall", "disc_auc", "cls_spread"))
        f3 = lambda x: "–" if x is None else f"{x:.3f}"  # noqa: E731
        disc = "–" if rc is None else f"{rc:.3f}, {f3(auc)}"
        lines.append(f"| {name} | {p.get('steps', '–')} | {f3(g)} | {disc} | {f3(cs)} | "
                     f"{fmt(cells['livedoor-title'])} | {fmt(cells['jaquad-qtype'])} |")
    (OUT / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (OUT / "report.md").write_text(f"# {title}\n\nDev macro-F1, median (min–max) "
                                   "of 3 fine-tuning seeds.\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
