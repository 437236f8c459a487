"""`denki tokenizer train`: a MeCab → WordPiece vocabulary trained on a corpus."""
from __future__ import annotations

import argparse

from denki.models.io.corpus import CORPUS_HELP


def register(sub) -> None:
    grp = sub.add_parser("tokenizer", help="train a Japanese WordPiece tokenizer (MeCab words → WordPiece)",
                         description="Tokenizer commands.")
    grp.set_defaults(_group_parser=grp)
    gsub = grp.add_subparsers(dest="tokenizer_command", metavar="SUBCOMMAND")
    p = gsub.add_parser(
        "train", help="train a vocabulary on a corpus",
        description="Train a WordPiece vocabulary on MeCab (unidic-lite) words of an NFKC-normalised corpus. "
                    "Corpus files: UTF-8 plain text or .gz, one paragraph per line (blank lines skipped). "
                    "The output directory also loads in plain transformers as BertJapaneseTokenizer (the same "
                    "--mecab-dic and --lower-case settings, written to its tokenizer_config.json).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--corpus", nargs="+", required=True, metavar="SOURCE", help=CORPUS_HELP)
    p.add_argument("--vocab-size", type=int, default=8000, help="vocabulary size, special tokens included. Larger: fewer "
                   "tokens per text and fewer [UNK] on a big, varied corpus, but a bigger embedding table; smaller "
                   "for a small corpus or a tiny model")
    p.add_argument("--limit-alphabet", type=int, default=2500,
                   help="max distinct characters kept as single tokens (rarer ones become [UNK]). Raise it when "
                        "`denki tokenize` shows too many [UNK] on rare kanji; it must leave room in --vocab-size")
    p.add_argument("--min-frequency", type=int, default=2, help="min count for a merged piece; raise it on a noisy "
                   "corpus so that typos do not become tokens")
    p.add_argument("--model-max-length", type=int, default=512, help="max sequence length recorded in the "
                   "tokenizer config (transformers' model_max_length); match the model's position limit")
    p.add_argument("--mecab-dic", choices=("unidic_lite", "ipadic", "unidic"), default="unidic_lite",
                   help="MeCab dictionary (ipadic: as bert-base-japanese-whole-word-masking and izumi-lab's ELECTRA; "
                        "unidic needs `pip install unidic && python -m unidic download`)")
    p.add_argument("--lower-case", action="store_true",
                   help="lower-case the text (transformers' do_lower_case; offsets still index the original)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.set_defaults(func=cmd_train)


def cmd_train(args) -> int:
    import time

    from denki.models.text.settings import TokenizerSettings
    from denki.models.text.tokenizer import train_tokenizer

    t0 = time.perf_counter()
    tok = train_tokenizer(args.corpus, args.vocab_size, limit_alphabet=args.limit_alphabet,
                          min_frequency=args.min_frequency, model_max_length=args.model_max_length,
                          settings=TokenizerSettings(mecab_dic=args.mecab_dic, do_lower_case=args.lower_case))
    tok.save(args.out)
    print(f"tokenizer: {tok.vocab_size} tokens from {tok.config['train']['lines']} lines "
          f"in {time.perf_counter() - t0:.1f}s → {args.out}")
    return 0
