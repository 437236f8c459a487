"""The softmax every routing module shares (numpy, imports nothing from denki): the routing rule
(:mod:`.decision`) and the out-of-scope score (:mod:`.scope`), which decision imports."""
from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax (float64)."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)
