"""The quickstart-budget table of experiments/cc1e14/quickstart.sh: copy each arm's router and QA reports and the
pretraining summary into experiments/cc1e14/qs-ARM-*.json and print the markdown rows.
    python experiments/cc1e14/quickstart_table.py          (reads runs/qscc-*, else the copies kept here; missing arms
                                                            are skipped)"""
import json
import shutil
from pathlib import Path

OUT = Path(__file__).resolve().parent
ARMS = [("base", "ELECTRA, the paper's loss, lr 3e-4 (the default; experiments/qsobj's arm re-run here)"), ("lr3e4", "ELECTRA --cls-contrast 1, lr 3e-4"),
        ("lr5e4", "ELECTRA --cls-contrast 1, lr 5e-4"), ("lr1e3", "ELECTRA --cls-contrast 1, lr 1e-3"),
        ("lr1e3wu100", "ELECTRA --cls-contrast 1, lr 1e-3, --warmup-steps 100 (of 209)")]


def load(p: Path, dest: str):
    if p.is_file():
        shutil.copyfile(p, OUT / dest)
    elif (OUT / dest).is_file():  # runs/ is gone (another machine): the copy kept here by an earlier run
        p = OUT / dest
    else:
        return None
    return json.loads(p.read_text(encoding="utf-8"))


def router(rep):
    s = rep["seed_summary"]
    return f"{s['macro_f1_median']:.3f} ({s['macro_f1_min']:.3f}–{s['macro_f1_max']:.3f})"


print("| pretraining (6e12 FLOPs) | gen acc | disc recall, probe AUC | [CLS] spread | routing dev macro-F1 | "
      "QA dev best F1 (HasAns span F1) |")
print("|---|---:|---|---:|---|---|")
for arm, name in ARMS:
    d = Path(f"runs/qscc-{arm}")
    pre = load(d / "pre-electra" / "summary.json", f"qs-{arm}-pretrain.summary.json")
    cls = load(d / "cls-electra" / "report.json", f"qs-{arm}-cls.json")
    qa = load(d / "qa-electra" / "report.json", f"qs-{arm}-qa.json")
    if pre is None or cls is None:
        continue
    f, g = pre["final"], pre.get("diagnostics") or {}
    q = "—"
    if qa is not None:
        m = qa["dev_metrics"]
        q = f"{m['best_f1']:.2f} ({m['HasAns_span_f1']:.1f})"
    print(f"| {name} | {f['gen_acc']:.3f} | {f['disc_recall']:.3f}, {g.get('disc_auc', float('nan')):.2f} | "
          f"{g.get('cls_spread', float('nan')):.3f} | {router(cls)} | {q} |")
rnd = load(Path("runs/qscc-lr1e3/cls-random/report.json"), "qs-random-cls.json")
if rnd:
    print(f"| *random init (control, this machine)* | – | – | – | {router(rnd)} | – |")
