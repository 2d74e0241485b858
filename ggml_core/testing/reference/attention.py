"""numpy references for attention ops: SOFT_MAX (ext), ROPE (normal/neox, partial, YaRN), FLASH_ATTN_EXT.

Numerics follow ``ggml-semantics.md``: rope's theta advances in float32 by repeated multiplication; YaRN uses
ggml's corr-dims and ramp; flash attention with f16 V accumulates in an f16 buffer with an online softmax (and
rounds Q to f16 for f16 K); sinks join the softmax denominator only.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["alibi_slopes", "flash_attn_ext", "rope", "soft_max", "yarn_corr_dims"]

F = np.float32


def alibi_slopes(n_head: int, max_bias: float) -> np.ndarray:
    """ALiBi slope of each head: m0^(h+1) for the first 2^floor(log2 n) heads, m1^(2(h−n)+1) after; 1 without bias."""
    if max_bias <= 0.0:
        return np.ones(n_head, np.float32)
    n_log2 = 1 << math.floor(math.log2(n_head))
    m0 = 2.0 ** (-max_bias / n_log2)
    m1 = 2.0 ** (-(max_bias / 2.0) / n_log2)
    h = np.arange(n_head)
    return np.where(h < n_log2, m0 ** (h + 1.0), m1 ** (2.0 * (h - n_log2) + 1.0)).astype(np.float32)


def _mask_for(mask: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Mask rows 0..rows−1, broadcast over dims 2 and 3 by ``i % ne`` (mask (m3, m2, ≥rows, cols))."""
    d3, d2, rows, cols = shape
    m = np.asarray(mask, dtype=np.float32)[:, :, :rows, :cols]
    i3 = np.arange(d3) % m.shape[0]
    i2 = np.arange(d2) % m.shape[1]
    return m[i3][:, i2]


def soft_max(
    a: np.ndarray, mask: np.ndarray | None, scale: float, max_bias: float, sinks: np.ndarray | None
) -> np.ndarray:
    """softmax(a·scale + slope·mask) over each row; ``sinks`` (one logit per head, dim 2) join the denominator."""
    x = np.asarray(a, dtype=np.float64) * F(scale)
    if mask is not None:
        slopes = alibi_slopes(a.shape[1], max_bias).astype(np.float64).reshape(1, -1, 1, 1)
        x = x + slopes * _mask_for(mask, a.shape)
    return _softmax_rows(x, sinks).astype(np.float32)


def _softmax_rows(x: np.ndarray, sinks: np.ndarray | None) -> np.ndarray:
    """Softmax over the last axis of (b, heads, rows, n) in float64; a head's sink logit joins the denominator."""
    mx = x.max(axis=-1, keepdims=True)
    if sinks is not None:
        sk = np.asarray(sinks, dtype=np.float64).reshape(1, -1, 1, 1)
        mx = np.maximum(mx, sk)
    with np.errstate(under="ignore", invalid="ignore"):
        e = np.exp(x - mx)
        den = e.sum(axis=-1, keepdims=True)
        if sinks is not None:
            den = den + np.exp(sk - mx)
    return e / den


def yarn_corr_dims(
    n_dims: int, n_ctx_orig: int, freq_base: float, beta_fast: float, beta_slow: float
) -> tuple[float, float]:
    """The [low, high] pair range of YaRN's ramp: floor/ceil of the correction dims, clamped to [0, n_dims − 1]."""

    def corr(n_rot: float) -> float:
        return n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(freq_base))

    lo = math.floor(corr(beta_fast))
    hi = math.ceil(corr(beta_slow))
    return float(max(0, lo)), float(min(n_dims - 1, hi))


def rope(
    x: np.ndarray,
    pos: np.ndarray,
    freq_factors: np.ndarray | None,
    n_dims: int,
    mode: int,
    n_ctx_orig: int,
    freq_base: float,
    freq_scale: float,
    ext_factor: float,
    attn_factor: float,
    beta_fast: float,
    beta_slow: float,
) -> np.ndarray:
    """ROPE of x (ne3, tokens, heads, head_dim) at positions ``pos`` (one per token); dims ≥ n_dims pass through.

    mode 0 rotates adjacent pairs (2i, 2i+1), mode 2 (NEOX) the pairs (i, i + n_dims/2); pair i turns by
    theta = pos · base^(−2i/n_dims) (advanced in float32), with YaRN interpolation and magnitude scaling.
    """
    v = np.asarray(x, dtype=np.float32)
    half = n_dims // 2
    p = np.asarray(pos).reshape(-1).astype(np.float32)
    step = F(freq_base) ** F(-2.0 / n_dims)
    theta = np.empty((p.size, half), np.float32)
    cur = p.copy()
    for i in range(half):  # theta *= theta_scale, one float32 multiply per pair
        theta[:, i] = cur
        cur = (cur * step).astype(np.float32)
    if freq_factors is not None:
        theta = theta / np.asarray(freq_factors, dtype=np.float32).reshape(-1)[:half]
    interp = F(freq_scale) * theta
    mscale = F(attn_factor)
    if ext_factor != 0.0:
        lo, hi = yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow)
        y = (np.arange(half, dtype=np.float32) - F(lo)) / max(F(0.001), F(hi - lo))
        ramp = (F(1.0) - np.clip(y, 0.0, 1.0)) * F(ext_factor)
        theta = interp * (F(1.0) - ramp) + theta * ramp
        mscale = F(mscale * (1.0 + 0.1 * math.log(1.0 / freq_scale)))
    else:
        theta = interp
    c = (np.cos(theta) * mscale)[None, :, None, :]
    s = (np.sin(theta) * mscale)[None, :, None, :]
    out = v.copy()
    if mode == 0:
        x0, x1 = v[..., 0:n_dims:2], v[..., 1:n_dims:2]
        out[..., 0:n_dims:2] = x0 * c - x1 * s
        out[..., 1:n_dims:2] = x0 * s + x1 * c
    else:
        x0, x1 = v[..., :half], v[..., half:n_dims]
        out[..., :half] = x0 * c - x1 * s
        out[..., half:n_dims] = x0 * s + x1 * c
    return out


def flash_attn_ext(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None,
    scale: float,
    max_bias: float,
    softcap: float,
    sinks: np.ndarray | None,
    kv_f16: bool,
) -> np.ndarray:
    """FLASH_ATTN_EXT: q (b, H, N, D), k (b, Hkv, KV, D), v (b, Hkv, KV, Dv) → (b, N, H, Dv) (ggml's permuted output).

    Head h reads kv head ``h // (H / Hkv)``. Scores: q·k·scale, softcapped (cap·tanh(s/cap)), plus slope·mask.
    With f16 K, Q is rounded to f16 first; with f16 V the weighted sum accumulates in f16 with an online softmax
    (ggml's CPU), otherwise in float64.
    """
    qv = np.asarray(q, dtype=np.float32)
    if kv_f16:
        qv = qv.astype(np.float16).astype(np.float32)
    n_head = qv.shape[1]
    rk = n_head // k.shape[1]
    kk = np.repeat(np.asarray(k, dtype=np.float64), rk, axis=1)
    vv = np.repeat(np.asarray(v, dtype=np.float32), n_head // v.shape[1], axis=1)
    s = np.matmul(qv.astype(np.float64), np.swapaxes(kk, -1, -2))  # (b, H, N, KV)
    s = softcap * np.tanh(s * (scale / softcap)) if softcap != 0.0 else s * scale
    mv = np.zeros_like(s)
    if mask is not None:
        slopes = alibi_slopes(n_head, max_bias).astype(np.float64).reshape(1, -1, 1, 1)
        mv = slopes * _mask_for(mask, s.shape)
        s = s + mv
    if kv_f16:
        out = _online_f16(s.astype(np.float32), np.isneginf(mv), vv, sinks)
    else:
        out = np.matmul(_softmax_rows(s, sinks), vv.astype(np.float64))
    return np.swapaxes(out, 1, 2)  # (b, N, H, Dv)


def _online_f16(s: np.ndarray, skip: np.ndarray, vv: np.ndarray, sinks: np.ndarray | None) -> np.ndarray:
    """ggml CPU's f16-V path: running max M, running sum S, an f16 accumulator rescaled when the max grows."""
    b, h, n, kv = s.shape
    dv = vv.shape[-1]
    m = np.full((b, h, n, 1), -np.inf, np.float32)
    total = np.zeros((b, h, n, 1), np.float32)
    acc = np.zeros((b, h, n, dv), np.float16)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for j in range(kv):
            sj = s[..., j : j + 1]
            live = ~skip[..., j : j + 1]
            grow = (sj > m) & live
            ms = np.where(grow, np.exp(m - sj), F(1.0)).astype(np.float32)
            vs = np.where(grow, F(1.0), np.exp(sj - m)).astype(np.float32)
            m = np.where(grow, sj, m)
            scaled = np.where(grow, (acc.astype(np.float32) * ms).astype(np.float16), acc)
            vj = vv[:, :, j : j + 1, :]  # (b, h, 1, dv), one value row per kv position
            added = (scaled.astype(np.float32) + vj * vs).astype(np.float16)
            acc = np.where(live, added, acc)
            total = np.where(live, total * ms + vs, total)
        out = acc.astype(np.float32)
        if sinks is not None:
            sk = np.asarray(sinks, dtype=np.float32).reshape(1, -1, 1, 1)
            grow = sk > m
            ms = np.where(grow, np.exp(m - sk), F(1.0))
            vs = np.where(grow, F(1.0), np.exp(sk - m))
            out = out * ms
            total = total * ms + vs
        inv = np.where(total == 0, F(0.0), F(1.0) / total)
    return (out * inv).astype(np.float64)
