"""Which score should the fusion's grid search maximise on dev — macro-F1 (the reported metric, but jumpy), the NLL
of the fused probabilities (smooth) or accuracy? For each kept router bundle given, the encoder's dev logits (PyTorch,
fp32) and the TF-IDF model's (refitted on the train file exactly as finetune does) are fused under each criterion and
scored by cross-fitting (5 stratified folds, the setting chosen on the other four), repeated over 5 fold seeds.

Rule, written before running it: the criterion with the highest mean cross-fitted macro-F1 over the cells becomes
the default; macro-F1 (the current one) stays unless another beats it by ≥ 0.2 points on that mean.

    python experiments/fused-router/criteria.py CELL=BUNDLE:TRAIN:DEV:FIELD ...   → criteria.json + a table
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))


def encoder_logits(bundle: str, texts: list[str]):
    import torch
    from transformers import AutoModelForSequenceClassification

    from denki.models.bundle.format import read_task
    from denki.models.bundle.pytorch import load_model
    from denki.models.classify.predict import encode_texts, predict_logits
    from denki.models.text.tokenizer import JapaneseTokenizer

    net = load_model(bundle, AutoModelForSequenceClassification).eval()
    tok = JapaneseTokenizer.load(bundle)
    ids, _ = encode_texts(tok, texts, int(read_task(bundle).get("max_length", 128)), progress=False)
    return predict_logits(net, ids, pad_id=tok.pad_id, batch_size=128, device=torch.device("cpu"), bf16=False,
                          progress=False)


def main() -> None:
    import numpy as np

    from denki.models.bundle.format import read_task
    from denki.models.classify.baseline import tfidf_baseline
    from denki.models.classify.evaluate import label_indices
    from denki.models.classify.fusion import CRITERIA, choose_fusion
    from denki.models.io.records import read_labelled

    out = json.loads((HERE / "criteria.json").read_text()) if (HERE / "criteria.json").is_file() else {}
    for arg in sys.argv[1:]:
        name, spec = arg.split("=", 1)
        bundle, train_path, dev_path, field = spec.split(":")
        labels = read_task(bundle)["labels"]
        train, dev = read_labelled(train_path, field, "label"), read_labelled(dev_path, field, "label")
        tg = label_indices(train.labels, labels, train.path, train.lines)
        dg = label_indices(dev.labels, labels, dev.path, dev.lines)
        lex = tfidf_baseline(train.texts, tg, dev.texts, dg, labels, keep_model=True)["model"].logits(dev.texts)
        enc = encoder_logits(bundle, dev.texts).astype(np.float64)
        out[name] = {c: [choose_fusion(enc, lex, dg, labels, seed=s, criterion=c)["crossfit"]["macro_f1"]
                         for s in range(5)] for c in CRITERIA}
        print(name, {c: round(statistics.mean(v), 4) for c, v in out[name].items()}, flush=True)
    (HERE / "criteria.json").write_text(json.dumps(out, indent=2) + "\n")
    print("| cell | " + " | ".join(CRITERIA) + " |\n|---|" + "---:|" * len(CRITERIA))
    for name, r in out.items():
        print(f"| {name} | " + " | ".join(f"{statistics.mean(r[c]):.4f}" for c in CRITERIA) + " |")
    means = {c: statistics.mean(statistics.mean(r[c]) for r in out.values()) for c in CRITERIA}
    print("| mean | " + " | ".join(f"{means[c]:.4f}" for c in CRITERIA) + " |")


if __name__ == "__main__":
    main()
