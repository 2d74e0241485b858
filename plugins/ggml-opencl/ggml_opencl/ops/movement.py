"""Data movement (kernels in ``movement.cl``): CPY/DUP/CONT with conversions, GET_ROWS, SET_ROWS."""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl.ops._dispatch import FLOAT_TYPES, KERNELS, QUANT_TYPES, Launcher, Thunk, enqueue, targs

__all__: list[str] = []

T = GGMLType

INT_TYPES: Final = frozenset({GGMLType.I8, GGMLType.I16, GGMLType.I32, GGMLType.I64})
#: types the kernels can quantize into (ggml's reference quantizers, byte for byte)
QUANTIZE_TYPES: Final = frozenset({GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0})


# ------------------------------------------------------------------------------------------------ CPY


def _copy_ok(info: DeviceInfo, node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    if a.nelements != node.nelements:
        return False
    if a.type == node.type:
        return a.type in FLOAT_TYPES or a.type in INT_TYPES or a.type.is_quantized
    if a.type in FLOAT_TYPES:
        return node.type in FLOAT_TYPES or node.type in QUANTIZE_TYPES or (a.type, node.type) == (T.F32, T.I32)
    if a.type in QUANT_TYPES:
        return node.type in FLOAT_TYPES or node.type in QUANTIZE_TYPES
    if a.type in INT_TYPES:
        return node.type in INT_TYPES or node.type == GGMLType.F32
    return False


@KERNELS.kernel(GGMLOp.CPY, GGMLOp.DUP, GGMLOp.CONT, supports=_copy_ok)
def _bind_copy(launcher: Launcher, node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    src = [*targs(launcher, a), np.int32(a.type)]
    dst = targs(launcher, node)
    if a.type == node.type and a.type.is_quantized:
        bs, size = a.type.block_size, a.type.type_size
        return enqueue(
            launcher, "k_cpy_blocks", node.nelements // bs, [*targs(launcher, a), *dst, np.int32(bs), np.int32(size)]
        )
    if node.type in QUANTIZE_TYPES:
        return enqueue(launcher, "k_cpy_to_q", node.nelements // 32, [*src, *dst, np.int32(node.type)])
    if a.type.is_quantized:
        return enqueue(launcher, "k_cpy_from_q", a.nelements // 32, [*src, *dst, np.int32(node.type)])
    # 0: float -> float, 1: int -> float, 2: int -> int, 3: float -> int (truncation toward zero, as C)
    ints = (2 if a.type in INT_TYPES else 3) if node.type in INT_TYPES else (1 if a.type in INT_TYPES else 0)
    return enqueue(launcher, "k_cpy", node.nelements, [*src, *dst, np.int32(node.type), np.int32(ints)])


# ------------------------------------------------------------------------------------------------ GET_ROWS


def _get_rows_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    if b.type != GGMLType.I32:
        return False
    if a.type == GGMLType.I32:
        return node.type == GGMLType.I32
    return (a.type in FLOAT_TYPES or a.type in QUANT_TYPES) and node.type == GGMLType.F32


@KERNELS.kernel(GGMLOp.GET_ROWS, supports=_get_rows_ok)
def _bind_get_rows(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    err = [launcher.err_buf, np.int32(launcher.error_code(node))]
    if a.type.is_quantized:
        args = [*targs(launcher, a), np.int32(a.type), *targs(launcher, b), *targs(launcher, node), *err]
        return enqueue(launcher, "k_get_rows_q", node.nelements // 32, args)
    args = [
        *targs(launcher, a),
        np.int32(a.type),
        *targs(launcher, b),
        *targs(launcher, node),
        np.int32(node.type),
        *err,
    ]
    return enqueue(launcher, "k_get_rows", node.nelements, args)


# ------------------------------------------------------------------------------------------------ SET_ROWS


def _set_rows_ok(info: DeviceInfo, node: Tensor) -> bool:
    b, c = node.src[0], node.src[1]
    assert b is not None and c is not None
    return (
        b.type in (GGMLType.F32, GGMLType.F16)
        and c.type in (GGMLType.I32, GGMLType.I64)
        and (node.type in FLOAT_TYPES or node.type in QUANTIZE_TYPES)
    )


@KERNELS.kernel(GGMLOp.SET_ROWS, supports=_set_rows_ok)
def _bind_set_rows(launcher: Launcher, node: Tensor) -> Thunk:
    b, c = node.src[0], node.src[1]
    assert b is not None and c is not None
    args = [
        *targs(launcher, b),
        np.int32(b.type),
        *targs(launcher, c),
        np.int32(c.type),
        *targs(launcher, node),
        np.int32(node.type),
        launcher.err_buf,
        np.int32(launcher.error_code(node)),
    ]
    if node.type.is_quantized:
        return enqueue(launcher, "k_set_rows_q", b.nelements // 32, args)
    return enqueue(launcher, "k_set_rows", b.nelements, args)
