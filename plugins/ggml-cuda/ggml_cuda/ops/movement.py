"""Data movement → ``kernels/movement.cu``: CPY/DUP/CONT conversions, GET_ROWS, SET_ROWS.

Conversions follow ggml: floats convert with round-to-nearest-even (f16, bf16), quantized sources dequantize,
float sources quantize to the 32-element types with ggml's reference quantizers, same-type copies move bytes.
Row indices are range-checked on the device (the backend raises at synchronize).
"""

from __future__ import annotations

from typing import Final

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_cuda.ops._launch import KERNELS, STATUS, Args, BindContext, Launch, flat_grid, rows_grid, src, type_id

__all__ = ["DEQUANT_TYPES", "QUANTIZE_TYPES"]

MODULE: Final = "movement"

FLOAT_TYPES: Final = frozenset({GGMLType.F32, GGMLType.F16, GGMLType.BF16})

#: quantized types the kernels dequantize (dequant_in_block in quants.cuh)
DEQUANT_TYPES: Final = frozenset(
    {
        GGMLType.Q4_0,
        GGMLType.Q4_1,
        GGMLType.Q5_0,
        GGMLType.Q5_1,
        GGMLType.Q8_0,
        GGMLType.IQ4_NL,
        GGMLType.Q2_K,
        GGMLType.Q3_K,
        GGMLType.Q4_K,
        GGMLType.Q5_K,
        GGMLType.Q6_K,
    }
)

#: types the kernels quantize into (quantize_block32 in quants.cuh)
QUANTIZE_TYPES: Final = frozenset({GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0})


# ------------------------------------------------------------------------------------------------ copies


def _copy_kind(a: Tensor, d: Tensor) -> str | None:
    """Which copy kernel serves a → d, or None."""
    if a.nelements != d.nelements:
        return None
    if a.type == d.type:
        if a.type.is_quantized:
            return "blocks" if a.is_contiguous_rows and d.is_contiguous_rows else None
        return "elements"
    if a.type in FLOAT_TYPES and d.type in FLOAT_TYPES:
        return "convert"
    if {a.type, d.type} == {GGMLType.F32, GGMLType.I32}:
        return "convert"
    if a.type in DEQUANT_TYPES and d.type in FLOAT_TYPES:
        return "dequant"
    if a.type in FLOAT_TYPES and d.type in QUANTIZE_TYPES and d.is_contiguous_rows:
        return "quantize"
    return None


def _copy_ok(node: Tensor) -> bool:
    return _copy_kind(src(node, 0), node) is not None


@KERNELS.kernel(GGMLOp.CPY, GGMLOp.DUP, GGMLOp.CONT, supports=_copy_ok)
def _bind_copy(node: Tensor, ctx: BindContext) -> list[Launch]:
    a = src(node, 0)
    kind = _copy_kind(a, node)
    args = Args().ptr(ctx.ptr(a)).ptr(ctx.ptr(node)).tdesc(a).tdesc(node)
    n = node.nelements
    if kind == "blocks":
        total = a.row_size * a.nrows
        args.i64(a.row_size).i64(node.row_size).i64(total)
        grid, block = flat_grid(total)
        return [Launch.of(MODULE, "k_cpy_block_bytes", grid, block, args)]
    if kind == "elements":
        args.i32(a.type.type_size).i64(n)
        grid, block = flat_grid(n)
        return [Launch.of(MODULE, "k_cpy_elements", grid, block, args)]
    if kind == "quantize":
        nblocks = n // 32
        args.i32(type_id(a.type)).i32(type_id(node.type)).i64(nblocks)
        grid, block = flat_grid(nblocks, 128)
        return [Launch.of(MODULE, "k_cpy_quantize", grid, block, args)]
    kernel = "k_cpy_dequant" if kind == "dequant" else "k_cpy_convert"
    args.i32(type_id(a.type)).i32(type_id(node.type)).i64(n)
    grid, block = flat_grid(n)
    return [Launch.of(MODULE, kernel, grid, block, args)]


# ------------------------------------------------------------------------------------------------ rows


def _get_rows_ok(node: Tensor) -> bool:
    a, idx = src(node, 0), src(node, 1)
    if idx.type != GGMLType.I32:
        return False
    if a.type == GGMLType.I32:
        return node.type == GGMLType.I32
    return (a.type in FLOAT_TYPES or a.type in DEQUANT_TYPES) and node.type == GGMLType.F32


@KERNELS.kernel(GGMLOp.GET_ROWS, supports=_get_rows_ok)
def _bind_get_rows(node: Tensor, ctx: BindContext) -> list[Launch]:
    a, idx = src(node, 0), src(node, 1)
    args = Args().ptr(ctx.ptr(a)).ptr(ctx.ptr(idx)).ptr(ctx.ptr(node)).tdesc(a).tdesc(idx).tdesc(node)
    args.i32(type_id(a.type)).i32(type_id(node.type)).ptr(STATUS)
    grid, block = rows_grid(node.ne[0], node.nrows)
    return [Launch.of(MODULE, "k_get_rows", grid, block, args)]


def _set_rows_ok(node: Tensor) -> bool:
    b, idx = src(node, 0), src(node, 1)
    if b.type not in (GGMLType.F32, GGMLType.F16) or idx.type not in (GGMLType.I32, GGMLType.I64):
        return False
    if node.type in FLOAT_TYPES:
        return True
    return node.type in QUANTIZE_TYPES and node.is_contiguous_rows and b.ne[0] % 32 == 0


@KERNELS.kernel(GGMLOp.SET_ROWS, supports=_set_rows_ok)
def _bind_set_rows(node: Tensor, ctx: BindContext) -> list[Launch]:
    b, idx = src(node, 0), src(node, 1)
    args = Args().ptr(ctx.ptr(b)).ptr(ctx.ptr(idx)).ptr(ctx.ptr(node)).tdesc(b).tdesc(idx).tdesc(node)
    args.i32(type_id(b.type)).i32(type_id(idx.type)).i32(type_id(node.type)).ptr(STATUS)
    if node.type in QUANTIZE_TYPES:
        grid, block = flat_grid(b.nrows * (b.ne[0] // 32), 128)
        return [Launch.of(MODULE, "k_set_rows_quant", grid, block, args)]
    grid, block = rows_grid(b.ne[0], b.nrows)
    return [Launch.of(MODULE, "k_set_rows", grid, block, args)]
