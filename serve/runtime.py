"""Torch-free predictor on onnxruntime: what backend services, the batch CLI and the demo call.

    from denki import Predictor
    p = Predictor("runs/quickstart/classifier-onnx")        # verifies every file's sha256 first
    p.classify(["ログインできません"])  # → [{"label", "score", "scores", "route", "reason"}]; route = label or "human"
    q = Predictor("runs/quickstart/qa-onnx")
    q.answer("質問", "文書…")           # → {"answer", "start", "end", "score", "has_answer", "null_score_diff",
                                       #    "confidence", "reason", …}
    p.predict(inputs)                   # any task: the inputs its head takes (texts; (question, passage) pairs)

A predictor is a session plus a head (as optimum's ORTModel is a session plus one subclass per task): the session
(:class:`serve.session.OnnxSession`) owns the bundle, the variant choice, the provider and the run; the head is
the one the bundle's task declares in the registry (:mod:`models.registry`): the router
(:class:`models.classify.runtime.RouterHead`), the reader (:class:`models.qa.runtime.ReaderHead`) or a new
task's. Only numpy, onnxruntime and denki's tokenizer are imported (a test checks ``sys.modules`` for torch).
The decision rules are the bundle's ``task.json`` applied by the same numpy code as the PyTorch evaluation.
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np

from denki.models.registry.tasks import task_for
from denki.models.task.base import RuntimeHead
from denki.models.task.batching import (CALL_COST_TOKENS, MAX_CONTEXT_CHARS, MAX_TEXT_CHARS, length_groups,
                                         sorted_batches)
from denki.serve.session import OnnxSession, _cuda_usable, resolve_onnx_bundle

HUMAN = "human"
__all__ = ["Predictor", "OnnxSession", "resolve_onnx_bundle", "length_groups", "sorted_batches", "CALL_COST_TOKENS",
           "MAX_TEXT_CHARS", "MAX_CONTEXT_CHARS", "HUMAN", "_cuda_usable"]


class Predictor(OnnxSession):
    """An ONNX bundle of any registered task, ready to answer (see module docstring and :class:`OnnxSession` for
    ``backend``, ``device``, ``threads``, ``spinning``, ``workload``). ``warmup``: one call at load on a fixed
    input, so that the first user's request does not pay for first-call costs (MeCab's first dictionary lookups,
    onnxruntime's first-run allocations); ``warmup_ms`` says what it took."""

    def __init__(self, bundle_dir: str | os.PathLike, *, backend: str = "auto", device: str = "auto",
                 threads: int | None = None, verify: bool = True, spinning: bool | None = None,
                 workload: str = "mixed", warmup: bool = True):
        super().__init__(bundle_dir, backend=backend, device=device, threads=threads, verify=verify,
                         spinning=spinning, workload=workload)
        self.task_spec = task_for(self.kind)
        self.head: RuntimeHead = self.task_spec.runtime_head(self)
        self.warmup_ms = self.warm_up() if warmup else None

    def warm_up(self) -> float:
        """The head's warm-up call; returns its milliseconds (``last_timing`` is left empty)."""
        t0 = time.perf_counter()
        self.head.warm_up()
        self.last_timing = {}
        return (time.perf_counter() - t0) * 1e3

    def describe(self) -> str:
        return super().describe(self.head.describe())

    def predict(self, inputs: list) -> list:
        """Any task: the head's results for a list of inputs (texts for the router, (question, passage) pairs for
        the reader, whatever a new task's head takes)."""
        return self.head.predict(inputs)

    # ---------------------------------------------------------- what a head offers, by name
    def _head(self, method: str, what: str):
        fn = getattr(self.head, method, None)
        if fn is None:
            raise self.head.refuse(what)
        return fn

    @property
    def lexical(self):
        """A router's TF-IDF model (fusion or an out-of-scope rule), else None."""
        return getattr(self.head, "lexical", None)

    @lexical.setter
    def lexical(self, model) -> None:
        self._head("fuse", "a classifier")  # only a router has one
        self.head.lexical = model

    @property
    def max_length(self) -> int:
        """The head's token limit per text (a router's ``max_length``; the reader's window length)."""
        return int(getattr(self.head, "max_length", None) or self.task.get("max_length") or 128)

    @max_length.setter
    def max_length(self, value: int) -> None:  # the latency benchmark times one token count
        self.head.max_length = int(value)

    def logits(self, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """Router logits ``(n, n_labels)`` float32 (fused for a fused router): what the routing rule is fitted on."""
        return self.rule_inputs(texts, batch_size=batch_size)[0]

    def rule_inputs(self, texts: Sequence[str], *, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray | None]:
        """``(logits (n, K), the TF-IDF model's logits (n, K) or None)``: what the routing rule takes."""
        return self._head("rule_inputs", "a classifier")(texts, batch_size=batch_size)

    def fuse(self, encoder_logits: np.ndarray, lexical_logits: np.ndarray | None) -> np.ndarray:
        return self._head("fuse", "a classifier")(encoder_logits, lexical_logits)

    def classify(self, texts: Sequence[str], *, batch_size: int = 32) -> list[dict]:
        """``[{"label", "score", "scores", "route", "reason"}]`` per text, by the bundle's routing rule
        (``reason``: None when routed, else ``"unsure"`` or ``"out_of_scope"``)."""
        return self._head("classify", "a classifier")(texts, batch_size=batch_size)

    def answer(self, question: str, context: str, *, n_best: int | None = None) -> dict:
        """Answer one question from a passage: ``{"answer", "start", "end", "score", "has_answer",
        "null_score_diff", "null_threshold", "confidence", "reason", "abstained", …}``; ``answer ==
        context[start:end]`` exactly (original characters); ``reason`` "unsure": confidence below the bundle's
        ``min_confidence``, no answer given (:mod:`models.qa.selective`)."""
        return self.answer_batch([(question, context)], n_best=n_best)[0]

    def answer_batch(self, pairs: Sequence[tuple[str, str]], *, batch_size: int = 16,
                     n_best: int | None = None) -> list[dict]:
        return self._head("answer_batch", "a QA model")(pairs, batch_size=batch_size, n_best=n_best)
