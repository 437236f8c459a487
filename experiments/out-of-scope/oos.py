"""Score out-of-scope detectors on the routers that run.sh fine-tunes (see README.md here for the rule).

For every router (a ``denki finetune classify`` run directory) and every candidate score (higher = more in scope),
the threshold is the 5th percentile of the score on the router's own tuning-dev rows (in scope by construction: no
out-of-scope text is used to choose anything), and the figures are the share of texts below it (sent to a human):

* held-out in-scope: inquiry dev rows that are not in samples/routing_dev.jsonl (the router never saw them);
* other-domain: 200 livedoor news titles + 200 JaQuAD questions (dev splits, ``Random(0)``);
* left-out desk: a leave-one-desk-out router's missing desk, all its inquiry dev rows.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SAMPLES = Path(__file__).resolve().parents[2] / "samples"
DESKS = ["宿泊", "飲食店", "観光スポット", "買い物", "タクシー", "天気"]
KEEP = 0.95  # the in-scope share of tuning dev kept above each threshold


def jsonl(path: Path) -> list[dict]:
    op = gzip.open if path.suffix == ".gz" else open
    with op(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def other_domain(n: int = 200) -> list[str]:
    news = [r["title"] for r in jsonl(DATA / "livedoor_dev.jsonl.gz")]
    qs = [r["text"] for r in jsonl(DATA / "jaquad_qtype_dev.jsonl.gz")]
    rng = random.Random(0)
    return rng.sample(news, n) + rng.sample(qs, n)


class Router:
    """A fine-tuned run's PyTorch model, its lexical model and its rule; every candidate score for a list of texts."""

    def __init__(self, run: Path):
        import torch
        from transformers import AutoModelForSequenceClassification

        from denki.models.bundle.format import read_task
        from denki.models.bundle.pytorch import load_model
        from denki.models.classify.lexical import LexicalModel
        from denki.models.text.tokenizer import JapaneseTokenizer

        self.torch = torch
        self.bundle = run / "bundle"
        self.task = read_task(self.bundle)
        self.net = load_model(self.bundle, AutoModelForSequenceClassification, kinds=("classifier",)).eval()
        self.tok = JapaneseTokenizer.load(self.bundle)
        self.train_texts = self._texts(run, "train")
        self.train_labels = self._texts(run, "train", "label")
        if self.task.get("fusion"):
            self.lex = LexicalModel.load(self.bundle)
        else:  # not fused (--fusion auto kept the encoder alone): the same TF-IDF model, fitted here
            from denki.models.classify.baseline import fit_tfidf

            idx = {k: i for i, k in enumerate(self.task["labels"])}
            vec, clf, _ = fit_tfidf(self.train_texts, np.array([idx[y] for y in self.train_labels]))
            self.lex = LexicalModel.from_sklearn(vec, clf, len(idx))
        self.dev_texts = self._texts(run, "dev")

    @staticmethod
    def _texts(run: Path, split: str, field: str = "text") -> list:
        source = json.loads((run / "bundle" / "manifest.json").read_text(encoding="utf-8"))["source"]
        return [r[field] for r in jsonl(Path(source[split]["path"]))]

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(logits (n, K), [CLS] hidden state of the last layer (n, H))``."""
        from denki.models.classify.predict import collate, encode_texts, length_batches

        ids, _ = encode_texts(self.tok, texts, int(self.task.get("max_length", 64)), progress=False)
        logits = np.zeros((len(texts), len(self.task["labels"])), dtype=np.float64)
        cls = None
        with self.torch.no_grad():
            for b in length_batches([len(x) for x in ids], 64):
                out = self.net(**collate(ids, np.asarray(b), self.tok.pad_id, "cpu"),
                               output_hidden_states=True)
                h = out.hidden_states[-1][:, 0].numpy()
                if cls is None:
                    cls = np.zeros((len(texts), h.shape[1]))
                logits[b] = out.logits.numpy()
                cls[b] = h
        return logits, cls

    def tfidf(self, texts: list[str]) -> np.ndarray:
        """Dense l2-normalised TF-IDF rows ``(n, F)`` in the lexical model's feature space."""
        f = len(self.lex.idf)
        out = np.zeros((len(texts), f), dtype=np.float32)
        for r, t in enumerate(texts):
            idx, w = self.lex.features(t)
            out[r, idx] = w
        return out

    def scores(self, texts: list[str]) -> dict[str, np.ndarray]:
        from denki.models.classify.decision import softmax
        from denki.models.classify.fusion import fused_logits

        if not hasattr(self, "_train"):
            self._train = self._reference()
        enc, cls = self.encode(texts)
        lex = self.lex.logits(texts)
        fused = fused_logits(self.task, enc, lex)
        t = float(self.task.get("temperature", 1.0))
        x = self.tfidf(texts)
        e = cls / np.linalg.norm(cls, axis=1, keepdims=True)
        ref = self._train
        known = np.array([len(self.lex._hits(s)) / max(1, _n_grams(s)) for s in texts])
        from denki.models.classify.decision import decide

        # the router's own abstention (its --target-precision), without a scope rule a newer router carries
        self.last_abstain = decide(fused, {k: v for k, v in self.task.items() if k != "scope"})[3]
        return {
            "msp (fused, calibrated)": softmax(fused / t, axis=1).max(1),
            "energy (encoder)": _lse(enc),
            "msp (TF-IDF LR)": softmax(lex, axis=1).max(1),
            "energy (TF-IDF LR)": _lse(lex),
            "TF-IDF nearest train text": (x @ ref["x"].T).max(1),
            "TF-IDF nearest desk centroid": (x @ ref["xc"].T).max(1),
            "n-grams known to the vocabulary": known,
            "encoder [CLS] nearest train text": (e @ ref["e"].T).max(1),
            "encoder [CLS] nearest desk centroid": (e @ ref["ec"].T).max(1),
        }

    def _reference(self) -> dict[str, np.ndarray]:
        x = self.tfidf(self.train_texts)
        _, cls = self.encode(self.train_texts)
        e = cls / np.linalg.norm(cls, axis=1, keepdims=True)
        labels = np.array(self.train_labels)
        cent = lambda m: np.stack([_unit(m[labels == k].mean(0)) for k in sorted(set(labels))])  # noqa: E731
        return {"x": x, "xc": cent(x), "e": e, "ec": cent(e)}


def _unit(v):
    return v / np.linalg.norm(v)


def _lse(z):
    m = z.max(1, keepdims=True)
    return (m + np.log(np.exp(z - m).sum(1, keepdims=True)))[:, 0]


def _n_grams(text: str) -> int:
    from denki.models.classify.lexical import char_ngrams

    return len(char_ngrams(text))


def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(an in-scope score > an out-of-scope score), ties half."""
    s = np.concatenate([pos, neg])
    ranks = s.argsort().argsort().astype(float) + 1
    return float((ranks[:len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=Path, default=Path("runs/oos"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sample_dev = {r["text"] for r in jsonl(SAMPLES / "routing_dev.jsonl")}
    dev = [r for r in jsonl(DATA / "inquiry_route_dev.jsonl.gz") if r["text"] not in sample_dev]
    other = other_domain()
    result: dict = {"keep": KEEP, "routers": {}}
    for name in ["all"] + [f"without-{d}" for d in DESKS]:
        run = args.runs / name
        if not (run / "bundle" / "manifest.json").is_file():
            continue
        router = Router(run)
        left_out = name.removeprefix("without-") if name != "all" else None
        inscope = [r["text"] for r in dev if r["label"] != left_out]
        sets = {"tune": router.dev_texts, "in-scope": inscope,
                ("left-out desk" if left_out else "other-domain"):
                    [r["text"] for r in dev if r["label"] == left_out] if left_out else other}
        s, abstain = {}, {}
        for k, v in sets.items():
            s[k] = router.scores(v)
            abstain[k] = router.last_abstain
        rows = {}
        for cand in s["tune"]:
            tau = float(np.quantile(s["tune"][cand], 1 - KEEP))
            row = {"threshold": tau}
            for k in sets:
                if k != "tune":
                    row[f"{k} → human"] = float((s[k][cand] < tau).mean())
            row["in-scope routed (with abstention)"] = float((~((s["in-scope"][cand] < tau) | abstain["in-scope"])).mean())
            oos = [k for k in sets if k not in ("tune", "in-scope")][0]
            row["auroc"] = auroc(s["in-scope"][cand], s[oos][cand])
            rows[cand] = row
        result["routers"][name] = {"abstain (router alone)": {k: float(abstain[k].mean()) for k in sets},
                                   "candidates": rows}
        print(f"\n== {name} (tune {len(sets['tune'])}, in-scope {len(inscope)}, "
              f"{oos} {len(sets[oos])})")
        for cand, row in rows.items():
            print(f"  {cand:38s} " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()))
    if args.json:
        args.json.write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
