"""Collect this experiment's outputs (experiments/eps1e14/run.sh, experiments/clscontrast1e14/run.sh and levers.sh, the third
pretraining seed of experiments/skipspecial1e14/seeds.sh, the random-init control and the mean-pooling probe
experiments/skipspecial1e14/meanpool.sh, all on one machine)
into experiments/clscontrast1e14/ (report.md|json, fine-tuning reports, pretraining summaries and metrics).
    python experiments/clscontrast1e14/summarize.py        (reads runs/hybrid; missing cells are shown as "—")"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "twostage"))
from summarize import summarize  # noqa: E402

ENCODERS = [  # (name, pretraining run dirs whose summaries are kept, fine-tuning dir prefix)
    ("random init (control, re-run on this machine)", [], "ft-random"),
    ("ELECTRA (control), pretraining seed 2", ["electra-1e14-s2"], "ft-electra-1e14-s2"),
    ("ELECTRA --disc-skip-special, pretraining seed 2", ["electra-skip-1e14-s2"], "ft-electra-skip-1e14-s2"),
    ("ELECTRA --disc-skip-special --adam-eps 1e-6", ["electra-skip-eps6-1e14"], "ft-electra-skip-eps6-1e14"),
    ("ELECTRA --disc-skip-special --cls-contrast 1", ["electra-skip-cc1-1e14"], "ft-electra-skip-cc1-1e14"),
    ("ELECTRA --disc-skip-special --cls-contrast 1, pretraining seed 1", ["electra-skip-cc1-1e14-s1"],
     "ft-electra-skip-cc1-1e14-s1"),
    ("ELECTRA --disc-skip-special --cls-contrast 1, pretraining seed 2", ["electra-skip-cc1-1e14-s2"],
     "ft-electra-skip-cc1-1e14-s2"),
    ("ELECTRA --cls-contrast 1 (without --disc-skip-special)", ["electra-cc1-1e14"], "ft-electra-cc1-1e14"),
    ("ELECTRA --disc-skip-special --lr 2e-3 (stopped at step 1,600: collapsed)", ["electra-skip-lr2e3-1e14"], None),
    ("mean-pooling head: random init", [], "meanpool-random"),
    ("mean-pooling head: ELECTRA --disc-skip-special, seed 2", [], "meanpool-electra-skip-1e14-s2"),
    ("mean-pooling head: ELECTRA --disc-skip-special --cls-contrast 1", [], "meanpool-electra-skip-cc1-1e14"),
]

if __name__ == "__main__":
    sys.exit(summarize(Path("runs/hybrid"), Path(__file__).resolve().parent, ENCODERS,
                       "Adam's ε, a third pretraining seed of --disc-skip-special, and a [CLS] contrastive loss, "
                       "at 1e14 FLOPs (experiments/clscontrast1e14)"))
