"""The recurrent ops → ``kernels/recurrent.cu``, f32: SSM_CONV, SSM_SCAN, GATED_DELTA_NET, RWKV_WKV7.

The scans run one thread per (state row, head, sequence), looping over the tokens; results hold the outputs, then
the states (``K`` snapshot slots for SSM_SCAN and GATED_DELTA_NET), as ggml writes them.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_cuda.ops._launch import KERNELS, STATUS, Args, BindContext, Launch, flat_grid

__all__: list[str] = []

MODULE: Final = "recurrent"
#: threads per block of the scans (one state row each)
_SCAN_BLOCK: Final = 64


def _operands(node: Tensor) -> list[Tensor]:
    return [s for s in node.src if s is not None]


def _all_f32(node: Tensor) -> bool:
    """f32 operands and result (SSM_SCAN's ids are i32)."""
    srcs = _operands(node)
    floats, ints = (srcs[:6], srcs[6:]) if node.op == GGMLOp.SSM_SCAN else (srcs, [])
    return (
        node.type == GGMLType.F32
        and all(s.type == GGMLType.F32 for s in floats)
        and all(s.type == GGMLType.I32 for s in ints)
    )


def _args(node: Tensor, ctx: BindContext) -> Args:
    """The operands' pointers, the result's pointer, then the operands' descriptors."""
    srcs = _operands(node)
    args = Args()
    for t in srcs:
        args.ptr(ctx.ptr(t))
    args.ptr(ctx.ptr(node))
    for t in srcs:
        args.tdesc(t)
    return args


@KERNELS.kernel(GGMLOp.SSM_CONV, supports=_all_f32)
def _bind_ssm_conv(node: Tensor, ctx: BindContext) -> list[Launch]:
    args = _args(node, ctx).tdesc(node).i64(node.nelements)
    grid, block = flat_grid(node.nelements)
    return [Launch.of(MODULE, "k_ssm_conv", grid, block, args)]


@KERNELS.kernel(GGMLOp.SSM_SCAN, supports=_all_f32)
def _bind_ssm_scan(node: Tensor, ctx: BindContext) -> list[Launch]:
    x = _operands(node)[1]
    n = x.ne[0] * x.ne[1] * x.ne[3]
    args = _args(node, ctx).i32(node.op_param_i32(0)).i64(n).ptr(STATUS)
    grid, block = flat_grid(n, _SCAN_BLOCK)
    return [Launch.of(MODULE, "k_ssm_scan", grid, block, args)]


@KERNELS.kernel(GGMLOp.GATED_DELTA_NET, supports=_all_f32)
def _bind_gated_delta_net(node: Tensor, ctx: BindContext) -> list[Launch]:
    v = _operands(node)[2]
    n = v.ne[0] * v.ne[1] * v.ne[3]
    scale = np.float32(1.0) / np.sqrt(np.float32(v.ne[0]))
    args = _args(node, ctx).i32(node.op_param_i32(0)).f32(float(scale)).i64(n)
    grid, block = flat_grid(n, _SCAN_BLOCK)
    return [Launch.of(MODULE, "k_gated_delta_net", grid, block, args)]


@KERNELS.kernel(GGMLOp.RWKV_WKV7, supports=_all_f32)
def _bind_rwkv_wkv7(node: Tensor, ctx: BindContext) -> list[Launch]:
    srcs = _operands(node)
    k, state = srcs[2], srcs[6]
    n = k.ne[0] * k.ne[1] * state.ne[1]
    grid, block = flat_grid(n, _SCAN_BLOCK)
    return [Launch.of(MODULE, "k_rwkv_wkv7", grid, block, _args(node, ctx).i64(n))]
