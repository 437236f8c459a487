"""Print the QA table of experiments/qa-cc1/README.md (and the rows of experiments/qa-lr and experiments/qaseeds)
from the reports kept in experiments/ (experiments/qa-cc1/*/report.json, the MLM 15 % row of experiments/qa-top/, the
lr row of experiments/qa-lr/).
    python experiments/qa-cc1/table.py"""
import json
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
ROWS = [  # (label, report)
    ("ELECTRA `--lr 1e-3 --cls-contrast 1`, 1e14 FLOPs", DOCS / "qa-cc1/electra-cc1-1e14/report.json"),
    ("ELECTRA `--lr 1e-3 --cls-contrast 1`, 2e14 FLOPs", DOCS / "qa-cc1/electra-cc1-2e14/report.json"),
    ("the same, QA fine-tuning seed 1 (2 threads)", DOCS / "qa-cc1/electra-cc1-2e14-seed1/report.json"),
    ("the same, QA fine-tuning seed 2", DOCS / "qa-cc1/electra-cc1-2e14-seed2/report.json"),
    ("random init (control, `--init-random tiny`)", DOCS / "qa-cc1/random/report.json"),
    ("MLM 40 % (the tiny default), 2e14 FLOPs", DOCS / "qa-cc1/mlm-m40-2e14/report.json"),
    ("*MLM 15 %, 2e14 FLOPs (another machine)*", DOCS / "qa-top/report.json"),
    ("ELECTRA cc1 2e14, QA `--lr 3e-4` (seed 0)", DOCS / "qa-lr/electra-cc1-2e14-lr3e-4/report.json"),
    # experiments/qaseeds/run.sh: the encoders of pretraining seed 2 (QA fine-tuning seed 0), both on machine B
    ("ELECTRA `--lr 1e-3 --cls-contrast 1`, 2e14, **pretraining seed 2**", DOCS / "qa-cc1/electra-cc1-2e14-s2/report.json"),
    ("MLM 40 %, 2e14, **pretraining seed 2**", DOCS / "qa-cc1/mlm-m40-2e14-s2/report.json"),
]


def main() -> None:
    print("| encoder (tiny), QA 1 epoch | best F1 (threshold) | HasAns F1 | NoAns acc | HasAns span F1 (always "
          "answering) | train loss (end) | train s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, path in ROWS:
        if not path.is_file():
            print(f"| {label} | — | — | — | — | — | — |")
            continue
        r = json.loads(path.read_text(encoding="utf-8"))
        m, s = r["dev_metrics"], r["seeds"][0]
        print(f"| {label} | {m['best_f1']:.2f} ({m['best_f1_thresh']:.2f}) | {m['HasAns_f1']:.2f} | "
              f"{m['NoAns_exact']:.2f} | {m['HasAns_span_f1']:.1f} | {s['final_loss']:.2f} | {s['train_seconds']:.0f} |")


if __name__ == "__main__":
    main()
