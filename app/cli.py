"""The ``denki`` command line: one console script, one module per command.

``denki X`` is registered by ``app/cmd_X.py`` (dashes as underscores; ``tests/test_layout.py`` keeps this true),
which exposes ``register(subparsers)``; heavy imports (torch, transformers, gradio) happen
inside the handlers so that ``denki --help`` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from denki.models.io.errors import DenkiError

# Order = order in `denki --help`.
COMMAND_MODULES = [
    "denki.app.cmd_quickstart",
    "denki.app.cmd_tokenizer",
    "denki.app.cmd_tokenize",
    "denki.app.cmd_import",
    "denki.app.cmd_checkpoints",
    "denki.app.cmd_pretrain",
    "denki.app.cmd_experiment",
    "denki.app.cmd_finetune",
    "denki.app.cmd_evaluate",
    "denki.app.cmd_calibrate",
    "denki.app.cmd_export",
    "denki.app.cmd_index",
    "denki.app.cmd_ask",
    "denki.app.cmd_classify",
    "denki.app.cmd_bench",
    "denki.app.cmd_demo",
    "denki.app.cmd_serve",
]


def _quiet_offline_env() -> None:
    # No network at run time, no telemetry (README "Offline and quiet").
    for k, v in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("GRADIO_ANALYTICS_ENABLED", "False"),
                 ("ORT_DISABLE_TELEMETRY", "1"), ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(k, v)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="denki",
        description="denki (電気): Japanese ELECTRA kit — tokenizer, RTD pretraining (or import of a public "
                    "MeCab-WordPiece ELECTRA/BERT), fine-tuning, ONNX export, serving and a demo, on your own corpus.",
        epilog="Run `denki COMMAND --help` for a command's options.",
    )
    try:
        from importlib.metadata import version

        parser.add_argument("--version", action="version", version=f"denki {version('denki')}")
    except Exception:  # running from a source tree without installation
        pass
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


#: options that take a bundle (or a tokenizer directory, which every pretrained bundle is): a shipped checkpoint's
#: name works there as well as a path (`denki checkpoints`)
NAMED_BUNDLE_OPTIONS = ("model", "init_from", "tokenizer")


def _resolve_checkpoint_names(args) -> None:
    """Replace a checkpoint name given to a bundle option by the checkpoint's folder; a value that is neither an
    existing path nor a name is an error that lists the names."""
    from denki.models.registry.checkpoints import resolve_or_explain

    if getattr(args, "command", None) == "import":  # its --model may be a hub id in the local cache
        return
    for key in NAMED_BUNDLE_OPTIONS:
        value = getattr(args, key, None)
        if not isinstance(value, str) or not value:
            continue
        resolved = resolve_or_explain(value, f"--{key.replace('_', '-')} {value}")
        setattr(args, key, resolved)


#: a package that is not installed → the extra that brings it (pyproject.toml [project.optional-dependencies])
EXTRA_OF = {
    **dict.fromkeys(("torch", "transformers", "tokenizers", "huggingface_hub", "accelerate", "onnx", "optimum",
                     "sklearn", "scipy", "matplotlib", "matplotlib_fontja"), "train"),
    **dict.fromkeys(("fastapi", "starlette", "uvicorn", "prometheus_client", "httptools", "uvloop", "pydantic"),
                    "serve"),
    "gradio": "demo", "ray": "ray", "ipadic": "ipadic", "onnxruntime": "cpu",
}


def missing_extra_message(command: str | None, err: ModuleNotFoundError) -> str | None:
    """What to install when a command meets a package that this install left out (None: not one of denki's)."""
    top = (err.name or "").split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return None
    what = f"`denki {command}`" if command else "this command"
    fix = ("pip install 'denki[cpu]' (or 'denki[gpu]' on a CUDA machine; never both)" if extra == "cpu"
           else f"pip install 'denki[{extra}]'")
    return f"{what} needs {top}, which this install of denki does not include: {fix}"


def main(argv: list[str] | None = None) -> int:
    _quiet_offline_env()
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        # a group without a subcommand (e.g. `denki tokenizer`) prints its own help
        (getattr(args, "_group_parser", None) or parser).print_help()
        return 2
    try:
        _resolve_checkpoint_names(args)
        return int(func(args) or 0)
    except DenkiError as e:
        print(f"denki: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:  # an extra left out (`pip install denki` is the runtime alone)
        msg = missing_extra_message(getattr(args, "command", None), e)
        if msg is None:
            raise
        print(f"denki: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("denki: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
