"""Attention ops (kernels in ``attention.cl``): SOFT_MAX (ext), ROPE (NORMAL, NEOX, MROPE, IMROPE, VISION; YaRN,
channel offset), FLASH_ATTN_EXT, DIAG_MASK."""

from __future__ import annotations

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.ops import alibi_params, rope_constants
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl.ops._dispatch import KERNELS, Launcher, Thunk, enqueue, enqueue_nd, int4, local_mem, targs

__all__ = ["FA_DMAX"]

#: largest V head size of the flash-attention kernel (its per-item accumulator, FA_DMAX in attention.cl)
FA_DMAX = 256


def _opt(launcher: Launcher, t: Tensor | None, fallback: Tensor) -> list[object]:
    """Arguments of an optional tensor: (1, its TENSOR args) or (0, a placeholder's)."""
    return [np.int32(t is not None), *targs(launcher, t if t is not None else fallback)]


# ---------------------------------------------------------------------------------------------- SOFT_MAX


def _soft_max_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, m, s = node.src[0], node.src[1], node.src[2]
    return (
        a is not None
        and a.type == GGMLType.F32
        and node.type == GGMLType.F32
        and (m is None or m.type in (GGMLType.F32, GGMLType.F16))
        and (s is None or s.type == GGMLType.F32)
    )


@KERNELS.kernel(GGMLOp.SOFT_MAX, supports=_soft_max_ok)
def _bind_soft_max(launcher: Launcher, node: Tensor) -> Thunk:
    a, mask, sinks = node.src[0], node.src[1], node.src[2]
    assert a is not None
    max_bias = node.op_param_f32(1)
    m0, m1, n_log2 = alibi_params(a.ne[2], max_bias)
    ls = launcher.local_size("k_soft_max", launcher.info.row_ls)
    args = [
        np.float32(node.op_param_f32(0)),
        np.float32(max_bias),
        np.float32(m0),
        np.float32(m1),
        np.int32(n_log2),
        *targs(launcher, a),
        *_opt(launcher, mask, a),
        np.int32(mask.type if mask is not None else GGMLType.F32),
        *_opt(launcher, sinks, a),
        *targs(launcher, node),
        local_mem(ls * 4),
    ]
    return enqueue_nd(launcher, "k_soft_max", (a.nrows * ls,), (ls,), args)


# ---------------------------------------------------------------------------------------------- ROPE


_ROPE_MODES = (0, 2, 8, 24, 40)  # NORMAL, NEOX, MROPE, VISION, IMROPE
_ROPE_MROPE, _ROPE_VISION = 8, 24


def _rope_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, p, f = node.src[0], node.src[1], node.src[2]
    if a is None or p is None:
        return False
    mode, n_dims, n_offs = node.op_param_i32(2), node.op_param_i32(1), node.op_param_i32(15)
    sections = [node.op_param_i32(i) for i in range(11, 15)]
    n_pairs = a.ne[0] // 2 if mode == _ROPE_VISION else n_dims // 2
    if mode not in _ROPE_MODES or a.ne[0] % 2 or n_offs % 2 or n_offs < 0 or n_offs + n_dims > a.ne[0]:
        return False
    if mode & _ROPE_MROPE and (sum(sections) <= 0 or sum(sections) > a.ne[0] or min(sections) < 0):
        return False
    if mode == _ROPE_VISION and (n_dims * 2 != a.ne[0] or n_offs != 0):
        return False
    return (
        a.type in (GGMLType.F32, GGMLType.F16)
        and node.type == a.type
        and node.ne == a.ne
        and p.type == GGMLType.I32
        and (f is None or (f.type == GGMLType.F32 and f.nelements >= n_pairs))
    )


@KERNELS.kernel(GGMLOp.ROPE, supports=_rope_ok)
def _bind_rope(launcher: Launcher, node: Tensor) -> Thunk:
    a, pos, ff = node.src[0], node.src[1], node.src[2]
    assert a is not None and pos is not None
    c = rope_constants(node)
    args = [
        np.int32(c.mode),
        np.int32(c.n_dims),
        np.int32(c.n_offs),
        int4(list(c.sections)),
        np.float32(c.theta_scale),
        np.float32(c.freq_scale),
        np.float32(c.ext_factor),
        np.float32(c.mscale),
        np.float32(c.corr_low),
        np.float32(c.corr_high),
        *targs(launcher, a),
        np.int32(a.type),
        *targs(launcher, pos),
        *_opt(launcher, ff, pos),
        *targs(launcher, node),
    ]
    return enqueue(launcher, "k_rope", a.nelements // 2, args)


# ---------------------------------------------------------------------------------------------- DIAG_MASK


def _f32_same(info: DeviceInfo, node: Tensor) -> bool:
    a = node.src[0]
    return a is not None and a.type == GGMLType.F32 and node.type == GGMLType.F32 and a.ne == node.ne


@KERNELS.kernel(GGMLOp.DIAG_MASK_INF, GGMLOp.DIAG_MASK_ZERO, supports=_f32_same)
def _bind_diag_mask(launcher: Launcher, node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    value = -np.inf if node.op == GGMLOp.DIAG_MASK_INF else 0.0
    args = [np.int32(node.op_param_i32(0)), np.float32(value), *targs(launcher, a), *targs(launcher, node)]
    return enqueue(launcher, "k_diag_mask", node.nelements, args)


# ---------------------------------------------------------------------------------------------- FLASH_ATTN_EXT


def _flash_ok(info: DeviceInfo, node: Tensor) -> bool:
    q, k, v, m = node.src[0], node.src[1], node.src[2], node.src[3]
    s = node.src[4]
    return (
        q is not None
        and k is not None
        and v is not None
        and q.type == GGMLType.F32
        and k.type in (GGMLType.F32, GGMLType.F16)
        and v.type in (GGMLType.F32, GGMLType.F16)
        and (m is None or m.type == GGMLType.F16)
        and (s is None or s.type == GGMLType.F32)
        and node.type == GGMLType.F32
        and v.ne[0] <= FA_DMAX
    )


@KERNELS.kernel(GGMLOp.FLASH_ATTN_EXT, supports=_flash_ok)
def _bind_flash(launcher: Launcher, node: Tensor) -> Thunk:
    q, k, v, mask, sinks = node.src[0], node.src[1], node.src[2], node.src[3], node.src[4]
    assert q is not None and k is not None and v is not None
    scale, max_bias, softcap = (node.op_param_f32(i) for i in range(3))
    m0, m1, n_log2 = alibi_params(q.ne[2], max_bias)
    args = [
        np.float32(scale),
        np.float32(max_bias),
        np.float32(m0),
        np.float32(m1),
        np.int32(n_log2),
        np.float32(softcap),
        *targs(launcher, q),
        *targs(launcher, k),
        np.int32(k.type),
        *targs(launcher, v),
        np.int32(v.type),
        *_opt(launcher, mask, q),
        *_opt(launcher, sinks, q),
        *targs(launcher, node),
    ]
    return enqueue(launcher, "k_flash_attn", q.ne[1] * q.ne[2] * q.ne[3], args)
