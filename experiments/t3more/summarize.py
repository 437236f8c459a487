"""Collect the follow-ups of tiny ELECTRA's T = 3 long-run default (issue 15) into experiments/t3more/report.md|json:
  1. the fine-tuning recipe for a T = 3 encoder (livedoor titles; `experiments/ftsweep/run.sh`),
  2. the pretraining lever `--lr 1.5e-3` on top of T = 3, seed 0, 2e14 FLOPs, paired with machine B's T = 3 seed 0
     (`BUDGET=2e14 CORE=0 bash experiments/cc1e14/run.sh t3lr15 --gen-temperature 3 --lr 1.5e-3`),
  3. QA on the full jaquad_train from the top-budget encoders at T = 1, 2 and 3 (pretraining seed 2; T = 2 also 0, 1)
     (`CORE=1 bash experiments/qa-cc1/run.sh electra-cc1-t3s2c-2e14 --model runs/hybrid/electra-cc1-t3s2c-2e14/bundle`;
     QA seeds 1 and 2 add `-seed1 … --seed 1`; T = 2's encoder: `experiments/gentemp1e14`).
Reads runs/ where present and keeps copies here, so that the report regenerates on a machine without those runs:
    python experiments/t3more/summarize.py"""
import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent
RUNS = DOCS.parent / "runs"


def kept(src: Path, name: str) -> Path | None:
    """Copy ``src`` (a file under runs/) to experiments/t3more/``name`` when it exists; return the kept copy or None."""
    dst = HERE / name
    if src.is_file():
        shutil.copyfile(src, dst)
    return dst if dst.is_file() else None


def load(p: Path | None) -> dict | None:
    return json.loads(p.read_text(encoding="utf-8")) if p is not None and p.is_file() else None


def cell(r: dict | None) -> str:
    """Dev macro-F1 of a 3-seed router report: median (min–max)."""
    if r is None:
        return "—"
    s = r["seed_summary"]
    return f"{s['macro_f1_median']:.3f} ({s['macro_f1_min']:.3f}–{s['macro_f1_max']:.3f})"


def median(r: dict | None) -> float | None:
    return None if r is None else r["seed_summary"]["macro_f1_median"]


def best_epochs(r: dict | None) -> str:
    return "—" if r is None else " / ".join(str(s["best_epoch"]) for s in r["seeds"])


def ft_recipe() -> tuple[list[str], dict]:
    enc = "electra-cc1-t3s2c-2e14"
    rows = [("lr 1e-3, layer decay 1.0 (the tiny default)", DOCS / f"gentemp1e14/ft-{enc}-livedoor-title.json")]
    for c, label in (("ld0.8", "layer decay 0.8 (official ELECTRA)"), ("lr5e-4", "lr 5e-4"), ("lr2e-3", "lr 2e-3"),
                     ("bs16", "batch 16 (2× the updates)")):
        rows.append((label, kept(RUNS / f"ftsweep/{enc}-livedoor-title-{c}/report.json", f"ftsweep-{enc}-{c}.json")))
    rand = [("the tiny default", DOCS / "gentemp1e14/ft-random-C-livedoor-title.json"),
            ("batch 16", kept(RUNS / "ftsweep/random-livedoor-title-bs16/report.json", "ftsweep-random-bs16.json"))]
    out = ["| encoder | fine-tuning recipe (one change) | livedoor-title | best epochs (seeds 0 / 1 / 2) |",
           "|---|---|---|---|"]
    js = {}
    for encoder, key, recipes in (("ELECTRA T = 3, seed 2 (machine C)", "t3s2c", rows),
                                  ("random init (machine C)", "random init", rand)):
        for label, p in recipes:
            r = load(p)
            out.append(f"| {encoder} | {label} | {cell(r)} | {best_epochs(r)} |")
            js[f"{key} / {label}"] = median(r)
    return out, js


def diag(summary: dict | None, run: str) -> str:
    """Pretraining diagnostics at the end of a run; a run logged before ``disc_auc_own_t`` existed takes it from
    experiments/gentemp1e14/reprobe.jsonl (which reproduced the logged AUCs exactly)."""
    if summary is None:
        return "— | — | —"
    f = dict(summary["final"])
    if "disc_auc_own_t" not in f:
        for line in (DOCS / "gentemp1e14/reprobe.jsonl").read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            if r["run"].endswith("/" + run):
                f["disc_auc_own_t"] = r["disc_auc_own_t"]
    return (f"{f['gen_acc']:.3f} | {f['disc_recall']:.3f} / {f['disc_precision']:.3f} | "
            f"{f.get('disc_auc_own_t', float('nan')):.3f}, {f['cls_spread']:.2f}")


def lever() -> tuple[list[str], dict]:
    name = "electra-cc1-t3lr15-2e14"
    here = RUNS / "hybrid" / name
    s_new = load(kept(here / "summary.json", f"{name}.summary.json"))
    kept(here / "metrics.jsonl", f"{name}.metrics.jsonl")
    ft_new = {t: load(kept(RUNS / f"hybrid/ft-{name}-{t}/report.json", f"ft-{name}-{t}.json"))
              for t in ("livedoor-title", "jaquad-qtype")}
    full_new = load(kept(RUNS / f"qtypefull/{name}-balanced/report.json", f"qtypefull-{name}-balanced.json"))
    base = "electra-cc1-t3-2e14"
    s_old = load(DOCS / f"gentemp1e14/{base}.summary.json")
    ft_old = {t: load(DOCS / f"gentemp1e14/ft-{base}-{t}.json") for t in ("livedoor-title", "jaquad-qtype")}
    full_old = load(DOCS / f"gentemp1e14/qtypefull-{base}-balanced.json")
    rand = {t: load(DOCS / f"seeds2e14/hybrid__ft-random-{t}__report.json") for t in ("livedoor-title", "jaquad-qtype")}
    rand_full = load(DOCS / "seeds2e14/qtypefull__random-balanced__report.json")
    out = ["| encoder (2e14 FLOPs, pretraining seed 0) | steps | gen acc | disc recall / P (training) | AUC own T, "
           "[CLS] spread | livedoor-title | jaquad-qtype (500) | jaquad-qtype, full dev, balanced |",
           "|---|---:|---:|---|---|---|---|---|"]
    for label, run, s, ft, full in (("T = 3, lr 1e-3 (machine B)", base, s_old, ft_old, full_old),
                                    ("**T = 3, lr 1.5e-3** (machine C)", name, s_new, ft_new, full_new)):
        steps = "—" if s is None else f"{s['steps']:,}"
        out.append(f"| {label} | {steps} | {diag(s, run)} | {cell(ft['livedoor-title'])} | {cell(ft['jaquad-qtype'])} | "
                   f"{cell(full)} |")
    out.append(f"| *random init (machine B = C)* | – | – | – | – | {cell(rand['livedoor-title'])} | "
               f"{cell(rand['jaquad-qtype'])} | {cell(rand_full)} |")
    js = {"lr1.5e-3": {"summary_final": None if s_new is None else s_new["final"],
                       **{t: median(r) for t, r in ft_new.items()}, "qtype_full_balanced": median(full_new)},
          "lr1e-3": {**{t: median(r) for t, r in ft_old.items()}, "qtype_full_balanced": median(full_old)}}
    return out, js


def qa() -> tuple[list[str], dict]:
    """QA on the full jaquad_train from the top-budget encoders, by generator temperature T and pretraining seed."""
    def run(name: str) -> dict | None:
        return load(kept(RUNS / f"qa-cc1/{name}/report.json", f"qa-{name}.json"))
    rows = (("ELECTRA T = 1 (machine A)", "0", load(DOCS / "qa-cc1/electra-cc1-2e14/report.json")),
            ("ELECTRA T = 1 (machine A)", "0", load(DOCS / "qa-cc1/electra-cc1-2e14-seed1/report.json")),
            ("ELECTRA T = 1 (machine A)", "0", load(DOCS / "qa-cc1/electra-cc1-2e14-seed2/report.json")),
            ("**ELECTRA T = 2** (machine C)", "0", run("electra-cc1-t2-2e14")),
            ("**ELECTRA T = 2** (machine C)", "1", run("electra-cc1-t2s1-2e14")),
            ("ELECTRA T = 1 (machine B)", "2", load(DOCS / "qa-cc1/electra-cc1-2e14-s2/report.json")),
            ("**ELECTRA T = 2** (machine C)", "2", run("electra-cc1-t2s2c-2e14")),
            ("**ELECTRA T = 2** (machine C)", "2", run("electra-cc1-t2s2c-2e14-seed1")),
            ("**ELECTRA T = 3** (machine C)", "2", run("electra-cc1-t3s2c-2e14")),
            ("**ELECTRA T = 3** (machine C)", "2", run("electra-cc1-t3s2c-2e14-seed1")),
            ("**ELECTRA T = 3** (machine C)", "2", run("electra-cc1-t3s2c-2e14-seed2")),
            ("*MLM 40 % (machine B)*", "2", load(DOCS / "qa-cc1/mlm-m40-2e14-s2/report.json")))
    out = ["| encoder (tiny, 2e14), QA 1 epoch | pretraining seed | QA seed | best F1 (threshold) | HasAns F1 | "
           "NoAns acc | HasAns span F1 | train s |", "|---|---|---|---:|---:|---:|---:|---:|"]
    js = {}
    for label, pseed, r in rows:
        if r is None:
            out.append(f"| {label} | {pseed} | — | — | — | — | — | — |")
            continue
        m, s = r["dev_metrics"], r["seeds"][0]
        out.append(f"| {label} | {pseed} | {s['seed']} | {m['best_f1']:.2f} ({m['best_f1_thresh']:.2f}) | "
                   f"{m['HasAns_f1']:.2f} | {m['NoAns_exact']:.2f} | {m['HasAns_span_f1']:.1f} | "
                   f"{s['train_seconds']:.0f} |")
        js[f"{label.replace('*', '')}, pretraining seed {pseed}, QA seed {s['seed']}"] = {
            k: m[k] for k in ("best_f1", "HasAns_f1", "NoAns_exact", "HasAns_span_f1")}
    return out, js


def main() -> None:
    parts, js = [], {}
    for title, fn in (("Fine-tuning recipe for a T = 3 encoder (dev macro-F1, median (min–max) of 3 seeds)", ft_recipe),
                      ("Pretraining lr 1.5e-3 on top of T = 3", lever),
                      ("QA by generator temperature", qa)):
        lines, j = fn()
        parts += [f"## {title}", "", *lines, ""]
        js[fn.__name__] = j
    (HERE / "report.md").write_text("# T = 3 follow-ups (issue 15; dev scores)\n\n" + "\n".join(parts), encoding="utf-8")
    (HERE / "report.json").write_text(json.dumps(js, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("\n".join(parts))


if __name__ == "__main__":
    main()
