"""Dequantization of the other grid-free types: IQ4_NL, IQ4_XS, MXFP4, NVFP4, TQ1_0, TQ2_0 and Q1_0; IQ4_NL's
reference quantizer.

Each ``dequantize_*`` maps ``(n_blocks, type_size)`` bytes to ``(n_blocks, block_size)`` float32, equal to ggml's
``dequantize_row_*``. (The IQ1/IQ2/IQ3 types need ggml's large lattice tables and are not implemented.)
"""

from __future__ import annotations

import numpy as np

from ._common import F32, F32Array, I32Array, U8Array, f32_to_f16_bits, first_absmax, le_bytes_u16, read_f16, seq_sum

#: ``kvalues_iq4nl`` of ggml-common.h
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)
#: ``kvalues_mxfp4``: twice the E2M1 values (the scale carries the factor 1/2)
KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def _nibbles(qs: U8Array) -> tuple[I32Array, I32Array]:
    q = qs.astype(np.int32)
    return q & 0x0F, q >> 4


def dequantize_iq4_nl(b: U8Array) -> F32Array:
    """``dequantize_row_iq4_nl`` (32 per block): ``d * kvalues_iq4nl[q]``."""
    d = read_f16(b, 0)[:, None]
    lo, hi = _nibbles(b[:, 2:18])
    return np.concatenate([d * KVALUES_IQ4NL[lo], d * KVALUES_IQ4NL[hi]], axis=1)


def _nearest_iq4nl(x: F32Array) -> I32Array:
    """ggml's ``best_index_int8(16, kvalues_iq4nl, x)``: the nearest grid value's index, a tie to the upper one."""
    v = KVALUES_IQ4NL
    mu = np.clip(np.searchsorted(v, x, side="right"), 1, 15)
    lower = (x - v[mu - 1]) < (v[mu] - x)
    idx = np.where(lower, mu - 1, mu)
    return np.where(x <= v[0], 0, np.where(x >= v[15], 15, idx)).astype(np.int32)


def quantize_iq4_nl(x: F32Array) -> U8Array:
    """``quantize_row_iq4_nl_ref`` (ggml-cpu's ``from_float`` for IQ4_NL; no importance weights, ``ntry = -1``):
    indices of ``x / (max/-127)`` on the grid, then ``d = Σ w·q·x / Σ w·q²`` with ``w = x²`` (float32, in order).

    A block below 1e-15 in magnitude gets ``d = 0`` and indices 0 (ggml leaves the previous block's there; either
    dequantizes to zeros)."""
    amax, vmax = first_absmax(x, axis=1)
    live = amax >= F32(1e-15)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d0 = np.where(live, vmax / F32(-127.0), F32(1.0)).astype(np.float32)
        inv = (F32(1.0) / d0).astype(np.float32)
        idx = _nearest_iq4nl((inv[:, None] * x).astype(np.float32))
        q = KVALUES_IQ4NL[idx]
        wq = (x * x) * q  # (w·q), as C evaluates w*q*x left to right
        sumqx, sumq2 = seq_sum((wq * x).T), seq_sum((wq * q).T)
        d = np.where(sumq2 > 0, sumqx / sumq2, F32(0.0)).astype(np.float32)
    d = np.where(live, d, F32(0.0)).astype(np.float32)
    idx = np.where(live[:, None], idx, 0)
    out = np.empty((x.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = le_bytes_u16(f32_to_f16_bits(d))
    out[:, 2:] = (idx[:, :16] | (idx[:, 16:] << 4)).astype(np.uint8)
    return out


def dequantize_iq4_xs(b: U8Array) -> F32Array:
    """``dequantize_row_iq4_xs`` (256 per block): 8 groups of 32 with 6-bit scales, ``(d*(ls-32)) * kvalues[q]``."""
    nb = b.shape[0]
    d = read_f16(b, 0)[:, None]
    scales_h = np.ascontiguousarray(b[:, 2:4]).view("<u2")[:, 0].astype(np.int32)[:, None]
    scales_l = b[:, 4:8].astype(np.int32)
    ib = np.arange(8)
    ls = ((scales_l[:, ib // 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4)
    dl = (d * (ls - 32).astype(np.float32))[..., None]
    lo, hi = _nibbles(b[:, 8:136].reshape(nb, 8, 16))
    vals = np.concatenate([KVALUES_IQ4NL[lo], KVALUES_IQ4NL[hi]], axis=2)
    return (dl * vals).reshape(nb, 256)


def e8m0_to_f32_half(e: U8Array) -> F32Array:
    """``GGML_E8M0_TO_FP32_HALF``: ``2**(e - 128)`` as float32 (subnormal for ``e < 2``)."""
    e32 = e.astype(np.uint32)
    bits = np.where(e32 < 2, np.uint32(0x00200000) << e32, (e32 - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


def dequantize_mxfp4(b: U8Array) -> F32Array:
    """``dequantize_row_mxfp4`` (32 per block): ``kvalues_mxfp4[q] * 2**(e-128)``."""
    d = e8m0_to_f32_half(b[:, 0])[:, None]
    lo, hi = _nibbles(b[:, 1:17])
    return np.concatenate([KVALUES_MXFP4[lo] * d, KVALUES_MXFP4[hi] * d], axis=1)


def ue4m3_to_f32_half(x: U8Array) -> F32Array:
    """``ggml_ue4m3_to_fp32``: unsigned E4M3 (bias 7, bit 7 ignored) times 1/2; ``0x00`` and ``0x7f`` give 0."""
    v = x.astype(np.int32)
    exp = (v >> 3) & 0xF
    man = (v & 7).astype(np.float32)
    normal = np.ldexp(np.float32(1.0) + man / np.float32(8.0), exp - 7).astype(np.float32)
    sub = np.ldexp(man, -9).astype(np.float32)
    raw = np.where(exp == 0, sub, normal)
    return np.where((v == 0) | (v == 0x7F), np.float32(0.0), raw * np.float32(0.5)).astype(np.float32)


def dequantize_nvfp4(b: U8Array) -> F32Array:
    """``dequantize_row_nvfp4`` (64 per block): 4 sub-blocks of 16, ``kvalues_mxfp4[q] * ue4m3(d[s])``."""
    nb = b.shape[0]
    d = ue4m3_to_f32_half(b[:, 0:4])[..., None]
    lo, hi = _nibbles(b[:, 4:36].reshape(nb, 4, 8))
    vals = np.concatenate([KVALUES_MXFP4[lo], KVALUES_MXFP4[hi]], axis=2)
    return (vals * d).reshape(nb, 64)


def _ternary(q: I32Array, n: I32Array) -> I32Array:
    """TQ1_0's base-3 digits ``n`` of packed bytes: ``(uint8)(q * 3**n) * 3 >> 8``."""
    return (((q * np.power(3, n)) & 0xFF) * 3) >> 8


def dequantize_tq1_0(b: U8Array) -> F32Array:
    """``dequantize_row_tq1_0`` (256 per block): base-3 packed ternary ``(t - 1) * d``."""
    nb = b.shape[0]
    qs = b[:, 0:48].astype(np.int32)
    qh = b[:, 48:52].astype(np.int32)
    d = read_f16(b, 52)[:, None]
    digits5 = np.arange(5, dtype=np.int32)[None, :, None]
    digits4 = np.arange(4, dtype=np.int32)[None, :, None]
    parts = [_ternary(qs[:, None, 0:32], digits5).reshape(nb, 160)]
    parts.append(_ternary(qs[:, None, 32:48], digits5).reshape(nb, 80))
    parts.append(_ternary(qh[:, None, :], digits4).reshape(nb, 16))
    t = np.concatenate(parts, axis=1)
    return (t - 1).astype(np.float32) * d


def dequantize_tq2_0(b: U8Array) -> F32Array:
    """``dequantize_row_tq2_0`` (256 per block): 2-bit ternary ``(q - 1) * d``."""
    nb = b.shape[0]
    qs = b[:, 0:64].astype(np.int32).reshape(nb, 2, 1, 32)
    d = read_f16(b, 64)[:, None]
    q = (qs >> (2 * np.arange(4, dtype=np.int32)).reshape(1, 1, 4, 1)) & 3
    return (q.reshape(nb, 256) - 1).astype(np.float32) * d


def dequantize_q1_0(b: U8Array) -> F32Array:
    """``dequantize_row_q1_0`` (128 per block): bit set → ``d``, clear → ``-d``."""
    nb = b.shape[0]
    d = read_f16(b, 0)[:, None]
    bits = np.unpackbits(b[:, 2:18], axis=1, bitorder="little").reshape(nb, 128)
    return np.where(bits != 0, d, -d).astype(np.float32)
