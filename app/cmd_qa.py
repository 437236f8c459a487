"""`denki finetune qa` and `denki evaluate qa`."""
from __future__ import annotations

import argparse
import json

from models.training.positions import POSITION_INITS


def _common(p) -> None:
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--strict", action="store_true",
                   help="stop at the first bad question instead of skipping and listing it")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def register_finetune(sub) -> None:
    p = sub.add_parser(
        "qa", help="extractive QA with no-answer (SQuAD 2.0 JSON or HF squad_v2 JSONL)",
        description="Fine-tune a pretrained bundle for extractive QA with unanswerable questions. Long contexts "
                    "are split into overlapping windows; the null threshold is tuned on --dev to maximise F1 and "
                    "stored in the bundle (task.json). Writes the `qa` bundle plus report.json/report.md/PNGs "
                    "into --out. --init-random trains the same QA model from random init instead: the control that "
                    "shows what the pretraining bought.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="BUNDLE", help="pretrained bundle directory")
    src.add_argument("--init-random", metavar="SIZE", choices=("tiny", "small", "base"),
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
                        "JaQuAD, docs/results.md), 3e-4 small (≤256), 1e-4 base)")
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
                        "99 %% (another) of the parity answers; fp32 / O2 match (docs/results.md)")
    p.add_argument("--position-init", choices=POSITION_INITS, default="keep",
                   help="the position embeddings pretraining never trained (rows from its --seq-len, 128 by "
                        "default, on; a 384-token window uses them): keep their random init (default), or tile "
                        "the trained rows over them, as Longformer did (measured: +1.6 and +0.4 F1 on JaQuAD at "
                        "one QA seed, within seed noise; docs/results.md)")
    _common(p)
    p.set_defaults(func=_finetune)


def register_evaluate(sub) -> None:
    p = sub.add_parser("qa", help="score a QA bundle on a labelled SQuAD 2.0 / squad_v2 file",
                       description="Evaluate a `qa` bundle with its stored null threshold. Prints and writes the "
                                   "official SQuAD v2 metric names (character-level F1 for Japanese).")
    p.add_argument("--model", required=True, help="qa bundle directory")
    p.add_argument("--data", required=True, help="labelled file (.json SQuAD 2.0 or .jsonl squad_v2; .gz ok)")
    p.add_argument("--output-json", default=None, help="write the metrics JSON here")
    p.add_argument("--predictions", default=None, help="write {id: answer text or \"\"} here")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-examples", type=int, default=None, help="random subset of the questions (seeded)")
    _common(p)
    p.set_defaults(func=_evaluate)


def _finetune(args) -> int:
    from models.qa.finetune import finetune_qa

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


def _evaluate(args) -> int:
    from models.bundle.format import read_manifest, resolve_bundle

    if read_manifest(resolve_bundle(args.model)).get("kind") == "onnx-qa":  # ONNX bundles: the torch-free runtime
        from models.io.fileio import atomic_write_json
        from serve.evaluate import evaluate_onnx_qa

        out, res = evaluate_onnx_qa(args.model, args.data, limit=args.max_examples,
                                    device="cpu" if args.device == "cpu" else "auto")
        out["skipped"] = []
        if args.output_json:
            atomic_write_json(args.output_json, out)
        if args.predictions:
            atomic_write_json(args.predictions, {q: r["answer"] for q, r in res.items()})
    else:
        from models.qa.finetune import evaluate_qa

        out = evaluate_qa(model=args.model, data=args.data, output_json=args.output_json,
                          predictions=args.predictions, batch_size=args.batch_size, max_examples=args.max_examples,
                          strict=args.strict, device=args.device, threads=args.threads,
                          progress=not args.no_progress)
    keys = ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_f1", "best_f1_thresh",
            "HasAns_span_f1", "total", "null_threshold", "null_rule")
    print(json.dumps({k: out.get(k) for k in keys}, ensure_ascii=False, indent=2))
    if out["skipped"]:
        print(f"skipped {len(out['skipped'])} questions (listed in the output JSON)")
    return 0
