"""The router's runtime head (torch-free): texts → tokens → length-bucketed model calls → (fused) logits → the
routing rule. :class:`serve.runtime.Predictor` exposes it as ``classify``/``logits``/``rule_inputs``; the batch
engine (:mod:`serve.batch`) and the HTTP micro-batcher run the same stages (:meth:`RouterHead.encode`,
:meth:`RouterHead.batches`, :meth:`RouterHead.run_batch`, :meth:`RouterHead.finish`)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from denki.models.task.base import RuntimeHead
from denki.models.task.batching import check_texts, sorted_batches

#: what :meth:`RouterHead.warm_up` asks: one short inquiry
WARMUP_TEXT = "ホテルの予約について問い合わせたいです。"


class RouterHead(RuntimeHead):
    """Routing over an ONNX classifier session. ``lexical``: a fused router's (task.json ``fusion``) or an
    out-of-scope rule's (``scope``) TF-IDF model, numpy; its files were checked by ``verify_bundle``."""

    def __init__(self, session):
        super().__init__(session)
        self._max_length: int | None = None
        self.lexical = None
        if self.task.get("fusion") or self.task.get("scope"):
            from denki.models.classify.lexical import LexicalModel

            self.lexical = LexicalModel.load(session.dir)

    @property
    def labels(self) -> list[str]:
        return list(self.task["labels"])

    @property
    def max_length(self) -> int:
        """task.json's ``max_length`` (read at each call), unless set here (the latency benchmark sets it)."""
        return self._max_length or int(self.task.get("max_length") or 128)

    @max_length.setter
    def max_length(self, value: int) -> None:
        self._max_length = int(value)

    # ---------------------------------------------------------------- stages
    def encode(self, texts: Sequence[str]) -> list:
        """Token encodings of ``texts`` at the bundle's ``max_length`` (limits checked first)."""
        check_texts(texts)
        return [self.tokenizer.encode(t, max_length=self.max_length) for t in texts]

    def lexical_logits(self, texts: Sequence[str]) -> np.ndarray | None:
        """The TF-IDF model's logits ``(n, K)``, or None for a router without one."""
        return self.lexical.logits(texts) if self.lexical is not None and len(texts) else None

    def batches(self, encs: list, batch_size: int) -> list[tuple[np.ndarray, dict]]:
        """``[(row indices, padded int64 arrays)]``: the encodings sorted by length and cut by
        :func:`~models.task.batching.sorted_batches`."""
        return [(idx, self.tokenizer.pad([encs[i] for i in idx]))
                for idx in sorted_batches([len(e) for e in encs], batch_size)]

    def run_batch(self, padded: dict) -> np.ndarray:
        """The model's logits ``(rows, K)`` float32 for one padded batch."""
        return self.session.run(padded)[0]

    def fuse(self, encoder_logits: np.ndarray, lexical_logits: np.ndarray | None) -> np.ndarray:
        """The logits the routing rule sees, from the ONNX model's ``(n, K)`` (and, for a fused router, the
        lexical model's); float32."""
        from denki.models.classify.fusion import fused_logits

        return np.asarray(fused_logits(self.task, encoder_logits, lexical_logits), dtype=np.float32)

    def finish(self, logits: np.ndarray, lexical: np.ndarray | None):
        """The routing rule, vectorised: ``(label index (n,), score (n,), probabilities (n, K), abstain (n,))``."""
        from denki.models.classify.decision import decide

        return decide(logits, self.task, lexical)

    # ---------------------------------------------------------------- whole calls
    def rule_inputs(self, texts: Sequence[str], *, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray | None]:
        """``(logits (n, K), the TF-IDF model's logits (n, K) or None)``: what the routing rule takes; for a
        fused router the logits are the fused ones (:func:`models.classify.fusion.fused_logits`)."""
        t = self.timed()
        encs = self.encode(texts)
        t.mark("tokenize_ms")
        out = np.zeros((len(texts), len(self.labels)), dtype=np.float32)
        for idx, padded in self.batches(encs, batch_size):
            out[idx] = self.run_batch(padded)
        t.mark("inference_ms")
        timing = {"tokenize_ms": t.ms["tokenize_ms"], "inference_ms": t.ms["inference_ms"], "n": len(texts)}
        lexical = None
        if self.lexical is not None:
            lexical = self.lexical.logits(texts)
            out = self.fuse(out, lexical)
            t.mark("lexical_ms")
            timing["lexical_ms"] = t.ms["lexical_ms"]
        self.session.last_timing = timing
        return out, lexical

    def classify(self, texts: Sequence[str], *, batch_size: int = 32) -> list[dict]:
        """``[{"label", "score", "scores", "route", "reason"}]`` per text, by the bundle's routing rule."""
        from denki.models.classify.decision import route

        if not texts:
            return []
        logits, lexical = self.rule_inputs(texts, batch_size=batch_size)
        return route(logits, self.task, lexical)

    predict = classify

    def warm_up(self) -> None:
        self.rule_inputs([WARMUP_TEXT])

    def describe(self) -> str:
        fu = self.task.get("fusion")
        return f" · fused with TF-IDF ({fu['mode']}, encoder weight {float(fu['weight']):.1f})" if fu else ""
