"""`denki calibrate qa`: fit a QA bundle's answer confidence (and an abstention floor) on a labelled file;
`denki calibrate ask`: fit the no-answer threshold of asking a whole collection (serve/calibrate_ask.py)."""
from __future__ import annotations

import json


def register(sub) -> None:
    cal = sub.add_parser("calibrate", help="fit a QA bundle's answer confidence, or its no-answer threshold over a "
                                           "collection, on a labelled file",
                         description="Calibration commands.")
    cal.set_defaults(_group_parser=cal)
    csub = cal.add_subparsers(dest="calibrate_command", metavar="TASK")
    p = csub.add_parser(
        "qa", help="give a qa bundle a calibrated confidence (and a floor below which it says it is unsure)",
        description="Fit the reader's confidence — the probability that an answer (a span or 回答なし) is right, "
                    "right meaning character F1 >= 0.5 — on a labelled file, as `denki finetune qa` does on its "
                    "dev set, and write a new bundle with it in task.json (the source bundle is left as it is). "
                    "For a bundle fine-tuned before confidences existed, or to fit on your own questions. With "
                    "--target-precision the bundle also abstains (reason \"unsure\") below the confidence whose "
                    "answers were right that often on the file. Use a file you do not report scores on: the "
                    "printed table is optimistic on it.")
    p.add_argument("--model", required=True, help="qa bundle (PyTorch), or a `denki finetune qa` --out directory")
    p.add_argument("--data", required=True, help="labelled file (.json SQuAD 2.0 or .jsonl squad_v2; .gz ok)")
    p.add_argument("--out", required=True, help="where the calibrated bundle goes (export it as any qa bundle)")
    p.add_argument("--target-precision", type=float, default=None,
                   help="also store min_confidence: the lowest confidence whose answers were right at least this "
                        "often on --data (default: never abstain)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    p.set_defaults(func=cmd_calibrate_qa)
    _register_ask(csub)


def _register_ask(csub) -> None:
    from denki.serve.asker import UNANSWERABLE_SHARE

    p = csub.add_parser(
        "ask", help="fit the no-answer threshold of asking a whole collection (denki ask, POST /v1/ask)",
        description="Ask every answerable question of a SQuAD 2.0 file of an index of its contexts with "
                    "--exclude-articles whole articles left out (their questions should get 回答なし), and fit "
                    "the threshold on the candidate passage's null_score_diff that maximises the mixed F1: "
                    "(1 - s) x end-to-end HasAns F1 in the collection + s x the share of 回答なし for the left-out "
                    "articles. Writes a copy of the ONNX QA bundle with ask_null_threshold in task.json, which "
                    "denki ask / denki serve --index / denki.Asker use instead of the reader's single-passage "
                    "threshold. Fit on a file you do not report scores on (experiments/ask-retrieval).")
    p.add_argument("--index", required=True, help="index of the file's contexts (denki index build --docs FILE)")
    p.add_argument("--qa", required=True, help="onnx-qa bundle (denki export)")
    p.add_argument("--data", required=True, help="SQuAD 2.0 .json(.gz) whose contexts the index holds")
    p.add_argument("--out", required=True, help="where the calibrated ONNX QA bundle goes")
    p.add_argument("-k", type=int, default=5, help="passages read per question, as you will ask (default: 5)")
    p.add_argument("--exclude-articles", type=int, default=10, metavar="N",
                   help="whole articles left out of a copy of the index (default: 10); more gives the no-answer "
                        "side more questions")
    p.add_argument("--unanswerable-share", type=float, default=UNANSWERABLE_SHARE, metavar="S",
                   help="s, the share of questions you expect the collection not to answer (default: "
                        f"{UNANSWERABLE_SHARE}, JaQuAD dev's share of unanswerable questions). Raise it where "
                        "a wrong answer costs more than a 回答なし")
    p.add_argument("--seed", type=int, default=0, help="draws the left-out articles (and --max-examples)")
    p.add_argument("--max-examples", type=int, default=None, help="a random subset of N answerable questions")
    p.add_argument("--backend", default="auto")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    p.set_defaults(func=cmd_calibrate_ask)


def cmd_calibrate_ask(args) -> int:
    from denki.serve.calibrate_ask import calibrate_ask

    res = calibrate_ask(index=args.index, qa=args.qa, data=args.data, out=args.out, k=args.k,
                        exclude_articles=args.exclude_articles, seed=args.seed, share=args.unanswerable_share,
                        limit=args.max_examples, backend=args.backend, threads=args.threads,
                        progress=not args.no_progress)
    c = res["ask_calibration"]
    print(f"ask_null_threshold {res['ask_null_threshold']:.4f} (the reader's own: {c['reader_null_threshold']:.4f})")
    print(f"mixed F1 at s = {c['unanswerable_share']}: {c['mixed_f1']:.2f} fitted vs "
          f"{c['mixed_f1_at_reader_threshold']:.2f} at the reader's threshold, on {args.data} (fitted there, so "
          f"optimistic); {c['in_collection_questions']} questions in the collection "
          f"({100 * res['answered_in_collection_at_fitted']:.1f} % answered), {c['out_of_collection_questions']} "
          f"about left-out articles ({100 * res['no_answer_out_of_collection_at_fitted']:.1f} % 回答なし)")
    print(f"calibrated bundle → {args.out}")
    return 0


def cmd_calibrate_qa(args) -> int:
    from denki.models.qa.calibrate import calibrate_qa
    from denki.models.qa.selective import format_rows

    res = calibrate_qa(model=args.model, data=args.data, out=args.out, target_precision=args.target_precision,
                       threads=args.threads, device=args.device, progress=not args.no_progress)
    fields = res["task"]
    cal = fields["confidence"]
    print(json.dumps({"answer_fit_on": cal["answer"]["n"], "no_answer_fit_on": cal["no_answer"]["n"],
                      **{k: v for k, v in fields.items() if k != "confidence"}}, ensure_ascii=False))
    print(f"on {args.data} (fitted there, so optimistic):")
    print("\n".join(format_rows(res["report"])))
    print(f"calibrated bundle → {args.out}")
    return 0
