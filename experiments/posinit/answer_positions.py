"""Where jaquad_dev's answers sit in the QA windows, and how well QA models find them there (issue 15).

`denki pretrain` trains position rows 0-127 only (--seq-len 128); a QA window is 384 tokens. This prints, for the
pretrained encoders and QA bundles named on the command line:
  - the norm of the trained and untrained position rows of each bundle;
  - how many dev windows are longer than 128 tokens, and how many answer starts sit at window position >= 128;
  - for each QA bundle, the span F1 when always answering (HasAns questions), split by the answer's position
    (< 128 / >= 128) in the first window that holds it.
    python experiments/posinit/answer_positions.py QA_BUNDLE… > experiments/posinit/answer_positions.json   (one thread)"""
import json
import sys

import numpy as np
import torch

from denki.models.bundle.pytorch import load_model
from denki.models.qa.data import read_qa
from denki.models.qa.features import build_features
from denki.models.qa.predict import predict_results
from denki.models.qa.heads import qa_model_class
from denki.models.qa.metrics import max_over_golds
from denki.models.text.tokenizer import JapaneseTokenizer

TRAINED = 128  # the pretraining --seq-len of every encoder compared here


def main(bundles: list[str]) -> None:
    torch.set_num_threads(1)
    dev = read_qa("../shared/data/jaquad_dev.squad2.json.gz")
    out = {"trained_positions": TRAINED, "bundles": {}}
    for b in bundles:
        tok = JapaneseTokenizer.load(b)
        f = build_features(dev.examples, tok, max_length=384, doc_stride=128, progress=False)
        lens = np.array([sum(e.attention_mask) for e in f.encodings])
        starts = f.start_positions[f.start_positions > 0]
        first = {}  # example → answer start in the first window that holds the answer
        for ei, s in zip(f.example_index, f.start_positions):
            if s > 0 and int(ei) not in first:
                first[int(ei)] = int(s)
        model = load_model(b, qa_model_class(b, False), kinds=("qa",))
        model.eval()
        pos = model.base_model.embeddings.position_embeddings.weight.detach().norm(dim=1)
        res = predict_results(model, f, tok, n_best=20, max_answer_length=30, null_threshold=0.0)
        f1 = {"lt128": [], "ge128": []}
        for i, ex in enumerate(f.examples):
            if ex.answer_texts and i in first:
                f1["lt128" if first[i] < TRAINED else "ge128"].append(max_over_golds(res[ex.id]["span_answer"],
                                                                                  ex.answer_texts)[1])
        out["windows"] = {"n": int(len(lens)), "longer_than_128": round(float((lens > TRAINED).mean()), 4),
                          "answer_windows": int(len(starts)),
                          "answer_start_ge_128": round(float((starts >= TRAINED).mean()), 4)}
        out["bundles"][b] = {
            "position_row_norm_trained": round(float(pos[:TRAINED].mean()), 4),
            "position_row_norm_untrained": round(float(pos[TRAINED:].mean()), 4),
            "span_f1_by_answer_position": {k: {"n": len(v), "f1": round(100 * float(np.mean(v)), 2)}
                                           for k, v in f1.items()}}
        print(b, out["bundles"][b], file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
