"""Collect the --cls-contrast follow-up at 1e14 FLOPs (experiments/clscontrast1e14/run.sh with SKIP=0: pretraining seeds
0–2 at weight 1, and the weights 0.3 and 3 at seed 0; experiments/cc1e14/run.sh: lr 3e-4, lr 5e-4 and a ⅛-width generator with
weight 1, lr 1e-3 and 3e-4 at 3e13 FLOPs (BUDGET=3e13) and lr 1e-3 at 2e14 (BUDGET=2e14; seeds 0 and 1), electra-mlm and
batch 16; the random-init control; all on one machine) into
experiments/cc1e14/ (report.md|json, fine-tuning reports, pretraining summaries and metrics).
    python experiments/cc1e14/summarize.py        (reads runs/hybrid; missing cells are shown as "—")"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "twostage"))
from summarize import summarize  # noqa: E402

ENCODERS = [  # (name, pretraining run dirs whose summaries are kept, fine-tuning dir prefix)
    ("random init (control, re-run on this machine)", [], "ft-random"),
    ("ELECTRA (control, the paper's loss), pretraining seed 2", ["electra-1e14-s2"], "ft-electra-1e14-s2"),
    ("ELECTRA --cls-contrast 1, pretraining seed 0", ["electra-cc1-1e14"], "ft-electra-cc1-1e14"),
    ("ELECTRA --cls-contrast 1, pretraining seed 1", ["electra-cc1-1e14-s1"], "ft-electra-cc1-1e14-s1"),
    ("ELECTRA --cls-contrast 1, pretraining seed 2", ["electra-cc1-1e14-s2"], "ft-electra-cc1-1e14-s2"),
    ("ELECTRA --cls-contrast 0.3, pretraining seed 0", ["electra-cc0.3-1e14"], "ft-electra-cc0.3-1e14"),
    ("ELECTRA --cls-contrast 3, pretraining seed 0", ["electra-cc3-1e14"], "ft-electra-cc3-1e14"),
    ("ELECTRA --cls-contrast 1 --lr 3e-4 (the tiny RTD default lr)", ["electra-cc1-lr3e4-1e14"],
     "ft-electra-cc1-lr3e4-1e14"),
    ("ELECTRA --cls-contrast 1 --lr 5e-4", ["electra-cc1-lr5e4-1e14"], "ft-electra-cc1-lr5e4-1e14"),
    ("ELECTRA --cls-contrast 1, lr 1e-3, at 3e13 FLOPs", ["electra-cc1-lr1e3-3e13"], "ft-electra-cc1-lr1e3-3e13"),
    ("ELECTRA --cls-contrast 1, lr 3e-4, at 3e13 FLOPs", ["electra-cc1-lr3e4-3e13"], "ft-electra-cc1-lr3e4-3e13"),
    ("ELECTRA --cls-contrast 1 --gen-size 0.125 (⅛-width generator)", ["electra-cc1-g8-1e14"],
     "ft-electra-cc1-g8-1e14"),
    ("ELECTRA --cls-contrast 1, lr 1e-3, at 2e14 FLOPs (the top budget)", ["electra-cc1-lr1e3-2e14"],
     "ft-electra-cc1-lr1e3-2e14"),
    ("ELECTRA --cls-contrast 1, lr 1e-3, at 2e14 FLOPs, pretraining seed 1", ["electra-cc1-lr1e3s1-2e14"],
     "ft-electra-cc1-lr1e3s1-2e14"),
    ("ELECTRA --cls-contrast 1 --objective electra-mlm (the corrective MLM too)", ["electra-cc1-emlm-1e14"],
     "ft-electra-cc1-emlm-1e14"),
    ("ELECTRA --cls-contrast 1 --batch-size 16 --lr 7e-4 (twice the steps)", ["electra-cc1-b16-1e14"],
     "ft-electra-cc1-b16-1e14"),
]

if __name__ == "__main__":
    sys.exit(summarize(Path("runs/hybrid"), Path(__file__).resolve().parent, ENCODERS,
                       "--cls-contrast without --disc-skip-special at 1e14 FLOPs: pretraining seeds and weights "
                       "(experiments/cc1e14)"))
