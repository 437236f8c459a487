"""`denki finetune qa` and `denki evaluate qa`."""
from __future__ import annotations


def register_finetune(sub) -> None:
    pass


def register_evaluate(sub) -> None:
    pass
