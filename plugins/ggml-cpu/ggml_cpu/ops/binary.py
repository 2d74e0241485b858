"""Binary kernels with ggml's broadcasting: ADD, SUB, MUL, DIV (b repeats over a), ADD1 (scalar b), ADD_ID.

ggml broadcasts by **repetition**: element ``i`` of the result uses ``b[i % b.ne]`` in every dimension (numpy's
broadcasting only stretches size-1 dimensions). Values are computed in float32 and rounded to the result type.
Any strides work, including the non-contiguous operands ggml itself rejects.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import cast

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_cpu.ops._base import FLOAT_TYPES, KERNELS, Thunk, arr, check_index_range, f32, store

__all__ = ["repeat_views"]


def _split(x: np.ndarray, inner: tuple[int, ...]) -> np.ndarray:
    """View a 4-d array of shape S as 8-d ``(S / inner, inner)`` per dimension (no copy)."""
    shape: list[int] = []
    strides: list[int] = []
    for n, s, b in zip(x.shape, x.strides, inner, strict=True):
        shape += [n // b, b]
        strides += [s * b, s]
    return np.lib.stride_tricks.as_strided(x, shape=shape, strides=strides, writeable=x.flags.writeable)


def repeat_views(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """8-d views of ``a`` and of ``b`` repeated over it (ggml's ``i % ne`` broadcasting) for numpy ufuncs."""
    b8 = np.lib.stride_tricks.as_strided(
        b,
        shape=[d for n in b.shape for d in (1, n)],
        strides=[d for s in b.strides for d in (0, s)],
        writeable=False,
    )
    return _split(a, b.shape), b8


_BINARY: dict[GGMLOp, Callable[..., np.ndarray]] = {
    GGMLOp.ADD: np.add,
    GGMLOp.SUB: np.subtract,
    GGMLOp.MUL: np.multiply,
    GGMLOp.DIV: np.divide,
}


def _binary_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    return a.type in FLOAT_TYPES and b.type in FLOAT_TYPES and node.type in FLOAT_TYPES


@KERNELS.kernel(GGMLOp.ADD, GGMLOp.SUB, GGMLOp.MUL, GGMLOp.DIV, supports=_binary_ok)
def _bind_binary(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    fn = _BINARY[node.op]
    if a.is_empty:
        return lambda: None
    if a.type == b.type == node.type == GGMLType.F32:
        # the engine replays every thunk inside one np.errstate, so the hot path is a bare ufunc call
        if a.ne == b.ne:
            return cast(Thunk, partial(fn, arr(a), arr(b), out=arr(node)))
        a8, b8 = repeat_views(arr(a), arr(b))
        d8 = _split(arr(node), (b.ne[3], b.ne[2], b.ne[1], b.ne[0]))
        return cast(Thunk, partial(fn, a8, b8, out=d8))

    def run() -> None:
        av, bv = f32(a), f32(b)
        out = np.empty(av.shape, np.float32)
        a8, b8 = repeat_views(av, bv)
        with np.errstate(all="ignore"):
            fn(a8, b8, out=_split(out, bv.shape))
        store(node, out)

    return run


@KERNELS.kernel(GGMLOp.ADD1, supports=_binary_ok)
def _bind_add1(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None

    def run() -> None:
        with np.errstate(all="ignore"):
            store(node, f32(a) + f32(b).reshape(-1)[0])

    return run


def _add_id_ok(node: Tensor) -> bool:
    a, b, ids = node.src[0], node.src[1], node.src[2]
    assert a is not None and b is not None and ids is not None
    return a.type == b.type == node.type == GGMLType.F32 and ids.type == GGMLType.I32


@KERNELS.kernel(GGMLOp.ADD_ID, supports=_add_id_ok)
def _bind_add_id(node: Tensor) -> Thunk:
    a, b, ids = node.src[0], node.src[1], node.src[2]
    assert a is not None and b is not None and ids is not None

    def run() -> None:
        idx = arr(ids)[0, 0].astype(np.int64)  # (a.ne[2], a.ne[1])
        check_index_range(node, idx, b.ne[1], "row of b")
        rows = arr(b)[0, 0][idx]  # (a.ne[2], a.ne[1], ne0)
        with np.errstate(all="ignore"):
            store(node, arr(a) + rows[None])

    return run
