"""Reductions and selection (kernels in ``reduce.cl``): SUM, SUM_ROWS, MEAN, CUMSUM, ARGMAX, COUNT_EQUAL, ARGSORT,
TOP_K."""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.ops import SortOrder
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl.ops._dispatch import FLOAT_TYPES, KERNELS, Launcher, Thunk, enqueue, enqueue_nd, local_mem, targs

__all__ = ["SORT_MAX_ROW"]

#: longest row ARGSORT / TOP_K take (each element scans its row: quadratic work); longer rows stay on the CPU
SORT_MAX_ROW: Final = 4096
_SUM_MODES: Final = {GGMLOp.SUM_ROWS: 0, GGMLOp.MEAN: 1, GGMLOp.SUM: 2}


def _float_src(info: DeviceInfo, node: Tensor) -> bool:
    a = node.src[0]
    return a is not None and a.type in FLOAT_TYPES and node.type in FLOAT_TYPES


@KERNELS.kernel(GGMLOp.SUM, GGMLOp.SUM_ROWS, GGMLOp.MEAN, supports=_float_src)
def _bind_sum(launcher: Launcher, node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    ls = launcher.local_size("k_sum", launcher.info.row_ls)
    groups = 1 if node.op == GGMLOp.SUM else a.nrows
    args = [
        np.int32(_SUM_MODES[node.op]),
        *targs(launcher, a),
        np.int32(a.type),
        *targs(launcher, node),
        np.int32(node.type),
        local_mem(ls * 4),
    ]
    return enqueue_nd(launcher, "k_sum", (groups * ls,), (ls,), args)


def _f32_src(info: DeviceInfo, node: Tensor) -> bool:
    a = node.src[0]
    return a is not None and a.type == GGMLType.F32


@KERNELS.kernel(GGMLOp.CUMSUM, supports=lambda info, node: _f32_src(info, node) and node.type == GGMLType.F32)
def _bind_cumsum(launcher: Launcher, node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    return enqueue(launcher, "k_cumsum", a.nrows, [*targs(launcher, a), *targs(launcher, node)])


@KERNELS.kernel(GGMLOp.ARGMAX, supports=lambda info, node: _f32_src(info, node) and node.type == GGMLType.I32)
def _bind_argmax(launcher: Launcher, node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    return enqueue(launcher, "k_argmax", a.ne[1], [*targs(launcher, a), *targs(launcher, node)])


def _count_equal_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    return a is not None and b is not None and a.type == b.type == GGMLType.I32 and node.type == GGMLType.I64


@KERNELS.kernel(GGMLOp.COUNT_EQUAL, supports=_count_equal_ok)
def _bind_count_equal(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    args = [*targs(launcher, a), *targs(launcher, b), *targs(launcher, node)]
    return enqueue_nd(launcher, "k_count_equal", (1,), (1,), args)


def _sort_ok(info: DeviceInfo, node: Tensor) -> bool:
    a = node.src[0]
    return _f32_src(info, node) and node.type == GGMLType.I32 and a is not None and a.ne[0] <= SORT_MAX_ROW


@KERNELS.kernel(GGMLOp.ARGSORT, GGMLOp.TOP_K, supports=_sort_ok)
def _bind_sort(launcher: Launcher, node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    if node.op == GGMLOp.TOP_K:
        descending, k = 1, node.ne[0]
        if k == 0:
            return lambda: None
    else:
        descending, k = int(node.op_param_i32(0) == SortOrder.DESC), 0
    args = [np.int32(descending), np.int32(k), *targs(launcher, a), *targs(launcher, node)]
    return enqueue(launcher, "k_rank_sort", a.nelements, args)
