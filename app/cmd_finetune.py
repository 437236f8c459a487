"""`denki finetune classify` (a routing classifier) and `denki finetune qa` (extractive QA with no-answer)."""
from __future__ import annotations

import argparse

from denki.models.training.positions import POSITION_INITS
from denki.models.training.precision import PRECISIONS


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


class _HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to an option's help, except where there is nothing to show (no default, a flag) or
    the help already says what the default is."""

    def _get_help_string(self, action):
        d = action.default
        if d is None or d is False or d == [] or d == argparse.SUPPRESS or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _register_classify(sub) -> None:
    from denki.models.classify.config import FinetuneConfig

    d = FinetuneConfig()  # every training default lives there; the options read it
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
        formatter_class=_HelpWithDefaults)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="BUNDLE",
                     help="pretrained bundle to start from, or a classifier bundle to fine-tune further (e.g. on "
                          "new labelled rows)")
    src.add_argument("--init-random", metavar="SIZE", choices=("tiny", "mini", "small", "base"),
                     help="random-init control of this size instead of --model (needs --tokenizer): the same "
                          "recipe without pretraining, to see what the pretraining bought")
    p.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (with --init-random)")
    p.add_argument("--train", required=True, nargs="+", metavar="FILE",
                   help="labelled training file(s) (.jsonl/.csv[.gz]); several are concatenated (the rows per file "
                        "are printed), e.g. the original file plus the rows of a `denki serve --human-log` file "
                        "that people gave a label. Every row needs a label; a row labelled 'human' (the "
                        "abstention route) is refused")
    p.add_argument("--dev", required=True, metavar="FILE",
                   help="labelled dev file: early stopping, the kept seed, calibration, the abstention threshold and "
                        "every figure of the report come from it, so judge the result on another file")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--text-field", default="text",
                   help="text field; join several with + (e.g. title+text)")
    p.add_argument("--label-field", default="label", help="label field")
    _add_classify_training_options(p, d)
    _add_classify_rule_options(p)
    p.add_argument("--device", default=d.device, help="auto | cpu | cuda (auto: CUDA when available)")
    p.add_argument("--no-bf16", action="store_true",
                   help="disable bf16 autocast on CUDA (no effect on CPU): for a GPU without bf16")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (logs, background jobs)")
    p.set_defaults(func=cmd_finetune_classify)


def _add_classify_training_options(p, d) -> None:
    """How the encoder trains (defaults: ``d``, a :class:`FinetuneConfig`) and on which rows."""
    from denki.models.classify.selftrain import DEFAULT_ENCODER_CAP

    p.add_argument("--seeds", type=int, default=len(d.seeds),
                   help="number of seeds trained (median reported and kept); more seeds give a steadier model "
                        "and a seed spread in the report, at that many times the training time")
    p.add_argument("--seed", type=int, default=d.seeds[0], help="first seed (seeds are SEED..SEED+N-1)")
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help="max epochs (early stopping on dev macro-F1); default 10 from about 2,000 training examples "
                        "up, more for smaller sets so that a run makes ≥ 630 updates (at most 40 epochs); the "
                        "schedule is printed. 0 = no training, only re-fit the routing rule (temperature, offsets, "
                        "threshold) of a classifier bundle given as --model")
    p.add_argument("--patience", type=int, default=d.patience,
                   help="epochs without dev macro-F1 gain before stopping (default: 30 %% of the epochs, ≥ 3); "
                        "raise it when dev macro-F1 is noisy from epoch to epoch")
    p.add_argument("--lr", type=float, default=d.lr,
                   help="peak learning rate (default by encoder width: 1e-3 for tiny (hidden ≤128), 3e-4 for small "
                        "(≤256), 1e-4 for larger). The best value depends on the model and the data: try a few on "
                        "dev (docs/classify.md)")
    p.add_argument("--layer-decay", type=float, default=d.layer_decay,
                   help="layer-wise LR decay: each layer below the top trains at this times the LR of the one above "
                        "(default: 1.0 for tiny (hidden ≤128), 0.8 = official ELECTRA for larger); lower keeps more "
                        "of what pretraining put into the lower layers")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay,
                   help="AdamW weight decay (not on biases and LayerNorm)")
    p.add_argument("--warmup-ratio", type=float, default=d.warmup_ratio,
                   help="share of the steps with a linear warmup to the peak LR")
    p.add_argument("--batch-size", type=int, default=d.batch_size,
                   help="texts per step; a smaller batch makes more updates per epoch")
    p.add_argument("--max-length", type=int, default=d.max_length,
                   help="tokens per text, [CLS]/[SEP] included; longer texts are cut (the report counts them): "
                        "raise it for long texts, at a higher cost per text")
    p.add_argument("--class-weights", choices=("none", "balanced", "auto"), default=d.class_weights,
                   help="balanced: loss weights n/(K·n_k), so a rare label counts as much as a frequent one; auto: "
                        "balanced when the most frequent label has ≥ 10× the rarest's training examples, else none")
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
                   help=f"pseudo-labelled rows per class the encoder trains on (default {DEFAULT_ENCODER_CAP}; more "
                        "make each epoch "
                        "longer; the TF-IDF half always takes all of them)")


def _add_classify_rule_options(p) -> None:
    """The routing rule fitted on dev, the TF-IDF model and the fusion."""
    from denki.models.classify.routing_rule import FUSION_CHOICES
    from denki.models.classify.scope import DEFAULT_KEEP

    grp = p.add_mutually_exclusive_group()
    grp.add_argument("--target-precision", type=float, default=None,
                     help="abstain below the confidence that gives this accuracy on the routed part of dev")
    grp.add_argument("--target-coverage", type=float, default=None,
                     help="abstain on the least confident (1 − coverage) of dev")
    p.add_argument("--min-recall", type=_min_recall, action="append", default=[], metavar="LABEL=FLOOR",
                   help="must-not-miss class: per-class offset so its dev recall reaches FLOOR (repeatable)")
    p.add_argument("--scope-keep", type=_keep, default=None, metavar="SHARE",
                   help="out of scope → human: a text that shares no desk's words (the TF-IDF model's top "
                        "probability under a threshold) is routed to human; the threshold keeps this share of dev "
                        f"routed (default {DEFAULT_KEEP:g}). Lower it to catch more unrelated texts at the cost of more in-scope "
                        "ones sent to a person; 0 turns the check off")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the TF-IDF + logistic regression baseline (and so the fusion and the out-of-scope "
                        "check)")
    p.add_argument("--fusion", choices=FUSION_CHOICES, default="auto",
                   help="fuse the encoder with the TF-IDF model in the bundle (weighted or log-linear probabilities, "
                        "weight chosen on dev): auto (default) ships the fused router when its cross-fitted dev "
                        "macro-F1 beats the encoder alone; on: always; off: the encoder alone. Calibration, "
                        "abstention and --min-recall apply to the fused probabilities")


def classify_config(args):
    """The :class:`FinetuneConfig` of ``denki finetune classify`` from its parsed options."""
    from denki.models.classify.config import FinetuneConfig

    return FinetuneConfig(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, max_length=args.max_length,
                          layer_decay=args.layer_decay, weight_decay=args.weight_decay,
                          warmup_ratio=args.warmup_ratio, patience=args.patience, class_weights=args.class_weights,
                          seeds=list(range(args.seed, args.seed + args.seeds)), device=args.device,
                          bf16=not args.no_bf16, progress=not args.no_progress)


def cmd_finetune_classify(args) -> int:
    import torch

    from denki.models.classify.finetune import finetune

    if args.threads:
        torch.set_num_threads(args.threads)
    r = finetune(train_path=args.train, dev_path=args.dev, out_dir=args.out, model=args.model,
                 init_random=args.init_random, tokenizer_dir=args.tokenizer, text_field=args.text_field,
                 label_field=args.label_field, cfg=classify_config(args), target_precision=args.target_precision,
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
    from denki.models.qa.config import QAFinetuneConfig

    d = QAFinetuneConfig()  # every training default lives there; the options read it
    p = sub.add_parser(
        "qa", help="extractive QA with no-answer (SQuAD 2.0 JSON or HF squad_v2 JSONL)",
        description="Fine-tune a pretrained bundle for extractive QA with unanswerable questions. Long contexts "
                    "are split into overlapping windows; the null threshold is tuned on --dev to maximise F1 and "
                    "stored in the bundle (task.json). Writes the `qa` bundle plus report.json/report.md/PNGs "
                    "into --out. --init-random trains the same QA model from random init instead: the control that "
                    "shows what the pretraining bought.",
        formatter_class=_HelpWithDefaults)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="BUNDLE",
                     help="pretrained bundle to start from, or a qa bundle to fine-tune further on your own "
                          "question/passage pairs (its heads are kept)")
    src.add_argument("--init-random", metavar="SIZE", choices=("tiny", "mini", "small", "base"),
                     help="random-init control of this size instead of --model (needs --tokenizer)")
    p.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (with --init-random)")
    p.add_argument("--train", required=True, help="training file (.json SQuAD 2.0 or .jsonl squad_v2; .gz ok)")
    p.add_argument("--dev", required=True,
                   help="dev file: the kept seed, the null rule and the null threshold are chosen on it, so its "
                        "figures are optimistic; judge the bundle on another file with `denki evaluate qa`")
    p.add_argument("--out", required=True, help="output directory (the bundle goes to OUT/bundle)")
    p.add_argument("--max-length", type=int, default=d.max_length,
                   help="tokens per window, question included; shorter windows train faster, longer ones see more "
                        "context at once")
    p.add_argument("--doc-stride", type=int, default=d.doc_stride,
                   help="overlap between the windows of a long context, in tokens (must stay below the context part "
                        "of a window)")
    p.add_argument("--max-answer-length", type=int, default=d.max_answer_length,
                   help="longest answer in tokens; raise it when gold answers are long")
    p.add_argument("--seeds", type=int, default=len(d.seeds),
                   help="models trained with seeds seed..seed+N-1; the median (dev best F1) is kept: more seeds give "
                        "a steadier model at that many times the training time")
    p.add_argument("--seed", type=int, default=d.seeds[0],
                   help="first seed (also draws the --max-*-examples subsets)")
    p.add_argument("--epochs", type=float, default=d.epochs, help="passes over the training windows (a fraction "
                                                                  "is allowed)")
    p.add_argument("--lr", type=float, default=d.lr,
                   help="peak learning rate (default by encoder width: 1e-3 tiny (hidden ≤128), 3e-4 small (≤256), "
                        "1e-4 base); choose on dev (docs/qa.md)")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="windows per step")
    p.add_argument("--warmup-ratio", type=float, default=d.warmup_ratio,
                   help="share of the steps with a linear warmup to the peak LR")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay,
                   help="AdamW weight decay (not on biases and LayerNorm)")
    p.add_argument("--layer-decay", type=float, default=d.layer_decay,
                   help="layer-wise LR decay: each layer below the top trains at this times the LR of the one above "
                        "(official ELECTRA uses 0.8)")
    p.add_argument("--n-best", type=int, default=d.n_best,
                   help="start/end candidates per window searched for the best span")
    p.add_argument("--max-train-examples", type=int, default=None,
                   help="random subset of the training questions (seeded); recorded in the report")
    p.add_argument("--max-dev-examples", type=int, default=None, help="random subset of the dev questions")
    p.add_argument("--max-steps", type=int, default=d.max_steps,
                   help="stop after this many steps per seed (quick checks)")
    p.add_argument("--target-precision", type=float, default=d.target_precision,
                   help="answer only when the answer's confidence clears the floor whose answers were right (char "
                        "F1 >= 0.5) at least this often on dev; below it the reader says it is unsure (reason "
                        "\"unsure\", no answer) — stored in task.json min_confidence, applied by every serving path. "
                        "Default: never abstain (the confidence is still given)")
    p.add_argument("--eval-each-epoch", action="store_true", default=d.eval_each_epoch,
                   help="also score dev after every whole epoch (report.md's epoch table): the curve for choosing "
                        "--epochs. Mid-schedule scores: the learning rate has not decayed yet, so a run of that many "
                        "epochs can score higher. Costs one dev pass per epoch")
    p.add_argument("--answerable-head", action=argparse.BooleanOptionalAction, default=d.answerable_head,
                   help="train ELECTRA's answerable classifier on [CLS] beside the span head (its loss added to the "
                        "span loss); the null rule (plain [CLS] score, head, or both) is chosen on dev and stored in "
                        "task.json; `denki export` and the runtime carry it. Default: on for a bundle denki "
                        "pretrained with ELECTRA (it helped there), as the source had it for a qa bundle, off "
                        "otherwise (MLM, random init, imports). An int8 export of a model with the head can fail the "
                        "parity gate: export fp32 then (docs/qa.md)")
    p.add_argument("--position-init", choices=POSITION_INITS, default=d.position_init,
                   help="the position embeddings pretraining never trained (the rows past its --seq-len, which "
                        "a window longer than that uses): keep their random init (default), or tile the trained "
                        "rows over them, as Longformer did (no clear gain measured; docs/qa.md)")
    p.add_argument("--precision", choices=PRECISIONS, default=d.precision,
                   help="autocast precision of the training step's forward (weights, optimizer and the saved "
                        "bundle stay fp32; dev is scored in fp32). bf16: 1.6-1.9x the fp32 step on an avx512_bf16 core "
                        "(docs/qa.md); auto: bf16 on CUDA and on CPUs with avx512_bf16/amx_bf16, fp32 elsewhere. "
                        "Default fp32: bf16 fine-tuning is not yet measured against fp32 on dev")
    add_qa_run_options(p)
    p.set_defaults(func=cmd_finetune_qa)


def qa_config(args):
    """The :class:`QAFinetuneConfig` of ``denki finetune qa`` from its parsed options."""
    from denki.models.qa.config import QAFinetuneConfig

    return QAFinetuneConfig(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, max_length=args.max_length,
                            layer_decay=args.layer_decay, weight_decay=args.weight_decay,
                            warmup_ratio=args.warmup_ratio, seeds=list(range(args.seed, args.seed + args.seeds)),
                            device=args.device, progress=not args.no_progress, doc_stride=args.doc_stride,
                            max_answer_length=args.max_answer_length, n_best=args.n_best, max_steps=args.max_steps,
                            answerable_head=args.answerable_head, position_init=args.position_init,
                            threads=args.threads, eval_each_epoch=args.eval_each_epoch,
                            target_precision=args.target_precision, precision=args.precision)


def cmd_finetune_qa(args) -> int:
    from denki.models.qa.finetune import finetune

    rep = finetune(train_path=args.train, dev_path=args.dev, out_dir=args.out, model=args.model,
                   init_random=args.init_random, tokenizer_dir=args.tokenizer, cfg=qa_config(args),
                   strict=args.strict, max_train_examples=args.max_train_examples,
                   max_dev_examples=args.max_dev_examples)
    m = rep["dev_metrics"]
    print(f"dev (threshold {rep['null_threshold']:.4f}, tuned on dev): EM {m['exact']:.2f}  F1 {m['f1']:.2f}  "
          f"HasAns F1 {m.get('HasAns_f1', float('nan')):.2f}  NoAns acc {m.get('NoAns_exact', float('nan')):.2f}")
    n_skip = len(rep["skipped"]["train"]) + len(rep["skipped"]["dev"])
    if n_skip:
        print(f"skipped {n_skip} questions (listed in {args.out}/report.json)")
    print(f"bundle + report: {args.out}")
    return 0

