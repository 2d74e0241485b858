"""Elementwise ops (kernels in ``elementwise.cl``): binary with broadcasting, UNARY and the scalar maps, GLU."""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core import GGMLOp, GGMLType, GluOp, Tensor, UnaryOp
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl.ops._dispatch import FLOAT_TYPES, KERNELS, Launcher, Thunk, enqueue, float4, mem_of, targs, targs_view

__all__: list[str] = []

_BINARY_CODES: Final = {GGMLOp.ADD: 0, GGMLOp.ADD1: 0, GGMLOp.SUB: 1, GGMLOp.MUL: 2, GGMLOp.DIV: 3}

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
        UnaryOp.XIELU,
    }
)

#: codes of the other map ops in k_map (elementwise.cl: M_*)
_MAP_CODES: Final = {
    GGMLOp.SQR: 100,
    GGMLOp.SQRT: 101,
    GGMLOp.LOG: 102,
    GGMLOp.SIN: 103,
    GGMLOp.COS: 104,
    GGMLOp.SCALE: 105,
    GGMLOp.CLAMP: 106,
    GGMLOp.LEAKY_RELU: 107,
}

GLU_SUPPORTED: Final = frozenset(
    {GluOp.REGLU, GluOp.GEGLU, GluOp.SWIGLU, GluOp.SWIGLU_OAI, GluOp.GEGLU_ERF, GluOp.GEGLU_QUICK}
)


def _src(node: Tensor, i: int) -> Tensor:
    s = node.src[i]
    assert s is not None, f"{node.op_desc}: operand {i} is missing"
    return s


def _flat_f32(*ts: Tensor) -> bool:
    """Every tensor is contiguous f32 (so the float4 kernels may treat it as one flat array)."""
    return all(t.type == GGMLType.F32 and t.is_contiguous and t.data_offset is not None for t in ts)


# ------------------------------------------------------------------------------------------------ binary


def _binary_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, b = _src(node, 0), _src(node, 1)
    return (
        a.type in FLOAT_TYPES
        and b.type in FLOAT_TYPES
        and node.type in FLOAT_TYPES
        and node.ne == a.ne
        and b.can_repeat_to(a)
    )


def _repeats_flat(a: Tensor, b: Tensor) -> bool:
    """b's flat data repeated along a's flat data equals ggml's broadcast: b = a's leading dims, then ones."""
    d = 0
    while d < 4 and b.ne[d] == a.ne[d]:
        d += 1
    return all(n == 1 for n in b.ne[d:])


@KERNELS.kernel(GGMLOp.ADD, GGMLOp.SUB, GGMLOp.MUL, GGMLOp.DIV, GGMLOp.ADD1, supports=_binary_ok)
def _bind_binary(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = _src(node, 0), _src(node, 1)
    code = np.int32(_BINARY_CODES[node.op])
    n = node.nelements
    if _flat_f32(a, b, node) and _repeats_flat(a, b) and n % 4 == 0 and b.nelements % 4 == 0:
        am, ao = mem_of(launcher, a)
        bm, bo = mem_of(launcher, b)
        dm, do = mem_of(launcher, node)
        args = [code, am, np.uint64(ao), bm, np.uint64(bo), np.int32(b.nelements // 4), dm, np.uint64(do)]
        return enqueue(launcher, "k_binary_f32x4", n // 4, args)
    args = [
        code,
        *targs(launcher, a),
        np.int32(a.type),
        *targs(launcher, b),
        np.int32(b.type),
        *targs(launcher, node),
        np.int32(node.type),
    ]
    return enqueue(launcher, "k_binary", n, args)


# ------------------------------------------------------------------------------------------------ maps


def _map_ok(info: DeviceInfo, node: Tensor) -> bool:
    a = _src(node, 0)
    if a.type not in FLOAT_TYPES or node.type not in FLOAT_TYPES or a.ne != node.ne:
        return False
    return node.op != GGMLOp.UNARY or UnaryOp(node.op_param_i32(0)) in UNARY_SUPPORTED


def _map_code(node: Tensor) -> tuple[int, list[float]]:
    if node.op == GGMLOp.UNARY:
        if UnaryOp(node.op_param_i32(0)) == UnaryOp.XIELU:  # alpha_n, alpha_p, beta, eps in op_params[1:5]
            return int(UnaryOp.XIELU), [node.op_param_f32(i) for i in range(1, 5)]
        return node.op_param_i32(0), []
    if node.op in (GGMLOp.SCALE, GGMLOp.CLAMP):
        return _MAP_CODES[node.op], [node.op_param_f32(0), node.op_param_f32(1)]
    if node.op == GGMLOp.LEAKY_RELU:
        return _MAP_CODES[node.op], [node.op_param_f32(0)]
    return _MAP_CODES[node.op], []


@KERNELS.kernel(GGMLOp.UNARY, *_MAP_CODES, supports=_map_ok)
def _bind_map(launcher: Launcher, node: Tensor) -> Thunk:
    a = _src(node, 0)
    code, params = _map_code(node)
    head = [np.int32(code), float4(params)]
    n = node.nelements
    if _flat_f32(a, node) and n % 4 == 0:
        am, ao = mem_of(launcher, a)
        dm, do = mem_of(launcher, node)
        return enqueue(launcher, "k_map_f32x4", n // 4, [*head, am, np.uint64(ao), dm, np.uint64(do)])
    args = [*head, *targs(launcher, a), np.int32(a.type), *targs(launcher, node), np.int32(node.type)]
    return enqueue(launcher, "k_map", n, args)


# ------------------------------------------------------------------------------------------------ GLU


def _glu_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None
    op = GluOp(node.op_param_i32(0))
    return (
        op in GLU_SUPPORTED
        and (a.type == GGMLType.F32 or (a.type == GGMLType.F16 and op != GluOp.SWIGLU_OAI))
        and (b is None or (b.type == a.type and b.ne == node.ne))
        and node.type == a.type
    )


@KERNELS.kernel(GGMLOp.GLU, supports=_glu_ok)
def _bind_glu(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = _src(node, 0), node.src[1]
    op = GluOp(node.op_param_i32(0))
    if b is None:
        half = node.ne[0] * a.nb[0]
        x_off, g_off = (half, 0) if node.op_param_i32(1) else (0, half)
        x = targs_view(launcher, a, node.ne, x_off)
        g = targs_view(launcher, a, node.ne, g_off)
    else:
        x, g = targs(launcher, a), targs(launcher, b)
    alpha, limit = (node.op_param_f32(2), node.op_param_f32(3)) if op == GluOp.SWIGLU_OAI else (0.0, 0.0)
    args = [np.int32(op), np.float32(alpha), np.float32(limit), *x, *g, np.int32(node.type), *targs(launcher, node)]
    return enqueue(launcher, "k_glu", node.nelements, args)


# ------------------------------------------------------------------------------------------------ ADD_ID


def _add_id_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, b, ids = node.src[0], node.src[1], node.src[2]
    return (
        a is not None
        and b is not None
        and ids is not None
        and a.type == b.type == node.type == GGMLType.F32
        and ids.type == GGMLType.I32
    )


@KERNELS.kernel(GGMLOp.ADD_ID, supports=_add_id_ok)
def _bind_add_id(launcher: Launcher, node: Tensor) -> Thunk:
    a, b, ids = _src(node, 0), _src(node, 1), _src(node, 2)
    args = [
        *targs(launcher, a),
        *targs(launcher, b),
        *targs(launcher, ids),
        *targs(launcher, node),
        launcher.err_buf,
        np.int32(launcher.error_code(node)),
    ]
    return enqueue(launcher, "k_add_id", node.nelements, args)
