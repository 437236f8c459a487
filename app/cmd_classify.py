"""`denki finetune classify` and `denki evaluate classify`."""
from __future__ import annotations

import argparse


def _min_recall(value: str) -> tuple[str, float]:
    lab, sep, v = value.rpartition("=")
    if not sep or not lab:
        raise argparse.ArgumentTypeError(f"expected LABEL=FLOOR (e.g. complaint=0.95), got {value!r}")
    try:
        return lab, float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"floor in {value!r} is not a number") from None


def register_finetune(sub) -> None:
    p = sub.add_parser(
        "classify", help="fine-tune a routing classifier (text → label, or 'human' when unsure)",
        description="Fine-tune ElectraForSequenceClassification (BertForSequenceClassification for an imported "
                    "BERT) from a pretrained bundle (or a random-init "
                    "control) on a labelled JSONL/CSV file (.gz allowed; CSV needs a header row), with several "
                    "seeds (the median-seed model is kept). Then fit on dev: temperature scaling, per-class "
                    "offsets for --min-recall classes, and an abstention threshold for --target-precision / "
                    "--target-coverage; the rule is stored in the bundle's task.json. Writes OUT/bundle, "
                    "OUT/report.json, OUT/report.md and PNGs, beside a TF-IDF char 1–3-gram + logistic "
                    "regression baseline. All figures are on dev, which also chose these settings.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="BUNDLE", help="pretrained (or classifier) bundle to start from")
    src.add_argument("--init-random", metavar="SIZE", choices=("tiny", "small", "base"),
                     help="random-init control of this size instead of --model (needs --tokenizer)")
    p.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (with --init-random)")
    p.add_argument("--train", required=True, metavar="FILE", help="labelled training file (.jsonl/.csv[.gz])")
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
                        "docs/results.md); 0 = no training, only re-fit the routing rule (temperature, offsets, "
                        "threshold) of a classifier bundle given as --model")
    p.add_argument("--patience", type=int, default=None,
                   help="epochs without dev macro-F1 gain before stopping (default: 30 %% of the epochs, ≥ 3)")
    p.add_argument("--lr", type=float, default=None,
                   help="peak learning rate (default: 1e-3 for tiny (hidden ≤128), 3e-4 for small (≤256), 1e-4 for "
                        "larger; measured in docs/results.md; choose on dev)")
    p.add_argument("--layer-decay", type=float, default=None,
                   help="layer-wise LR decay (default: 1.0 for tiny, 0.8 = official ELECTRA for larger)")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128, help="tokens per text, [CLS]/[SEP] included")
    p.add_argument("--class-weights", choices=("none", "balanced", "auto"), default="auto",
                   help="balanced: loss weights n/(K·n_k); auto: balanced when the most frequent label has ≥ 10× "
                        "the rarest's training examples, else none (measured in docs/results.md)")
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
    p.add_argument("--no-baseline", action="store_true", help="skip the TF-IDF + logistic regression baseline")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--no-bf16", action="store_true", help="disable bf16 autocast on CUDA")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_finetune)


def register_evaluate(sub) -> None:
    p = sub.add_parser(
        "classify", help="score a classifier bundle on a labelled file",
        description="Score a classifier bundle (or a finetune output directory) on a labelled JSONL/CSV file "
                    "with the bundle's routing rule. JSON: accuracy, macro_f1, per_class {precision, recall, f1, "
                    "support, abstained, routed_wrong}, confusion_matrix, abstain_rate, accuracy_non_abstained, "
                    "ece, nll, n.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", required=True, metavar="DIR", help="classifier bundle or finetune --out directory")
    p.add_argument("--data", required=True, metavar="FILE", help="labelled .jsonl/.csv(.gz)")
    p.add_argument("--text-field", default=None, help="default: the field the model was trained on")
    p.add_argument("--label-field", default=None, help="default: the field the model was trained on")
    p.add_argument("--output-json", metavar="FILE", default=None)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--skip-empty", action="store_true", help="skip rows with empty text instead of failing")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_evaluate)


def cmd_finetune(args) -> int:
    import torch

    from models.classify.finetune import FinetuneConfig, finetune

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
                 baseline=not args.no_baseline)
    d, ss = r["dev"], r["seed_summary"]
    print(f"dev, {len(r['seeds'])} seed(s), plain argmax: macro-F1 median {ss['macro_f1_median']:.4f} "
          f"[{ss['macro_f1_min']:.4f}–{ss['macro_f1_max']:.4f}], accuracy median {ss['accuracy_median']:.4f}")
    print(f"dev, kept model with the routing rule: macro-F1 {d['macro_f1']:.4f}, accuracy {d['accuracy']:.4f}, "
          f"ECE {d['ece_uncalibrated']:.3f}→{d['ece']:.3f}, abstain {d['abstain_rate']:.3f}"
          + (f", accuracy on routed {d['accuracy_non_abstained']:.4f}" if d["accuracy_non_abstained"] is not None
             else ""))
    if r.get("baseline"):
        print(f"TF-IDF baseline: macro-F1 {r['baseline']['macro_f1']:.4f}, accuracy {r['baseline']['accuracy']:.4f}")
    print(r["verdict"])
    print(f"bundle → {r['bundle']}; report → {args.out}/report.md")
    return 0


def cmd_evaluate(args) -> int:
    from models.bundle.format import read_manifest, resolve_bundle
    from models.classify.evaluate import evaluate_bundle
    from models.io.fileio import atomic_write_json

    bundle = resolve_bundle(args.model)
    fn = None
    if read_manifest(bundle).get("kind") == "onnx-classifier":
        from serve.evaluate import onnx_logits_fn  # torch-free ONNX runtime

        fn = onnx_logits_fn(bundle, device=args.device, batch_size=args.batch_size)
    elif args.threads:
        import torch

        torch.set_num_threads(args.threads)
    r = evaluate_bundle(bundle, args.data, text_field=args.text_field, label_field=args.label_field, logits_fn=fn,
                        device=args.device, batch_size=args.batch_size, skip_empty=args.skip_empty,
                        progress=not args.no_progress)
    if args.output_json:
        atomic_write_json(args.output_json, r)
    print(f"n {r['n']}: accuracy {r['accuracy']:.4f}, macro-F1 {r['macro_f1']:.4f}, abstain {r['abstain_rate']:.3f}"
          + (f", accuracy on routed {r['accuracy_non_abstained']:.4f}" if r["accuracy_non_abstained"] is not None
             else "") + f", ECE {r['ece']:.3f}")
    return 0
