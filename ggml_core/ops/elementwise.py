"""Elementwise ops: binary with ggml's repeat-broadcasting (ADD, SUB, MUL, DIV, ADD1, ADD_ID), SQR, SQRT, LOG,
SIN, COS, SCALE, CLAMP, LEAKY_RELU. The UNARY sub-ops live in :mod:`.unary`, the GLU family in :mod:`.glu`."""

from __future__ import annotations

from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.ops._build import check, ctx_of, finish, same_or_dup, view_of
from ggml_core.ops._enum import GGMLOp

__all__ = [
    "add",
    "add1",
    "add_id",
    "clamp",
    "cos",
    "div",
    "leaky_relu",
    "log",
    "mul",
    "scale",
    "scale_bias",
    "sin",
    "sqr",
    "sqrt",
    "sub",
]


# ------------------------------------------------------------------------------------------------ binary


def _binary(op: GGMLOp, a: Tensor, b: Tensor, inplace: bool) -> Tensor:
    check(
        b.can_repeat_to(a),
        op.name,
        f"b (ne={list(b.ne)}) must repeat an integer number of times into a (ne={list(a.ne)}) in every dimension",
        a,
        b,
    )
    return finish(same_or_dup(op.name, a, inplace), op, [a, b])


def add(a: Tensor, b: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_add``: a + b, b broadcast (repeated) over a."""
    return _binary(GGMLOp.ADD, a, b, inplace)


def sub(a: Tensor, b: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_sub``: a - b, b broadcast over a."""
    return _binary(GGMLOp.SUB, a, b, inplace)


def mul(a: Tensor, b: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_mul``: a * b, b broadcast over a."""
    return _binary(GGMLOp.MUL, a, b, inplace)


def div(a: Tensor, b: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_div``: a / b, b broadcast over a."""
    return _binary(GGMLOp.DIV, a, b, inplace)


def add1(a: Tensor, b: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_add1``: a + the scalar tensor b."""
    check(b.nelements == 1, "ADD1", "b must be a scalar (one element)", a, b)
    check(a.is_padded_1d, "ADD1", "a must have packed elements", a)
    return finish(same_or_dup("ADD1", a, inplace), GGMLOp.ADD1, [a, b])


def add_id(a: Tensor, b: Tensor, ids: Tensor) -> Tensor:
    """``ggml_add_id``: ``a[:, i1, i2] + b[:, ids[i1, i2]]`` (per-expert biases of a mixture of experts)."""
    op = "ADD_ID"
    check(a.ne[0] == b.ne[0], op, f"row lengths differ: a.ne[0]={a.ne[0]}, b.ne[0]={b.ne[0]}", a, b)
    check(a.ne[1] == ids.ne[0], op, f"a.ne[1]={a.ne[1]} must equal ids.ne[0]={ids.ne[0]}", a, ids)
    check(a.ne[2] == ids.ne[1], op, f"a.ne[2]={a.ne[2]} must equal ids.ne[1]={ids.ne[1]}", a, ids)
    check(ids.type == GGMLType.I32, op, f"ids must be i32, got {ids.type.traits.name}", ids)
    return finish(ctx_of(op, a).dup_tensor(a), GGMLOp.ADD_ID, [a, b, ids])


# ------------------------------------------------------------------------------------------------ scalar params


def scale(a: Tensor, s: float, inplace: bool = False) -> Tensor:
    """``ggml_scale``: a * s."""
    return scale_bias(a, s, 0.0, inplace)


def scale_bias(a: Tensor, s: float, b: float, inplace: bool = False) -> Tensor:
    """``ggml_scale_bias``: a * s + b (op_params: [s, b] as float)."""
    check(a.is_padded_1d, "SCALE", "a must have packed elements (rows may be padded)", a)
    result = same_or_dup("SCALE", a, inplace)
    result.set_op_params_f32([s, b])
    return finish(result, GGMLOp.SCALE, [a])


def clamp(a: Tensor, min: float, max: float) -> Tensor:
    """``ggml_clamp``: values clamped to [min, max]; like ggml, the result is a view of a (in place)."""
    result = view_of("CLAMP", a)
    result.set_op_params_f32([min, max])
    return finish(result, GGMLOp.CLAMP, [a])


def leaky_relu(a: Tensor, negative_slope: float, inplace: bool = False) -> Tensor:
    """``ggml_leaky_relu``: x if x > 0 else negative_slope * x."""
    result = same_or_dup("LEAKY_RELU", a, inplace)
    result.set_op_params_f32([negative_slope])
    return finish(result, GGMLOp.LEAKY_RELU, [a])


# ------------------------------------------------------------------------------------------------ simple math


def _math(op: GGMLOp, a: Tensor, inplace: bool) -> Tensor:
    return finish(same_or_dup(op.name, a, inplace), op, [a])


def sqr(a: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_sqr``: x²."""
    return _math(GGMLOp.SQR, a, inplace)


def sqrt(a: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_sqrt``."""
    return _math(GGMLOp.SQRT, a, inplace)


def log(a: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_log``: natural logarithm."""
    return _math(GGMLOp.LOG, a, inplace)


def sin(a: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_sin``."""
    return _math(GGMLOp.SIN, a, inplace)


def cos(a: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_cos``."""
    return _math(GGMLOp.COS, a, inplace)
