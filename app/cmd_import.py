"""`denki import`: a public MeCab-WordPiece ELECTRA/BERT checkpoint (directory or cached hub id) → a
``pretrained`` bundle that `denki finetune`, `denki pretrain --init-from`, export and serving take."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser(
        "import", help="turn a transformers checkpoint (ELECTRA/BERT, MeCab + WordPiece) into a pretrained bundle",
        description="Import a transformers checkpoint directory (config.json + safetensors weights + the "
                    "BertJapaneseTokenizer files) or a hub id already in the local Hugging Face cache (never "
                    "downloaded) as a denki 'pretrained' bundle. Architectures: ElectraForPreTraining, ElectraModel, "
                    "ElectraForMaskedLM, BertForPreTraining, BertForMaskedLM, BertModel; --generator adds an ELECTRA "
                    "generator (ElectraForMaskedLM) for `denki pretrain --init-from`. The tokenizer (MeCab "
                    "unidic-lite / ipadic / unidic, lower-casing, special tokens from tokenizer_config.json) must "
                    "give ids identical to transformers' BertJapaneseTokenizer on built-in probe texts (and "
                    "--parity-texts), or nothing is written. Weights load only from safetensors.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", required=True, metavar="DIR_OR_HUB_ID",
                   help="checkpoint directory, or a hub id (e.g. tohoku-nlp/bert-base-japanese-v3) in the local cache")
    p.add_argument("--out", required=True, metavar="BUNDLE", help="output bundle directory")
    p.add_argument("--generator", metavar="DIR_OR_HUB_ID", default=None,
                   help="ELECTRA generator checkpoint (ElectraForMaskedLM, same vocabulary) kept for continued RTD; "
                        "give it when you will continue pretraining with `--objective electra`")
    p.add_argument("--parity-texts", metavar="FILE", default=None,
                   help="more texts (one per line, .txt/.gz) on which denki's ids must equal transformers'; give a "
                        "sample of your own corpus to check the tokenizer on your domain's words")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="Hugging Face hub cache to look hub ids up in (None: HF_HUB_CACHE, else "
                        "~/.cache/huggingface/hub)")
    p.add_argument("--revision", default=None, help="cached revision (branch, tag or commit) of a hub id; None: "
                   "the cache's main")
    p.set_defaults(func=cmd_import)


def cmd_import(args) -> int:
    import os
    import time

    # no network, whatever the environment says: hub ids resolve from the local cache only
    os.environ["HF_HUB_OFFLINE"] = "1"
    from denki.models.bundle.importer import import_checkpoint

    t0 = time.perf_counter()
    m = import_checkpoint(args.model, args.out, generator=args.generator, cache_dir=args.cache_dir,
                          revision=args.revision, parity_texts=args.parity_texts)
    imp, met = m["source"]["import"], m["metrics"]["import"]
    gen = f" + generator ({imp['generator']['architecture']})" if imp.get("generator") else ""
    print(f"import: {imp['architecture']}{gen}, {met['parameters'] / 1e6:.1f}M parameters, "
          f"{met['num_hidden_layers']} layers × {met['hidden_size']}, vocabulary {met['vocab_size']}; tokenizer "
          f"{m['source']['tokenizer_settings'] or 'denki defaults (unidic-lite, cased)'}, ids identical to "
          f"BertJapaneseTokenizer on {met['tokenizer_identical']}/{met['tokenizer_probe_texts']} probe texts "
          f"({time.perf_counter() - t0:.1f}s) → {args.out}")
    for note in imp.get("notes") or []:
        print(f"import: note: {note}")
    return 0
