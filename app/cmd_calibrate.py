"""`denki calibrate qa`: fit a QA bundle's answer confidence (and an abstention floor) on a labelled file."""
from __future__ import annotations

import json


def register(sub) -> None:
    cal = sub.add_parser("calibrate", help="fit a QA bundle's answer confidence on a labelled file",
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
