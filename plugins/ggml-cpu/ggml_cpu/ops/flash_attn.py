"""FLASH_ATTN_EXT with the numerics of ggml's reference CPU kernel (one query row at a time, online softmax).

For every query row ggml computes ``s = q·k`` with q first rounded to K's dot type (f16 for f16 K), scales it,
applies the soft-cap ``cap·tanh(s·scale/cap)`` and adds ``slope·mask``; then it runs an online softmax over the
KV positions in order. With **f16 V** the running sum ``Σ exp(s - M)·v`` is kept in an **f16** buffer: every step
rescales it (``f16(f32(acc)·ms)``) and adds ``v·vs`` with one fused multiply-add rounded to f32 then to f16. That
loop is reproduced step by step here (vectorised over all rows; positions masked for every row are skipped, as
ggml skips them), because its rounding is visible (≈1e-3). ``ms`` and ``vs`` are C's scalar ``expf`` (float64
here, rounded once; glibc's is within 0.502 ulp of that, numpy's float32 ``exp`` is not) and the running sum
``S = S·ms + vs`` is one fused multiply-add, as GCC contracts it on FMA targets. With f32
or quantized V the accumulator is f32 and a plain softmax gives the same values to float rounding. Sinks join the
denominator only. The result is permuted: ``ne = [Dv, n_head, n_batch, ne3]``.
"""

from __future__ import annotations

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.quants import can_dequantize
from ggml_cpu.ops._base import FLOAT_TYPES, KERNELS, Thunk, arr, f32
from ggml_cpu.ops.attention import alibi_slopes
from ggml_cpu.ops.matmul import VEC_DOT_TYPE, activations_as_dot_type

__all__ = ["attention_scores", "online_softmax_f16"]


def _group(x: np.ndarray, r3: int, r2: int) -> np.ndarray:
    """(n3, n2, ...) → (n3 / r3, r3, n2 / r2, r2, ...): query dims grouped by the K/V tensor they share."""
    n3, n2 = x.shape[:2]
    return x.reshape(n3 // r3, r3, n2 // r2, r2, *x.shape[2:])


def _bcast(y: np.ndarray) -> np.ndarray:
    """(k3, k2, ...) → (k3, 1, k2, 1, ...) so it broadcasts against :func:`_group`'s layout."""
    return y[:, None, :, None]


def attention_scores(q: np.ndarray, k: np.ndarray, k_type: GGMLType) -> np.ndarray:
    """``q·kᵀ`` per head with ggml's K/Q broadcasting: q (q3, H, N, D), k (k3, Hk, n_kv, D) → (q3, H, N, n_kv).

    q is rounded through K's dot type first (f16 K rounds q to f16, Q8_0 K quantizes q to Q8_0, ...).
    """
    qd = activations_as_dot_type(np.ascontiguousarray(q), k_type)
    r3, r2 = q.shape[0] // k.shape[0], q.shape[1] // k.shape[1]
    s = np.matmul(_group(qd, r3, r2), _bcast(k).swapaxes(-1, -2))
    return s.reshape(q.shape[0], q.shape[1], q.shape[2], k.shape[2])


def _weighted_values(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``p @ v`` per head: p (q3, H, N, n_kv), v (v3, Hv, n_kv, Dv) → (q3, H, N, Dv)."""
    r3, r2 = p.shape[0] // v.shape[0], p.shape[1] // v.shape[1]
    out = np.matmul(_group(p, r3, r2), _bcast(v))
    return out.reshape(*p.shape[:3], v.shape[-1])


def _expf(x: np.ndarray) -> np.ndarray:
    """C's ``expf`` of float32 arguments: evaluated in float64 and rounded once (glibc's is within 0.502 ulp)."""
    return np.exp(x.astype(np.float64)).astype(np.float32)


def online_softmax_f16(s: np.ndarray, v16: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ggml's online softmax with an f16 V accumulator, step by step over the KV positions.

    :param s: scores (q3, H, N, n_kv) float32, -inf where the mask removes a position (such steps are skipped)
    :param v16: values (v3, Hv, n_kv, Dv) float16
    :returns: (acc as float32 (q3, H, N, Dv), running max M (q3, H, N), running sum S (q3, H, N))
    """
    q3, n_head, n_q, _ = s.shape
    dv = v16.shape[-1]
    r3, r2 = q3 // v16.shape[0], n_head // v16.shape[1]
    acc = np.zeros((q3, n_head, n_q, dv), np.float16)
    big_m = np.full((q3, n_head, n_q), -np.inf, np.float32)
    big_s = np.zeros((q3, n_head, n_q), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        # positions masked out for every row change nothing (ggml skips them): the cache's unused cells
        for ic in np.flatnonzero((s != -np.inf).any(axis=(0, 1, 2))).tolist():
            sc = s[..., ic]
            live = sc != -np.inf
            new_max = live & (sc > big_m)
            ms = np.where(new_max, _expf(big_m - sc), np.float32(1.0)).astype(np.float32)
            vs = np.where(new_max | ~live, np.float32(1.0), _expf(sc - big_m)).astype(np.float32)
            big_m = np.where(new_max, sc, big_m)
            if new_max.any():  # acc = f16(f32(acc) · ms) where a new maximum appeared
                scaled = (acc.astype(np.float32) * ms[..., None]).astype(np.float16)
                acc = np.where(new_max[..., None], scaled, acc)
            # acc = f16(f32(fma(v, vs, acc))) on the rows that take this position
            v_row = np.repeat(np.repeat(v16[:, :, ic, :], r3, axis=0), r2, axis=1).astype(np.float64)  # (q3, H, Dv)
            fma = v_row[:, :, None, :] * vs[..., None].astype(np.float64) + acc.astype(np.float64)
            fma = fma.astype(np.float32)
            acc = np.where(live[..., None], fma.astype(np.float16), acc)
            # S = S·ms + vs, contracted to one fused multiply-add by the C compiler (float64 here, rounded once)
            fused = (big_s.astype(np.float64) * ms + vs).astype(np.float32)
            big_s = np.where(live, fused, big_s)
    return acc.astype(np.float32), big_m, big_s


def _flash_ok(node: Tensor) -> bool:
    q, k, v, mask = node.src[0], node.src[1], node.src[2], node.src[3]
    assert q is not None and k is not None and v is not None
    k_ok = k.type in VEC_DOT_TYPE and (not k.type.is_quantized or can_dequantize(k.type))
    v_ok = v.type in FLOAT_TYPES or (v.type.is_quantized and can_dequantize(v.type))
    return (
        q.type == GGMLType.F32
        and k_ok
        and v_ok
        and (mask is None or mask.type == GGMLType.F16)
        and node.type == GGMLType.F32
        and node.op_param_i32(3) in (0, 10)
    )


@KERNELS.kernel(GGMLOp.FLASH_ATTN_EXT, supports=_flash_ok)
def _bind_flash_attn_ext(node: Tensor) -> Thunk:
    q, k, v, mask, sinks = node.src[0], node.src[1], node.src[2], node.src[3], node.src[4]
    assert q is not None and k is not None and v is not None
    scale = np.float32(node.op_param_f32(0))
    max_bias = node.op_param_f32(1)
    softcap = np.float32(node.op_param_f32(2))
    if softcap != 0:
        scale = np.float32(scale / softcap)
    q3, n_head, n_q = q.ne[3], q.ne[2], q.ne[1]
    n_kv = k.ne[1]
    slopes = alibi_slopes(n_head, max_bias).reshape(1, -1, 1, 1)

    def run() -> None:
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            s = attention_scores(f32(q), f32(k), k.type) * scale  # (q3, H, N, n_kv)
            if softcap != 0:
                s = softcap * np.tanh(s)
            if mask is not None:
                m = f32(mask)[:, :, :n_q, :n_kv]
                m = np.tile(m, (q3 // mask.ne[3], n_head // mask.ne[2], 1, 1))
                s = s + slopes * m
            s = s.astype(np.float32)
            if v.type == GGMLType.F16:
                acc, big_m, big_s = online_softmax_f16(s, arr(v).astype(np.float16))
            else:
                big_m = s.max(axis=-1) if n_kv else np.full(s.shape[:3], -np.inf, np.float32)
                finite_m = np.where(big_m == -np.inf, np.float32(0.0), big_m)
                p = np.exp(s - finite_m[..., None]).astype(np.float32)
                big_s = p.sum(axis=-1, dtype=np.float32)
                acc = _weighted_values(p, f32(v)).astype(np.float32)
            if sinks is not None:
                sk = f32(sinks).reshape(1, -1, 1).astype(np.float32)
                grow = sk > big_m
                ms = np.where(grow, np.exp(big_m - sk), np.float32(1.0)).astype(np.float32)
                vs = np.where(grow, np.float32(1.0), np.exp(sk - big_m)).astype(np.float32)
                acc = acc * ms[..., None]
                big_s = big_s * ms + vs
            inv = np.where(big_s == 0, np.float32(0.0), np.float32(1.0) / np.where(big_s == 0, 1, big_s))
            out = (acc * inv.astype(np.float32)[..., None]).astype(np.float32)  # (q3, H, N, Dv)
        arr(node)[...] = out.transpose(0, 2, 1, 3)  # permuted: (q3, N, H, Dv)

    return run
