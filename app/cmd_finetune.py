"""`denki finetune classify` (a routing classifier) and `denki finetune qa` (extractive QA with no-answer)."""
from __future__ import annotations

import argparse

from denki.models.training.positions import POSITION_INITS


def register(sub) -> None:
    ft = sub.add_parser("finetune", help="fine-tune a pretrained bundle (classify: routing, qa: extractive QA)",
                        description="Fine-tuning commands.")
    ft.set_defaults(_group_parser=ft)
    ftsub = ft.add_subparsers(dest="finetune_command", metavar="TASK")
    _register_classify(ftsub)
    _register_qa(ftsub)


def add_qa_run_options(p) -> None:
    """Options `denki finetune qa` and `denki evaluate qa` share."""
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--strict", action="store_true",
                   help="stop at the first bad question instead of skipping and listing it")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


# ------------------------------------------------------------------------------------------------- classify
def _keep(value: str) -> float:
    """--scope-keep: a share in [0, 1) (0 = no out-of-scope check)."""
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share such as 0.95, got {value!r}") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1) (0 = off), got {v:g}")
    return v


def _min_recall(value: str) -> tuple[str, float]:
    lab, sep, v = value.rpartition("=")
    if not sep or not lab:
        raise argparse.ArgumentTypeError(f"expected LABEL=FLOOR (e.g. complaint=0.95), got {value!r}")
    try:
        return lab, float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"floor in {value!r} is not a number") from None


def _register_classify(sub) -> None:
    p = sub.add_parser(
        "classify", help="fine-tune a routing classifier (text → label, or 'human' when unsure)",
        description="Fine-tune ElectraForSequenceClassification (BertForSequenceClassification for an imported "
                    "BERT) from a pretrained bundle (or a random-init "
                    "control) on labelled JSONL/CSV files (.gz allowed; CSV needs a header row), with several "
                    "seeds (the median-seed model is kept). It also fits a TF-IDF char 1–3-gram + logistic "
                    "regression model and, where it wins on dev (--fusion auto), ships the two fused in the "
                    "bundle. Then fit on dev: temperature scaling, per-class "
                    "offsets for --min-recall classes, and an abstention threshold for --target-precision / "
                    "--target-coverage; the rule is stored in the bundle's task.json. Writes OUT/bundle, "
                    "OUT/report.json, OUT/report.md and PNGs, with the encoder, the TF-IDF model and the "
                    "fused router side by side. All figures are on dev, which also chose these settings.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="BUNDLE", help="pretrained (or classifier) bundle to start from")
    src.add_argument("--init-random", metavar="SIZE", choices=("tiny", "mini", "small", "base"),
                     help="random-init control of this size instead of --model (needs --tokenizer)")
    p.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (with --init-random)")
    p.add_argument("--train", required=True, nargs="+", metavar="FILE",
                   help="labelled training file(s) (.jsonl/.csv[.gz]); several are concatenated (the rows per file "
                        "are printed), e.g. the original file plus the rows of a `denki serve --human-log` file "
                        "that people gave a label. Every row needs a label; a row labelled 'human' (the "
                        "abstention route) is refused")
    p.add_argument("--dev", required=True, metavar="FILE", help="labelled dev file (early stopping, calibration)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--text-field", default="text",
                   help="text field; join several with + (e.g. title+text)")
    p.add_argument("--label-field", default="label")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (median reported and kept)")
    p.add_argument("--seed", type=int, default=0, help="first seed (seeds are SEED..SEED+N-1)")
    p.add_argument("--epochs", type=int, default=None,
                   help="max epochs (early stopping on dev macro-F1); default 10 from about 2,000 training examples up, "
                        "more for smaller sets so that a run makes ≥ 630 updates (at most 40 epochs; measured in "
                        "experiments/labels); 0 = no training, only re-fit the routing rule (temperature, offsets, "
                        "threshold) of a classifier bundle given as --model")
    p.add_argument("--patience", type=int, default=None,
                   help="epochs without dev macro-F1 gain before stopping (default: 30 %% of the epochs, ≥ 3)")
    p.add_argument("--lr", type=float, default=None,
                   help="peak learning rate (default: 1e-3 for tiny (hidden ≤128), 3e-4 for small (≤256), 1e-4 for "
                        "larger; measured in experiments/finetune-recipe; choose on dev)")
    p.add_argument("--layer-decay", type=float, default=None,
                   help="layer-wise LR decay (default: 1.0 for tiny, 0.8 = official ELECTRA for larger)")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128, help="tokens per text, [CLS]/[SEP] included")
    p.add_argument("--class-weights", choices=("none", "balanced", "auto"), default="auto",
                   help="balanced: loss weights n/(K·n_k); auto: balanced when the most frequent label has ≥ 10× "
                        "the rarest's training examples, else none (measured in experiments/cw)")
    grp = p.add_mutually_exclusive_group()
    grp.add_argument("--target-precision", type=float, default=None,
                     help="abstain below the confidence that gives this accuracy on the routed part of dev")
    grp.add_argument("--target-coverage", type=float, default=None,
                     help="abstain on the least confident (1 − coverage) of dev")
    p.add_argument("--min-recall", type=_min_recall, action="append", default=[], metavar="LABEL=FLOOR",
                   help="must-not-miss class: per-class offset so its dev recall reaches FLOOR (repeatable)")
    p.add_argument("--max-train-examples", type=int, default=None,
                   help="random subsample of the training file (Random(0)); reported")
    p.add_argument("--skip-empty", action="store_true",
                   help="skip rows whose text is empty (listed in OUT/skipped_rows.jsonl) instead of failing")
    p.add_argument("--unlabelled", nargs="+", metavar="FILE", default=None,
                   help="texts without labels (.jsonl/.csv[.gz], the same --text-field; a label field in them is never "
                        "read), e.g. past inquiries nobody routed. Use it when you have few labels (tens per class) "
                        "and many such texts: the TF-IDF model labels the texts it is surest of, refits on them and "
                        "repeats (self-training, 3 rounds); the encoder then trains on the labelled rows plus up to "
                        "--unlabelled-cap of these rows per class, and the TF-IDF half of the router on the labelled "
                        "rows plus all of them. Texts equal to a training or dev text are dropped; dev is used as "
                        "without it. The report records the rounds (see docs/classify.md)")
    p.add_argument("--unlabelled-cap", type=int, default=None, metavar="N",
                   help="pseudo-labelled rows per class the encoder trains on (default 100; more make each epoch "
                        "longer and did not score better; the TF-IDF half always takes all of them)")
    p.add_argument("--scope-keep", type=_keep, default=None, metavar="SHARE",
                   help="out of scope → human: a text that shares no desk's words (the TF-IDF model's top "
                        "probability under a threshold) is routed to human; the threshold keeps this share of dev "
                        "routed (default 0.95). Lower it to catch more unrelated texts at the cost of more in-scope "
                        "ones sent to a person; 0 turns the check off")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the TF-IDF + logistic regression baseline (and so the fusion and the out-of-scope "
                        "check)")
    p.add_argument("--fusion", choices=("auto", "on", "off"), default="auto",
                   help="fuse the encoder with the TF-IDF model in the bundle (weighted or log-linear probabilities, "
                        "weight chosen on dev): auto (default) ships the fused router when its cross-fitted dev "
                        "macro-F1 beats the encoder alone; on: always; off: the encoder alone. Calibration, "
                        "abstention and --min-recall apply to the fused probabilities")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--no-bf16", action="store_true", help="disable bf16 autocast on CUDA")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_finetune_classify)


def cmd_finetune_classify(args) -> int:
    import torch

    from denki.models.classify.finetune import FinetuneConfig, finetune

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = FinetuneConfig(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, max_length=args.max_length,
                         layer_decay=args.layer_decay, weight_decay=args.weight_decay,
                         warmup_ratio=args.warmup_ratio, patience=args.patience, class_weights=args.class_weights,
                         seeds=list(range(args.seed, args.seed + args.seeds)), device=args.device,
                         bf16=not args.no_bf16, progress=not args.no_progress)
    r = finetune(train_path=args.train, dev_path=args.dev, out_dir=args.out, model=args.model,
                 init_random=args.init_random, tokenizer_dir=args.tokenizer, text_field=args.text_field,
                 label_field=args.label_field, cfg=cfg, target_precision=args.target_precision,
                 target_coverage=args.target_coverage, min_recall=dict(args.min_recall),
                 skip_empty=args.skip_empty, max_train_examples=args.max_train_examples,
                 baseline=not args.no_baseline, fusion=args.fusion, unlabelled=args.unlabelled,
                 unlabelled_cap=args.unlabelled_cap, scope_keep=args.scope_keep)
    d, ss = r["dev"], r["seed_summary"]
    print(f"dev, {len(r['seeds'])} seed(s), plain argmax: macro-F1 median {ss['macro_f1_median']:.4f} "
          f"[{ss['macro_f1_min']:.4f}–{ss['macro_f1_max']:.4f}], accuracy median {ss['accuracy_median']:.4f}")
    print(f"dev, kept model with the routing rule: macro-F1 {d['macro_f1']:.4f}, accuracy {d['accuracy']:.4f}, "
          f"ECE {d['ece_uncalibrated']:.3f}→{d['ece']:.3f}, abstain {d['abstain_rate']:.3f}"
          + (f", accuracy on routed {d['accuracy_non_abstained']:.4f}" if d["accuracy_non_abstained"] is not None
             else ""))
    if r.get("baseline"):
        print(f"TF-IDF baseline: macro-F1 {r['baseline']['macro_f1']:.4f}, accuracy {r['baseline']['accuracy']:.4f}")
    if r.get("fusion"):
        fu = r["fusion"]
        print(f"fused with TF-IDF ({fu['mode']}, encoder weight {fu['weight']:.1f}): cross-fitted dev macro-F1 "
              f"{fu['crossfit']['macro_f1']:.4f} (seeds {fu['fused_crossfit_min']:.4f}–{fu['fused_crossfit_max']:.4f})"
              f" → {'shipped' if fu['shipped'] else 'not shipped'}")
    print(r["verdict"])
    print(f"bundle → {r['bundle']}; report → {args.out}/report.md")
    return 0


# ------------------------------------------------------------------------------------------------------- qa
def _register_qa(sub) -> None:
    p = sub.add_parser(
        "qa", help="extractive QA with no-answer (SQuAD 2.0 JSON or HF squad_v2 JSONL)",
        description="Fine-tune a pretrained bundle for extractive QA with unanswerable questions. Long contexts "
                    "are split into overlapping windows; the null threshold is tuned on --dev to maximise F1 and "
                    "stored in the bundle (task.json). Writes the `qa` bundle plus report.json/report.md/PNGs "
                    "into --out. --init-random trains the same QA model from random init instead: the control that "
                    "shows what the pretraining bought.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="BUNDLE", help="pretrained bundle directory")
    src.add_argument("--init-random", metavar="SIZE", choices=("tiny", "mini", "small", "base"),
                     help="random-init control of this size instead of --model (needs --tokenizer)")
    p.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (with --init-random)")
    p.add_argument("--train", required=True, help="training file (.json SQuAD 2.0 or .jsonl squad_v2; .gz ok)")
    p.add_argument("--dev", required=True, help="dev file (threshold tuning and the report)")
    p.add_argument("--out", required=True, help="output bundle directory")
    p.add_argument("--max-length", type=int, default=384, help="tokens per window (default 384)")
    p.add_argument("--doc-stride", type=int, default=128, help="overlap between windows in tokens (default 128)")
    p.add_argument("--max-answer-length", type=int, default=30, help="longest answer in tokens (default 30)")
    p.add_argument("--seeds", type=int, default=1, help="models trained with seeds seed..seed+N-1; the median "
                                                        "(dev best F1) is kept (default 1)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--epochs", type=float, default=2.0, help="epochs (default 2)")
    p.add_argument("--lr", type=float, default=None,
                   help="peak learning rate (default by encoder width: 1e-3 tiny (hidden ≤128; it beat 3e-4 on "
                        "JaQuAD, experiments/qa-lr), 3e-4 small (≤256), 1e-4 base)")
    p.add_argument("--batch-size", type=int, default=32, help="windows per step (default 32)")
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--layer-decay", type=float, default=1.0, help="layer-wise LR decay (ELECTRA uses 0.8)")
    p.add_argument("--n-best", type=int, default=20, help="start/end candidates per window (default 20)")
    p.add_argument("--max-train-examples", type=int, default=None,
                   help="random subset of the training questions (seeded); recorded in the report")
    p.add_argument("--max-dev-examples", type=int, default=None, help="random subset of the dev questions")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many steps per seed")
    p.add_argument("--answerable-head", action=argparse.BooleanOptionalAction, default=None,
                   help="train ELECTRA's answerable classifier on [CLS] beside the span head (its loss added to the "
                        "span loss); the null rule (plain [CLS] score, head, or both) is chosen on dev and stored in "
                        "task.json; `denki export` and the runtime carry it. Default: on for a bundle denki "
                        "pretrained with ELECTRA, off otherwise (MLM, random init, imports: unmeasured or no gain). "
                        "Measured on JaQuAD: a QA-fragile encoder's median of 3 seeds 38.7 → 47.3 F1, the T = 1 "
                        "encoder 48.0 → 49.3. Its int8 exports agreed on 91 %% (one model, refused by the parity gate) and "
                        "99 %% (another) of the parity answers; fp32 / O2 match (experiments/anshead)")
    p.add_argument("--position-init", choices=POSITION_INITS, default="keep",
                   help="the position embeddings pretraining never trained (rows from its --seq-len, 128 by "
                        "default, on; a 384-token window uses them): keep their random init (default), or tile "
                        "the trained rows over them, as Longformer did (measured: +1.6 and +0.4 F1 on JaQuAD at "
                        "one QA seed, within seed noise; experiments/posinit)")
    add_qa_run_options(p)
    p.set_defaults(func=cmd_finetune_qa)


def cmd_finetune_qa(args) -> int:
    from denki.models.qa.finetune import finetune_qa

    rep = finetune_qa(model=args.model, init_random=args.init_random, tokenizer_dir=args.tokenizer,
                      train=args.train, dev=args.dev, out=args.out, max_length=args.max_length,
                      doc_stride=args.doc_stride, max_answer_length=args.max_answer_length, seeds=args.seeds,
                      seed=args.seed, epochs=args.epochs, lr=args.lr, batch_size=args.batch_size,
                      warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay, layer_decay=args.layer_decay,
                      n_best=args.n_best, max_train_examples=args.max_train_examples,
                      max_dev_examples=args.max_dev_examples, max_steps=args.max_steps, strict=args.strict,
                      answerable_head=args.answerable_head, device=args.device, threads=args.threads,
                      progress=not args.no_progress, position_init=args.position_init)
    m = rep["dev_metrics"]
    print(f"dev (threshold {rep['null_threshold']:.4f}, tuned on dev): EM {m['exact']:.2f}  F1 {m['f1']:.2f}  "
          f"HasAns F1 {m.get('HasAns_f1', float('nan')):.2f}  NoAns acc {m.get('NoAns_exact', float('nan')):.2f}")
    n_skip = len(rep["skipped"]["train"]) + len(rep["skipped"]["dev"])
    if n_skip:
        print(f"skipped {n_skip} questions (listed in {args.out}/report.json)")
    print(f"bundle + report: {args.out}")
    return 0

