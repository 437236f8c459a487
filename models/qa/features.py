"""QA windows and start/end targets (torch-free).

Each question becomes one or more windows ``[CLS] question [SEP] context-part [SEP]`` (denki's
``JapaneseTokenizer.encode_windows``: consecutive windows overlap by ``doc_stride`` tokens). Token offsets index
the ORIGINAL context, so an answer's character span maps straight to tokens:

* start token = the first context token that ends after the answer's first character,
* end token   = the last context token that starts before the answer's end,

so a token that straddles an answer boundary counts as inside (as in HF ``run_qa``), and when one character
expands into several tokens (``㍿`` → ``株式`` ``##会社``) the span covers all of them. A window that does not
contain the whole answer, and every unanswerable question, targets [CLS] (index 0) for both start and end.
Training uses the first reference answer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from denki.models.qa.data import QAExample


@dataclass
class QAFeatures:
    """Windows of a list of examples. ``example_index[w]`` = index into ``examples`` of window ``w``."""

    examples: list[QAExample]  # the examples that produced windows (skipped ones removed)
    encodings: list  # list[Encoding], one per window
    example_index: np.ndarray  # (n_windows,) int64
    start_positions: np.ndarray  # (n_windows,) int64 target token, 0 = [CLS]
    end_positions: np.ndarray  # (n_windows,) int64
    skipped: list[dict] = field(default_factory=list)  # {"id", "reason", "detail"}
    stats: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.encodings)

    def windows_of(self) -> list[list[int]]:
        """For every example, the list of its window indices (in order)."""
        out: list[list[int]] = [[] for _ in self.examples]
        for w, i in enumerate(self.example_index.tolist()):
            out[i].append(w)
        return out


def answer_token_span(enc, char_start: int, char_end: int) -> tuple[int, int] | None:
    """Token span ``(start, end)`` (inclusive) of the context characters ``[char_start, char_end)`` in window
    ``enc``, or ``None`` when the window does not contain the whole answer."""
    ctx = [i for i, s in enumerate(enc.sequence_ids) if s == 1]
    if not ctx:
        return None
    offs = enc.offsets
    # The window must cover the answer entirely (straddling edge tokens count as covering).
    if offs[ctx[0]][0] > char_start or offs[ctx[-1]][1] < char_end:
        return None
    start = next((i for i in ctx if offs[i][1] > char_start), None)
    end = next((i for i in reversed(ctx) if offs[i][0] < char_end), None)
    if start is None or end is None or end < start:
        return None  # e.g. an answer made only of characters the tokenizer dropped (whitespace)
    return start, end


def question_token_count(tokenizer, question: str) -> int:
    return len(tokenizer.token_ids(question))


def build_features(examples: list[QAExample], tokenizer, *, max_length: int = 384, doc_stride: int = 128,
                   progress: bool = False, desc: str = "qa: windows") -> QAFeatures:
    """Window every example and compute targets. Questions that cannot be windowed (question longer than
    ``max_length`` allows, or leaving a window not larger than ``doc_stride``) are skipped and listed."""
    from tqdm.auto import tqdm

    kept: list[QAExample] = []
    encs = []
    ex_idx: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    skipped: list[dict] = []
    n_roundtrip = {"exact": 0, "superstring": 0, "other": 0}
    straddles: list[dict] = []
    n_answerable_without_window = 0
    for ex in tqdm(examples, desc=desc, unit=" q", disable=not progress, mininterval=1.0):
        nq = question_token_count(tokenizer, ex.question)
        window = max_length - nq - 3
        if window < 1:
            skipped.append({"id": ex.id, "reason": "question_too_long",
                            "detail": f"question is {nq} tokens; max_length={max_length} leaves no room for context"})
            continue
        if doc_stride >= window:
            skipped.append({"id": ex.id, "reason": "question_too_long",
                            "detail": f"question is {nq} tokens; the context window ({window} tokens) is not "
                                      f"larger than doc_stride={doc_stride}"})
            continue
        windows = tokenizer.encode_windows(ex.question, ex.context, max_length=max_length, stride=doc_stride,
                                           sample_index=len(kept))
        i = len(kept)
        kept.append(ex)
        found = False
        for enc in windows:
            s = e = 0
            if ex.answers:
                text, a = ex.answers[0]
                span = answer_token_span(enc, a, a + len(text))
                if span is not None:
                    s, e = span
                    found = True
                    decoded = ex.context[enc.offsets[s][0]:enc.offsets[e][1]]
                    if decoded == text:
                        n_roundtrip["exact"] += 1
                    elif text in decoded:
                        n_roundtrip["superstring"] += 1
                        if len(straddles) < 20:
                            straddles.append({"id": ex.id, "answer": text, "token_span_text": decoded})
                    else:  # cannot happen with correct offsets; counted so a regression is visible
                        n_roundtrip["other"] += 1
            encs.append(enc)
            ex_idx.append(i)
            starts.append(s)
            ends.append(e)
        if ex.answers and not found:
            n_answerable_without_window += 1
    stats = {
        "questions": len(kept), "windows": len(encs),
        "windows_with_answer": int(sum(1 for s in starts if s > 0)),
        "answerable_questions": sum(not e.is_impossible for e in kept),
        "answerable_without_aligned_window": n_answerable_without_window,
        "gold_span_roundtrip": n_roundtrip,
        "straddle_examples": straddles,
        "skipped": len(skipped),
    }
    return QAFeatures(kept, encs, np.asarray(ex_idx, dtype=np.int64), np.asarray(starts, dtype=np.int64),
                      np.asarray(ends, dtype=np.int64), skipped, stats)
