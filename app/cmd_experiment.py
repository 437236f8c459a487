"""`denki experiment electra-vs-mlm`: ELECTRA vs MLM vs random init at equal pretraining FLOPs.

Every option's default is :class:`~pretrain.experiment.plan.ExperimentConfig`'s (read with ``field_default``);
what the experiment measured so far: docs/pretrain.md.
"""
from __future__ import annotations

import argparse

from denki.models.io.corpus import CORPUS_HELP
from denki.pretrain.experiment.plan import field_default as D

DESCRIPTION = (
    "For each --flops-budgets B: pretrain ELECTRA (replaced-token detection) and an MLM encoder with B training "
    "FLOPs, plus one random-init control; fine-tune each on each task with every seed; evaluate on dev. Writes "
    "OUT/report.md, OUT/report.json and OUT/score_vs_flops.png. Every stage is cached under OUT: re-running the "
    "same command resumes and skips finished stages (budgets, tasks and seeds may be added). Built-in tasks read "
    "--data-dir: livedoor-title, livedoor-text, jaquad-qtype, manpages-section (classification, dev macro-F1), "
    "jaquad-qa, jsquad-qa (SQuAD 2.0, dev best-threshold F1). Own tasks: "
    "--task NAME=classify:TRAIN:DEV[:TEXTFIELD[:LABELFIELD]], NAME=qa:TRAIN:DEV or a JSON file "
    "{name, kind, train, dev, text_field, label_field}. Guide: docs/pretrain.md.")


def register(sub) -> None:
    p = sub.add_parser("experiment", help="reproducible experiments (ELECTRA vs MLM at equal compute)",
                       description="Reproduce published comparisons on your own corpus.")
    p.set_defaults(_group_parser=p)
    esub = p.add_subparsers(dest="experiment_command", metavar="EXPERIMENT")
    e = esub.add_parser("electra-vs-mlm", help="pretrain ELECTRA and MLM at equal FLOPs, fine-tune on tasks, compare",
                        description=DESCRIPTION, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _add_plan_options(e)
    _add_finetune_options(e)
    _add_pretrain_options(e)
    _add_run_options(e)
    e.set_defaults(func=cmd_electra_vs_mlm)


def _add_plan_options(e) -> None:
    """What is compared: corpus, tokenizer, size, budgets, tasks, seeds and their data."""
    e.add_argument("--corpus", nargs="+", required=True, metavar="SOURCE", help=CORPUS_HELP)
    e.add_argument("--tokenizer", required=True, metavar="DIR", help="tokenizer directory (denki tokenizer train)")
    e.add_argument("--out", required=True, metavar="DIR", help="experiment directory (stages cached here)")
    e.add_argument("--size", choices=("tiny", "mini", "small", "base"), default=D("size"),
                   help="model size preset of every encoder")
    e.add_argument("--flops-budgets", required=True, metavar="B1,B2,…",
                   help="pretraining budgets in training FLOPs, e.g. 2e12,6e12,2e13")
    e.add_argument("--tasks", default="", metavar="T1,T2,…", help="built-in task names, comma-separated")
    e.add_argument("--task", action="append", default=[], metavar="SPEC",
                   help="an own task (repeatable): NAME=classify:TRAIN:DEV[:TEXTFIELD[:LABELFIELD]], "
                        "NAME=qa:TRAIN:DEV or a JSON file")
    e.add_argument("--seeds", type=int, default=D("seeds"),
                   help="fine-tuning seeds per (model, task); more seeds measure the noise a difference must beat")
    e.add_argument("--data-dir", default=None, help="folder of the built-in tasks' files "
                                                    "(default $DENKI_SHARED_DATA or ../shared/data)")
    e.add_argument("--max-train", type=int, default=D("max_train"), help="subsample each task's train set (0 = all)")
    e.add_argument("--max-dev", type=int, default=D("max_dev"), help="subsample each task's dev set (0 = all)")


def _add_finetune_options(e) -> None:
    """How every encoder is fine-tuned (the same for all of them)."""
    e.add_argument("--epochs", type=float, default=D("epochs"),
                   help="fine-tuning epochs (classification rounds to int; default: the fine-tuners' own, "
                        "classify 10 with early stopping, QA 2)")
    e.add_argument("--lr", type=float, default=D("lr"), help="fine-tuning LR (default: the fine-tuners' own)")
    e.add_argument("--max-length", type=int, default=D("max_length"), help="classification max tokens")
    e.add_argument("--class-weights", choices=("none", "balanced", "auto"), default=D("class_weights"),
                   help="classification loss weights, as `denki finetune classify --class-weights`; keep none "
                        "to compare with earlier experiments' tables, which used it")
    e.add_argument("--qa-max-length", type=int, default=D("qa_max_length"), help="QA window length")
    e.add_argument("--qa-doc-stride", type=int, default=D("qa_doc_stride"),
                   help="QA window stride (default: half the window)")


def _add_pretrain_options(e) -> None:
    """How every encoder is pretrained (see `denki pretrain --help`)."""
    e.add_argument("--batch-size", type=int, default=D("batch_size"), help="pretraining sequences per step")
    e.add_argument("--seq-len", type=int, default=D("seq_len"), help="pretraining sequence length")
    e.add_argument("--pretrain-lr", type=float, default=D("pretrain_lr"),
                   help="pretraining peak LR (default: `denki pretrain`'s, per size and objective)")
    e.add_argument("--pretrain-seed", type=int, default=D("pretrain_seed"))
    e.add_argument("--disc-weight", type=float, default=D("disc_weight"), help="ELECTRA: λ in mlm + λ·disc")
    e.add_argument("--embeddings", choices=("shared", "separate"), default=D("embeddings"),
                   help="ELECTRA generator/discriminator embeddings (see `denki pretrain --help`)")
    e.add_argument("--mask-prob", type=float, default=D("mask_prob"),
                   help="share of tokens masked while pretraining, every objective (ELECTRA's generator input, "
                        "MLM's targets)")
    e.add_argument("--pretrain-dropout", type=float, default=D("pretrain_dropout"), metavar="P",
                   help="dropout while pretraining, every objective (unset: 0.1)")
    e.add_argument("--objectives", default=",".join(D("objectives")), metavar="O1,O2",
                   help="pretraining objectives to compare (electra, mlm); e.g. 'electra' to add an ELECTRA "
                        "variant beside an MLM run made before")
    e.add_argument("--electra15", action="store_true",
                   help="also pretrain the paper's 'ELECTRA 15%%' ablation (discriminator loss on the masked "
                        "positions only) at every budget")
    e.add_argument("--no-random-init", action="store_true", help="skip the random-init control")


def _add_run_options(e) -> None:
    """Where and how the stages run."""
    e.add_argument("--keep-finetuned", action="store_true", help="keep every fine-tuned bundle (disk)")
    e.add_argument("--device", default=D("device"), help="auto | cpu | cuda")
    e.add_argument("--threads", type=int, default=D("threads"), help="torch CPU threads (per job with --jobs)")
    e.add_argument("--jobs", type=int, default=D("jobs"),
                   help="run the pretraining runs, then the fine-tuning runs, this many at a time in separate "
                        "processes (same results; log lines interleave). Raise it where one run leaves the "
                        "machine idle: a GPU driven by a small model, or several CPU cores (give each job "
                        "--threads cores)")
    e.add_argument("--cache-dir", default=D("cache_dir"),
                   help="token cache (default $DENKI_CACHE/corpus, i.e. ~/.cache/denki/corpus)")
    e.add_argument("--no-progress", action="store_true", help="no per-stage tqdm bars (stage lines stay)")


def cmd_electra_vs_mlm(args) -> int:
    from denki.pretrain.experiment.plan import ExperimentConfig
    from denki.pretrain.experiment.run import run_experiment

    run_experiment(ExperimentConfig.from_args(args))
    return 0
