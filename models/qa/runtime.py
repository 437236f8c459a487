"""The reader's runtime head (torch-free): (question, passage) pairs → windows → length-bucketed model calls →
an exact span of the passage or no answer (:func:`models.qa.postprocess.postprocess_question`).
:class:`serve.runtime.Predictor` exposes it as ``answer``/``answer_batch``."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from denki.models.io.errors import DenkiError
from denki.models.task.base import RuntimeHead, pad_rows
from denki.models.task.batching import MAX_CONTEXT_CHARS, check_texts, sorted_batches

#: what :meth:`ReaderHead.warm_up` asks: one question over a two-sentence passage
WARMUP_QA = ("保証期間はどのくらいですか?", "この製品の保証期間はお買い上げから一年間です。修理はサポート窓口で承ります。")


class ReaderHead(RuntimeHead):
    """Extractive QA over an ONNX QA session. A model fine-tuned with ``--answerable-head`` has a third output,
    one "answerable" logit per window, used by task.json's ``null_rule`` (``head`` / ``combined``); ``cls`` (the
    default) ignores it."""

    # task.json is read at each call (a caller may change a setting, e.g. the null threshold, on a loaded model)
    @property
    def max_length(self) -> int:
        return int(self.task.get("max_length", 384))

    @max_length.setter
    def max_length(self, value: int) -> None:
        self.task["max_length"] = int(value)

    @property
    def null_rule(self) -> str:
        return self.task.get("null_rule", "cls")

    # ---------------------------------------------------------------- stages
    def windows(self, pairs: Sequence[tuple[str, str]]) -> list[list]:
        """Per pair, its windows (:meth:`JapaneseTokenizer.encode_windows`), after checking the inputs."""
        out = []
        for i, (q, c) in enumerate(pairs):
            if not q or not q.strip():
                raise DenkiError(f"question {i} is empty")
            if not c or not c.strip():
                raise DenkiError(f"context {i} is empty")
            check_texts([q])
            check_texts([c], MAX_CONTEXT_CHARS)
            out.append(self.tokenizer.encode_windows(q, c, max_length=self.max_length,
                                                     stride=int(self.task.get("doc_stride", 128)), sample_index=i))
        return out

    def run_windows(self, flat: list, batch_size: int) -> tuple[list, list, np.ndarray | None]:
        """Start/end logits per window (1-D, the window's padded length) and, with the answerable head, one
        logit per window ``(n_windows,)``."""
        has_head = len(self.session.output_names) > 2
        if self.null_rule != "cls" and not has_head:
            raise DenkiError(f"{self.session.dir}: task.json null_rule {self.null_rule!r} needs the "
                             "answerable_logits output, which this ONNX graph lacks (re-export the bundle with "
                             "this denki)")
        starts: list = [None] * len(flat)
        ends: list = [None] * len(flat)
        answerable = np.zeros(len(flat), dtype=np.float32) if has_head else None
        for idx in sorted_batches([len(e) for e in flat], batch_size):
            outs = self.session.run(self.tokenizer.pad([flat[i] for i in idx]))
            for row, i in enumerate(idx):
                starts[i], ends[i] = outs[0][row], outs[1][row]
                if answerable is not None:
                    answerable[i] = outs[2][row]
        return starts, ends, answerable

    def finish(self, pairs, windows, starts, ends, answerable, n_best: int | None) -> list[dict]:
        """One result per pair from its windows' logits (post-processing, numpy)."""
        from denki.models.qa.postprocess import postprocess_question
        from denki.models.qa.selective import decide

        thr = float(self.task.get("null_threshold", 0.0))
        results, k = [], 0
        for i, ws in enumerate(windows):
            n, lens = len(ws), [len(w) for w in ws]
            r = postprocess_question(pad_rows(starts[k:k + n], lens), pad_rows(ends[k:k + n], lens),
                                     [w.offsets for w in ws], [w.sequence_ids for w in ws], pairs[i][1],
                                     n_best=int(n_best or self.task.get("n_best", 20)),
                                     max_answer_length=int(self.task.get("max_answer_length", 30)),
                                     null_threshold=thr, null_rule=self.null_rule,
                                     answerable_logits=None if answerable is None else answerable[k:k + n])
            results.append(decide({"answer": r["answer"], "start": r["start"], "end": r["end"],
                                   "score": r["score"], "has_answer": r["has_answer"],
                                   "null_score_diff": r["null_score_diff"], "null_threshold": thr,
                                   "span_answer": r["span_answer"], "span_start": r["span_start"],
                                   "span_end": r["span_end"], "windows": n}, self.task))
            k += n
        return results

    # ---------------------------------------------------------------- whole calls
    def answer_batch(self, pairs: Sequence[tuple[str, str]], *, batch_size: int = 16,
                     n_best: int | None = None) -> list[dict]:
        """Answer each (question, passage) pair: ``{"answer", "start", "end", "score", "has_answer",
        "null_score_diff", "null_threshold", "span_*", "windows", "confidence", "reason", "abstained"}``;
        ``answer == context[start:end]`` exactly; ``reason`` "answer" | "no_answer" | "unsure" (confidence below
        task.json ``min_confidence``: no answer given, :mod:`models.qa.selective`)."""
        t = self.timed()
        windows = self.windows(pairs)
        flat = [w for ws in windows for w in ws]
        t.mark("tokenize_ms")
        starts, ends, answerable = self.run_windows(flat, batch_size)
        t.mark("inference_ms")
        results = self.finish(pairs, windows, starts, ends, answerable, n_best)
        t.mark("postprocess_ms")
        self.session.last_timing = {**t.ms, "n": len(pairs)}
        return results

    def answer(self, question: str, context: str, *, n_best: int | None = None) -> dict:
        return self.answer_batch([(question, context)], n_best=n_best)[0]

    predict = answer_batch

    def warm_up(self) -> None:
        self.answer_batch([WARMUP_QA])
