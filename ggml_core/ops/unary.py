"""The UNARY op and its sub-ops (op_params[0] = ``UnaryOp``): ABS ... TRUNC, XIELU.

ggml's builder only asks for contiguous rows; the result is a copy of a (or a view with ``inplace``).
"""

from __future__ import annotations

import numpy as np

from ggml_core._tensor import Tensor
from ggml_core.ops._build import check, ctx_of, finish, same_or_dup
from ggml_core.ops._enum import GGMLOp, UnaryOp

__all__ = [
    "abs",
    "ceil",
    "elu",
    "exp",
    "expm1",
    "floor",
    "gelu",
    "gelu_erf",
    "gelu_quick",
    "hardsigmoid",
    "hardswish",
    "neg",
    "relu",
    "round",
    "sgn",
    "sigmoid",
    "silu",
    "softplus",
    "step",
    "tanh",
    "trunc",
    "unary",
    "xielu",
]


def unary(a: Tensor, op: UnaryOp, inplace: bool = False) -> Tensor:
    """``ggml_unary``: the UNARY op with sub-op ``op`` in op_params[0]; rows of a must be contiguous."""
    check(a.is_contiguous_rows, "UNARY", f"{op.name} needs contiguous rows", a)
    result = same_or_dup("UNARY", a, inplace)
    result.set_op_param_i32(0, int(op))
    return finish(result, GGMLOp.UNARY, [a])


def abs(a: Tensor, inplace: bool = False) -> Tensor:  # ggml's name (shadows the builtin in this module only)
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
    """tanh-approximated GELU (ggml's CPU reads an f16 lookup table; see docs/ops-semantics.md)."""
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


def expm1(a: Tensor, inplace: bool = False) -> Tensor:
    """exp(x) - 1 (ggml's CPU computes ``expf(x) - 1``)."""
    return unary(a, UnaryOp.EXPM1, inplace)


def softplus(a: Tensor, inplace: bool = False) -> Tensor:
    """log(1 + exp(x)), x itself above 20."""
    return unary(a, UnaryOp.SOFTPLUS, inplace)


def floor(a: Tensor, inplace: bool = False) -> Tensor:
    """floor(x)."""
    return unary(a, UnaryOp.FLOOR, inplace)


def ceil(a: Tensor, inplace: bool = False) -> Tensor:
    """ceil(x)."""
    return unary(a, UnaryOp.CEIL, inplace)


def round(a: Tensor, inplace: bool = False) -> Tensor:  # ggml's name (shadows the builtin in this module only)
    """x rounded half away from zero (C's ``roundf``)."""
    return unary(a, UnaryOp.ROUND, inplace)


def trunc(a: Tensor, inplace: bool = False) -> Tensor:
    """x rounded toward zero."""
    return unary(a, UnaryOp.TRUNC, inplace)


def xielu(a: Tensor, alpha_n: float, alpha_p: float, beta: float, eps: float) -> Tensor:
    """``ggml_xielu``: ``α_p·x² + β·x`` for x > 0, ``(expm1(min(x, eps)) - x)·α_n + β·x`` otherwise.

    Like ggml, the stored parameters are ``α_n = beta + softplus(alpha_n)`` and ``α_p = softplus(alpha_p)``
    (op_params: [XIELU, α_n, α_p, beta, eps]).
    """
    check(a.is_contiguous_rows, "UNARY", "XIELU needs contiguous rows", a)
    result = ctx_of("UNARY", a).dup_tensor(a)
    result.set_op_param_i32(0, int(UnaryOp.XIELU))
    result.set_op_params_f32([beta + _softplus(alpha_n), _softplus(alpha_p), beta, eps], start=1)
    return finish(result, GGMLOp.UNARY, [a])


def _softplus(x: float) -> float:
    """ggml_compute_softplus_f32 in float32: x above 20, log(1 + exp(x)) otherwise."""
    x32 = np.float32(x)
    return float(x32) if x32 > 20.0 else float(np.log(np.float32(1.0) + np.exp(x32)))
