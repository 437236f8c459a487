"""Tokenizer throughput: denki's encoder (ids + original-string offsets) vs transformers' BertJapaneseTokenizer.

Same vocabulary, same texts, one process, interleaved rounds (the machine is noisy); prints sentences/s for both
(per CPU second and per wall second), the ratios, and checks that every text gets identical ids. denki memoises
WordPiece per word: "steady state" is a warm encoder (a service, or a batch job past its first rows), "cold word
cache" is the very first pass over unseen text. Also reports chars/token and [UNK] rate.

    python bench/tokenizer.py                      # trains/reuses an 8k tokenizer on the shared corpora
    python bench/tokenizer.py --tokenizer DIR --texts 5000 --rounds 3 --json out.json
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DATA = Path(os.environ.get("DENKI_SHARED_DATA", REPO.parent / "shared" / "data"))


def need(name: str) -> Path:
    p = DATA / name
    if not p.exists():
        sys.exit(f"bench/tokenizer.py: shared data file missing: {p} (set DENKI_SHARED_DATA)")
    return p


def sample_texts(n: int, seed: int = 0) -> list[str]:
    """Half corpus paragraphs (long), half livedoor titles and JaQuAD questions (short)."""
    rng = random.Random(seed)
    paras = []
    for name in ("corpus_manpages_ja.txt.gz", "corpus_wiki_ja.txt.gz"):
        with gzip.open(need(name), "rt", encoding="utf-8") as f:
            paras += [line.rstrip("\n") for line in f]
    short = []
    with gzip.open(need("livedoor_train.jsonl.gz"), "rt", encoding="utf-8") as f:
        short += [json.loads(line)["title"] for line in f]
    with gzip.open(need("jaquad_qtype_train.jsonl.gz"), "rt", encoding="utf-8") as f:
        short += [json.loads(line)["text"] for line in f]
    return rng.sample(paras, n // 2) + rng.sample(short, n - n // 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", help="tokenizer dir (default: train an 8k vocab on the shared corpora into "
                                        "runs/bench-tok8k, reused afterwards)")
    ap.add_argument("--texts", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from denki.models.text.tokenizer import JapaneseTokenizer, train_tokenizer

    tok_dir = Path(args.tokenizer) if args.tokenizer else REPO / "runs" / "bench-tok8k"
    if not (tok_dir / "vocab.txt").exists():
        t0 = time.perf_counter()
        train_tokenizer([need("corpus_manpages_ja.txt.gz"), need("corpus_wiki_ja.txt.gz")], 8000,
                        limit_alphabet=2500).save(tok_dir)
        print(f"trained 8k tokenizer on the shared corpora in {time.perf_counter() - t0:.1f}s → {tok_dir}")
    ours = JapaneseTokenizer.load(tok_dir)
    theirs = AutoTokenizer.from_pretrained(str(tok_dir))
    texts = sample_texts(args.texts)
    n_chars = sum(map(len, texts))

    # correctness first: identical ids on every text
    same = 0
    n_tok = n_unk = 0
    for t in texts:
        a = ours.encode(t, truncation=False).ids
        same += a == theirs(t, truncation=False)["input_ids"]
        n_tok += len(a) - 2
        n_unk += a.count(ours.unk_id)

    def run_ours():
        return [e.offsets for e in ours.encode_batch(texts, truncation=False)]

    def run_ours_cold():
        ours._cache.clear()  # first pass over unseen words: every WordPiece computed, nothing memoised
        return run_ours()

    def run_theirs():
        return theirs(texts, truncation=False)["input_ids"]

    # Both encoders are single-threaded, so process CPU time is the fair clock on a shared machine; wall time is
    # reported beside it. Warm-up (one pass each) is excluded; rounds are interleaved.
    runs = {"denki (ids+offsets), steady state": run_ours,
            "denki (ids+offsets), cold word cache": run_ours_cold,
            "transformers BertJapaneseTokenizer (ids only)": run_theirs}
    for fn in runs.values():
        fn()
    cpu = {k: [] for k in runs}
    wall = {k: [] for k in runs}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)
    res = {"texts": len(texts), "chars": n_chars, "identical_ids": same, "chars_per_token": n_chars / n_tok,
           "unk_rate": n_unk / n_tok, "vocab_size": ours.vocab_size, "rounds": args.rounds, "results": {}}
    print(f"{len(texts)} texts, {n_chars} chars; identical ids: {same}/{len(texts)}; "
          f"{n_chars / n_tok:.2f} chars/token, [UNK] {n_unk / n_tok:.3%}")
    print(f"  {'encoder':48s} {'sent/s (CPU)':>13s} {'sent/s (wall)':>14s}")
    for name in runs:
        c, w = statistics.median(cpu[name]), statistics.median(wall[name])
        res["results"][name] = {"cpu_s": c, "wall_s": w, "sentences_per_cpu_s": len(texts) / c,
                                "sentences_per_wall_s": len(texts) / w}
        print(f"  {name:48s} {len(texts) / c:13.0f} {len(texts) / w:14.0f}")
    base = "transformers BertJapaneseTokenizer (ids only)"
    for name in list(runs)[:2]:
        r_cpu = statistics.median(cpu[base]) / statistics.median(cpu[name])
        r_wall = statistics.median(wall[base]) / statistics.median(wall[name])
        res["results"][name]["speedup_cpu"] = r_cpu
        res["results"][name]["speedup_wall"] = r_wall
        print(f"  speed-up {name}: {r_cpu:.2f}× (CPU time), {r_wall:.2f}× (wall)")
    print("  goal: ≥ 3× with identical ids")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
