"""Layout and fill ops (kernels in ``layout.cl``): REPEAT(_BACK), CONCAT, PAD, PAD_REFLECT_1D, ROLL, DIAG, TRI,
ARANGE, FILL, TIMESTEP_EMBEDDING; SET and ACC reuse the copy and binary kernels on a region of the result."""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl.ops._dispatch import FLOAT_TYPES, KERNELS, Launcher, Thunk, chain, enqueue, int8, targs, targs_view

__all__: list[str] = []

_MODES: Final = {
    GGMLOp.REPEAT: 0,
    GGMLOp.CONCAT: 1,
    GGMLOp.PAD: 2,
    GGMLOp.ROLL: 3,
    GGMLOp.PAD_REFLECT_1D: 4,
    GGMLOp.DIAG: 5,
    GGMLOp.TRI: 6,
    GGMLOp.ARANGE: 7,
    GGMLOp.FILL: 8,
    GGMLOp.TIMESTEP_EMBEDDING: 9,
    GGMLOp.REPEAT_BACK: 10,
}
_INT_TYPES: Final = frozenset({GGMLType.I8, GGMLType.I16, GGMLType.I32, GGMLType.I64})


def _plain(t: GGMLType) -> bool:
    return not t.is_quantized


def _layout_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    op = node.op
    if op == GGMLOp.ARANGE:
        return node.type == GGMLType.F32
    assert a is not None
    if op == GGMLOp.FILL:
        return node.type in (GGMLType.F32, GGMLType.F16)
    if op in (GGMLOp.TRI, GGMLOp.PAD_REFLECT_1D, GGMLOp.TIMESTEP_EMBEDDING):
        return a.type == node.type == GGMLType.F32
    if op == GGMLOp.REPEAT_BACK:
        return a.type in FLOAT_TYPES and node.type == a.type
    if op == GGMLOp.CONCAT:
        return b is not None and _plain(a.type) and a.type == b.type == node.type
    return _plain(a.type) and a.type == node.type


def _params(node: Tensor) -> tuple[list[int], float, float]:
    op = node.op
    if op == GGMLOp.CONCAT:
        return [node.op_param_i32(0)], 0.0, 0.0
    if op == GGMLOp.PAD:  # op params: lp0, rp0, lp1, rp1, ..., circular
        return [node.op_param_i32(2 * i) for i in range(4)] + [node.op_param_i32(8)], 0.0, 0.0
    if op == GGMLOp.ROLL:
        return [node.op_param_i32(i) for i in range(4)], 0.0, 0.0
    if op == GGMLOp.PAD_REFLECT_1D:
        return [node.op_param_i32(0)], 0.0, 0.0
    if op == GGMLOp.TRI:
        return [node.op_param_i32(0)], 0.0, 0.0
    if op == GGMLOp.ARANGE:
        return [], node.op_param_f32(0), node.op_param_f32(2)
    if op == GGMLOp.FILL:
        return [], node.op_param_f32(0), 0.0
    if op == GGMLOp.TIMESTEP_EMBEDDING:
        return [node.op_param_i32(0), node.op_param_i32(1)], 0.0, 0.0
    return [], 0.0, 0.0


@KERNELS.kernel(*_MODES, supports=_layout_ok)
def _bind_layout(launcher: Launcher, node: Tensor) -> Thunk:
    a = node.src[0] if node.src[0] is not None else node
    b = node.src[1] if node.src[1] is not None else a
    p, f0, f1 = _params(node)
    args = [
        np.int32(_MODES[node.op]),
        int8(p),
        np.float32(f0),
        np.float32(f1),
        np.int32(node.type.type_size),
        *targs(launcher, a),
        np.int32(a.type),
        *targs(launcher, b),
        *targs(launcher, node),
        np.int32(node.type),
    ]
    return enqueue(launcher, "k_layout", node.nelements, args)


# ------------------------------------------------------------------------------------------------ SET, ACC


def _set_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    if node.op == GGMLOp.ACC:
        return a.type == b.type == node.type == GGMLType.F32
    if not _plain(a.type) or a.type != node.type:
        return False
    return (b.type == a.type and (a.type in FLOAT_TYPES or a.type in _INT_TYPES)) or (
        b.type in FLOAT_TYPES and a.type in FLOAT_TYPES
    )


@KERNELS.kernel(GGMLOp.SET, GGMLOp.ACC, supports=_set_ok)
def _bind_set(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    nb1, nb2, nb3, offset = (node.op_param_i32(i) for i in range(4))
    inplace = bool(node.op_param_i32(4))
    steps: list[Thunk] = []
    ints = 2 if node.type in _INT_TYPES else 0
    if not inplace:  # the result starts as a copy of a
        args = [*targs(launcher, a), np.int32(a.type), *targs(launcher, node), np.int32(node.type), np.int32(ints)]
        steps.append(enqueue(launcher, "k_cpy", node.nelements, args))
    if not b.is_empty:
        region = targs_view(launcher, node, b.ne, offset, (node.type.type_size, nb1, nb2, nb3))
        if node.op == GGMLOp.ACC:  # region = region + b
            args = [
                np.int32(0),
                *region,
                np.int32(node.type),
                *targs(launcher, b),
                np.int32(b.type),
                *region,
                np.int32(node.type),
            ]
            steps.append(enqueue(launcher, "k_binary", b.nelements, args))
        else:
            args = [*targs(launcher, b), np.int32(b.type), *region, np.int32(node.type), np.int32(ints)]
            steps.append(enqueue(launcher, "k_cpy", b.nelements, args))
    return chain(*steps)
