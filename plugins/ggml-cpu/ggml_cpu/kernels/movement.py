"""Data movement kernels: CPY/DUP/CONT (with type conversion and quantization), GET_ROWS, SET_ROWS."""

from __future__ import annotations

import numpy as np
from ggml_core import ComputeError, GGMLOp, GGMLType, Tensor
from ggml_core.quants import dequantize

from ggml_cpu.kernels._base import FLOAT_TYPES, Thunk, arr, f32, kernel, store

__all__: list[str] = []

_INT_TYPES = frozenset({GGMLType.I8, GGMLType.I16, GGMLType.I32, GGMLType.I64})


def _copy_ok(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    if a.type == node.type:
        return True
    if a.type in FLOAT_TYPES or a.type.is_quantized:
        return node.type in FLOAT_TYPES or (node.type.is_quantized and node.is_contiguous_rows)
    return a.type in _INT_TYPES and node.type in _INT_TYPES | {GGMLType.F32}


@kernel(GGMLOp.CPY, GGMLOp.DUP, GGMLOp.CONT, supports=_copy_ok)
def _bind_copy(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    shape = (node.ne[3], node.ne[2], node.ne[1], node.ne[0])

    if a.type == node.type and (a.type.is_quantized or a.type == GGMLType.BF16 or a.type in _INT_TYPES):
        # same type: bytes move unchanged, in logical element (or row) order
        def run_same() -> None:
            src, dst = arr(a), arr(node)
            if a.type.is_quantized:
                rows = np.ascontiguousarray(src).reshape(-1)
                dst[...] = rows.reshape(dst.shape)
            else:
                dst[...] = np.ascontiguousarray(src).reshape(shape)

        return run_same

    if node.type in _INT_TYPES:

        def run_int() -> None:
            arr(node)[...] = np.ascontiguousarray(arr(a)).reshape(shape)

        return run_int

    def run() -> None:
        store(node, np.ascontiguousarray(f32(a)).reshape(shape))

    return run


def _check_indices(node: Tensor, idx: np.ndarray, limit: int, what: str) -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= limit):
        bad = idx[(idx < 0) | (idx >= limit)][0]
        raise ComputeError(node, "CPU", f"{what} index {int(bad)} is outside 0..{limit - 1}")


def _get_rows_ok(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return (a.type in FLOAT_TYPES or a.type.is_quantized or a.type == GGMLType.I32) and node.type in (
        GGMLType.F32,
        GGMLType.I32,
    )


@kernel(GGMLOp.GET_ROWS, supports=_get_rows_ok)
def _bind_get_rows(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None

    def run() -> None:
        av = arr(a)  # (a3, a2, a1, K or row bytes)
        idx = arr(b)[0]  # (b2 = a3, b1 = a2, n)
        _check_indices(node, idx, a.ne[1], "row")
        i3 = np.arange(a.ne[3])[:, None, None]
        i2 = np.arange(a.ne[2])[None, :, None]
        rows = av[i3, i2, idx]  # (a3, a2, n, ...)
        if a.type.is_quantized:
            vals = dequantize(np.ascontiguousarray(rows), a.type)
        elif a.type == GGMLType.I32:
            arr(node)[...] = rows
            return
        elif a.type == GGMLType.BF16:
            vals = (rows.astype(np.uint32) << 16).view(np.float32)
        else:
            vals = rows.astype(np.float32)
        store(node, vals)

    return run


def _set_rows_ok(node: Tensor) -> bool:
    b = node.src[0]
    assert b is not None
    return b.type in (GGMLType.F32, GGMLType.F16) and (node.type in FLOAT_TYPES or node.type.is_quantized)


@kernel(GGMLOp.SET_ROWS, supports=_set_rows_ok)
def _bind_set_rows(node: Tensor) -> Thunk:
    b, c, dst = node.src[0], node.src[1], node.src[2]
    assert b is not None and c is not None and dst is not None

    def run() -> None:
        src = f32(b)  # (ne3, ne2, nr, ne0)
        idx = arr(c).astype(np.int64)  # (1, c2, c1, nr)
        _check_indices(node, idx, node.ne[1], "destination row")
        reps = (node.ne[3] // c.ne[2], node.ne[2] // c.ne[1], 1)
        full = np.tile(idx[0], reps)  # (ne3, ne2, nr)
        i3 = np.arange(node.ne[3])[:, None, None]
        i2 = np.arange(node.ne[2])[None, :, None]
        out = arr(node)
        if node.type == GGMLType.F32:
            out[i3, i2, full] = src
        else:
            tmp = np.empty((node.ne[3], node.ne[2], full.shape[-1], node.ne[0]), np.float32)
            tmp[...] = src
            # convert the written rows only, then scatter their bytes
            from ggml_core.quants import quantize

            if node.type == GGMLType.F16:
                out[i3, i2, full] = tmp.astype(np.float16)
            else:
                conv = quantize(tmp, node.type)
                if node.type == GGMLType.BF16:
                    conv = conv.view(np.uint16)
                out[i3, i2, full] = conv

    return run
