"""Collect the --gen-temperature experiment (issue 15) into experiments/gentemp1e14/report.md|json: every encoder's
pretraining diagnostics and its routers (dev macro-F1, median (min–max) of 3 fine-tuning seeds; the 2,000 / 500
task samples; --class-weights none), beside the controls measured on the same machine.
    python experiments/gentemp1e14/summarize.py     (reads runs/hybrid where present, else the copies kept here)
Runs: `CORE=N bash experiments/cc1e14/run.sh t2|t3 --gen-temperature 2|3` (1e14) and `BUDGET=2e14 CORE=N bash
experiments/cc1e14/run.sh t3[s1] --gen-temperature 3 [--seed 1]` (2e14). Controls: experiments/seeds2e14 (machine B: random init, T = 1 at 2e14, pretraining seeds 0b/1b/2) and
experiments/cc1e14 (machine A: random init, T = 1 at 1e14, seeds 0–2). Machine C (AMD EPYC without avx_vnni): a pair at
pretraining seed 2, `BUDGET=2e14 CORE=0 bash experiments/cc1e14/run.sh t3s2c --gen-temperature 3 --seed 2`, `… lr1e3s2c
--seed 2` (T = 1) and `… t2s2c --gen-temperature 2 --seed 2` (T = 2; seeds 0 and 1: `… t2 --gen-temperature 2`, `… t2s1 --gen-temperature 2
--seed 1`, which pair with B's seeds 0b/1b and T = 3 seeds 0/1), with its own random-init control
(experiments/clscontrast1e14/prepare.sh; run this script there as `CONTROL_MACHINE=C python experiments/gentemp1e14/summarize.py`
so that it keeps those reports). reprobe.jsonl: experiments/gentemp1e14/reprobe.py."""
import json
import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS, R = HERE.parent, Path("runs/hybrid")
TASKS = ("livedoor-title", "jaquad-qtype")
# (row, machine, FLOPs, T, pretraining seed, run name or None, where its kept summary/metrics are, fine-tuning
#  report path pattern with {task})
B2 = "seeds2e14/hybrid__ft-{run}-{task}__report.json"
ROWS = [
    ("random init", "B", None, None, None, None, None, "seeds2e14/hybrid__ft-random-{task}__report.json"),
    ("T = 1 (the default)", "B", "2e14", 1, "0b", "electra-cc1-lr1e3s0b-2e14", "seeds2e14", B2),
    ("T = 1 (the default)", "B", "2e14", 1, "1b", "electra-cc1-lr1e3s1b-2e14", "seeds2e14", B2),
    ("T = 1 (the default)", "B", "2e14", 1, "2", "electra-cc1-lr1e3s2-2e14", "seeds2e14", B2),
    ("**T = 3**", "B", "2e14", 3, "0", "electra-cc1-t3-2e14", "gentemp1e14", "gentemp1e14/ft-{run}-{task}.json"),
    ("**T = 3**", "B", "2e14", 3, "1", "electra-cc1-t3s1-2e14", "gentemp1e14", "gentemp1e14/ft-{run}-{task}.json"),
    ("random init", "C", None, None, None, None, None, "gentemp1e14/ft-random-C-{task}.json"),
    ("T = 1 (the default)", "C", "2e14", 1, "2c", "electra-cc1-lr1e3s2c-2e14", "gentemp1e14",
     "gentemp1e14/ft-{run}-{task}.json"),
    ("**T = 3**", "C", "2e14", 3, "2c", "electra-cc1-t3s2c-2e14", "gentemp1e14", "gentemp1e14/ft-{run}-{task}.json"),
    ("**T = 2**", "C", "2e14", 2, "2c", "electra-cc1-t2s2c-2e14", "gentemp1e14", "gentemp1e14/ft-{run}-{task}.json"),
    ("**T = 2**", "C", "2e14", 2, "0", "electra-cc1-t2-2e14", "gentemp1e14", "gentemp1e14/ft-{run}-{task}.json"),
    ("**T = 2**", "C", "2e14", 2, "1", "electra-cc1-t2s1-2e14", "gentemp1e14", "gentemp1e14/ft-{run}-{task}.json"),
    ("T = 2", "B", "1e14", 2, "0", "electra-cc1-t2-1e14", "gentemp1e14", "gentemp1e14/ft-{run}-{task}.json"),
    ("T = 3", "B", "1e14", 3, "0", "electra-cc1-t3-1e14", "gentemp1e14", "gentemp1e14/ft-{run}-{task}.json"),
    ("*random init*", "A", None, None, None, None, None, "cc1e14/ft-random-{task}.json"),
    ("*T = 1*", "A", "1e14", 1, "0", "electra-cc1-1e14", "cc1e14", "cc1e14/ft-{run}-{task}.json"),
    ("*T = 1*", "A", "1e14", 1, "1", "electra-cc1-1e14-s1", "cc1e14", "cc1e14/ft-{run}-{task}.json"),
    ("*T = 1*", "A", "1e14", 1, "2", "electra-cc1-1e14-s2", "cc1e14", "cc1e14/ft-{run}-{task}.json"),
]


#: jaquad-qtype on its full dev file with the default (balanced) loss: experiments/qtypefull/run.sh's report per
#: (machine, run); None is that machine's random-init control
FULL_DEV = {("B", None): "seeds2e14/qtypefull__random-balanced__report.json",
            ("B", "electra-cc1-lr1e3s0b-2e14"): "seeds2e14/qtypefull__electra-cc1-2e14-s0b-balanced__report.json",
            ("B", "electra-cc1-lr1e3s1b-2e14"): "seeds2e14/qtypefull__electra-cc1-2e14-s1b-balanced__report.json",
            ("B", "electra-cc1-lr1e3s2-2e14"): "seeds2e14/qtypefull__electra-cc1-2e14-s2-balanced__report.json",
            ("B", "electra-cc1-t3-2e14"): "gentemp1e14/qtypefull-electra-cc1-t3-2e14-balanced.json",
            ("B", "electra-cc1-t3s1-2e14"): "gentemp1e14/qtypefull-electra-cc1-t3s1-2e14-balanced.json",
            ("C", None): "gentemp1e14/qtypefull-random-C-balanced.json",
            ("C", "electra-cc1-lr1e3s2c-2e14"): "gentemp1e14/qtypefull-electra-cc1-lr1e3s2c-2e14-balanced.json",
            ("C", "electra-cc1-t3s2c-2e14"): "gentemp1e14/qtypefull-electra-cc1-t3s2c-2e14-balanced.json",
            ("C", "electra-cc1-t2s2c-2e14"): "gentemp1e14/qtypefull-electra-cc1-t2s2c-2e14-balanced.json",
            ("C", "electra-cc1-t2-2e14"): "gentemp1e14/qtypefull-electra-cc1-t2-2e14-balanced.json",
            ("C", "electra-cc1-t2s1-2e14"): "gentemp1e14/qtypefull-electra-cc1-t2s1-2e14-balanced.json"}


def keep_random_c() -> None:
    """Machine C's random-init control (experiments/clscontrast1e14/prepare.sh and experiments/qtypefull/run.sh there), kept under
    a -C name: the B control's reports are kept in experiments/seeds2e14 under the same run names. Only with
    CONTROL_MACHINE=C set: runs/ on another machine holds that machine's control."""
    if os.environ.get("CONTROL_MACHINE") != "C":
        return
    for task in TASKS:
        if (R / f"ft-random-{task}" / "report.json").is_file():
            shutil.copyfile(R / f"ft-random-{task}" / "report.json", HERE / f"ft-random-C-{task}.json")
    src = Path("runs/qtypefull/random-balanced/report.json")
    if src.is_file():
        shutil.copyfile(src, HERE / "qtypefull-random-C-balanced.json")


def keep(run: str) -> None:
    """Copy a finished run's summary, metrics and fine-tuning reports from runs/hybrid into this folder."""
    if not (R / run / "summary.json").is_file():
        return
    for name, dst in (("summary.json", f"{run}.summary.json"), ("metrics.jsonl", f"{run}.metrics.jsonl")):
        shutil.copyfile(R / run / name, HERE / dst)
    for task in TASKS:
        if (R / f"ft-{run}-{task}" / "report.json").is_file():
            shutil.copyfile(R / f"ft-{run}-{task}" / "report.json", HERE / f"ft-{run}-{task}.json")
    for w in ("none", "balanced"):
        src = Path("runs/qtypefull") / f"{run}-{w}" / "report.json"
        if src.is_file():
            shutil.copyfile(src, HERE / f"qtypefull-{run}-{w}.json")


def cell(path: Path):
    if not path.is_file():
        return None
    s = json.loads(path.read_text(encoding="utf-8"))["seed_summary"]
    return {k: s[f"macro_f1_{k}"] for k in ("median", "min", "max", "std")}


def main() -> None:
    keep_random_c()
    reprobe = {}
    if (HERE / "reprobe.jsonl").is_file():
        for line in (HERE / "reprobe.jsonl").read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            reprobe[Path(r["run"]).name] = r
    f3 = lambda x: "–" if x is None else f"{x:.3f}"  # noqa: E731
    fmt = lambda c: "—" if c is None else f"{c['median']:.3f} ({c['min']:.3f}–{c['max']:.3f})"  # noqa: E731
    lines = ["| encoder (tiny ELECTRA --cls-contrast 1, lr 1e-3) | machine | FLOPs | seed | gen acc | disc recall / P "
             "(training, at T) | probe recall, AUC (T = 1) | probe AUC (own T) | [CLS] spread | livedoor-title | "
             "jaquad-qtype | jaquad-qtype, full dev, balanced |", "|---|---|---|---|---:|---|---|---:|---:|---|---|---|"]
    report = []
    for name, machine, flops, t, seed, run, where, ft in ROWS:
        pre, rows = {}, []
        if run:
            keep(run)
            summ = DOCS / where / f"{run}.summary.json"
            pre = json.loads(summ.read_text(encoding="utf-8")) if summ.is_file() else {}
        d, f = pre.get("diagnostics") or {}, pre.get("final") or {}
        rp = reprobe.get(run or "", {})
        recall = d.get("probe_recall", rp.get("probe_recall"))
        own = d.get("disc_auc_own_t", rp.get("disc_auc_own_t"))
        cells = {task: cell(DOCS / ft.format(run=run, task=task)) for task in TASKS}
        if (machine, run) in FULL_DEV:
            cells["jaquad-qtype-full-dev-balanced"] = cell(DOCS / FULL_DEV[machine, run])
        report.append({"encoder": name, "machine": machine, "flops": flops, "gen_temperature": t, "seed": seed,
                       "run": run, "gen_acc": f.get("gen_acc"), "disc_recall": f.get("disc_recall"),
                       "disc_precision": f.get("disc_precision"), "probe_recall": recall,
                       "disc_auc": d.get("disc_auc"), "disc_auc_own_t": own, "cls_spread": d.get("cls_spread"),
                       "health_warning": pre.get("health_warning"), "dev_macro_f1": cells})
        disc = "–" if f.get("disc_recall") is None else f"{f3(f['disc_recall'])} / {f3(f.get('disc_precision'))}"
        probe = "–" if d.get("disc_auc") is None else f"{f3(recall)}, {f3(d['disc_auc'])}"
        lines.append(f"| {name} | {machine} | {flops or '–'} | {seed or '–'} | {f3(f.get('gen_acc'))} | {disc} | "
                     f"{probe} | {f3(own) if t and t != 1 else '–'} | {f3(d.get('cls_spread'))} | "
                     f"{fmt(cells['livedoor-title'])} | {fmt(cells['jaquad-qtype'])} | "
                     f"{fmt(cells.get('jaquad-qtype-full-dev-balanced'))} |")
    (HERE / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (HERE / "report.md").write_text(
        "# The generator's sampling temperature (--gen-temperature), issue 15\n\nDev macro-F1, median (min–max) of "
        "3 fine-tuning seeds; `python experiments/gentemp1e14/summarize.py`.\n\n" + "\n".join(lines) + "\n",
        encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
