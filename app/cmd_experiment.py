"""`denki experiment electra-vs-mlm`: ELECTRA vs MLM vs random init at equal pretraining FLOPs."""
from __future__ import annotations

import argparse

from denki.models.io.corpus import CORPUS_HELP


def register(sub) -> None:
    p = sub.add_parser("experiment", help="reproducible experiments (ELECTRA vs MLM at equal compute)",
                       description="Reproduce published comparisons on your own corpus.")
    p.set_defaults(_group_parser=p)
    esub = p.add_subparsers(dest="experiment_command", metavar="EXPERIMENT")
    e = esub.add_parser(
        "electra-vs-mlm", help="pretrain ELECTRA and MLM at equal FLOPs, fine-tune on tasks, compare",
        description="For each --flops-budgets B: pretrain ELECTRA (replaced-token detection) and an MLM encoder "
                    "with B training FLOPs, plus one random-init control; fine-tune each on each task with every "
                    "seed; evaluate on dev. Writes OUT/report.md, OUT/report.json and OUT/score_vs_flops.png. "
                    "Every stage is cached under OUT: re-running the same command resumes and skips finished "
                    "stages (budgets, tasks and seeds may be added). Built-in tasks read "
                    "--data-dir: livedoor-title, livedoor-text, jaquad-qtype, manpages-section (classification, "
                    "dev macro-F1), jaquad-qa, jsquad-qa (SQuAD 2.0, dev best-threshold F1). Own tasks: "
                    "--task NAME=classify:TRAIN:DEV[:TEXTFIELD[:LABELFIELD]], NAME=qa:TRAIN:DEV or a JSON file "
                    "{name, kind, train, dev, text_field, label_field}.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    e.add_argument("--corpus", nargs="+", required=True, metavar="SOURCE", help=CORPUS_HELP)
    e.add_argument("--tokenizer", required=True, metavar="DIR", help="tokenizer directory (denki tokenizer train)")
    e.add_argument("--out", required=True, metavar="DIR", help="experiment directory (stages cached here)")
    e.add_argument("--size", choices=("tiny", "mini", "small", "base"), default="tiny")
    e.add_argument("--flops-budgets", required=True, metavar="B1,B2,…",
                   help="pretraining budgets in training FLOPs, e.g. 2e12,6e12,2e13")
    e.add_argument("--tasks", default="", metavar="T1,T2,…", help="built-in task names, comma-separated")
    e.add_argument("--task", action="append", default=[], metavar="SPEC",
                   help="an own task (repeatable): NAME=classify:TRAIN:DEV[:TEXTFIELD[:LABELFIELD]], "
                        "NAME=qa:TRAIN:DEV or a JSON file")
    e.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per (model, task)")
    e.add_argument("--data-dir", default=None, help="folder of the built-in tasks' files "
                                                    "(default $DENKI_SHARED_DATA or ../shared/data)")
    e.add_argument("--max-train", type=int, default=2000, help="subsample each task's train set (0 = all)")
    e.add_argument("--max-dev", type=int, default=500, help="subsample each task's dev set (0 = all)")
    e.add_argument("--epochs", type=float, default=None,
                   help="fine-tuning epochs (classification rounds to int; default: the fine-tuners' own, "
                        "classify 10 with early stopping, QA 2)")
    e.add_argument("--lr", type=float, default=None, help="fine-tuning LR (default: the fine-tuners' own)")
    e.add_argument("--max-length", type=int, default=128, help="classification max tokens")
    e.add_argument("--class-weights", choices=("none", "balanced", "auto"), default="none",
                   help="classification loss weights, as `denki finetune classify --class-weights`; none (the "
                        "loss of every experiment table in experiments/) keeps the encoders' comparisons "
                        "with those tables")
    e.add_argument("--qa-max-length", type=int, default=256, help="QA window length")
    e.add_argument("--qa-doc-stride", type=int, default=None, help="QA window stride (default: half the window)")
    e.add_argument("--batch-size", type=int, default=32, help="pretraining sequences per step")
    e.add_argument("--seq-len", type=int, default=128, help="pretraining sequence length")
    e.add_argument("--pretrain-lr", type=float, default=None, help="pretraining peak LR (default per size)")
    e.add_argument("--pretrain-seed", type=int, default=0)
    e.add_argument("--disc-weight", type=float, default=50.0, help="ELECTRA: λ in mlm + λ·disc")
    e.add_argument("--embeddings", choices=("shared", "separate"), default="shared",
                   help="ELECTRA generator/discriminator embeddings (see `denki pretrain --help`)")
    e.add_argument("--mask-prob", type=float, default=0.15,
                   help="share of tokens masked while pretraining, every objective (ELECTRA's generator input, "
                        "MLM's targets)")
    e.add_argument("--pretrain-dropout", type=float, default=None, metavar="P",
                   help="dropout while pretraining, every objective (unset: 0.1)")
    e.add_argument("--objectives", default="electra,mlm", metavar="O1,O2",
                   help="pretraining objectives to compare (electra, mlm); e.g. 'electra' to add an ELECTRA "
                        "variant beside an MLM run made before")
    e.add_argument("--electra15", action="store_true",
                   help="also pretrain the paper's 'ELECTRA 15%%' ablation (discriminator loss on the masked "
                        "positions only) at every budget")
    e.add_argument("--no-random-init", action="store_true", help="skip the random-init control")
    e.add_argument("--keep-finetuned", action="store_true", help="keep every fine-tuned bundle (disk)")
    e.add_argument("--device", default="auto", help="auto | cpu | cuda")
    e.add_argument("--threads", type=int, default=None, help="torch CPU threads (per job with --jobs)")
    e.add_argument("--jobs", type=int, default=1,
                   help="run the pretraining runs, then the fine-tuning runs, this many at a time in separate "
                        "processes (same results; log lines interleave). On a GPU a small model leaves idle "
                        "(a small encoder used ~1%% of an H200 per run), several jobs share it; on CPU give each "
                        "job --threads cores")
    e.add_argument("--cache-dir", default=None, help="token cache (default ~/.cache/denki/corpus)")
    e.add_argument("--no-progress", action="store_true", help="no per-stage tqdm bars (stage lines stay)")
    e.set_defaults(func=cmd_electra_vs_mlm)


def _objectives(text: str) -> tuple[str, ...]:
    from denki.models.io.errors import DenkiError

    objs = tuple(dict.fromkeys(o.strip() for o in text.split(",") if o.strip()))
    bad = [o for o in objs if o not in ("electra", "mlm")]
    if bad or not objs:
        raise DenkiError(f"--objectives takes electra and/or mlm (comma-separated), not {text!r}"
                         " (the ELECTRA 15% ablation has its own flag, --electra15)")
    return objs


def cmd_electra_vs_mlm(args) -> int:
    from denki.models.io.errors import DenkiError
    from denki.pretrain.experiment.plan import ExperimentConfig, default_data_dir, parse_budgets, parse_task
    from denki.pretrain.experiment.run import run_experiment

    data_dir = args.data_dir or default_data_dir()
    names = [t.strip() for t in args.tasks.split(",") if t.strip()] + list(args.task)
    if not names:
        raise DenkiError("give --tasks (built-in names) and/or --task SPEC")
    cfg = ExperimentConfig(
        corpus=list(args.corpus), tokenizer=args.tokenizer, out=args.out,
        tasks=[parse_task(n, data_dir) for n in names], budgets=parse_budgets(args.flops_budgets), size=args.size,
        seeds=args.seeds, batch_size=args.batch_size, seq_len=args.seq_len, pretrain_lr=args.pretrain_lr,
        pretrain_seed=args.pretrain_seed, objectives=_objectives(args.objectives), disc_weight=args.disc_weight,
        embeddings=args.embeddings, pretrain_dropout=args.pretrain_dropout, mask_prob=args.mask_prob,
        random_init=not args.no_random_init, electra15=args.electra15, epochs=args.epochs, lr=args.lr,
        max_length=args.max_length, class_weights=args.class_weights, qa_max_length=args.qa_max_length,
        qa_doc_stride=args.qa_doc_stride,
        max_train=args.max_train or None, max_dev=args.max_dev or None, keep_finetuned=args.keep_finetuned,
        device=args.device, threads=args.threads, jobs=args.jobs, cache_dir=args.cache_dir,
        progress=not args.no_progress)
    run_experiment(cfg)
    return 0
