"""Normalisations (kernels in ``norm.cl``): NORM, RMS_NORM, L2_NORM per row; GROUP_NORM per channel group."""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl.ops._dispatch import KERNELS, Launcher, Thunk, enqueue_nd, local_mem, targs

__all__: list[str] = []

_MODES: Final = {GGMLOp.NORM: 0, GGMLOp.RMS_NORM: 1, GGMLOp.L2_NORM: 2}


def _f32_rows(info: DeviceInfo, node: Tensor) -> bool:
    a = node.src[0]
    return a is not None and a.type == GGMLType.F32 and node.type == GGMLType.F32 and a.ne == node.ne


@KERNELS.kernel(GGMLOp.NORM, GGMLOp.RMS_NORM, GGMLOp.L2_NORM, supports=_f32_rows)
def _bind_norm(launcher: Launcher, node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    ls = launcher.local_size("k_norm_rows", launcher.info.row_ls)
    args = [
        np.int32(_MODES[node.op]),
        np.float32(node.op_param_f32(0)),
        *targs(launcher, a),
        *targs(launcher, node),
        local_mem(ls * 4),
    ]
    return enqueue_nd(launcher, "k_norm_rows", (node.nrows * ls,), (ls,), args)


@KERNELS.kernel(GGMLOp.GROUP_NORM, supports=_f32_rows)
def _bind_group_norm(launcher: Launcher, node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    n_groups = node.op_param_i32(0)
    per_group = (a.ne[2] + n_groups - 1) // n_groups
    ls = launcher.local_size("k_group_norm", launcher.info.row_ls)
    args = [
        np.int32(per_group),
        np.float32(node.op_param_f32(1)),
        *targs(launcher, a),
        *targs(launcher, node),
        local_mem(ls * 4),
    ]
    return enqueue_nd(launcher, "k_group_norm", (n_groups * ls, a.ne[3]), (ls, 1), args)
