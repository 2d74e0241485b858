"""Attention kernels: SOFT_MAX (ext: scale, mask, ALiBi, sinks) and ROPE (NORMAL/NEOX with YaRN)."""

from __future__ import annotations

import math

import numpy as np
from ggml_core import GGMLOp, GGMLType, Tensor

from ggml_cpu.kernels._base import Thunk, arr, f32, kernel, store

__all__ = ["alibi_slopes", "rope_cos_sin", "yarn_corr_dims"]


def alibi_slopes(n_head: int, max_bias: float) -> np.ndarray:
    """ggml's ALiBi slope per head (float32); all ones when ``max_bias`` is 0."""
    if max_bias <= 0.0:
        return np.ones(n_head, np.float32)
    n_head_log2 = 1 << int(math.floor(math.log2(n_head)))
    m0 = np.float32(2.0) ** (np.float32(-max_bias) / np.float32(n_head_log2))
    m1 = np.float32(2.0) ** (np.float32(-max_bias / 2.0) / np.float32(n_head_log2))
    h = np.arange(n_head)
    return np.where(
        h < n_head_log2, m0 ** (h + 1).astype(np.float32), m1 ** (2 * (h - n_head_log2) + 1).astype(np.float32)
    ).astype(np.float32)


def _soft_max_ok(node: Tensor) -> bool:
    a, m = node.src[0], node.src[1]
    assert a is not None
    return a.type == GGMLType.F32 and node.type == GGMLType.F32 and (m is None or m.type in (GGMLType.F32, GGMLType.F16))


@kernel(GGMLOp.SOFT_MAX, supports=_soft_max_ok)
def _bind_soft_max(node: Tensor) -> Thunk:
    a, mask, sinks = node.src[0], node.src[1], node.src[2]
    assert a is not None
    scale = np.float32(node.op_param_f32(0))
    max_bias = node.op_param_f32(1)
    slopes = alibi_slopes(a.ne[2], max_bias).reshape(1, -1, 1, 1)

    def run() -> None:
        w = f32(a) * scale
        if mask is not None:
            m = f32(mask)[:, :, : a.ne[1], :]  # rows i01 of the mask, dims 2/3 repeat
            reps = (a.ne[3] // mask.ne[3], a.ne[2] // mask.ne[2], 1, 1)
            w = w + slopes * np.tile(m, reps)
        mx = w.max(axis=-1, keepdims=True)
        if sinks is not None:
            sk = f32(sinks).reshape(1, -1, 1, 1)
            mx = np.maximum(mx, sk)
        with np.errstate(under="ignore"):
            e = np.exp(w - mx)
            total = e.sum(axis=-1, dtype=np.float64, keepdims=True)
            if sinks is not None:
                total = total + np.exp(sk - mx).astype(np.float64)
        store(node, e * (1.0 / total).astype(np.float32))

    return run


def yarn_corr_dims(n_dims: int, n_ctx_orig: int, freq_base: float, beta_fast: float, beta_slow: float) -> tuple[float, float]:
    """``ggml_rope_yarn_corr_dims``: the [low, high] pair range of the YaRN ramp."""

    def corr_dim(n_rot: float) -> float:
        return float(
            np.float32(n_dims)
            * np.log(np.float32(n_ctx_orig) / (np.float32(n_rot) * np.float32(2.0 * math.pi)))
            / (np.float32(2.0) * np.log(np.float32(freq_base)))
        )

    start = math.floor(corr_dim(beta_fast))
    end = math.ceil(corr_dim(beta_slow))
    return float(max(0, start)), float(min(n_dims - 1, end))


def rope_cos_sin(
    pos: np.ndarray,
    ne0: int,
    n_dims: int,
    freq_base: float,
    freq_scale: float,
    ext_factor: float,
    attn_factor: float,
    corr: tuple[float, float],
    freq_factors: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin per (position, pair) as ggml's ``ggml_rope_cache_init`` computes them (float32 steps)."""
    n_pairs = ne0 // 2
    theta_scale = np.float32(freq_base) ** np.float32(-2.0 / n_dims)
    steps = np.empty((pos.shape[0], n_pairs), np.float32)
    steps[:, 0] = pos.astype(np.float32)
    steps[:, 1:] = theta_scale
    theta_extrap = np.cumprod(steps, axis=1, dtype=np.float32)  # theta *= theta_scale, in float
    if freq_factors is not None:
        theta_extrap = theta_extrap / freq_factors[:n_pairs].astype(np.float32)
    theta_interp = np.float32(freq_scale) * theta_extrap
    mscale = np.float32(attn_factor)
    if ext_factor != 0.0:
        i0 = np.arange(n_pairs, dtype=np.float32)  # i0/2 for i0 = 0, 2, 4, ...
        low, high = np.float32(corr[0]), np.float32(corr[1])
        y = (i0 - low) / max(np.float32(0.001), high - low)
        ramp = (np.float32(1.0) - np.minimum(np.float32(1.0), np.maximum(np.float32(0.0), y))) * np.float32(ext_factor)
        theta = theta_interp * (np.float32(1.0) - ramp) + theta_extrap * ramp
        mscale = mscale * (np.float32(1.0) + np.float32(0.1) * np.log(np.float32(1.0) / np.float32(freq_scale)))
    else:
        theta = theta_interp
    return (np.cos(theta) * mscale).astype(np.float32), (np.sin(theta) * mscale).astype(np.float32)


def _rope_ok(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return a.type in (GGMLType.F32, GGMLType.F16) and node.type == a.type and node.op_param_i32(2) in (0, 2)


@kernel(GGMLOp.ROPE, supports=_rope_ok)
def _bind_rope(node: Tensor) -> Thunk:
    a, p, ff = node.src[0], node.src[1], node.src[2]
    assert a is not None and p is not None
    n_dims, mode, n_ctx_orig = node.op_param_i32(1), node.op_param_i32(2), node.op_param_i32(4)
    freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow = (node.op_param_f32(i) for i in range(5, 11))
    corr = yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow)
    half = n_dims // 2

    def run() -> None:
        x = f32(a)  # (ne3, ne2 = tokens, ne1 = heads, ne0)
        pos = arr(p).reshape(-1)
        cos, sin = rope_cos_sin(
            pos, a.ne[0], n_dims, freq_base, freq_scale, ext_factor, attn_factor, corr,
            None if ff is None else f32(ff).reshape(-1),
        )
        c = cos[None, :, None, :half]
        s = sin[None, :, None, :half]
        y = x.copy()
        if mode == 0:  # NORMAL: adjacent pairs (x[2i], x[2i+1])
            x0, x1 = x[..., 0:n_dims:2], x[..., 1:n_dims:2]
            y[..., 0:n_dims:2] = x0 * c - x1 * s
            y[..., 1:n_dims:2] = x0 * s + x1 * c
        else:  # NEOX: halves (x[i], x[i + n_dims/2])
            x0, x1 = x[..., :half], x[..., half:n_dims]
            y[..., :half] = x0 * c - x1 * s
            y[..., half:n_dims] = x0 * s + x1 * c
        store(node, y)

    return run
