"""Normalisations → ``kernels/norm.cu``: NORM, RMS_NORM, L2_NORM (a block per row), GROUP_NORM (a block per group)."""

from __future__ import annotations

from typing import Final

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_cuda.ops._launch import KERNELS, MAX_GRID_X, Args, BindContext, Launch, src

__all__: list[str] = []

MODULE: Final = "norm"

_ROW_MODE: Final = {GGMLOp.NORM: 0, GGMLOp.RMS_NORM: 1, GGMLOp.L2_NORM: 2}


def _f32_same_shape(node: Tensor) -> bool:
    a = src(node, 0)
    return a.type == GGMLType.F32 and node.type == GGMLType.F32 and a.ne == node.ne


def _block_for(n: int) -> int:
    return 1024 if n >= 4096 else (256 if n >= 256 else 32 * max(1, -(-n // 32)))


@KERNELS.kernel(GGMLOp.NORM, GGMLOp.RMS_NORM, GGMLOp.L2_NORM, supports=_f32_same_shape)
def _bind_norm_rows(node: Tensor, ctx: BindContext) -> list[Launch]:
    a = src(node, 0)
    args = Args().ptr(ctx.ptr(a)).ptr(ctx.ptr(node)).tdesc(a).tdesc(node)
    args.f32(node.op_param_f32(0)).i32(_ROW_MODE[node.op])
    grid = (min(a.nrows, MAX_GRID_X), 1, 1)
    return [Launch.of(MODULE, "k_norm_rows", grid, (_block_for(a.ne[0]), 1, 1), args)]


@KERNELS.kernel(GGMLOp.GROUP_NORM, supports=_f32_same_shape)
def _bind_group_norm(node: Tensor, ctx: BindContext) -> list[Launch]:
    a = src(node, 0)
    n_groups = node.op_param_i32(0)
    per_group = -(-a.ne[2] // n_groups)
    args = Args().ptr(ctx.ptr(a)).ptr(ctx.ptr(node)).tdesc(a).tdesc(node)
    args.i32(n_groups).i32(per_group).f32(node.op_param_f32(1))
    grid = (n_groups * a.ne[3], 1, 1)
    return [Launch.of(MODULE, "k_group_norm", grid, (256, 1, 1), args)]
