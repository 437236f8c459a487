"""`denki quickstart`: the main job on the shipped sample, stage by stage; a finished stage is skipped."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"


def register(sub) -> None:
    p = sub.add_parser(
        "quickstart", help="run the whole pipeline on the shipped sample data",
        description="Run denki end to end on the sample data shipped in samples/ (no ../shared needed). "
                    "Each stage writes under --out and is skipped when its output already exists, so re-running "
                    "is cheap. Stages so far: train the tokenizer on samples/corpus_ja.txt, tokenize the corpus "
                    "to JSONL with original-string offsets.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/quickstart", help="output directory")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--no-demo", action="store_true", help="do not launch the demo at the end")
    p.set_defaults(func=cmd_quickstart)


def _stage(name: str, done: bool, fn) -> None:
    if done:
        print(f"[quickstart] {name}: done already (skipped)")
        return
    t0 = time.perf_counter()
    print(f"[quickstart] {name} …")
    fn()
    print(f"[quickstart] {name}: {time.perf_counter() - t0:.1f}s")


def cmd_quickstart(args) -> int:
    from models.tokenize_file import tokenize_file
    from models.tokenizer import JapaneseTokenizer, train_tokenizer

    out = Path(args.out)
    corpus = SAMPLES / "corpus_ja.txt"
    tok_dir = out / "tokenizer"
    tokens = out / "corpus_tokens.jsonl"
    _stage("1/2 tokenizer", (tok_dir / "vocab.txt").exists(),
           lambda: train_tokenizer([corpus], args.vocab_size, limit_alphabet=2500).save(tok_dir))
    stats = {}
    _stage("2/2 tokenize sample", tokens.exists(),
           lambda: stats.update(tokenize_file(tok_dir, corpus, tokens)))
    tok = JapaneseTokenizer.load(tok_dir)
    example = "ＡＢＣ株式会社の①番窓口は、東京都千代田区にあります。"
    enc = tok.encode(example)
    print("\nsummary")
    print(f"  tokenizer   {tok_dir}  ({tok.vocab_size} tokens)")
    print(f"  tokens      {tokens}" + (f"  ({stats['tokens']} tokens, {stats['chars_per_token']:.2f} chars/token)"
                                       if stats else ""))
    print(f"  example     {example}")
    print("  tokens      " + " ".join(f"{t}[{a}:{b}]" for t, (a, b) in zip(enc.tokens, enc.offsets)))
    return 0
