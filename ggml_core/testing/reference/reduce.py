"""numpy references for reductions and selections: SUM SUM_ROWS MEAN ARGMAX ARGSORT TOP_K COUNT_EQUAL CUMSUM.

Sums run in float64 (ggml's CPU accumulates in double). ARGMAX returns the last index among equal maxima, as
ggml's CPU does; ARGSORT and TOP_K results are compared for rows of distinct values (TOP_K as a set).
"""

from __future__ import annotations

import numpy as np

__all__ = ["argmax", "argsort", "count_equal", "cumsum", "mean", "sum_all", "sum_rows", "top_k"]


def sum_all(a: np.ndarray) -> np.ndarray:
    """SUM: the sum of every element, shape (1, 1, 1, 1)."""
    return np.asarray(a, dtype=np.float64).sum().reshape(1, 1, 1, 1)


def sum_rows(a: np.ndarray) -> np.ndarray:
    """SUM_ROWS: per-row sums, ne[0] = 1."""
    return np.asarray(a, dtype=np.float64).sum(axis=-1, keepdims=True)


def mean(a: np.ndarray) -> np.ndarray:
    """MEAN: per-row means, ne[0] = 1."""
    return np.asarray(a, dtype=np.float64).mean(axis=-1, keepdims=True)


def cumsum(a: np.ndarray) -> np.ndarray:
    """CUMSUM: running sums along each row."""
    return np.cumsum(np.asarray(a, dtype=np.float64), axis=-1)


def argmax(a: np.ndarray) -> np.ndarray:
    """ARGMAX of each row; among equal maxima the **last** index (ggml's CPU). Result ne = [rows]."""
    x = np.asarray(a, dtype=np.float32)
    rows = x.reshape(-1, x.shape[-1])
    last = rows.shape[1] - 1 - np.argmax(rows[:, ::-1], axis=1)
    return last.astype(np.int32)


def argsort(a: np.ndarray, descending: bool) -> np.ndarray:
    """ARGSORT of each row, ascending or descending (rows must hold distinct values for a unique answer)."""
    x = np.asarray(a, dtype=np.float32)
    idx = np.argsort(-x if descending else x, axis=-1, kind="stable")
    return idx.astype(np.int32)


def top_k(a: np.ndarray, k: int) -> np.ndarray:
    """TOP_K: the indices of the k largest values of each row (compared as a set: ggml swaps two on purpose)."""
    return argsort(a, descending=True)[..., :k]


def count_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """COUNT_EQUAL: how many elements of a and b are equal, as one int64."""
    return np.array([np.count_nonzero(np.asarray(a) == np.asarray(b))], dtype=np.int64)
