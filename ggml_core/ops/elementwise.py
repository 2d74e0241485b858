"""Elementwise ops: binary with broadcasting, unary math, UNARY sub-ops, SCALE, CLAMP, LEAKY_RELU, GLU."""

from __future__ import annotations

from ggml_core._tensor import Tensor
from ggml_core.ops._build import check, finish, new_result, same_or_dup, view_of
from ggml_core.ops._enum import GGMLOp, GluOp, UnaryOp

__all__ = [
    "abs",
    "add",
    "add1",
    "clamp",
    "cos",
    "div",
    "elu",
    "exp",
    "geglu",
    "geglu_erf",
    "geglu_quick",
    "gelu",
    "gelu_erf",
    "gelu_quick",
    "glu",
    "glu_split",
    "hardsigmoid",
    "hardswish",
    "leaky_relu",
    "log",
    "mul",
    "neg",
    "reglu",
    "relu",
    "scale",
    "scale_bias",
    "sgn",
    "sigmoid",
    "silu",
    "sin",
    "sqr",
    "sqrt",
    "step",
    "sub",
    "swiglu",
    "tanh",
    "unary",
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


# ------------------------------------------------------------------------------------------------ UNARY


def unary(a: Tensor, op: UnaryOp, inplace: bool = False) -> Tensor:
    """``ggml_unary``: the UNARY op with sub-op ``op`` in op_params[0]; rows of a must be contiguous."""
    check(a.is_contiguous_rows, "UNARY", f"{op.name} needs contiguous rows", a)
    result = same_or_dup("UNARY", a, inplace)
    result.set_op_param_i32(0, int(op))
    return finish(result, GGMLOp.UNARY, [a])


def abs(a: Tensor, inplace: bool = False) -> Tensor:
    """|x|."""
    return unary(a, UnaryOp.ABS, inplace)


def sgn(a: Tensor, inplace: bool = False) -> Tensor:
    """sign(x)."""
    return unary(a, UnaryOp.SGN, inplace)


def neg(a: Tensor, inplace: bool = False) -> Tensor:
    """-x."""
    return unary(a, UnaryOp.NEG, inplace)


def step(a: Tensor, inplace: bool = False) -> Tensor:
    """1 where x > 0, else 0."""
    return unary(a, UnaryOp.STEP, inplace)


def tanh(a: Tensor, inplace: bool = False) -> Tensor:
    """tanh(x)."""
    return unary(a, UnaryOp.TANH, inplace)


def elu(a: Tensor, inplace: bool = False) -> Tensor:
    """x if x > 0 else exp(x) - 1."""
    return unary(a, UnaryOp.ELU, inplace)


def relu(a: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0)."""
    return unary(a, UnaryOp.RELU, inplace)


def sigmoid(a: Tensor, inplace: bool = False) -> Tensor:
    """1 / (1 + exp(-x))."""
    return unary(a, UnaryOp.SIGMOID, inplace)


def gelu(a: Tensor, inplace: bool = False) -> Tensor:
    """tanh-approximated GELU (ggml's CPU uses an f16 lookup table; see docs/ops.md)."""
    return unary(a, UnaryOp.GELU, inplace)


def gelu_quick(a: Tensor, inplace: bool = False) -> Tensor:
    """x * sigmoid(1.702 x)."""
    return unary(a, UnaryOp.GELU_QUICK, inplace)


def gelu_erf(a: Tensor, inplace: bool = False) -> Tensor:
    """0.5 x (1 + erf(x / sqrt 2))."""
    return unary(a, UnaryOp.GELU_ERF, inplace)


def silu(a: Tensor, inplace: bool = False) -> Tensor:
    """x * sigmoid(x)."""
    return unary(a, UnaryOp.SILU, inplace)


def hardswish(a: Tensor, inplace: bool = False) -> Tensor:
    """x * min(1, max(0, (x + 3) / 6))."""
    return unary(a, UnaryOp.HARDSWISH, inplace)


def hardsigmoid(a: Tensor, inplace: bool = False) -> Tensor:
    """min(1, max(0, (x + 3) / 6))."""
    return unary(a, UnaryOp.HARDSIGMOID, inplace)


def exp(a: Tensor, inplace: bool = False) -> Tensor:
    """exp(x)."""
    return unary(a, UnaryOp.EXP, inplace)


# ------------------------------------------------------------------------------------------------ GLU


def glu(a: Tensor, op: GluOp, swapped: bool = False) -> Tensor:
    """``ggml_glu`` (fused): the first half of each row of a is the activation input, the second the gate.

    With ``swapped`` the halves change roles. The result has ne[0] = a.ne[0] / 2.
    """
    check(a.is_contiguous_1, "GLU", f"{op.name} needs a tensor contiguous from dim 1 on", a)
    check(a.ne[0] % 2 == 0, "GLU", f"{op.name} (fused) needs an even ne[0], got {a.ne[0]}", a)
    result = new_result("GLU", a, a.type, (a.ne[0] // 2, a.ne[1], a.ne[2], a.ne[3]))
    result.set_op_params_i32([int(op), int(swapped)])
    return finish(result, GGMLOp.GLU, [a, None])


def glu_split(a: Tensor, b: Tensor, op: GluOp) -> Tensor:
    """``ggml_glu_split``: activation(a) * b for two tensors of the same shape and type."""
    check(a.is_contiguous_1 and b.is_contiguous_1, "GLU", f"{op.name} needs operands contiguous from dim 1 on", a, b)
    check(a.ne == b.ne, "GLU", f"{op.name} needs a and b of the same shape", a, b)
    check(a.type == b.type, "GLU", f"{op.name} needs a and b of the same type", a, b)
    result = new_result("GLU", a, a.type, a.ne)
    result.set_op_params_i32([int(op), 0])
    return finish(result, GGMLOp.GLU, [a, b])


def _glu_either(op: GluOp, a: Tensor, b: Tensor | None, swapped: bool) -> Tensor:
    return glu(a, op, swapped) if b is None else glu_split(a, b, op)


def reglu(a: Tensor, b: Tensor | None = None, swapped: bool = False) -> Tensor:
    """relu(x) * g (fused when b is None, else split)."""
    return _glu_either(GluOp.REGLU, a, b, swapped)


def geglu(a: Tensor, b: Tensor | None = None, swapped: bool = False) -> Tensor:
    """gelu(x) * g."""
    return _glu_either(GluOp.GEGLU, a, b, swapped)


def swiglu(a: Tensor, b: Tensor | None = None, swapped: bool = False) -> Tensor:
    """silu(x) * g."""
    return _glu_either(GluOp.SWIGLU, a, b, swapped)


def geglu_erf(a: Tensor, b: Tensor | None = None, swapped: bool = False) -> Tensor:
    """gelu_erf(x) * g."""
    return _glu_either(GluOp.GEGLU_ERF, a, b, swapped)


def geglu_quick(a: Tensor, b: Tensor | None = None, swapped: bool = False) -> Tensor:
    """gelu_quick(x) * g."""
    return _glu_either(GluOp.GEGLU_QUICK, a, b, swapped)
