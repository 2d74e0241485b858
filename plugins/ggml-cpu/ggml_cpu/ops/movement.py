"""Copies and row gathers: CPY/DUP/CONT (type conversion, quantization), GET_ROWS, SET_ROWS.

Copies move elements in logical order (``ne[0]`` fastest), whatever the strides of source and destination.
Conversions follow ggml: f32 → f16/bf16 round to nearest even, f32 → quantized gives the reference quantizer's
bytes, quantized → f32 dequantizes, f32 → i32 truncates toward zero.
"""

from __future__ import annotations

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.quants import can_dequantize, can_quantize, dequantize
from ggml_cpu.ops import _compiled
from ggml_cpu.ops._base import FLOAT_TYPES, KERNELS, Thunk, arr, check_index_range, f32, store
from ggml_cpu.ops._compiled import (
    DTYPE,
    flat,
    kernel,
    params,
    rows_of,
    split_rows,
)
from ggml_cpu.quant import from_float

__all__: list[str] = []

_INT_TYPES = frozenset({GGMLType.I8, GGMLType.I16, GGMLType.I32, GGMLType.I64})


def _np_shape(t: Tensor) -> tuple[int, int, int, int]:
    return (t.ne[3], t.ne[2], t.ne[1], t.ne[0])


def _readable(t: GGMLType) -> bool:
    """Values of this type can be read as float32."""
    return t in FLOAT_TYPES or (t.is_quantized and can_dequantize(t))


def _writable(t: GGMLType) -> bool:
    """float32 values can be converted to this type."""
    return t in FLOAT_TYPES or (t.is_quantized and can_quantize(t))


# ------------------------------------------------------------------------------------------------ CPY / DUP / CONT


def _copy_ok(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    if a.type == node.type:
        # bytes move unchanged; quantized rows must stay whole blocks
        return not a.type.is_quantized or (a.is_contiguous_rows and node.is_contiguous_rows)
    if node.type.is_quantized and not node.is_contiguous_rows:
        return False
    if a.type.is_quantized and not a.is_contiguous_rows:
        return False
    if _readable(a.type) and _writable(node.type):
        return True
    return {a.type, node.type} == {GGMLType.F32, GGMLType.I32}


@KERNELS.kernel(GGMLOp.CPY, GGMLOp.DUP, GGMLOp.CONT, supports=_copy_ok)
def _bind_copy(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    shape = _np_shape(node)

    if a.type == node.type and a.type.is_quantized:
        # whole blocks: the rows' bytes in logical order, regrouped into the destination's rows
        def run_blocks() -> None:
            dst = arr(node)
            dst[...] = np.ascontiguousarray(arr(a)).reshape(dst.shape)

        return run_blocks

    if a.type == node.type:

        def run_same() -> None:
            arr(node)[...] = np.ascontiguousarray(arr(a)).reshape(shape)

        return run_same

    if node.type == GGMLType.I32:  # f32 → i32: C's truncation toward zero

        def run_to_int() -> None:
            with np.errstate(invalid="ignore"):
                arr(node)[...] = np.trunc(np.ascontiguousarray(arr(a))).astype(np.int32).reshape(shape)

        return run_to_int

    def run() -> None:
        values = arr(a).astype(np.float32) if a.type in _INT_TYPES else f32(a)
        store(node, np.ascontiguousarray(values).reshape(shape))

    return run


# ------------------------------------------------------------------------------------------------ GET_ROWS


def _get_rows_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    if b.type != GGMLType.I32:
        return False
    if a.type == GGMLType.I32:
        return node.type == GGMLType.I32
    if a.type.is_quantized and not a.is_contiguous_rows:
        return False
    return _readable(a.type) and node.type in FLOAT_TYPES


def _bind_get_rows_dequantized(node: Tensor, a: Tensor, b: Tensor) -> Thunk | None:
    """Quantized rows (one weight slice, a token embedding) dequantized by the compiled row dequantizer straight
    into the f32 result, one call per index (bit for bit as ``ggml_core.quants.dequantize``); None: not here."""
    from ggml_cpu import quant

    simple = a.ne[2] == a.ne[3] == 1 and b.ne[1] == b.ne[2] == b.ne[3] == 1 and node.type == GGMLType.F32
    if not (simple and a.type.is_quantized and a.type not in (GGMLType.Q4_1, GGMLType.Q5_1)):
        return None  # Q4_1 / Q5_1: the row dequantizer splits off the minima
    w, idx, out = arr(a)[0, 0], arr(b)[0, 0, 0], arr(node)[0, 0]
    if not (w.flags.c_contiguous and out.flags.c_contiguous and quant.dequantizer_ready(a.type)):
        return None
    wtype, m = a.type, a.ne[1]
    mins = np.empty((1, max(1, a.ne[0] // 32)), np.float32)

    def run() -> None:
        for j, r in enumerate(idx.tolist()):
            if not 0 <= r < m:
                check_index_range(node, idx, m, "row")
            quant.dequantize_rows(w, wtype, r, r + 1, out[j : j + 1], mins)

    return run


@KERNELS.kernel(GGMLOp.GET_ROWS, supports=_get_rows_ok)
def _bind_get_rows(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    fast = _bind_get_rows_dequantized(node, a, b)
    if fast is not None:
        return fast
    i3 = np.arange(a.ne[3])[:, None, None]
    i2 = np.arange(a.ne[2])[None, :, None]

    def run() -> None:
        idx = arr(b)[0]  # (b.ne[2] = a.ne[3], b.ne[1] = a.ne[2], n)
        check_index_range(node, idx, a.ne[1], "row")
        rows = arr(a)[i3, i2, idx]  # (a3, a2, n, ne0 or row bytes): only the picked rows are read
        if a.type == GGMLType.I32:
            arr(node)[...] = rows
        elif a.type.is_quantized:
            store(node, dequantize(np.ascontiguousarray(rows), a.type))
        elif a.type == GGMLType.BF16:
            store(node, (rows.astype(np.uint32) << 16).view(np.float32))
        else:
            store(node, rows.astype(np.float32))

    return run


# ------------------------------------------------------------------------------------------------ SET_ROWS


def _set_rows_ok(node: Tensor) -> bool:
    b, c = node.src[0], node.src[1]
    assert b is not None and c is not None
    return (
        b.type in (GGMLType.F32, GGMLType.F16)
        and c.type in (GGMLType.I32, GGMLType.I64)
        and _writable(node.type)
        and (not node.type.is_quantized or node.is_contiguous_rows)
    )


@KERNELS.kernel(GGMLOp.SET_ROWS, supports=_set_rows_ok)
def _bind_set_rows(node: Tensor) -> Thunk:
    b, c = node.src[0], node.src[1]
    assert b is not None and c is not None
    fast = bind_set_rows(node)
    if fast is not None:
        return fast
    i3 = np.arange(node.ne[3])[:, None, None]
    i2 = np.arange(node.ne[2])[None, :, None]
    # b's dims 2, 3 take the index rows i % c.ne (ggml tiles the indices)
    reps = (node.ne[3] // c.ne[2], node.ne[2] // c.ne[1], 1)

    def run() -> None:
        idx = np.tile(arr(c)[0].astype(np.int64), reps)  # (ne3, ne2, rows of b)
        check_index_range(node, idx, node.ne[1], "destination row")
        src = f32(b)
        out = arr(node)
        if node.type == GGMLType.F32:
            out[i3, i2, idx] = src
        elif node.type == GGMLType.F16:
            out[i3, i2, idx] = src.astype(np.float16)
        else:  # bf16 bits or quantized rows (ggml-cpu's from_float: x86 Q8_0 ties to even): only the rows written
            conv = from_float(np.ascontiguousarray(src, dtype=np.float32), node.type)
            out[i3, i2, idx] = conv.view(np.uint16) if node.type == GGMLType.BF16 else conv

    return run


# ------------------------------------------------------------------------------------- the compiled path


def _token_width(b: Tensor) -> int:
    """C when ``b``, SET_ROWS' source, is one-value rows ``t·C + c`` of a batch's C values per token (a transposed
    V cache's store: ``b`` reshapes the batch's V, whose last non-unit dimension counts tokens) and C fills a
    channel block of the kernel (:data:`._movement_kernels.SET_ROWS_BLOCK`), else 0. Only the order the rows are
    written in depends on it."""
    mod = _compiled.load_module("_movement_kernels", "compiled set_rows")
    if mod is None or b.ne[0] != 1 or b.ne[2] != 1 or b.ne[3] != 1 or b.ne[1] < 2 * mod.SET_ROWS_BLOCK:
        return 0
    base = b.view_src
    while base is not None and base.view_src is not None:
        base = base.view_src
    if base is None or base.nelements != b.nelements:
        return 0
    tokens = next((n for n in reversed(base.ne) if n > 1), 1)
    chans = b.ne[1] // tokens
    return chans if tokens > 1 and chans * tokens == b.ne[1] and chans >= mod.SET_ROWS_BLOCK else 0


def bind_set_rows(node: Tensor) -> Thunk | None:
    """SET_ROWS of f32 rows into f32 or f16 rows (any destination strides), indices I32 / I64 checked per call."""
    b, c = node.src[0], node.src[1]
    if b is None or c is None or b.type != GGMLType.F32 or node.type not in (GGMLType.F32, GGMLType.F16):
        return None
    if c.type not in (GGMLType.I32, GGMLType.I64):
        return None
    fn = kernel(
        "SET_ROWS_SPECS",
        ("float32" if node.type == GGMLType.F32 else "uint16", str(DTYPE[c.type])),
        module="_movement_kernels",
    )
    src, idx, dst = flat(b), flat(c), flat(node, any_ne0=True)
    if fn is None or src is None or idx is None or dst is None:
        return None
    ds, cs = dst[1], idx[1]
    chans = _token_width(b)
    p = params(*b.ne, *src[1][1:], *ds[1:], node.ne[1], cs[0], cs[1], c.ne[1], cs[2], c.ne[2], ds[0], chans)
    sv, iv, dv = src[0], idx[0], dst[0]
    key = (dv.dtype.name, iv.dtype.name)
    # a transposed V cache's one-value rows go in blocks of channels (no two threads write a cache line); other
    # rows split only from 64 values: one-value rows of neighbouring tokens share cache lines, and two cores
    # writing them took longer than one (false sharing: 0.41 against 0.24 ms a layer)
    block = _compiled.load_module("_movement_kernels", "compiled set_rows").SET_ROWS_BLOCK
    rows = -(-chans // block) if chans else rows_of(p)  # the kernel's module: loaded for fn
    elements = b.nelements if b.ne[0] >= 64 or chans else 0
    split = split_rows("SET_ROWS", (sv, iv, dv), p, (), rows, elements, lambda: fn(sv, iv, dv, p), key)

    def run() -> None:
        if split():
            check_index_range(node, arr(c), node.ne[1], "destination row")

    return run
