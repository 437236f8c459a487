"""`denki tokenize`: a text file → JSONL of ids, tokens and offsets (golden vectors)."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    t = sub.add_parser(
        "tokenize", help="tokenize a text file to JSONL (ids, tokens, offsets; golden vectors)",
        description="Tokenize every line of a UTF-8 text file (.gz allowed). Output: one JSON line per input "
                    "line with `line`, `text`, `ids`, `tokens`, `offsets` ([start, end] into the original line; "
                    "[CLS]/[SEP] included with offsets [0, 0], as the model sees them). These lines double as "
                    "golden vectors for non-Python backends.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--tokenizer", required=True, metavar="DIR", help="tokenizer or model bundle directory")
    t.add_argument("--input", required=True, metavar="FILE", help="UTF-8 text file (.gz ok), one text per line")
    t.add_argument("--output", required=True, metavar="FILE.jsonl", help="where the JSON lines go")
    t.add_argument("--max-length", type=int, default=None,
                   help="truncate to this many tokens, [CLS]/[SEP] included (None: no truncation); set the "
                        "model's max_length to see exactly what it sees")
    t.set_defaults(func=cmd_tokenize)


def cmd_tokenize(args) -> int:
    from denki.models.text.tokenize_file import tokenize_file

    stats = tokenize_file(args.tokenizer, args.input, args.output, max_length=args.max_length)
    print(f"tokenize: {stats['lines']} lines, {stats['tokens']} tokens "
          f"({stats['unk_rate']:.2%} [UNK], {stats['chars_per_token']:.2f} chars/token) → {args.output}")
    return 0
