"""Reductions and selection: SUM, SUM_ROWS, MEAN, CUMSUM, ARGMAX, COUNT_EQUAL, ARGSORT, TOP_K.

ggml sums rows in double (``ggml_float``) and rounds the row sum to float; MEAN divides that float by ``ne0`` in
float. ARGMAX keeps the **last** index among equal maxima (``if (max == x[i]) idx = i``), and a NaN resets the
running maximum to the next element, exactly as ggml's loop does. ARGSORT uses a stable sort (ggml's is unstable:
ties have no defined order). TOP_K returns the k largest in descending order with the first two swapped, as
ggml's CPU does to make clear that the order carries no meaning.
"""

from __future__ import annotations

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.ops import SortOrder
from ggml_cpu.ops._base import FLOAT_TYPES, KERNELS, Thunk, arr, f32, store

__all__ = ["argmax_last"]

_F32 = np.float32


def _float_src(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return a.type in FLOAT_TYPES and node.type in FLOAT_TYPES


def _f32_src(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return a.type == GGMLType.F32


# ------------------------------------------------------------------------------------------------ sums


def _row_sums(x: np.ndarray) -> np.ndarray:
    """Each row summed in float64, rounded to float32 (``ggml_vec_sum_f32``), keepdims."""
    return x.sum(axis=-1, dtype=np.float64, keepdims=True).astype(np.float32)


@KERNELS.kernel(GGMLOp.SUM, supports=_float_src)
def _bind_sum(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None

    def run() -> None:
        x = f32(a)
        rows = x.sum(axis=-1, dtype=np.float64)  # double per row, rows added in double (f32 source)
        store(node, np.array(rows.sum(dtype=np.float64), dtype=np.float32).reshape(1, 1, 1, 1))

    return run


@KERNELS.kernel(GGMLOp.SUM_ROWS, supports=_float_src)
def _bind_sum_rows(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    return lambda: store(node, _row_sums(f32(a)))


@KERNELS.kernel(GGMLOp.MEAN, supports=_float_src)
def _bind_mean(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    n = _F32(a.ne[0])

    def run() -> None:
        with np.errstate(invalid="ignore", divide="ignore"):
            store(node, _row_sums(f32(a)) / n)

    return run


@KERNELS.kernel(GGMLOp.CUMSUM, supports=_f32_src)
def _bind_cumsum(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    return lambda: store(node, np.cumsum(f32(a), axis=-1, dtype=np.float32))  # y[i] = y[i-1] + x[i] in float


# ------------------------------------------------------------------------------------------------ selection


def argmax_last(rows: np.ndarray) -> np.ndarray:
    """ggml's ``ggml_vec_argmax_f32`` for each row of a 2-d float32 array (int32 result).

    ``max = MAX(max, x[i]); if (max == x[i]) idx = i``: the last index among equal maxima. Rows holding a NaN
    follow the loop literally (a NaN makes MAX pick the next element), the others are vectorised.
    """
    n = rows.shape[-1]
    out = np.zeros(rows.shape[0], np.int32)
    if n == 0:
        return out
    nan_rows = np.isnan(rows).any(axis=-1)
    clean = rows[~nan_rows]
    out[~nan_rows] = n - 1 - np.argmax(clean[:, ::-1], axis=-1)
    for r in np.nonzero(nan_rows)[0]:
        best, idx = _F32(-np.inf), 0
        for i, v in enumerate(rows[r]):
            best = best if best > v else v  # C's MAX(a, b) = a > b ? a : b
            if best == v:
                idx = i
        out[r] = idx
    return out


@KERNELS.kernel(GGMLOp.ARGMAX, supports=_f32_src)
def _bind_argmax(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    return lambda: store(node, argmax_last(f32(a)[0, 0]).reshape(1, 1, 1, -1))


def _count_equal_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    return a.type == b.type == GGMLType.I32 and node.type == GGMLType.I64


@KERNELS.kernel(GGMLOp.COUNT_EQUAL, supports=_count_equal_ok)
def _bind_count_equal(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None

    def run() -> None:
        arr(node)[...] = np.int64(np.count_nonzero(arr(a) == arr(b)))

    return run


def _sort_ok(node: Tensor) -> bool:
    return _f32_src(node) and node.type == GGMLType.I32


@KERNELS.kernel(GGMLOp.ARGSORT, supports=_sort_ok)
def _bind_argsort(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    descending = node.op_param_i32(0) == SortOrder.DESC

    def run() -> None:
        x = f32(a)
        idx = np.argsort(-x if descending else x, axis=-1, kind="stable")
        arr(node)[...] = idx.astype(np.int32)

    return run


@KERNELS.kernel(GGMLOp.TOP_K, supports=_sort_ok)
def _bind_top_k(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    k = node.ne[0]

    def run() -> None:
        idx = np.argsort(-f32(a), axis=-1, kind="stable")[..., :k].astype(np.int32)
        if k > 1:  # ggml swaps the first two on purpose: the order is not part of the result
            idx[..., [0, 1]] = idx[..., [1, 0]]
        arr(node)[...] = idx

    return run
