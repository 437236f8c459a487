"""An unbiased check of a QA bundle's dev score: the null threshold tuned on one half of the dev questions, scored
on the other half (and the reverse), instead of tuned and scored on the same questions as the report does.
    python experiments/qa-cc1/halfsplit.py QA_BUNDLE DEV_FILE [OUT_JSON]      (one thread; ~3 min for jaquad_dev)"""
import json
import sys

import numpy as np
import torch

from denki.models.bundle.format import read_task
from denki.models.bundle.pytorch import load_model
from denki.models.io.fileio import atomic_write_json
from denki.models.qa.data import read_qa
from denki.models.qa.features import build_features
from denki.models.qa.evaluate import THRESHOLD_AT
from denki.models.qa.report import golds_of
from denki.models.qa.predict import predict_results
from denki.models.qa.heads import qa_model_class
from denki.models.qa.metrics import squad_v2_metrics
from denki.models.qa.postprocess import apply_threshold
from denki.models.text.tokenizer import JapaneseTokenizer

KEYS = ("f1", "exact", "HasAns_f1", "NoAns_exact")


def main(bundle: str, dev: str, out: str | None = None) -> None:
    torch.set_num_threads(1)
    task = read_task(bundle)
    model = load_model(bundle, qa_model_class(bundle, task.get("answerable_head", False)), kinds=("qa",))
    tok = JapaneseTokenizer.load(bundle)
    feats = build_features(read_qa(dev).examples, tok, max_length=task["max_length"], doc_stride=task["doc_stride"],
                           progress=False)
    rule = task.get("null_rule", "cls")
    res = predict_results(model, feats, tok, n_best=task.get("n_best", 20), max_answer_length=task["max_answer_length"],
                          null_threshold=0.0, null_rule=rule, progress=False)
    golds = golds_of(feats.examples)
    ids = sorted(res)
    perm = np.random.default_rng(0).permutation(len(ids))
    halves = [[ids[i] for i in perm[: len(ids) // 2]], [ids[i] for i in perm[len(ids) // 2:]]]
    rows = {}
    for k, (tune, test) in enumerate((halves, halves[::-1])):
        tuned = squad_v2_metrics({q: golds[q] for q in tune}, {q: res[q] for q in tune}, threshold_at=THRESHOLD_AT)
        thr = float(tuned["best_f1_thresh"])
        scored = dict(zip(test, apply_threshold([res[q] for q in test], thr, rule)))
        m = squad_v2_metrics({q: golds[q] for q in test}, scored, threshold_at=THRESHOLD_AT)
        rows[f"tune_half{k}_test_half{1 - k}"] = {"threshold": thr, "n_test": len(test),
                                                   "tuned_half_best_f1": tuned["best_f1"],
                                                   **{key: m[key] for key in KEYS}}
        print(f"threshold {thr:.3f} tuned on half {k} (best F1 there {tuned['best_f1']:.2f}); on half {1 - k} "
              f"({len(test)} q): " + ", ".join(f"{key} {m[key]:.2f}" for key in KEYS), flush=True)
    mean = {key: float(np.mean([r[key] for r in rows.values()])) for key in KEYS}
    print("mean of the two held-out halves: " + ", ".join(f"{key} {v:.2f}" for key, v in mean.items()))
    if out:
        atomic_write_json(out, {"bundle": bundle, "dev": dev, "halves": rows, "mean": mean})


if __name__ == "__main__":
    main(*sys.argv[1:])
