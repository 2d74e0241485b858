"""Attention ops → ``kernels/attention.cu`` (SOFT_MAX, ROPE) and ``kernels/flash_attn.cu`` (FLASH_ATTN_EXT).

Per-op constants that ggml computes once on the host (ALiBi bases, the RoPE theta step and YaRN's correction
range and magnitude scale) are computed here in float32 exactly as ggml does and passed to the kernels.
"""

from __future__ import annotations

from typing import Final

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.ops import ROPE_TYPE_NEOX, alibi_params, rope_constants
from ggml_cuda.ops._launch import KERNELS, MAX_GRID_X, MAX_GRID_Y, Args, BindContext, Launch, rows_grid, src, type_id

__all__ = ["FA_MAX_HEAD"]

#: the largest head size FLASH_ATTN_EXT's kernel handles (FA_MAX_D in flash_attn.cu)
FA_MAX_HEAD: Final = 512

_F32_F16: Final = (GGMLType.F32, GGMLType.F16)


# ---------------------------------------------------------------------------------------------- SOFT_MAX


def _soft_max_ok(node: Tensor) -> bool:
    a, mask, sinks = src(node, 0), node.src[1], node.src[2]
    return (
        a.type == GGMLType.F32
        and node.type == GGMLType.F32
        and a.ne == node.ne
        and (mask is None or mask.type in _F32_F16)
        and (sinks is None or sinks.type == GGMLType.F32)
    )


@KERNELS.kernel(GGMLOp.SOFT_MAX, supports=_soft_max_ok)
def _bind_soft_max(node: Tensor, ctx: BindContext) -> list[Launch]:
    a, mask, sinks = src(node, 0), node.src[1], node.src[2]
    scale, max_bias = node.op_param_f32(0), node.op_param_f32(1)
    m0, m1, n_head_log2 = alibi_params(a.ne[2], max_bias)
    args = Args().ptr(ctx.ptr(a)).ptr(ctx.ptr(mask) if mask is not None else 0)
    args.ptr(ctx.ptr(sinks) if sinks is not None else 0).ptr(ctx.ptr(node))
    args.tdesc(a).tdesc(mask if mask is not None else a).tdesc(node)
    args.i32(type_id(mask.type) if mask is not None else 0).i32(mask is not None).i32(sinks is not None)
    args.f32(scale).f32(max_bias).f32(m0).f32(m1).i32(n_head_log2)
    block = 1024 if a.ne[0] >= 8192 else (256 if a.ne[0] >= 256 else 32 * max(1, -(-a.ne[0] // 32)))
    return [Launch.of("attention", "k_soft_max", (min(a.nrows, MAX_GRID_X), 1, 1), (block, 1, 1), args)]


# ---------------------------------------------------------------------------------------------- ROPE


def _rope_ok(node: Tensor) -> bool:
    a, pos, ff = src(node, 0), src(node, 1), node.src[2]
    return (
        a.type in _F32_F16
        and node.type == a.type
        and a.ne == node.ne
        and node.op_param_i32(2) in (0, 2)
        and pos.type == GGMLType.I32
        and pos.ne[0] >= a.ne[2]
        and a.ne[0] % 2 == 0
        and 0 <= node.op_param_i32(15) <= a.ne[0] - node.op_param_i32(1)
        and (ff is None or ff.type == GGMLType.F32)
    )


@KERNELS.kernel(GGMLOp.ROPE, supports=_rope_ok)
def _bind_rope(node: Tensor, ctx: BindContext) -> list[Launch]:
    a, pos, ff = src(node, 0), src(node, 1), node.src[2]
    c = rope_constants(node)
    args = Args().ptr(ctx.ptr(a)).ptr(ctx.ptr(pos)).ptr(ctx.ptr(ff) if ff is not None else 0).ptr(ctx.ptr(node))
    args.tdesc(a).tdesc(node).i32(type_id(a.type)).i32(c.n_dims).i32(c.n_offs)
    args.i32(int(c.mode == ROPE_TYPE_NEOX)).i32(ff is not None)
    for value in (c.theta_scale, c.freq_scale, c.ext_factor, c.corr_low, c.corr_high, c.mscale):
        args.f32(value)
    grid, block = rows_grid(a.ne[0] // 2, a.nrows, max_block=128)
    return [Launch.of("attention", "k_rope", grid, block, args)]


# ---------------------------------------------------------------------------------------------- FLASH_ATTN_EXT


def _flash_attn_ok(node: Tensor) -> bool:
    q, k, v, mask, sinks = src(node, 0), src(node, 1), src(node, 2), node.src[3], node.src[4]
    return (
        q.type == GGMLType.F32
        and k.type in _F32_F16
        and v.type in _F32_F16
        and node.type == GGMLType.F32
        and q.ne[0] <= FA_MAX_HEAD
        and v.ne[0] <= FA_MAX_HEAD
        and (mask is None or mask.type == GGMLType.F16)
        and (sinks is None or sinks.type == GGMLType.F32)
        and q.ne[2] <= MAX_GRID_Y
        and q.ne[3] <= MAX_GRID_Y
        and q.ne[2] % k.ne[2] == 0
        and q.ne[2] % v.ne[2] == 0
    )


@KERNELS.kernel(GGMLOp.FLASH_ATTN_EXT, supports=_flash_attn_ok)
def _bind_flash_attn(node: Tensor, ctx: BindContext) -> list[Launch]:
    q, k, v, mask, sinks = src(node, 0), src(node, 1), src(node, 2), node.src[3], node.src[4]
    scale, max_bias, softcap = node.op_param_f32(0), node.op_param_f32(1), node.op_param_f32(2)
    m0, m1, n_head_log2 = alibi_params(q.ne[2], max_bias)
    args = Args().ptr(ctx.ptr(q)).ptr(ctx.ptr(k)).ptr(ctx.ptr(v)).ptr(ctx.ptr(mask) if mask is not None else 0)
    args.ptr(ctx.ptr(sinks) if sinks is not None else 0).ptr(ctx.ptr(node))
    args.tdesc(q).tdesc(k).tdesc(v).tdesc(mask if mask is not None else q).tdesc(node)
    args.i32(type_id(k.type)).i32(type_id(v.type)).i32(mask is not None).i32(sinks is not None)
    args.f32(scale).f32(softcap).f32(max_bias).f32(m0).f32(m1).i32(n_head_log2)
    grid = (q.ne[1], q.ne[2], q.ne[3])
    return [Launch.of("flash_attn", "k_flash_attn", grid, (128, 1, 1), args)]
