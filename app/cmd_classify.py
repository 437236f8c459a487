"""`denki finetune classify` and `denki evaluate classify`."""
from __future__ import annotations


def register_finetune(sub) -> None:
    pass


def register_evaluate(sub) -> None:
    pass
