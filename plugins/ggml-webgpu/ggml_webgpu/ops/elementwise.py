"""Elementwise ops (``elementwise.wgsl``): binary with broadcasting, UNARY and the other maps, GLU."""

from __future__ import annotations

from typing import Final

from ggml_core import GGMLOp, GGMLType, GluOp, Tensor, UnaryOp
from ggml_webgpu.ops._dispatch import (
    FLOAT_TYPES,
    KERNELS,
    Dispatch,
    Launcher,
    Limits,
    elementwise,
    f32,
    fits,
    groups_1d,
    slot,
    src,
)

T = GGMLType

__all__ = ["GLU_SUPPORTED", "UNARY_SUPPORTED"]


# ------------------------------------------------------------------------------------------------ binary


_BINARY: Final = {GGMLOp.ADD: 0, GGMLOp.ADD1: 0, GGMLOp.SUB: 1, GGMLOp.MUL: 2, GGMLOp.DIV: 3}


def _binary_ok(limits: Limits, node: Tensor) -> bool:
    a, b = src(node, 0), src(node, 1)
    return (
        a.type in FLOAT_TYPES
        and b.type in FLOAT_TYPES
        and node.type in FLOAT_TYPES
        and node.ne == a.ne
        and b.can_repeat_to(a)
        and fits(limits, a, b, node)
    )


def _flat_f32(*ts: Tensor) -> bool:
    """Every tensor is contiguous f32 (so a kernel may treat it as one flat array)."""
    return all(t.type == T.F32 and t.is_contiguous for t in ts)


def _repeats_flat(a: Tensor, b: Tensor) -> bool:
    """b's flat data repeated along a's flat data equals ggml's broadcast: b = a's leading dims, then ones."""
    d = 0
    while d < 4 and b.ne[d] == a.ne[d]:
        d += 1
    return all(n == 1 for n in b.ne[d:])


@KERNELS.kernel(*_BINARY, supports=_binary_ok)
def _bind_binary(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b = src(node, 0), src(node, 1)
    if _flat_f32(a, b, node) and _repeats_flat(a, b):
        words = [_BINARY[node.op], b.nelements]
        return [elementwise("elementwise.binary_flat", launcher, node, words, a=a, b=b)]
    words = [_BINARY[node.op], a.type, b.type, node.type]
    return [elementwise("elementwise.binary", launcher, node, words, a=a, b=b)]


# ------------------------------------------------------------------------------------------------ maps


#: UNARY sub-ops with a kernel (codes = ggml's enum ggml_unary_op)
UNARY_SUPPORTED: Final = frozenset(
    {
        UnaryOp.ABS,
        UnaryOp.SGN,
        UnaryOp.NEG,
        UnaryOp.STEP,
        UnaryOp.TANH,
        UnaryOp.ELU,
        UnaryOp.RELU,
        UnaryOp.SIGMOID,
        UnaryOp.GELU,
        UnaryOp.GELU_QUICK,
        UnaryOp.SILU,
        UnaryOp.HARDSWISH,
        UnaryOp.HARDSIGMOID,
        UnaryOp.EXP,
        UnaryOp.EXPM1,
        UnaryOp.SOFTPLUS,
        UnaryOp.GELU_ERF,
        UnaryOp.FLOOR,
        UnaryOp.CEIL,
        UnaryOp.ROUND,
        UnaryOp.TRUNC,
    }
)
_MAPS: Final = {
    GGMLOp.SQR: 100,
    GGMLOp.SQRT: 101,
    GGMLOp.LOG: 102,
    GGMLOp.SIN: 103,
    GGMLOp.COS: 104,
    GGMLOp.SCALE: 105,
    GGMLOp.CLAMP: 106,
    GGMLOp.LEAKY_RELU: 107,
}


def _map_ok(limits: Limits, node: Tensor) -> bool:
    a = src(node, 0)
    if a.type not in FLOAT_TYPES or node.type not in FLOAT_TYPES or a.ne != node.ne or not fits(limits, a, node):
        return False
    return node.op != GGMLOp.UNARY or UnaryOp(node.op_param_i32(0)) in UNARY_SUPPORTED


@KERNELS.kernel(GGMLOp.UNARY, *_MAPS, supports=_map_ok)
def _bind_map(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = src(node, 0)
    code = node.op_param_i32(0) if node.op == GGMLOp.UNARY else _MAPS[node.op]
    p0 = p1 = 0.0
    if node.op in (GGMLOp.SCALE, GGMLOp.CLAMP):
        p0, p1 = node.op_param_f32(0), node.op_param_f32(1)
    elif node.op == GGMLOp.LEAKY_RELU:
        p0 = node.op_param_f32(0)
    if _flat_f32(a, node):
        return [elementwise("elementwise.map_flat", launcher, node, [code, f32(p0), f32(p1)], a=a)]
    words = [code, a.type, node.type, f32(p0), f32(p1)]
    return [elementwise("elementwise.map", launcher, node, words, a=a)]


# ------------------------------------------------------------------------------------------------ GLU


GLU_SUPPORTED: Final = frozenset(
    {GluOp.REGLU, GluOp.GEGLU, GluOp.SWIGLU, GluOp.SWIGLU_OAI, GluOp.GEGLU_ERF, GluOp.GEGLU_QUICK}
)


def _glu_ok(limits: Limits, node: Tensor) -> bool:
    a, b = src(node, 0), node.src[1]
    return (
        GluOp(node.op_param_i32(0)) in GLU_SUPPORTED
        and a.type in (T.F32, T.F16)
        and (b is None or (b.type == a.type and b.ne == node.ne))
        and node.type == a.type
        and fits(limits, a, b, node)
    )


@KERNELS.kernel(GGMLOp.GLU, supports=_glu_ok)
def _bind_glu(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b = src(node, 0), node.src[1]
    op = GluOp(node.op_param_i32(0))
    if b is None:  # fused: x and g are the two halves of each row of a
        half = node.ne[0] * a.nb[0]
        x_off, g_off = (half, 0) if node.op_param_i32(1) else (0, half)
        x = slot(launcher, a, ne=node.ne, extra=x_off)
        g = slot(launcher, a, ne=node.ne, extra=g_off)
    else:
        x, g = slot(launcher, a), slot(launcher, b)
    alpha, limit = (node.op_param_f32(2), node.op_param_f32(3)) if op == GluOp.SWIGLU_OAI else (0.0, 0.0)
    words = [node.nelements, int(op), node.type, f32(alpha), f32(limit)]
    return [Dispatch("elementwise.glu", groups_1d(node.nelements), (x, g, None, slot(launcher, node)), words)]


# ------------------------------------------------------------------------------------------------ ADD_ID


def _add_id_ok(limits: Limits, node: Tensor) -> bool:
    a, b, ids = src(node, 0), src(node, 1), src(node, 2)
    return a.type == b.type == node.type == T.F32 and ids.type == T.I32 and fits(limits, a, b, ids, node)


@KERNELS.kernel(GGMLOp.ADD_ID, supports=_add_id_ok)
def _bind_add_id(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b, ids = src(node, 0), src(node, 1), src(node, 2)
    return [elementwise("elementwise.add_id", launcher, node, [launcher.error_code(node)], a=a, b=b, c=ids)]
