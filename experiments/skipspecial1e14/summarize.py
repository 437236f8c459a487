"""Collect experiments/skipspecial1e14/run.sh's and meanpool.sh's outputs into experiments/skipspecial1e14/ (report.md|json,
fine-tuning reports, pretraining summaries and metrics), beside the same machine's controls from experiments/hybrid1e14.
    python experiments/skipspecial1e14/summarize.py        (reads runs/hybrid; missing cells are shown as "—")"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "twostage"))
from summarize import summarize  # noqa: E402

ENCODERS = [  # (name, pretraining run dirs whose summaries are kept, fine-tuning dir prefix)
    ("random init (control, experiments/hybrid1e14)", [], "ft-random"),
    ("ELECTRA, --disc-skip-special", ["electra-skip-1e14"], "ft-electra-skip-1e14"),
    ("ELECTRA (control, experiments/hybrid1e14)", [], "ft-electra-1e14"),
    ("ELECTRA, --disc-skip-special, pretraining seed 1", ["electra-skip-1e14-s1"], "ft-electra-skip-1e14-s1"),
    ("ELECTRA (control), pretraining seed 1", ["electra-1e14-s1"], "ft-electra-1e14-s1"),
    ("electra-mlm, --disc-skip-special", ["electra-mlm-skip-1e14"], "ft-electra-mlm-skip-1e14"),
    ("electra-mlm (control, experiments/hybrid1e14)", [], "ft-electra-mlm-1e14"),
    ("MLM 40 % (control, experiments/hybrid1e14)", [], "ft-mlm-m40-1e14"),
    ("mean-pooling head: random init", [], "meanpool-random"),
    ("mean-pooling head: ELECTRA", [], "meanpool-electra-1e14"),
    ("mean-pooling head: electra-mlm", [], "meanpool-electra-mlm-1e14"),
    ("mean-pooling head: MLM 40 %", [], "meanpool-mlm-m40-1e14"),
    ("mean-pooling head: ELECTRA --disc-skip-special", [], "meanpool-electra-skip-1e14"),
    ("mean-pooling head: electra-mlm --disc-skip-special", [], "meanpool-electra-mlm-skip-1e14"),
]

if __name__ == "__main__":
    sys.exit(summarize(Path("runs/hybrid"), Path(__file__).resolve().parent, ENCODERS,
                       "The discriminator loss without [CLS]/[SEP], and a mean-pooling head, at 1e14 FLOPs "
                       "(experiments/skipspecial1e14)"))
