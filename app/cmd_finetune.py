"""`denki finetune {classify,qa}` and `denki evaluate {classify,qa}`: the task modules add their subcommands."""
from __future__ import annotations

from app import cmd_classify, cmd_qa


def register(sub) -> None:
    ft = sub.add_parser("finetune", help="fine-tune a pretrained bundle (classify: routing, qa: extractive QA)",
                        description="Fine-tuning commands.")
    ft.set_defaults(_group_parser=ft)
    ftsub = ft.add_subparsers(dest="finetune_command", metavar="TASK")
    ev = sub.add_parser("evaluate", help="score a fine-tuned bundle on a labelled file",
                        description="Evaluation commands (PyTorch and ONNX bundles).")
    ev.set_defaults(_group_parser=ev)
    evsub = ev.add_subparsers(dest="evaluate_command", metavar="TASK")
    for mod in (cmd_classify, cmd_qa):
        mod.register_finetune(ftsub)
        mod.register_evaluate(evsub)
