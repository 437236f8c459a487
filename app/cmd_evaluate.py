"""`denki evaluate classify` and `denki evaluate qa`: score a fine-tuned bundle (PyTorch or ONNX) on a labelled file."""
from __future__ import annotations

import argparse
import json

from denki.app.cmd_finetune import add_qa_run_options


def register(sub) -> None:
    ev = sub.add_parser("evaluate", help="score a fine-tuned bundle on a labelled file",
                        description="Evaluation commands (PyTorch and ONNX bundles; `evaluate ask`: an index and a reader).")
    ev.set_defaults(_group_parser=ev)
    evsub = ev.add_subparsers(dest="evaluate_command", metavar="TASK")
    _register_classify(evsub)
    _register_qa(evsub)
    _register_ask(evsub)


def _register_classify(sub) -> None:
    p = sub.add_parser(
        "classify", help="score a classifier bundle on a labelled file",
        description="Score a classifier bundle (PyTorch or ONNX, or a finetune output directory) on a labelled "
                    "JSONL/CSV file with the bundle's routing rule. Prints one summary line, which model file was "
                    "scored (for ONNX: the fp32 / o2 / int8 / fp16 variant), a per-class table (precision, recall, "
                    "F1, support, abstained, routed wrong), the confusion matrix and the most confident mistakes "
                    "with their line in the file. --output-json writes: accuracy, macro_f1, per_class, "
                    "confusion_matrix, abstain_rate, accuracy_non_abstained, ece, nll, n, misrouted, and for ONNX "
                    "onnx_variant / onnx_file / onnx_choice.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", required=True, metavar="DIR",
                   help="classifier bundle (PyTorch or ONNX) or a `denki finetune classify` --out directory")
    p.add_argument("--data", required=True, metavar="FILE",
                   help="labelled .jsonl/.csv(.gz); every label must be one the model knows")
    p.add_argument("--text-field", default=None,
                   help="the text column; None: the field the model was trained on (task.json). Set it when this "
                        "file names the column differently")
    p.add_argument("--label-field", default=None,
                   help="the label column; None: the field the model was trained on (task.json)")
    p.add_argument("--output-json", metavar="FILE", default=None,
                   help="also write every metric (and the misrouted examples) here, for scripts and comparisons")
    p.add_argument("--batch-size", type=int, default=128,
                   help="texts per model call; lower it if a GPU runs out of memory")
    p.add_argument("--skip-empty", action="store_true",
                   help="skip rows with empty text instead of stopping at the first one")
    p.add_argument("--backend", default="auto",
                   help="ONNX bundles only: which variant to score (fp32, o2, int8, fp16, ...); auto: the one "
                        "`denki serve` and `denki classify` would use on this machine. Name one to check a "
                        "variant before serving it")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda; auto uses a GPU when one is usable")
    p.add_argument("--threads", type=int, default=None,
                   help="PyTorch bundles: torch CPU threads; None: torch's choice (all cores). Lower it on a "
                        "shared machine")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    p.set_defaults(func=cmd_evaluate_classify)


def _register_qa(sub) -> None:
    p = sub.add_parser("qa", help="score a QA bundle on a labelled SQuAD 2.0 / squad_v2 file",
                       description="Evaluate a `qa` or `onnx-qa` bundle with its stored null threshold. Prints and "
                                   "writes the official SQuAD v2 metric names (character-level F1 for Japanese).")
    p.add_argument("--model", required=True, help="qa or onnx-qa bundle directory")
    p.add_argument("--data", required=True, help="labelled file (.json SQuAD 2.0 or .jsonl squad_v2; .gz ok)")
    p.add_argument("--output-json", default=None, help="write the metrics JSON here")
    p.add_argument("--predictions", default=None,
                   help="write {id: answer text or \"\"} here, to inspect answers or score them elsewhere")
    p.add_argument("--batch-size", type=int, default=64,
                   help="PyTorch bundles: windows per model call (default: 64); lower it if a GPU runs out of "
                        "memory")
    p.add_argument("--max-examples", type=int, default=None,
                   help="score a random subset of this many questions (seeded, so repeatable) for a quick look; "
                        "default: all")
    p.add_argument("--coverage-plot", default=None, metavar="PNG",
                   help="write the selective-answering plot here (share of right answers against coverage, with "
                        "the stored operating point); the table is printed either way")
    add_qa_run_options(p)
    p.set_defaults(func=cmd_evaluate_qa)


def _register_ask(sub) -> None:
    from denki.serve.asker import UNANSWERABLE_SHARE

    p = sub.add_parser("ask", help="score asking a whole collection (index + reader) on a labelled SQuAD 2.0 file",
                       description="Ask every answerable question of a SQuAD 2.0 file of an index built from its "
                                   "contexts (`denki index build --docs FILE`): passage recall at 1/5/20, end-to-end "
                                   "HasAns F1/EM against the same reader given each question's own passage "
                                   "(gold_passage_HasAns_f1), and with --exclude-articles N whole articles left "
                                   "out of the index, the share of their questions answered 回答なし "
                                   "(out_of_collection_no_answer). Synthetic unanswerable questions are left out "
                                   "(their answer is in the collection). Latency percentiles of retrieval and of "
                                   "the whole question.")
    p.add_argument("--index", required=True)
    p.add_argument("--qa", required=True, help="onnx-qa bundle")
    p.add_argument("--data", required=True, help="SQuAD 2.0 .json(.gz) whose contexts the index holds")
    p.add_argument("-k", type=int, default=5, help="passages read per question (default: 5)")
    p.add_argument("--exclude-articles", type=int, default=0, metavar="N",
                   help="leave N whole articles (drawn with --seed) out of a copy of the index (default: 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-examples", type=int, default=None,
                   help="a random subset of N answerable questions (drawn with --seed), for a quicker look")
    p.add_argument("--unanswerable-share", type=float, default=UNANSWERABLE_SHARE, metavar="S",
                   help="s of mixed_f1 ((1 - s) x HasAns F1 + s x out_of_collection_no_answer, with "
                        f"--exclude-articles; default {UNANSWERABLE_SHARE}): what `denki calibrate ask` maximises")
    p.add_argument("--output-json", default=None)
    p.add_argument("--backend", default="auto")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_evaluate_ask)


def cmd_evaluate_ask(args) -> int:
    from denki.models.io.fileio import atomic_write_json
    from denki.serve.evaluate_ask import evaluate_ask

    out = evaluate_ask(args.index, args.qa, args.data, k=args.k, exclude_articles=args.exclude_articles,
                       seed=args.seed, limit=args.max_examples, backend=args.backend, threads=args.threads,
                       progress=not args.no_progress, share=args.unanswerable_share)
    if args.output_json:
        atomic_write_json(args.output_json, out)
    print(json.dumps({k: v for k, v in out.items() if k != "excluded_articles"}, ensure_ascii=False, indent=2))
    return 0


def cmd_evaluate_classify(args) -> int:
    from denki.models.bundle.format import read_manifest, resolve_bundle
    from denki.models.classify.evaluate import evaluate_bundle
    from denki.models.registry.tasks import is_onnx
    from denki.models.io.fileio import atomic_write_json

    bundle = resolve_bundle(args.model)
    fn = None
    if is_onnx(read_manifest(bundle).get("kind", "")):
        from denki.serve.evaluate import onnx_logits_fn  # torch-free ONNX runtime

        fn = onnx_logits_fn(bundle, backend=args.backend, device=args.device, batch_size=args.batch_size)
    elif args.threads:
        import torch

        torch.set_num_threads(args.threads)
    r = evaluate_bundle(bundle, args.data, text_field=args.text_field, label_field=args.label_field, logits_fn=fn,
                        device=args.device, batch_size=args.batch_size, skip_empty=args.skip_empty,
                        progress=not args.no_progress)
    if fn is not None:  # which ONNX file was scored: auto picks one per CPU (docs/serving.md)
        p = fn.predictor
        r.update(onnx_variant=p.backend, onnx_file=p.model_file.name, onnx_choice=p.choice)
    if args.output_json:
        atomic_write_json(args.output_json, r)
    print(f"n {r['n']}: accuracy {r['accuracy']:.4f}, macro-F1 {r['macro_f1']:.4f}, abstain {r['abstain_rate']:.3f}"
          + (f", accuracy on routed {r['accuracy_non_abstained']:.4f}" if r["accuracy_non_abstained"] is not None
             else "") + f", ECE {r['ece']:.3f}")
    print(format_classify_report(r))
    return 0


def format_classify_report(r: dict) -> str:
    """What a user acts on, below the one-line summary: which model file was scored, per-class precision / recall /
    F1 / support, the confusion matrix, and the most confident mistakes."""
    labels = list(r["per_class"])
    if r.get("onnx_variant"):
        scored = f"scored: ONNX {r['onnx_variant']} ({r['onnx_file']}; {r['onnx_choice']})"
    else:
        scored = "scored: PyTorch (model.safetensors)"
    lines = [scored, "", "per class (decision at full coverage; abstained and routed wrong: the routing rule's "
             "share of the class sent to a person and to a wrong desk):",
             "| label | precision | recall | F1 | support | abstained | routed wrong |", "|---|---|---|---|---|---|---|"]
    for lab, m in r["per_class"].items():
        lines.append(f"| {lab} | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} | {m['support']} | "
                     f"{m.get('abstained', 0):.3f} | {m.get('routed_wrong', 0):.3f} |")
    lines += ["", "confusion matrix (rows: gold, columns: predicted):",
              "| gold \\ predicted | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for lab, row in zip(labels, r["confusion_matrix"]):
        lines.append(f"| {lab} | " + " | ".join(str(c) for c in row) + " |")
    mis = r.get("misrouted") or []
    n_wrong = sum(m["support"] for m in r["per_class"].values()) - sum(
        r["confusion_matrix"][i][i] for i in range(len(labels)))
    if not mis:
        lines += ["", "misrouted: none (every example is predicted correctly)"]
        return "\n".join(lines)
    lines += ["", f"misrouted ({len(mis)} of {n_wrong} wrong; wrong desk before sent to a person, the most "
                  "confident first):"]
    for m in mis:
        text = m["text"].replace("\n", " ")
        text = text if len(text) <= 60 else text[:59] + "…"
        to_person = " (the rule sends it to a person)" if m["route"] != m["predicted"] else ""
        lines.append(f"- line {m.get('line', m['index'] + 1)}: 「{text}」 gold {m['gold']} → predicted {m['predicted']} "
                     f"(confidence {m['confidence']:.2f}){to_person}")
    return "\n".join(lines)


def cmd_evaluate_qa(args) -> int:
    from denki.models.bundle.format import read_manifest, resolve_bundle
    from denki.models.registry.tasks import is_onnx

    if is_onnx(read_manifest(resolve_bundle(args.model)).get("kind", "")):  # ONNX bundles: the torch-free runtime
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
        from denki.models.qa.evaluate import evaluate_qa

        out = evaluate_qa(model=args.model, data=args.data, output_json=args.output_json,
                          predictions=args.predictions, batch_size=args.batch_size, max_examples=args.max_examples,
                          strict=args.strict, device=args.device, threads=args.threads,
                          progress=not args.no_progress)
    keys = ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_f1", "best_f1_thresh",
            "HasAns_span_f1", "total", "null_threshold", "null_rule")
    print(json.dumps({k: out.get(k) for k in keys}, ensure_ascii=False, indent=2))
    _print_selective(out.get("selective"), args.coverage_plot)
    if out["skipped"]:
        print(f"skipped {len(out['skipped'])} questions (listed in the output JSON)")
    return 0


def _print_selective(sel: dict | None, plot: str | None) -> None:
    """The selective-answering table (``confidence`` against right answers on this file) and its plot."""
    from denki.models.qa.selective import format_rows

    if not sel:
        print("selective answering: this bundle has no confidence calibration (fine-tuned before denki gave "
              "answers a confidence): fine-tune it again to get one")
        return
    print(f"\nselective answering ({sel['right_if']}; answers kept by falling confidence):")
    print("\n".join(format_rows(sel)))
    if plot:
        from denki.models.qa.report import plot_coverage

        plot_coverage(sel, plot)
        print(f"plot → {plot}")
