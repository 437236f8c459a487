"""The task spec (:class:`Task`) and the runtime head base (:class:`RuntimeHead`): what a task declares once.

A task is known by one name everywhere: :attr:`Task.name` is its PyTorch bundle kind and the registry key
(``"classifier"``, ``"qa"``); the ONNX bundle kind is derived (``"onnx-" + name``) and the verb of ``denki finetune``
/ ``denki evaluate`` is :attr:`Task.command`. Code outside :mod:`models.registry` asks a task object what to do
instead of comparing kind strings.

The torch side (model class, export, parity) imports torch/transformers inside its methods, so that a spec can be
imported by the torch-free runtime.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from denki.models.bundle.format import ONNX_PREFIX
from denki.models.io.errors import DenkiError


class Task:
    """One task's declaration. Subclasses set the class attributes and override the methods their task needs."""

    #: the registry key and PyTorch bundle kind (``manifest.json`` ``kind``)
    name: str = ""
    #: the verb of ``denki finetune NAME`` / ``denki evaluate NAME`` and of experiment task specs
    command: str = ""
    #: what a user calls the served model (logs, ``describe``)
    title: str = ""
    #: optimum's export task for the fp32 graph (``text-classification``, ``question-answering``)
    hf_task: str = ""
    #: the dev metric a pretraining experiment reports for this task (a key of the fine-tune's report)
    experiment_metric: str = ""

    # ------------------------------------------------------------------ names
    @property
    def onnx_kind(self) -> str:
        """The kind of this task's ONNX bundles."""
        return ONNX_PREFIX + self.name

    @property
    def kinds(self) -> tuple[str, str]:
        return self.name, self.onnx_kind

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    def bundle_files(self, task_json: dict) -> tuple[str, ...]:
        """Files besides the model, the tokenizer, task.json and parity_sample.json that this task's bundles
        carry (the ONNX export copies them; ``verify_bundle`` checks them like any listed file)."""
        return ()

    # ------------------------------------------------------------------ runtime (torch-free)
    def runtime_head(self, session) -> "RuntimeHead":
        """The head that turns inputs into model calls and outputs into results over an open ONNX session."""
        raise NotImplementedError(f"task {self.name!r} declares no runtime head")

    # ------------------------------------------------------------------ examples (demo, benchmarks)
    def examples(self, sample: dict, n: int = 5) -> list[list[str]]:
        """A few real inputs from a bundle's ``parity_sample.json``, each a list of strings (a demo's example
        row: the fields a user would fill in)."""
        return []

    def warmup_example(self) -> list[str]:
        """A fixed example (the runtime head's warm-up input) for when a bundle has no sample."""
        return []

    def request(self, example: list[str]):
        """One example row as one input of :meth:`RuntimeHead.predict`."""
        return example[0]

    def serving_sample(self, sample: dict, n: int) -> tuple[list, list | None]:
        """``(inputs, expected)``: up to ``n`` inputs of a bundle's ``parity_sample.json`` that a reloaded model
        runs before it takes traffic (:func:`serve.reload.check_parity`), and what the bundle recorded for each
        (None: nothing recorded, the run itself is the check)."""
        return [self.request(e) for e in self.examples(sample, n)], None

    def serving_agrees(self, result: dict, expected) -> bool:
        """Whether one runtime result agrees with what the bundle recorded for its input."""
        return True

    # ------------------------------------------------------------------ torch side
    def torch_model(self, bundle_dir: Path, task_json: dict):
        """The bundle's PyTorch model (eval mode), as the export's parity gate compares it."""
        raise NotImplementedError(f"task {self.name!r} declares no PyTorch model")

    def export_fp32(self, src: Path, work: Path, task_json: dict) -> Path:
        """Write the fp32 ONNX graph into ``work`` and return its path (default: optimum's ``main_export``)."""
        from optimum.exporters.onnx import main_export

        main_export(str(src), str(work), task=self.hf_task, do_validation=False, local_files_only=True,
                    library_name="transformers", device="cpu")
        return work / "model.onnx"

    def parity_data(self, src: Path, parity_file: str | None, task_json: dict, limit: int) -> dict:
        """The inputs the parity gate runs: from ``parity_file`` (dev data) or the bundle's parity_sample.json."""
        raise NotImplementedError

    def sample_encodings(self, tok, data: dict, task_json: dict, limit: int) -> list:
        """Tokenised inputs (:class:`~models.text.tokenizer.Encoding`) of the parity data, as the runtime encodes
        them: static int8 calibration runs them."""
        raise NotImplementedError

    def parity(self, model, tok, files: dict[str, Path], data: dict, task_json: dict) -> dict:
        """``{"n", VARIANT: {"ran", "max_abs_diff", "agreement", "metric_drop"?}}``: each ONNX file against
        PyTorch on ``data``."""
        raise NotImplementedError

    def golden(self, tok, data: dict, task_json: dict, n: int = 50) -> list[dict]:
        """Golden tokenisation records (``golden_tokenization.jsonl``): inputs with the ids a runtime must produce."""
        return []

    def extra_gates(self, src: Path, task_json: dict) -> dict:
        """Gates beyond the ONNX files' parity (``{name: figures}``); raise :class:`DenkiError` on failure."""
        return {}

    def gate_hint(self, task_json: dict, failed: dict[str, str]) -> str:
        """Advice appended to a failed parity gate's message ('' for none)."""
        return ""

    # ------------------------------------------------------------------ fine-tuning (generic loop)
    def build_model(self, parent: Path, task_json: dict):
        """Encoder + this task's head, initialised from the bundle ``parent`` (generic fine-tuning loop)."""
        raise NotImplementedError(f"task {self.name!r} has its own fine-tuning command")

    def make_features(self, records: list[dict], tok, task_json: dict) -> list[dict[str, Any]]:
        """One dict of model inputs and targets per example (generic loop; lists of ints/floats)."""
        raise NotImplementedError

    def compute_loss(self, model, batch: dict):
        """A scalar loss tensor for one padded batch (generic loop)."""
        raise NotImplementedError

    def task_json(self, records: list[dict], settings: dict) -> dict:
        """The ``task.json`` a fine-tuned bundle of this task carries."""
        return dict(settings)

    def parity_sample(self, records: list[dict]) -> dict:
        """What ``parity_sample.json`` holds for this task (the export gate's default data)."""
        raise NotImplementedError


class RuntimeHead:
    """A task's half of the runtime: encode inputs, run the session's model on length-bucketed batches, turn the
    outputs into results. ``session`` is the open ONNX session (:class:`serve.session.OnnxSession`: ``run``,
    ``tokenizer``, ``task``, ``dir``, ``kind``, ``output_names``); the head never chooses a variant or a provider.

    Subclasses implement :meth:`predict` (a list of inputs → a list of results) and :meth:`warm_up`."""

    def __init__(self, session):
        self.session = session
        self.tokenizer = session.tokenizer

    @property
    def task(self) -> dict:
        """The bundle's task.json, the session's (a caller may replace or change it on a loaded model)."""
        return self.session.task

    def predict(self, inputs: list) -> list:
        raise NotImplementedError

    def warm_up(self) -> None:
        """One call on a fixed input (the first user's request should not pay for first-call costs)."""

    def describe(self) -> str:
        """What this head adds to the session's one-line description ('' for nothing)."""
        return ""

    def timed(self) -> "_Timer":
        return _Timer()

    def refuse(self, what: str) -> DenkiError:
        return DenkiError(f"{self.session.dir} is a {self.session.kind} bundle, not {what}")


class _Timer:
    """Milliseconds between named marks: ``t.mark("tokenize_ms")`` after each stage."""

    def __init__(self):
        self.t = time.perf_counter()
        self.ms: dict[str, float] = {}

    def mark(self, key: str) -> None:
        now = time.perf_counter()
        self.ms[key] = (now - self.t) * 1e3
        self.t = now


def pad_rows(rows: list[np.ndarray], lengths: list[int], fill: float = -1e9) -> np.ndarray:
    """Stack 1-D rows cut to their own ``lengths`` into ``(len(rows), max(lengths))``, padding with ``fill``."""
    L = max(lengths)
    return np.stack([np.pad(r[:n], (0, L - n), constant_values=fill) for r, n in zip(rows, lengths)])
