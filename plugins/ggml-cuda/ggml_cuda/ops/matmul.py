"""MUL_MAT → ``kernels/matmul.cu`` and ``kernels/matmul_q.cu``: which kernel path serves which operands.

Paths, chosen by :func:`matmul_path` from the weight type, the number of activation columns N and the device:

============  =====================================================================================================
``mv``        N <= 8, float weights: one warp per weight row, activations rounded to the weight's dot type
``mv_q``      N <= 8, quantized weights: activations quantized to Q8_0/Q8_1 (32-element types) or Q8_K
              (K-quants) as ggml does, then integer dot products
``gemm_f32``  N > 8, f32 weights (and bf16 weights before compute capability 8.0, widened to f32)
``wmma``      N > 8, f16 / bf16 weights, and quantized weights dequantized to f16: tensor cores (m16n16k16,
              f32 accumulation) with the activations converted to the weight's 16-bit type
============  =====================================================================================================
"""

from __future__ import annotations

from typing import Final

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_cuda.ops._launch import (
    KERNELS,
    MAX_GRID_Y,
    STATUS,
    Args,
    BindContext,
    Launch,
    Scratch,
    rows_grid,
    src,
    type_id,
)

__all__ = ["K_QUANTS", "MMVQ_TYPES", "MV_MAX_COLS", "matmul_path", "mvq_kernel", "mvq_vec_width"]

#: the most activation columns the matrix-vector kernels take (MV_MAX_COLS / MVQ_MAX_COLS in the .cu files)
MV_MAX_COLS: Final = 8
MV_ROWS: Final = 4  # weight rows (warps) per block of k_mv_float / k_mv_q

K_QUANTS: Final = frozenset({GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K})
#: weight types of the quantized matrix-vector kernel
MMVQ_TYPES: Final = frozenset({GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0} | K_QUANTS)
FLOAT_WEIGHTS: Final = frozenset({GGMLType.F32, GGMLType.F16, GGMLType.BF16})
_ZERO4: Final = (0, 0, 0, 0)


def matmul_path(a_type: GGMLType, n_cols: int, compute_capability: tuple[int, int]) -> str:
    """The kernel path for weights of ``a_type`` times ``n_cols`` activation columns (see the module doc)."""
    if n_cols <= MV_MAX_COLS:
        return "mv" if a_type in FLOAT_WEIGHTS else "mv_q"
    if a_type == GGMLType.F32:
        return "gemm_f32"
    if a_type == GGMLType.BF16 and compute_capability < (8, 0):
        return "gemm_f32"
    return "wmma"


def _mul_mat_ok(node: Tensor) -> bool:
    a, b = src(node, 0), src(node, 1)
    return (
        (a.type in FLOAT_WEIGHTS or a.type in MMVQ_TYPES)
        and b.type in (GGMLType.F32, GGMLType.F16)
        and node.type == GGMLType.F32
        and a.is_contiguous_rows
        and a.nb[0] <= a.nb[1]
        and node.nb[0] == 4
        and b.ne[2] % a.ne[2] == 0
        and b.ne[3] % a.ne[3] == 0
        and b.ne[2] * b.ne[3] <= MAX_GRID_Y
        and -(-a.ne[1] // 128) <= MAX_GRID_Y
    )


def _aligned(width: int, *values: int) -> bool:
    return all(v % width == 0 for v in values)


def _packed_desc(t: Tensor, esize: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """ne and nb of a packed copy of ``t`` with ``esize``-byte elements."""
    ne = t.ne
    nb0 = esize
    nb1 = nb0 * ne[0]
    return ne, (nb0, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2])


@KERNELS.kernel(GGMLOp.MUL_MAT, supports=_mul_mat_ok)
def _bind_mul_mat(node: Tensor, ctx: BindContext) -> list[Launch]:
    a, b = src(node, 0), src(node, 1)
    path = matmul_path(a.type, b.ne[1], ctx.compute_capability)
    if path == "mv":
        return _mv_float(node, a, b, ctx)
    if path == "mv_q":
        return _mv_q(node, a, b, ctx)
    return _gemm(node, a, b, ctx, path)


def _mv_float(node: Tensor, a: Tensor, b: Tensor, ctx: BindContext) -> list[Launch]:
    pa, pb = ctx.ptr(a), ctx.ptr(b)
    vec = (
        a.ne[0] % 8 == 0
        and b.type == GGMLType.F32
        and b.nb[0] == 4
        and _aligned(16, pa, a.nb[1], a.nb[2], a.nb[3], pb, b.nb[1], b.nb[2], b.nb[3])
    )
    args = Args().ptr(pa).ptr(pb).ptr(ctx.ptr(node)).ptr(0).ptr(0).tdesc(a).tdesc(b).tdesc(node).desc(_ZERO4, _ZERO4)
    args.i32(type_id(a.type)).i32(type_id(b.type)).i32(b.ne[1]).i32(vec).i32(1)
    grid = (-(-a.ne[1] // MV_ROWS), b.ne[2] * b.ne[3], 1)
    return [Launch.of("matmul", "k_mv_float", grid, (32 * MV_ROWS, 1, 1), args)]


def mvq_kernel(t: GGMLType) -> str:
    """The quantized matrix-vector kernel of weight type ``t`` (one per type: ``k_mv_q4_0`` ... ``k_mv_q6_k``)."""
    return f"k_mv_{t.name.lower()}"


def mvq_vec_width(a: Tensor, a_ptr: int) -> int:
    """The widest load (16, 8, 4 or 2 bytes) that divides every staged chunk address of k_mv_q."""
    per_chunk = 4 if a.type in K_QUANTS else 32
    chunk = per_chunk * a.type.type_size
    for width in (16, 8, 4):
        if _aligned(width, a_ptr, a.nb[1], a.nb[2], a.nb[3], chunk):
            return width
    return 2


def _mv_q(node: Tensor, a: Tensor, b: Tensor, ctx: BindContext, ids: Tensor | None = None) -> list[Launch]:
    k = a.ne[0]
    rows = b.nrows
    act_qk = 256 if a.type in K_QUANTS else 32
    n_act_blocks = rows * k // act_qk
    qx = ctx.scratch(rows * k)
    dx = ctx.scratch(n_act_blocks * 4)
    sx = ctx.scratch(max(rows * k // 32 * 4, 4))
    quant = Args().ptr(ctx.ptr(b)).ptr(qx).ptr(dx).ptr(sx).tdesc(b).i32(type_id(b.type)).i32(act_qk)
    quant.i64(n_act_blocks)
    launches = [Launch.of("matmul_q", "k_quantize_act", (-(-n_act_blocks // 8), 1, 1), (256, 1, 1), quant)]
    pa = ctx.ptr(a)
    mv = Args().ptr(pa).ptr(qx).ptr(dx).ptr(sx).ptr(ctx.ptr(node))
    if ids is None:
        mv.ptr(0).ptr(0).tdesc(a).tdesc(b).tdesc(node).desc(_ZERO4, _ZERO4)
        mv.i32(b.ne[1]).i32(mvq_vec_width(a, pa)).i32(1)
        grid = (-(-a.ne[1] // MV_ROWS), b.ne[2] * b.ne[3], 1)
    else:
        mv.ptr(ctx.ptr(ids)).ptr(STATUS).tdesc(a).tdesc(b).tdesc(node).tdesc(ids)
        mv.i32(1).i32(mvq_vec_width(a, pa)).i32(ids.ne[0])
        grid = (-(-a.ne[1] // MV_ROWS), ids.ne[0] * ids.ne[1], 1)
    launches.append(Launch.of("matmul_q", mvq_kernel(a.type), grid, (32 * MV_ROWS, 1, 1), mv))
    return launches


def _gemm(node: Tensor, a: Tensor, b: Tensor, ctx: BindContext, path: str) -> list[Launch]:
    launches: list[Launch] = []
    wide = path == "gemm_f32"
    half = GGMLType.BF16 if a.type == GGMLType.BF16 else GGMLType.F16
    in_type = GGMLType.F32 if wide else half
    esize = in_type.type_size
    # weights: used in place when already in the input type with packed rows, else converted to scratch
    a_ptr: int | Scratch = ctx.ptr(a)
    a_ne: tuple[int, ...] = a.ne
    a_nb: tuple[int, ...] = a.nb
    if a.type != in_type:
        a_scr = ctx.scratch(a.nelements * esize)
        kernel = "k_dequant_rows" if a.type.is_quantized else "k_convert_rows"
        conv = Args().ptr(ctx.ptr(a)).ptr(a_scr).tdesc(a).i32(type_id(a.type)).i32(type_id(in_type))
        grid, block = rows_grid(a.ne[0], a.nrows)
        launches.append(Launch.of("matmul", kernel, grid, block, conv))
        a_ptr = a_scr
        a_ne, a_nb = _packed_desc(a, esize)
    # activations: used in place when f32 with packed rows on the f32 path, else converted
    b_ptr: int | Scratch = ctx.ptr(b)
    b_ne: tuple[int, ...] = b.ne
    b_nb: tuple[int, ...] = b.nb
    if not (wide and b.type == GGMLType.F32 and b.nb[0] == 4):
        b_scr = ctx.scratch(b.nelements * esize)
        conv = Args().ptr(ctx.ptr(b)).ptr(b_scr).tdesc(b).i32(type_id(b.type)).i32(type_id(in_type))
        grid, block = rows_grid(b.ne[0], b.nrows)
        launches.append(Launch.of("matmul", "k_convert_rows", grid, block, conv))
        b_ptr = b_scr
        b_ne, b_nb = _packed_desc(b, esize)
    args = Args().ptr(a_ptr).ptr(b_ptr).ptr(ctx.ptr(node))
    args.desc(a_ne, a_nb).desc(b_ne, b_nb).tdesc(node)
    batch = b.ne[2] * b.ne[3]
    if wide:
        grid = (-(-b.ne[1] // 64), -(-a.ne[1] // 64), batch)
        launches.append(Launch.of("matmul", "k_gemm_f32", grid, (256, 1, 1), args))
        return launches
    # scratch addresses are 256-aligned; tensor addresses are checked
    direct = [v for v in (a_ptr, b_ptr) if isinstance(v, int)]
    aligned = a.ne[0] % 8 == 0 and _aligned(16, *direct, a_nb[1], a_nb[2], a_nb[3], b_nb[1], b_nb[2], b_nb[3])
    args.i32(aligned)
    kernel = "k_gemm_wmma_bf16" if in_type == GGMLType.BF16 else "k_gemm_wmma_f16"
    grid = (-(-b.ne[1] // 128), -(-a.ne[1] // 128), batch)
    launches.append(Launch.of("matmul", kernel, grid, (256, 1, 1), args))
    return launches


# ------------------------------------------------------------------------------------------------ MUL_MAT_ID


def _mul_mat_id_ok(node: Tensor) -> bool:
    a, b, ids = src(node, 0), src(node, 1), src(node, 2)
    return (
        (a.type in FLOAT_WEIGHTS or a.type in MMVQ_TYPES)
        and b.type in (GGMLType.F32, GGMLType.F16)
        and ids.type == GGMLType.I32
        and node.type == GGMLType.F32
        and a.is_contiguous_rows
        and ids.ne[0] * ids.ne[1] <= MAX_GRID_Y
    )


@KERNELS.kernel(GGMLOp.MUL_MAT_ID, supports=_mul_mat_id_ok)
def _bind_mul_mat_id(node: Tensor, ctx: BindContext) -> list[Launch]:
    """One matrix-vector product per (expert slot, token): out[:, e, t] = as[:, :, ids[e, t]] · b[:, e % b1, t].

    Every token reads its experts' weights anew (no grouping of tokens by expert): right for generation, slow
    for long prompts.
    """
    a, b, ids = src(node, 0), src(node, 1), src(node, 2)
    if a.type in MMVQ_TYPES:
        return _mv_q(node, a, b, ctx, ids)
    pa, pb = ctx.ptr(a), ctx.ptr(b)
    vec = (
        a.ne[0] % 8 == 0
        and b.type == GGMLType.F32
        and b.nb[0] == 4
        and _aligned(16, pa, a.nb[1], a.nb[2], pb, b.nb[1], b.nb[2])
    )
    args = Args().ptr(pa).ptr(pb).ptr(ctx.ptr(node)).ptr(ctx.ptr(ids)).ptr(STATUS)
    args.tdesc(a).tdesc(b).tdesc(node).tdesc(ids)
    args.i32(type_id(a.type)).i32(type_id(b.type)).i32(1).i32(vec).i32(ids.ne[0])
    grid = (-(-a.ne[1] // MV_ROWS), ids.ne[0] * ids.ne[1], 1)
    return [Launch.of("matmul", "k_mv_float", grid, (32 * MV_ROWS, 1, 1), args)]
