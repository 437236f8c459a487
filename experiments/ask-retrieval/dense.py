"""Dense retrieval (the general checkpoint's mean-pooled sentence vector) alone and fused with BM25 by reciprocal rank
fusion, against BM25 alone, on the two dev collections (experiments/ask-retrieval/README.md, "Dense retrieval fused
with BM25").

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 taskset -c 0 python experiments/ask-retrieval/dense.py

Vectors: the discriminator of a ``pretrained`` bundle (no fine-tuning), the bundle's own tokenizer, ``[CLS] text
[SEP]`` truncated to min(512, max positions) tokens, the mean of the last hidden layer over the non-padding tokens,
L2-normalised; cosine = inner product, an exact search with numpy (faiss is not installed here; on ≤ 1,144
passages an exact ``IndexFlatIP`` gives the same ranking). Fusion: RRF with k = 60 of the BM25 top 100 and the
dense ranking of every passage, score(p) = Σ over the rankings holding p of 1 / (60 + rank).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from denki.models.bundle.pytorch import load_model
from denki.models.retrieval.evaluate import squad_questions
from denki.models.retrieval.index import PassageIndex
from denki.models.retrieval.passages import read_passages
from denki.models.text.tokenizer import JapaneseTokenizer

ROOT = Path(__file__).resolve().parents[2]
D = ROOT.parent / "shared" / "data"
SETS = {"jsquad_valid": D / "jsquad_valid.squad2.json.gz", "jaquad_dev": D / "jaquad_dev.squad2.json.gz"}
KS = (1, 5, 20)
BM25_TOP = 100
RRF_K = 60


class Encoder:
    """Mean-pooled, L2-normalised last hidden layer of a bundle's discriminator."""

    def __init__(self, bundle: Path, batch: int = 32):
        from transformers import ElectraModel
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the discriminator head's weights are not ElectraModel's: expected
        try:
            self.model = load_model(bundle, ElectraModel, kinds=("pretrained",)).eval()
        finally:
            hf_logging.set_verbosity(verbosity)
        self.tok = JapaneseTokenizer.load(bundle)
        self.max_len = min(512, int(self.model.config.max_position_embeddings), int(self.tok.model_max_length or 512))
        self.batch = batch

    @torch.inference_mode()
    def __call__(self, texts: list[str]) -> np.ndarray:
        out = []
        for i in range(0, len(texts), self.batch):
            encs = [self.tok.encode(t, max_length=self.max_len, truncation=True) for t in texts[i:i + self.batch]]
            b = {k: torch.from_numpy(v) for k, v in self.tok.pad(encs).items()}
            h = self.model(**b).last_hidden_state                      # (batch, seq, hidden)
            m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
            v = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
            out.append(torch.nn.functional.normalize(v, dim=-1).numpy())
        return np.concatenate(out).astype(np.float32)


def metrics(ranks: list[float]) -> dict:
    """recall@1/5/20 and MRR from 1-based ranks of the gold passage (inf: not in the ranking)."""
    r = np.array(ranks, dtype=np.float64)
    n = len(r) or 1
    return {"recall_at": {str(k): float((r <= k).sum() / n) for k in KS},
            "mrr": float(np.where(np.isfinite(r), 1.0 / r, 0.0).sum() / n)}


def rrf(rankings: list[list[str]], k: int = RRF_K) -> list[str]:
    """Reciprocal rank fusion; ties keep the first ranking's order (then the second's)."""
    score: dict[str, float] = {}
    first: dict[str, int] = {}
    for ranking in rankings:
        for i, pid in enumerate(ranking):
            score[pid] = score.get(pid, 0.0) + 1.0 / (k + i + 1)
            first.setdefault(pid, len(first))
    return sorted(score, key=lambda p: (-score[p], first[p]))


def rank_of(ranking: list[str], gold: str) -> float:
    try:
        return float(ranking.index(gold) + 1)
    except ValueError:
        return float("inf")


def run_set(name: str, path: Path, enc: Encoder, tmp: Path, timed: int) -> dict:
    ps = list(read_passages(path))
    ids = [p.id for p in ps]
    qs = [q for q in squad_questions(path) if q.answerable]

    idx = PassageIndex.build([path], tmp / name)
    bm25 = [[h.passage.id for h in idx.search(q.question, k=BM25_TOP)] for q in qs]
    idx.close()

    t0 = time.perf_counter()
    P = enc([f"{p.title}\n{p.text}" for p in ps])
    p_enc_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    Q = enc([q.question for q in qs])
    q_enc_s = time.perf_counter() - t0

    # one question at a time, as `denki ask` would: tokenise + forward + pool + normalise
    enc_ms = []
    for q in qs[:timed]:
        t1 = time.perf_counter()
        enc([q.question])
        enc_ms.append((time.perf_counter() - t1) * 1e3)

    dense, search_ms = [], []
    for i in range(len(qs)):
        t1 = time.perf_counter()
        s = P @ Q[i]
        order = np.argsort(-s, kind="stable")
        search_ms.append((time.perf_counter() - t1) * 1e3)
        dense.append([ids[j] for j in order])

    fused = [rrf([b, d]) for b, d in zip(bm25, dense)]
    out = {"questions": len(qs), "passages": len(ps)}
    for key, rankings in (("bm25", bm25), ("dense", dense), ("rrf", fused)):
        out[key] = metrics([rank_of(r, q.passage_id) for r, q in zip(rankings, qs)])
    out["timing"] = {
        "passage_encode_s": round(p_enc_s, 1), "question_encode_batched_s": round(q_enc_s, 1),
        "query_encode_ms": {"questions": len(enc_ms),
                            **{f"p{p}": round(float(np.percentile(enc_ms, p)), 2) for p in (50, 90)}},
        "dense_search_ms": {f"p{p}": round(float(np.percentile(search_ms, p)), 3) for p in (50, 90)}}
    return out


def search_10k(dim: int, n: int = 10_000, queries: int = 1000) -> dict:
    """Exact inner-product search time over ``n`` unit vectors (random: the time does not depend on the values)."""
    rng = np.random.default_rng(0)
    P = rng.standard_normal((n, dim)).astype(np.float32)
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    Q = rng.standard_normal((queries, dim)).astype(np.float32)
    ms = []
    for q in Q:
        t1 = time.perf_counter()
        s = P @ q
        top = np.argpartition(-s, 100)[:100]
        top[np.argsort(-s[top], kind="stable")]
        ms.append((time.perf_counter() - t1) * 1e3)
    return {"passages": n, "dim": dim, "queries": queries, "top": 100,
            **{f"p{p}": round(float(np.percentile(ms, p)), 3) for p in (50, 90)}}


def table(res: dict) -> str:
    def cell(m):
        r = m["recall_at"]
        return f"{r['1']:.3f} / **{r['5']:.3f}** / {r['20']:.3f}, {m['mrr']:.3f}"

    names = {"bm25": "BM25 (FTS5, content words; top 100)", "dense": "dense (mean-pooled, cosine; all passages)",
             "rrf": "RRF k = 60 (BM25 top 100 + dense)"}
    rows = ["| | JSQuAD valid R@1 / **R@5** / R@20, MRR | JaQuAD dev R@1 / **R@5** / R@20, MRR |", "|---|---|---|"]
    for key, label in names.items():
        rows.append(f"| {label} | {cell(res['jsquad_valid'][key])} | {cell(res['jaquad_dev'][key])} |")
    rows.append("")
    rows.append("| | JSQuAD valid | JaQuAD dev |")
    rows.append("|---|---|---|")
    t = {k: res[k]["timing"] for k in SETS}
    rows.append("| query encoding p50 / p90 (ms, one question) | "
                + " | ".join(f"{t[k]['query_encode_ms']['p50']:.2f} / {t[k]['query_encode_ms']['p90']:.2f}"
                             for k in SETS) + " |")
    rows.append("| dense search p50 / p90 (ms, numpy, all passages) | "
                + " | ".join(f"{t[k]['dense_search_ms']['p50']:.3f} / {t[k]['dense_search_ms']['p90']:.3f}"
                             for k in SETS) + " |")
    rows.append("| passages encoded (s) | " + " | ".join(f"{t[k]['passage_encode_s']:.1f}" for k in SETS) + " |")
    s = res["dense_search_10k"]
    rows.append("")
    rows.append(f"Dense search over {s['passages']:,} random unit vectors ({s['dim']} dims, numpy, top {s['top']}): "
                f"p50 {s['p50']:.3f} ms, p90 {s['p90']:.3f} ms.")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "checkpoints" / "denki-electra-tiny-ja-1.7e15"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--timed-questions", type=int, default=500, help="questions encoded one at a time for p50")
    ap.add_argument("--out", default=str(Path(__file__).with_name("dense.json")))
    a = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    enc = Encoder(Path(a.model), batch=a.batch)
    res = {"model": Path(a.model).name, "max_tokens": enc.max_len, "pooling": "mean of last layer, non-padding",
           "search": "exact inner product, numpy (faiss not installed)", "bm25_top": BM25_TOP, "rrf_k": RRF_K,
           "torch_threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory() as t:
        for name, path in SETS.items():
            res[name] = run_set(name, path, enc, Path(t), a.timed_questions)
            print(name, json.dumps(res[name], ensure_ascii=False), file=sys.stderr, flush=True)
    res["dense_search_10k"] = search_10k(int(enc.model.config.hidden_size))
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    Path(a.out).write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(table(res))
    print(f"\nwall {res['wall_s']} s")


if __name__ == "__main__":
    main()
