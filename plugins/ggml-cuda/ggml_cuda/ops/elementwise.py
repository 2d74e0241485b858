"""Elementwise ops → ``kernels/elementwise.cu``: binary ops, unary math, SCALE, CLAMP, LEAKY_RELU, GLU, DIAG_MASK_*."""

from __future__ import annotations

from typing import Final

from ggml_core import GGMLOp, GGMLType, GluOp, Tensor, UnaryOp
from ggml_cuda.ops._launch import KERNELS, Args, BindContext, Launch, rows_grid, src, type_id

__all__ = ["FLOAT_TYPES", "GLU_CODES", "MATH_CODES", "UNARY_CODES", "unary_code_and_params"]

MODULE: Final = "elementwise"

#: storage types the elementwise kernels load and store (computing in f32)
FLOAT_TYPES: Final = frozenset({GGMLType.F32, GGMLType.F16, GGMLType.BF16})

#: UNARY sub-op → kernel op code (the ``U_*`` defines of elementwise.cu)
UNARY_CODES: Final[dict[UnaryOp, int]] = {
    UnaryOp.ABS: 0,
    UnaryOp.SGN: 1,
    UnaryOp.NEG: 2,
    UnaryOp.STEP: 3,
    UnaryOp.TANH: 4,
    UnaryOp.ELU: 5,
    UnaryOp.RELU: 6,
    UnaryOp.SIGMOID: 7,
    UnaryOp.GELU: 8,
    UnaryOp.GELU_QUICK: 9,
    UnaryOp.SILU: 10,
    UnaryOp.HARDSWISH: 11,
    UnaryOp.HARDSIGMOID: 12,
    UnaryOp.EXP: 13,
    UnaryOp.EXPM1: 14,
    UnaryOp.SOFTPLUS: 15,
    UnaryOp.GELU_ERF: 16,
    UnaryOp.XIELU: 17,
    UnaryOp.FLOOR: 18,
    UnaryOp.CEIL: 19,
    UnaryOp.ROUND: 20,
    UnaryOp.TRUNC: 21,
}

#: plain ops served by k_unary → kernel op code (ggml op id + 1000)
MATH_CODES: Final[dict[GGMLOp, int]] = {
    GGMLOp.SQR: 1009,
    GGMLOp.SQRT: 1010,
    GGMLOp.LOG: 1011,
    GGMLOp.SIN: 1012,
    GGMLOp.COS: 1013,
    GGMLOp.SCALE: 1032,
    GGMLOp.CLAMP: 1050,
    GGMLOp.LEAKY_RELU: 1071,
}

#: GLU sub-op → kernel op code (the ``G_*`` defines of elementwise.cu)
GLU_CODES: Final[dict[GluOp, int]] = {
    GluOp.REGLU: 0,
    GluOp.GEGLU: 1,
    GluOp.SWIGLU: 2,
    GluOp.SWIGLU_OAI: 3,
    GluOp.GEGLU_ERF: 4,
    GluOp.GEGLU_QUICK: 5,
}


# ------------------------------------------------------------------------------------------------ binary


def _binary_ok(node: Tensor) -> bool:
    a, b = src(node, 0), src(node, 1)
    return a.type in FLOAT_TYPES and b.type in FLOAT_TYPES and node.type in FLOAT_TYPES and b.can_repeat_to(node)


@KERNELS.kernel(GGMLOp.ADD, GGMLOp.SUB, GGMLOp.MUL, GGMLOp.DIV, GGMLOp.ADD1, supports=_binary_ok)
def _bind_binary(node: Tensor, ctx: BindContext) -> list[Launch]:
    a, b = src(node, 0), src(node, 1)
    args = Args().ptr(ctx.ptr(a)).ptr(ctx.ptr(b)).ptr(ctx.ptr(node)).tdesc(a).tdesc(b).tdesc(node)
    args.i32(type_id(a.type)).i32(type_id(b.type)).i32(type_id(node.type)).i32(int(node.op))
    grid, block = rows_grid(node.ne[0], node.nrows)
    return [Launch.of(MODULE, "k_binary", grid, block, args)]


# ------------------------------------------------------------------------------------------------ unary


def _float_in_out(node: Tensor) -> bool:
    a = src(node, 0)
    return a.type in FLOAT_TYPES and node.type in FLOAT_TYPES and a.ne == node.ne


def _unary_ok(node: Tensor) -> bool:
    if not _float_in_out(node):
        return False
    if node.op == GGMLOp.UNARY:
        return UnaryOp(node.op_param_i32(0)) in UNARY_CODES
    return node.op in MATH_CODES


def unary_code_and_params(node: Tensor) -> tuple[int, tuple[float, float, float, float]]:
    """The k_unary op code and its four float parameters for a node."""
    if node.op == GGMLOp.UNARY:
        sub = UnaryOp(node.op_param_i32(0))
        if sub == UnaryOp.XIELU:  # alpha_n, alpha_p, beta, eps in op_params[1:5]
            p = tuple(node.op_param_f32(i) for i in range(1, 5))
            return UNARY_CODES[sub], (p[0], p[1], p[2], p[3])
        return UNARY_CODES[sub], (0.0, 0.0, 0.0, 0.0)
    code = MATH_CODES[node.op]
    if node.op in (GGMLOp.SCALE, GGMLOp.CLAMP):
        return code, (node.op_param_f32(0), node.op_param_f32(1), 0.0, 0.0)
    if node.op == GGMLOp.LEAKY_RELU:
        return code, (node.op_param_f32(0), 0.0, 0.0, 0.0)
    return code, (0.0, 0.0, 0.0, 0.0)


@KERNELS.kernel(GGMLOp.UNARY, *MATH_CODES, supports=_unary_ok)
def _bind_unary(node: Tensor, ctx: BindContext) -> list[Launch]:
    a = src(node, 0)
    code, params = unary_code_and_params(node)
    args = Args().ptr(ctx.ptr(a)).ptr(ctx.ptr(node)).tdesc(a).tdesc(node)
    args.i32(type_id(a.type)).i32(type_id(node.type)).i32(code)
    for p in params:
        args.f32(p)
    grid, block = rows_grid(node.ne[0], node.nrows)
    return [Launch.of(MODULE, "k_unary", grid, block, args)]


# ------------------------------------------------------------------------------------------------ GLU


def _glu_ok(node: Tensor) -> bool:
    a, b = src(node, 0), node.src[1]
    op = GluOp(node.op_param_i32(0))
    return (
        op in GLU_CODES
        and a.type in ((GGMLType.F32,) if op == GluOp.SWIGLU_OAI else (GGMLType.F32, GGMLType.F16))
        and node.type == a.type
        and (b is None or (b.type == a.type and b.ne == node.ne))
        and (b is not None or a.ne[0] == 2 * node.ne[0])
    )


@KERNELS.kernel(GGMLOp.GLU, supports=_glu_ok)
def _bind_glu(node: Tensor, ctx: BindContext) -> list[Launch]:
    a, b = src(node, 0), node.src[1]
    op = GLU_CODES[GluOp(node.op_param_i32(0))]
    if b is None:  # fused: the halves of each row of a
        half = node.ne[0] * a.nb[0]
        x_ptr, g_ptr = ctx.ptr(a), ctx.ptr(a) + half
        if node.op_param_i32(1):
            x_ptr, g_ptr = g_ptr, x_ptr
        x_nb = g_nb = a.nb
    else:
        x_ptr, g_ptr, x_nb, g_nb = ctx.ptr(a), ctx.ptr(b), a.nb, b.nb
    args = Args().ptr(x_ptr).ptr(g_ptr).ptr(ctx.ptr(node)).desc(node.ne, x_nb).desc(node.ne, g_nb).tdesc(node)
    args.i32(type_id(node.type)).i32(op).f32(node.op_param_f32(2)).f32(node.op_param_f32(3))
    grid, block = rows_grid(node.ne[0], node.nrows)
    return [Launch.of(MODULE, "k_glu", grid, block, args)]


# ------------------------------------------------------------------------------------------------ DIAG_MASK


def _diag_mask_ok(node: Tensor) -> bool:
    a = src(node, 0)
    return a.type == GGMLType.F32 and node.type == GGMLType.F32 and a.ne == node.ne


@KERNELS.kernel(GGMLOp.DIAG_MASK_INF, GGMLOp.DIAG_MASK_ZERO, supports=_diag_mask_ok)
def _bind_diag_mask(node: Tensor, ctx: BindContext) -> list[Launch]:
    a = src(node, 0)
    value = float("-inf") if node.op == GGMLOp.DIAG_MASK_INF else 0.0
    args = Args().ptr(ctx.ptr(a)).ptr(ctx.ptr(node)).tdesc(a).tdesc(node)
    args.i32(type_id(node.type)).i32(node.op_param_i32(0)).f32(value)
    grid, block = rows_grid(node.ne[0], node.nrows)
    return [Launch.of(MODULE, "k_diag_mask", grid, block, args)]
