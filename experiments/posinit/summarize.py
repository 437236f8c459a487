"""Collect issue 15's QA follow-ups of session 43 into experiments/posinit/report.md|json (dev scores):
  1. the --gen-temperature 2 encoder at pretraining seed 0 with QA fine-tuning seeds 1 and 2, so that it has the
     issue's median of 3 fine-tuning seeds (seed 0 scored 38.74):
       CORE=0 bash experiments/qa-cc1/run.sh electra-cc1-t2-2e14-seed1 --model runs/hybrid/electra-cc1-t2-2e14/bundle --seed 1
       CORE=1 bash experiments/qa-cc1/run.sh electra-cc1-t2-2e14-seed2 --model runs/hybrid/electra-cc1-t2-2e14/bundle --seed 2
  2. `--position-init tile` (models/training/positions.py) at QA seed 0, on that encoder and on T = 1's pretraining
     seed 2 (its `keep` run scored 47.95 on machine B):
       CORE=0 bash experiments/qa-cc1/run.sh electra-cc1-t2-2e14-tile --model runs/hybrid/electra-cc1-t2-2e14/bundle --position-init tile
       CORE=1 bash experiments/qa-cc1/run.sh electra-cc1-lr1e3s2c-2e14-tile --model runs/hybrid/electra-cc1-lr1e3s2c-2e14/bundle --position-init tile
Reads runs/qa-cc1 where present and keeps copies here, so that the report regenerates without those runs:
    python experiments/posinit/summarize.py"""
import json
import shutil
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent
RUNS = DOCS.parent / "runs"


def qa_run(name: str) -> dict | None:
    """runs/qa-cc1/NAME/report.json, copied here as qa-NAME.json when it exists; the kept copy, or None."""
    src, dst = RUNS / f"qa-cc1/{name}/report.json", HERE / f"qa-{name}.json"
    if src.is_file():
        shutil.copyfile(src, dst)
    return json.loads(dst.read_text(encoding="utf-8")) if dst.is_file() else None


def load(p: Path) -> dict | None:
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


ROWS = (  # (encoder, pretraining seed, position init, report)
    ("ELECTRA T = 2 (machine C)", "0", "keep", lambda: load(DOCS / "t3more/qa-electra-cc1-t2-2e14.json")),
    ("ELECTRA T = 2 (machine C)", "0", "keep", lambda: qa_run("electra-cc1-t2-2e14-seed1")),
    ("ELECTRA T = 2 (machine C)", "0", "keep", lambda: qa_run("electra-cc1-t2-2e14-seed2")),
    ("ELECTRA T = 2 (machine C)", "0", "**tile**", lambda: qa_run("electra-cc1-t2-2e14-tile")),
    ("ELECTRA T = 2 (machine C)", "1", "keep", lambda: load(DOCS / "t3more/qa-electra-cc1-t2s1-2e14.json")),
    ("ELECTRA T = 2 (machine C)", "2", "keep", lambda: load(DOCS / "t3more/qa-electra-cc1-t2s2c-2e14.json")),
    ("ELECTRA T = 2 (machine C)", "2", "keep", lambda: load(DOCS / "t3more/qa-electra-cc1-t2s2c-2e14-seed1.json")),
    ("ELECTRA T = 1 (machine B)", "2", "keep", lambda: load(DOCS / "qa-cc1/electra-cc1-2e14-s2/report.json")),
    ("ELECTRA T = 1 (machine C)", "2", "**tile**", lambda: qa_run("electra-cc1-lr1e3s2c-2e14-tile")),
)


def main() -> None:
    out = ["| encoder (tiny, 2e14), QA 1 epoch | pretraining seed | positions | QA seed | best F1 (threshold) | "
           "HasAns F1 | NoAns acc | HasAns span F1 | train s |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    js, t2s0_keep = {}, []
    for label, pseed, init, get in ROWS:
        r = get()
        if r is None:
            out.append(f"| {label} | {pseed} | {init} | — | — | — | — | — | — |")
            continue
        m, s = r["dev_metrics"], r["seeds"][0]
        assert r["settings"].get("position_init", "keep") == init.strip("*"), (label, init)
        out.append(f"| {label} | {pseed} | {init} | {s['seed']} | {m['best_f1']:.2f} ({m['best_f1_thresh']:.2f}) | "
                   f"{m['HasAns_f1']:.2f} | {m['NoAns_exact']:.2f} | {m['HasAns_span_f1']:.1f} | "
                   f"{s['train_seconds']:.0f} |")
        js[f"{label}, pretraining seed {pseed}, {init.strip('*')}, QA seed {s['seed']}"] = {
            k: m[k] for k in ("best_f1", "HasAns_f1", "NoAns_exact", "HasAns_span_f1")}
        if label.startswith("ELECTRA T = 2") and pseed == "0" and init == "keep":
            t2s0_keep.append((m["best_f1"], m["HasAns_f1"]))
    lines = ["## QA on the full jaquad_train (1 epoch, lr 1e-3, one thread; dev = jaquad_dev, threshold tuned on dev)",
             "", *out, ""]
    if len(t2s0_keep) == 3:
        med = (statistics.median(f for f, _ in t2s0_keep), statistics.median(h for _, h in t2s0_keep))
        js["T = 2, pretraining seed 0, keep: median of 3 QA seeds"] = {"best_f1": med[0], "HasAns_f1": med[1]}
        lines += [f"T = 2, pretraining seed 0, median of its 3 QA seeds: F1 {med[0]:.2f}, HasAns F1 {med[1]:.2f}.", ""]
    pos = load(HERE / "answer_positions.json")
    if pos is not None:
        w = pos["windows"]
        lines += ["## Where the answers sit (experiments/posinit/answer_positions.py)", "",
                  f"{w['n']:,} dev windows of ≤ 384 tokens: {100 * w['longer_than_128']:.1f} % longer than the 128 "
                  f"positions pretraining trained; {100 * w['answer_start_ge_128']:.1f} % of the {w['answer_windows']:,} "
                  "answer starts at window position ≥ 128.", "",
                  "| QA bundle | span F1, answer at < 128 (n) | span F1, answer at ≥ 128 (n) |", "|---|---:|---:|"]
        for b, v in pos["bundles"].items():
            a, z = v["span_f1_by_answer_position"]["lt128"], v["span_f1_by_answer_position"]["ge128"]
            lines.append(f"| `{b}` | {a['f1']:.1f} ({a['n']:,}) | {z['f1']:.1f} ({z['n']:,}) |")
        lines.append("")
        js["answer_positions"] = pos
    (HERE / "report.md").write_text("# QA fine-tuning seeds and position init (issue 15; dev scores)\n\n"
                                    + "\n".join(lines), encoding="utf-8")
    (HERE / "report.json").write_text(json.dumps(js, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
