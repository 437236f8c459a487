"""`denki evaluate classify` and `denki evaluate qa`: score a fine-tuned bundle (PyTorch or ONNX) on a labelled file."""
from __future__ import annotations

import argparse
import json

from denki.app.cmd_finetune import add_qa_run_options


def register(sub) -> None:
    ev = sub.add_parser("evaluate", help="score a fine-tuned bundle on a labelled file",
                        description="Evaluation commands (PyTorch and ONNX bundles).")
    ev.set_defaults(_group_parser=ev)
    evsub = ev.add_subparsers(dest="evaluate_command", metavar="TASK")
    _register_classify(evsub)
    _register_qa(evsub)


def _register_classify(sub) -> None:
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
    p.set_defaults(func=cmd_evaluate_classify)


def _register_qa(sub) -> None:
    p = sub.add_parser("qa", help="score a QA bundle on a labelled SQuAD 2.0 / squad_v2 file",
                       description="Evaluate a `qa` bundle with its stored null threshold. Prints and writes the "
                                   "official SQuAD v2 metric names (character-level F1 for Japanese).")
    p.add_argument("--model", required=True, help="qa bundle directory")
    p.add_argument("--data", required=True, help="labelled file (.json SQuAD 2.0 or .jsonl squad_v2; .gz ok)")
    p.add_argument("--output-json", default=None, help="write the metrics JSON here")
    p.add_argument("--predictions", default=None, help="write {id: answer text or \"\"} here")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-examples", type=int, default=None, help="random subset of the questions (seeded)")
    add_qa_run_options(p)
    p.set_defaults(func=cmd_evaluate_qa)


def cmd_evaluate_classify(args) -> int:
    from denki.models.bundle.format import read_manifest, resolve_bundle
    from denki.models.classify.evaluate import evaluate_bundle
    from denki.models.io.fileio import atomic_write_json

    bundle = resolve_bundle(args.model)
    fn = None
    if read_manifest(bundle).get("kind") == "onnx-classifier":
        from denki.serve.evaluate import onnx_logits_fn  # torch-free ONNX runtime

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


def cmd_evaluate_qa(args) -> int:
    from denki.models.bundle.format import read_manifest, resolve_bundle

    if read_manifest(resolve_bundle(args.model)).get("kind") == "onnx-qa":  # ONNX bundles: the torch-free runtime
        from denki.models.io.fileio import atomic_write_json
        from denki.serve.evaluate import evaluate_onnx_qa

        out, res = evaluate_onnx_qa(args.model, args.data, limit=args.max_examples,
                                    device="cpu" if args.device == "cpu" else "auto")
        out["skipped"] = []
        if args.output_json:
            atomic_write_json(args.output_json, out)
        if args.predictions:
            atomic_write_json(args.predictions, {q: r["answer"] for q, r in res.items()})
    else:
        from denki.models.qa.finetune import evaluate_qa

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
