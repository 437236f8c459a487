"""Length-bucketed batching and the input limits every runtime head shares (numpy, torch-free)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from denki.models.io.errors import DenkiError

MAX_TEXT_CHARS = 20_000  # an inquiry or a question; longer input is refused with a clear message, not silently cut
MAX_CONTEXT_CHARS = 100_000  # a QA passage (windows cover all of it)
#: the fixed cost of one model call, in padded-token equivalents, for :func:`length_groups`. Measured with
#: bench/bucketing.py on a tiny int8 router (docs/serving.md): cost 32 made mixed batches about half the model time of
#: one padded batch; 0 and 128 were slower; 32 rather than 8 because a call's fixed cost grows with threads.
CALL_COST_TOKENS = 32


def length_groups(lengths: Sequence[int], max_batch: int, call_cost: float = CALL_COST_TOKENS) -> list[tuple[int, int]]:
    """Cut ascending ``lengths`` into contiguous ``[start, end)`` groups of at most ``max_batch`` rows.

    The groups minimise ``Σ (call_cost + rows · longest)`` — a padded batch costs its rows × its longest row plus a
    fixed per-call overhead — exactly, by dynamic programming in ``O(n · max_batch)``. Why: a micro-batch of
    short and long texts padded to the longest wastes much of its work; a large ``call_cost`` keeps batches whole."""
    n = len(lengths)
    if n == 0:
        return []
    max_batch = max(1, int(max_batch))
    inf = float("inf")
    best = [0.0] + [inf] * n  # best[j]: cheapest cost of the first j rows
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        longest = lengths[j - 1]  # ascending: the last row of a group is its longest
        bj, cj = inf, 0
        for i in range(max(0, j - max_batch), j):
            c = best[i] + call_cost + (j - i) * longest
            if c < bj:
                bj, cj = c, i
        best[j], cut[j] = bj, cj
    groups, j = [], n
    while j > 0:
        groups.append((cut[j], j))
        j = cut[j]
    return groups[::-1]


def sorted_batches(lengths: Sequence[int], max_batch: int) -> list[np.ndarray]:
    """Row indices of each batch: the rows sorted by length (stable: ties keep input order), then cut by
    :func:`length_groups`. The one batching rule of every runtime head and of the batch engine's windows."""
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    return [order[a:b] for a, b in length_groups([int(lengths[i]) for i in order], max_batch)]


def check_texts(texts: Sequence[str], limit: int = MAX_TEXT_CHARS, what: str = "text") -> None:
    """Refuse a non-string or an over-long text with a message naming which one (:class:`DenkiError`)."""
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise DenkiError(f"{what} {i}: expected a string, got {type(t).__name__}")
        if len(t) > limit:
            raise DenkiError(f"{what} {i} is {len(t):,} characters; the limit is {limit:,}")
