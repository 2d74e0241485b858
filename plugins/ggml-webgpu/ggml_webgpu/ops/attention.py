"""Attention ops: SOFT_MAX ext (``rows.wgsl``), ROPE (``rope.wgsl``), FLASH_ATTN_EXT (``attention.wgsl``)."""

from __future__ import annotations

from typing import Final

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.ops import alibi_params, rope_constants
from ggml_webgpu.ops._dispatch import (
    KERNELS,
    Dispatch,
    Launcher,
    Limits,
    f32,
    fits,
    groups_1d,
    slot,
    src,
)

T = GGMLType

__all__ = ["FA_DMAX"]


def _soft_max_ok(limits: Limits, node: Tensor) -> bool:
    a, m, s = src(node, 0), node.src[1], node.src[2]
    return (
        a.type == T.F32
        and node.type == T.F32
        and (m is None or m.type in (T.F32, T.F16))
        and (s is None or s.type == T.F32)
        and fits(limits, a, m, s, node)
    )


@KERNELS.kernel(GGMLOp.SOFT_MAX, supports=_soft_max_ok)
def _bind_soft_max(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, mask, sinks = src(node, 0), node.src[1], node.src[2]
    max_bias = node.op_param_f32(1)
    m0, m1, n_log2 = alibi_params(a.ne[2], max_bias)
    words = [
        a.nrows,
        f32(node.op_param_f32(0)),
        f32(max_bias),
        f32(m0),
        f32(m1),
        n_log2,
        int(mask is not None),
        mask.type if mask is not None else 0,
        int(sinks is not None),
    ]
    slots = (
        slot(launcher, a),
        slot(launcher, mask) if mask is not None else None,
        slot(launcher, sinks) if sinks is not None else None,
        slot(launcher, node),
    )
    return [Dispatch("rows.soft_max", a.nrows, slots, words)]


# ------------------------------------------------------------------------------------------------ ROPE


_ROPE_MODES: Final = (0, 2, 8, 24, 40)  # NORMAL, NEOX, MROPE, VISION, IMROPE
_ROPE_MROPE, _ROPE_VISION = 8, 24


def _rope_ok(limits: Limits, node: Tensor) -> bool:
    a, p, f = src(node, 0), src(node, 1), node.src[2]
    mode, n_dims, n_offs = node.op_param_i32(2), node.op_param_i32(1), node.op_param_i32(15)
    sections = [node.op_param_i32(i) for i in range(11, 15)]
    n_pairs = a.ne[0] // 2 if mode == _ROPE_VISION else n_dims // 2
    if mode not in _ROPE_MODES or a.ne[0] % 2 or n_offs % 2 or n_offs < 0 or n_dims <= 0 or n_offs + n_dims > a.ne[0]:
        return False
    if mode & _ROPE_MROPE and (sum(sections) <= 0 or sum(sections) > a.ne[0] or min(sections) < 0):
        return False
    if mode == _ROPE_VISION and (n_dims * 2 != a.ne[0] or n_offs != 0):
        return False
    return (
        a.type in (T.F32, T.F16)
        and node.type == a.type
        and node.ne == a.ne
        and p.type == T.I32
        and (f is None or (f.type == T.F32 and f.nelements >= n_pairs))
        and fits(limits, a, p, f, node)
    )


@KERNELS.kernel(GGMLOp.ROPE, supports=_rope_ok)
def _bind_rope(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, pos, ff = src(node, 0), src(node, 1), node.src[2]
    c = rope_constants(node)
    n = a.nelements // 2
    words = [
        n,
        c.mode,
        c.n_dims,
        c.n_offs,
        *c.sections,
        f32(c.theta_scale),
        f32(c.freq_scale),
        f32(c.ext_factor),
        f32(c.mscale),
        f32(c.corr_low),
        f32(c.corr_high),
        a.type,
        int(ff is not None),
    ]
    slots = (
        slot(launcher, a),
        slot(launcher, pos),
        slot(launcher, ff) if ff is not None else None,
        slot(launcher, node),
    )
    return [Dispatch("rope.rope", groups_1d(n), slots, words)]


# ------------------------------------------------------------------------------------------------ FLASH_ATTN_EXT

#: largest V head size of the flash-attention kernel (its per-invocation accumulator, FA_DMAX in attention.wgsl)
FA_DMAX: Final = 256


def _flash_ok(limits: Limits, node: Tensor) -> bool:
    q, k, v, m, s = src(node, 0), src(node, 1), src(node, 2), node.src[3], node.src[4]
    return (
        q.type == T.F32
        and k.type in (T.F32, T.F16)
        and v.type in (T.F32, T.F16)
        and (m is None or m.type == T.F16)
        and (s is None or s.type == T.F32)
        and node.type == T.F32
        and v.ne[0] <= FA_DMAX
        and fits(limits, q, k, v, m, s, node)
    )


@KERNELS.kernel(GGMLOp.FLASH_ATTN_EXT, supports=_flash_ok)
def _bind_flash(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    q, k, v, mask, sinks = src(node, 0), src(node, 1), src(node, 2), node.src[3], node.src[4]
    scale, max_bias, softcap = (node.op_param_f32(i) for i in range(3))
    m0, m1, n_log2 = alibi_params(q.ne[2], max_bias)
    n = q.ne[1] * q.ne[2] * q.ne[3]
    words = [
        n,
        f32(scale),
        f32(max_bias),
        f32(m0),
        f32(m1),
        n_log2,
        f32(softcap),
        k.type,
        v.type,
        int(mask is not None),
        int(sinks is not None),
    ]
    slots = (
        slot(launcher, q),
        slot(launcher, k),
        slot(launcher, v),
        slot(launcher, node),
        slot(launcher, mask) if mask is not None else None,
        slot(launcher, sinks) if sinks is not None else None,
    )
    return [Dispatch("attention.flash_attn", n, slots, words)]
