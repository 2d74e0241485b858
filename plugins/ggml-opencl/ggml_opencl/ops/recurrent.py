"""The recurrent family (kernels in ``recurrent.cl``), f32: SSM_CONV, SSM_SCAN, GATED_DELTA_NET, RWKV_WKV7.

The scans take one work-item per (state row, head, sequence) and loop over the tokens inside the kernel; the
result holds the outputs, then the states (``K`` snapshot slots for SSM_SCAN and GATED_DELTA_NET), as ggml writes.
"""

from __future__ import annotations

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl.ops._dispatch import KERNELS, Launcher, Thunk, enqueue, targs

__all__: list[str] = []


def _all_f32(info: DeviceInfo, node: Tensor) -> bool:
    """f32 operands and result (SSM_SCAN's ids are i32), rows packed (the kernels walk rows through pointers)."""
    srcs = [s for s in node.src if s is not None]
    ids_ok = node.op != GGMLOp.SSM_SCAN or (len(srcs) == 7 and srcs[6].type == GGMLType.I32)
    floats = srcs[:6] if node.op == GGMLOp.SSM_SCAN else srcs
    return node.type == GGMLType.F32 and ids_ok and all(s.type == GGMLType.F32 and s.nb[0] == 4 for s in floats)


def _operands(node: Tensor, n: int) -> list[Tensor]:
    srcs = [s for s in node.src[:n] if s is not None]
    assert len(srcs) == n, f"{node.op_desc}: operands missing"
    return srcs


@KERNELS.kernel(GGMLOp.SSM_CONV, supports=_all_f32)
def _bind_ssm_conv(launcher: Launcher, node: Tensor) -> Thunk:
    sx, c = _operands(node, 2)
    args = [*targs(launcher, sx), *targs(launcher, c), *targs(launcher, node)]
    return enqueue(launcher, "k_ssm_conv", node.nelements, args)


@KERNELS.kernel(GGMLOp.SSM_SCAN, supports=_all_f32)
def _bind_ssm_scan(launcher: Launcher, node: Tensor) -> Thunk:
    srcs = _operands(node, 7)
    x = srcs[1]
    args = [
        *(a for t in srcs for a in targs(launcher, t)),
        *targs(launcher, node),
        np.int32(node.op_param_i32(0)),
        launcher.err_buf,
        np.int32(launcher.error_code(node)),
    ]
    return enqueue(launcher, "k_ssm_scan", x.ne[0] * x.ne[1] * x.ne[3], args)


@KERNELS.kernel(GGMLOp.GATED_DELTA_NET, supports=_all_f32)
def _bind_gated_delta_net(launcher: Launcher, node: Tensor) -> Thunk:
    srcs = _operands(node, 6)
    v = srcs[2]
    args = [*(a for t in srcs for a in targs(launcher, t)), *targs(launcher, node), np.int32(node.op_param_i32(0))]
    return enqueue(launcher, "k_gated_delta_net", v.ne[0] * v.ne[1] * v.ne[3], args)


@KERNELS.kernel(GGMLOp.RWKV_WKV7, supports=_all_f32)
def _bind_rwkv_wkv7(launcher: Launcher, node: Tensor) -> Thunk:
    srcs = _operands(node, 7)
    k, state = srcs[2], srcs[6]
    args = [*(a for t in srcs for a in targs(launcher, t)), *targs(launcher, node)]
    return enqueue(launcher, "k_rwkv_wkv7", k.ne[0] * k.ne[1] * state.ne[1], args)
