"""denki (電気): turn a company's own Japanese text into small, fast, served ELECTRA models.

Everything imports from here: ``from denki import Predictor`` (the torch-free ONNX runtime), ``denki.serve``,
``denki.models``, ``denki.pretrain``, ``denki.app``. ``import denki`` itself is cheap: the names below load on first
use, so a backend that only classifies never imports the training stack.

In the repository the four layers stay at the top (``app/``, ``serve/``, ``models/``, ``pretrain/``, beside this
folder); a wheel maps them into ``denki/`` (pyproject ``package-dir``). The same code runs in both: in a source tree
``__path__`` below also searches the repository root, so ``denki.serve`` is ``serve/``. Each layer refuses to be
imported under its bare name (``import serve``), so no class exists twice.
"""
from __future__ import annotations

from pathlib import Path as _Path

__all__ = ["Predictor", "Asker", "DenkiError", "__version__"]

_root = _Path(__file__).resolve().parent.parent
if not (_Path(__file__).resolve().parent / "serve").is_dir() and (_root / "serve" / "__init__.py").is_file():
    __path__.append(str(_root))  # noqa: F821 — a source tree: the layers live beside this folder

try:
    from importlib.metadata import version as _version

    __version__ = _version("denki")
except Exception:  # a source tree without installation
    __version__ = "0+source"

_LAZY = {"Predictor": ("denki.serve.runtime", "Predictor"), "Asker": ("denki.serve.asker", "Asker"),
         "DenkiError": ("denki.models.io.errors", "DenkiError")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'denki' has no attribute {name!r}")
