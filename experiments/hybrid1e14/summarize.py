"""Collect experiments/hybrid1e14/run.sh's outputs into experiments/hybrid1e14/ (report.md|json, fine-tuning reports, pretraining
summaries and metrics) with the two-stage experiment's summarizer.
    python experiments/hybrid1e14/summarize.py        (reads runs/hybrid; missing cells are shown as "—")"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "twostage"))
from summarize import summarize  # noqa: E402

ENCODERS = [  # (name, pretraining run dirs whose summaries are kept, fine-tuning dir prefix)
    ("random init (re-run on this machine)", [], "ft-random"),
    ("ELECTRA + corrective MLM, mask 15 %", ["electra-mlm-1e14"], "ft-electra-mlm-1e14"),
    ("ELECTRA + corrective MLM, mask 40 %", ["electra-mlm-m40-1e14"], "ft-electra-mlm-m40-1e14"),
    ("ELECTRA, mask 15 % (pure RTD control)", ["electra-1e14"], "ft-electra-1e14"),
    ("MLM, mask 40 % (control, the tiny default)", ["mlm-m40-1e14"], "ft-mlm-m40-1e14"),
    ("electra-mlm 15 %: its transformer layers, random embeddings", [], "ft-swap-layers-only"),
    ("electra-mlm 15 %: its embeddings, random transformer layers", [], "ft-swap-embeddings-only"),
    ("ELECTRA: its transformer layers, random embeddings", [], "ft-swap-electra-layers-only"),
    ("ELECTRA: its embeddings, random transformer layers", [], "ft-swap-electra-embeddings-only"),
]

if __name__ == "__main__":
    sys.exit(summarize(Path("runs/hybrid"), Path(__file__).resolve().parent, ENCODERS,
                       "ELECTRA + the discriminator's corrective MLM at 1e14 FLOPs (experiments/hybrid1e14/run.sh)"))
