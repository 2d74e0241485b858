"""The 256-element super-block types Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_K.

Each ``quantize_*`` takes a C-contiguous float32 array of shape ``(n_blocks, 256)`` and returns the blocks'
bytes (``(n_blocks, type_size)``), equal to ggml's ``quantize_row_*_ref`` (the path ``ggml_quantize_chunk``
takes without an importance matrix). Each ``dequantize_*`` equals ggml's ``dequantize_row_*``.
"""

from __future__ import annotations

import numpy as np

from ._common import (
    F32,
    GROUP_MAX_EPS,
    F32Array,
    I32Array,
    U8Array,
    f32_to_f16_bits,
    first_absmax,
    le_bytes_u16,
    nearest_int,
    read_f16,
    round_f16,
    seq_sum,
)
from ._search import make_q3_quants_rmse, make_qkx2_quants, make_qx_quants_rmse1

QK_K = 256


def _subblocks(x: F32Array, n: int) -> F32Array:
    """``(NB, 256)`` → transposed sub-blocks ``(n, NB*256/n)`` (column ``b`` is sub-block ``b``)."""
    return np.ascontiguousarray(x.reshape(-1, n).T)


def _unsub(lt: I32Array, nb: int) -> I32Array:
    """Inverse of :func:`_subblocks` for quant arrays: ``(n, B)`` → ``(NB, 256)``."""
    return np.ascontiguousarray(lt.T).reshape(nb, QK_K)


def _positive_max(v: F32Array) -> F32Array:
    """``m = 0; if (v[j] > m) m = v[j];`` along axis 1 (NaNs are skipped, as the comparison is false)."""
    m = np.fmax.reduce(v, axis=1)
    return np.where(m > 0, m, F32(0.0)).astype(np.float32)


def _requant(x: F32Array, big_l: I32Array, d: F32Array, dm: F32Array | None, lo: int, hi: int) -> I32Array:
    """The final pass: ``if (d) L = clamp(nearest_int((x + dm)/d))`` per sub-block (``dm`` None: ``x/d``).

    ``x`` and ``big_l`` are ``(NB, S, n)``; ``d`` and ``dm`` are ``(NB, S)``.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        num = x if dm is None else x + dm[..., None]
        q = np.minimum(np.maximum(nearest_int(num / d[..., None]), np.int32(lo)), np.int32(hi))
    return np.where((d != 0)[..., None], q, big_l)


def _pack_2bit(big_l: I32Array) -> U8Array:
    """``qs[j/4 + l] = L[j+l] | L[j+l+32] << 2 | L[j+l+64] << 4 | L[j+l+96] << 6`` for ``j`` in 0, 128."""
    q = big_l.reshape(-1, 2, 4, 32)
    packed = q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)
    return (packed & 0xFF).astype(np.uint8).reshape(-1, 64)


def _f16(v: F32Array) -> U8Array:
    return le_bytes_u16(f32_to_f16_bits(v))


# ---------------------------------------------------------------- Q2_K


def quantize_q2_k(x: F32Array) -> U8Array:
    """``quantize_row_q2_K_ref``: 16 sub-blocks of 16, 2-bit quants, 4-bit scales and mins (``make_qkx2_quants``)."""
    nb = x.shape[0]
    xs = _subblocks(x, 16)
    lt, scales, mins = make_qkx2_quants(xs, np.abs(xs), 3, -0.5, 0.1, 15, True)
    big_l = _unsub(lt, nb).reshape(nb, 16, 16)
    scales = scales.reshape(nb, 16)
    mins = mins.reshape(nb, 16)
    q4scale = F32(15.0)
    max_scale = _positive_max(scales)
    max_min = _positive_max(mins)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        has_scale = max_scale > 0
        sc = np.where(has_scale[:, None], nearest_int((q4scale / max_scale)[:, None] * scales), 0) & 0xFF
        d = np.where(has_scale, max_scale / q4scale, F32(0.0)).astype(np.float32)
        has_min = max_min > 0
        ml = nearest_int((q4scale / max_min)[:, None] * mins)
        sc = np.where(has_min[:, None], (sc | (ml << 4)) & 0xFF, sc)
        dmin = np.where(has_min, max_min / q4scale, F32(0.0)).astype(np.float32)
    dd = round_f16(d)[:, None] * (sc & 0xF).astype(np.float32)
    dm = round_f16(dmin)[:, None] * (sc >> 4).astype(np.float32)
    final_l = _requant(x.reshape(nb, 16, 16), big_l, dd, dm, 0, 3).reshape(nb, QK_K)
    out = np.empty((nb, 84), dtype=np.uint8)
    out[:, 0:16] = sc.astype(np.uint8)
    out[:, 16:80] = _pack_2bit(final_l)
    out[:, 80:82] = _f16(d)
    out[:, 82:84] = _f16(dmin)
    return out


def _unpack_2bit(qs: U8Array) -> I32Array:
    """Inverse of :func:`_pack_2bit`: ``(NB, 64)`` bytes → ``(NB, 256)`` values 0..3."""
    q = qs.astype(np.int32).reshape(-1, 2, 1, 32)
    shifts = np.array([0, 2, 4, 6], dtype=np.int32).reshape(1, 1, 4, 1)
    return ((q >> shifts) & 3).reshape(-1, QK_K)


def dequantize_q2_k(b: U8Array) -> F32Array:
    """``dequantize_row_q2_K``: ``(d * (sc & 15)) * q - dmin * (sc >> 4)``."""
    nb = b.shape[0]
    sc = b[:, 0:16].astype(np.int32)
    d = read_f16(b, 80)[:, None]
    dmin = read_f16(b, 82)[:, None]
    dl = (d * (sc & 0xF).astype(np.float32))[..., None]
    ml = (dmin * (sc >> 4).astype(np.float32))[..., None]
    q = _unpack_2bit(b[:, 16:80]).reshape(nb, 16, 16).astype(np.float32)
    return (dl * q - ml).reshape(nb, QK_K)


# ---------------------------------------------------------------- Q3_K


def _pack_q3_scales(ls: I32Array) -> U8Array:
    """16 six-bit values → 12 bytes: low nibbles in bytes 0-7, high 2-bit pairs in bytes 8-11."""
    nb = ls.shape[0]
    out = np.empty((nb, 12), dtype=np.uint8)
    out[:, 0:8] = ((ls[:, 0:8] & 0xF) | ((ls[:, 8:16] & 0xF) << 4)).astype(np.uint8)
    hi = (ls >> 4).reshape(nb, 4, 4)  # [j // 4, j % 4]
    out[:, 8:12] = (hi[:, 0] | (hi[:, 1] << 2) | (hi[:, 2] << 4) | (hi[:, 3] << 6)).astype(np.uint8)
    return out


def _unpack_q3_scales(s: U8Array) -> I32Array:
    """Inverse of :func:`_pack_q3_scales` (``(NB, 12)`` → ``(NB, 16)`` values 0..63)."""
    s32 = s.astype(np.int32)
    low = np.concatenate([s32[:, 0:8] & 0xF, s32[:, 0:8] >> 4], axis=1)
    j = np.arange(16)
    high = (s32[:, 8 + j % 4] >> (2 * (j // 4))) & 3
    return low | (high << 4)


def quantize_q3_k(x: F32Array) -> U8Array:
    """``quantize_row_q3_K_ref``: 16 sub-blocks of 16, 3-bit quants (``make_q3_quants``), 6-bit signed scales."""
    nb = x.shape[0]
    xs = _subblocks(x, 16)
    lt, scales = make_q3_quants_rmse(xs, 4)
    big_l = _unsub(lt, nb).reshape(nb, 16, 16)
    scales = scales.reshape(nb, 16)
    _, max_scale = first_absmax(scales, axis=1)
    has = max_scale != 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = F32(-32.0) / max_scale
        ls = nearest_int(iscale[:, None] * scales).astype(np.int8).astype(np.int32)
        ls = np.minimum(np.maximum(ls, -32), 31) + 32
        ls = np.where(has[:, None], ls, 0)
        d = np.where(has, F32(1.0) / iscale, F32(0.0)).astype(np.float32)
    dd = round_f16(d)[:, None] * (ls - 32).astype(np.float32)
    final_l = _requant(x.reshape(nb, 16, 16), big_l - 4, dd, None, -4, 3).reshape(nb, QK_K) + 4
    high = (final_l > 3).reshape(nb, 8, 32).astype(np.int32)
    hmask = np.zeros((nb, 32), dtype=np.int32)
    for k in range(8):
        hmask |= high[:, k] << k
    out = np.empty((nb, 110), dtype=np.uint8)
    out[:, 0:32] = hmask.astype(np.uint8)
    out[:, 32:96] = _pack_2bit(np.where(final_l > 3, final_l - 4, final_l))
    out[:, 96:108] = _pack_q3_scales(ls)
    out[:, 108:110] = _f16(d)
    return out


def dequantize_q3_k(b: U8Array) -> F32Array:
    """``dequantize_row_q3_K``: ``(d * (sc - 32)) * (q - (hbit ? 0 : 4))``."""
    nb = b.shape[0]
    low = (b[:, 32:96].reshape(nb, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & 3
    high = (b[:, 0:32].reshape(nb, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
    q = (low.reshape(nb, QK_K) | (high.reshape(nb, QK_K) << 2)).view(np.int8) - np.int8(4)
    sc = _unpack_q3_scales(b[:, 96:108])
    d = read_f16(b, 108)[:, None]
    dl = (d * (sc - 32).astype(np.float32))[..., None]
    return (dl * q.reshape(nb, 16, 16).astype(np.float32)).reshape(nb, QK_K)


# ---------------------------------------------------------------- Q4_K / Q5_K


def _pack_k4_scales(ls: I32Array, lm: I32Array) -> U8Array:
    """Eight 6-bit scales and mins → the 12 bytes that ``get_scale_min_k4`` reads."""
    nb = ls.shape[0]
    out = np.empty((nb, 12), dtype=np.int32)
    out[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    out[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    return (out & 0xFF).astype(np.uint8)


def unpack_k4_scales(s: U8Array) -> tuple[I32Array, I32Array]:
    """``get_scale_min_k4`` for j = 0..7: ``(NB, 12)`` → scales ``(NB, 8)`` and mins ``(NB, 8)``."""
    q = s.astype(np.int32)
    sc = np.concatenate([q[:, 0:4] & 63, (q[:, 8:12] & 0xF) | ((q[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([q[:, 4:8] & 63, (q[:, 8:12] >> 4) | ((q[:, 4:8] >> 6) << 4)], axis=1)
    return sc, m


def _quantize_k45(x: F32Array, nmax: int, rmin: float, nstep: int) -> tuple[I32Array, U8Array, F32Array, F32Array]:
    """Shared part of Q4_K and Q5_K: quants ``(NB, 256)``, packed scales, ``d`` and ``dmin``."""
    nb = x.shape[0]
    xs = _subblocks(x, 32)
    with np.errstate(over="ignore", invalid="ignore"):
        av_x = np.sqrt(seq_sum(xs * xs) / F32(32.0))
        weights = av_x + np.abs(xs)
    lt, scales, mins = make_qkx2_quants(xs, weights, nmax, rmin, 0.1, nstep, False)
    big_l = _unsub(lt, nb).reshape(nb, 8, 32)
    scales = scales.reshape(nb, 8)
    mins = mins.reshape(nb, 8)
    max_scale = _positive_max(scales)
    max_min = _positive_max(mins)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv_scale = np.where(max_scale > 0, F32(63.0) / max_scale, F32(0.0)).astype(np.float32)
        inv_min = np.where(max_min > 0, F32(63.0) / max_min, F32(0.0)).astype(np.float32)
        ls = np.minimum(nearest_int(inv_scale[:, None] * scales) & 0xFF, 63)
        lm = np.minimum(nearest_int(inv_min[:, None] * mins) & 0xFF, 63)
        d = (max_scale / F32(63.0)).astype(np.float32)
        dmin = (max_min / F32(63.0)).astype(np.float32)
    dd = round_f16(d)[:, None] * ls.astype(np.float32)
    dm = round_f16(dmin)[:, None] * lm.astype(np.float32)
    final_l = _requant(x.reshape(nb, 8, 32), big_l, dd, dm, 0, nmax).reshape(nb, QK_K)
    return final_l, _pack_k4_scales(ls, lm), d, dmin


def quantize_q4_k(x: F32Array) -> U8Array:
    """``quantize_row_q4_K_ref``: 8 sub-blocks of 32, 4-bit quants, 6-bit scales and mins."""
    nb = x.shape[0]
    big_l, scales, d, dmin = _quantize_k45(x, 15, -1.0, 20)
    q = big_l.reshape(nb, 4, 2, 32)
    out = np.empty((nb, 144), dtype=np.uint8)
    out[:, 0:2] = _f16(d)
    out[:, 2:4] = _f16(dmin)
    out[:, 4:16] = scales
    out[:, 16:144] = (q[:, :, 0] | (q[:, :, 1] << 4)).astype(np.uint8).reshape(nb, 128)
    return out


def quantize_q5_k(x: F32Array) -> U8Array:
    """``quantize_row_q5_K_ref``: 8 sub-blocks of 32, 5-bit quants, 6-bit scales and mins."""
    nb = x.shape[0]
    big_l, scales, d, dmin = _quantize_k45(x, 31, -0.5, 15)
    q = big_l.reshape(nb, 4, 2, 32)
    high = (q >> 4) & 1  # [chunk c, half h] -> bit 2c + h of qh
    qh = np.zeros((nb, 32), dtype=np.int32)
    for c in range(4):
        qh |= (high[:, c, 0] << (2 * c)) | (high[:, c, 1] << (2 * c + 1))
    out = np.empty((nb, 176), dtype=np.uint8)
    out[:, 0:2] = _f16(d)
    out[:, 2:4] = _f16(dmin)
    out[:, 4:16] = scales
    out[:, 16:48] = qh.astype(np.uint8)
    out[:, 48:176] = ((q[:, :, 0] & 0xF) | ((q[:, :, 1] & 0xF) << 4)).astype(np.uint8).reshape(nb, 128)
    return out


def _dequantize_k45(b: U8Array, q: I32Array) -> F32Array:
    nb = b.shape[0]
    d = read_f16(b, 0)[:, None]
    dmin = read_f16(b, 2)[:, None]
    sc, m = unpack_k4_scales(b[:, 4:16])
    d1 = (d * sc.astype(np.float32))[..., None]
    m1 = (dmin * m.astype(np.float32))[..., None]
    return (d1 * q.reshape(nb, 8, 32).astype(np.float32) - m1).reshape(nb, QK_K)


def dequantize_q4_k(b: U8Array) -> F32Array:
    """``dequantize_row_q4_K``: ``(d * sc) * q - dmin * m``."""
    nb = b.shape[0]
    qs = b[:, 16:144].astype(np.int32).reshape(nb, 4, 1, 32)
    q = (qs >> np.array([0, 4], dtype=np.int32).reshape(1, 1, 2, 1)) & 0xF
    return _dequantize_k45(b, q.reshape(nb, QK_K))


def dequantize_q5_k(b: U8Array) -> F32Array:
    """``dequantize_row_q5_K``: ``(d * sc) * (q + 16*hbit) - dmin * m``."""
    nb = b.shape[0]
    qh = b[:, 16:48].astype(np.int32).reshape(nb, 1, 1, 32)
    qs = b[:, 48:176].astype(np.int32).reshape(nb, 4, 1, 32)
    low = (qs >> np.array([0, 4], dtype=np.int32).reshape(1, 1, 2, 1)) & 0xF
    bit = np.arange(8, dtype=np.int32).reshape(1, 4, 2, 1)
    q = low | (((qh >> bit) & 1) << 4)
    return _dequantize_k45(b, q.reshape(nb, QK_K))


# ---------------------------------------------------------------- Q6_K


def quantize_q6_k(x: F32Array) -> U8Array:
    """``quantize_row_q6_K_ref``: 16 sub-blocks of 16, 6-bit quants (``make_qx_quants``), 8-bit scales."""
    nb = x.shape[0]
    xs = _subblocks(x, 16)
    lt, scales = make_qx_quants_rmse1(xs, 32)
    big_l = _unsub(lt, nb).reshape(nb, 16, 16)
    scales = scales.reshape(nb, 16)
    max_abs, max_scale = first_absmax(scales, axis=1)
    zero = max_abs < GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = F32(-128.0) / max_scale
        d = (F32(1.0) / iscale).astype(np.float32)
        sc = np.minimum(127, nearest_int(iscale[:, None] * scales)).astype(np.int8).astype(np.int32)
    dd = round_f16(d)[:, None] * sc.astype(np.float32)
    final_l = _requant(x.reshape(nb, 16, 16), big_l - 32, dd, None, -32, 31).reshape(nb, QK_K) + 32
    q = final_l.reshape(nb, 2, 4, 32)  # [half h, quarter k, l]
    ql = np.empty((nb, 2, 2, 32), dtype=np.int32)
    ql[:, :, 0] = (q[:, :, 0] & 0xF) | ((q[:, :, 2] & 0xF) << 4)
    ql[:, :, 1] = (q[:, :, 1] & 0xF) | ((q[:, :, 3] & 0xF) << 4)
    qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)
    out = np.empty((nb, 210), dtype=np.uint8)
    out[:, 0:128] = (ql & 0xFF).astype(np.uint8).reshape(nb, 128)
    out[:, 128:192] = (qh & 0xFF).astype(np.uint8).reshape(nb, 64)
    out[:, 192:208] = sc.astype(np.int8).view(np.uint8)
    out[:, 208:210] = _f16(d)
    out[zero] = 0
    return out


def dequantize_q6_k(b: U8Array) -> F32Array:
    """``dequantize_row_q6_K``: ``(d * sc) * (q - 32)``."""
    nb = b.shape[0]
    ql = b[:, 0:128].astype(np.int32).reshape(nb, 2, 2, 1, 32)  # [h, half of ql, nibble, l]
    qh = b[:, 128:192].astype(np.int32).reshape(nb, 2, 1, 32)
    low = (ql >> np.array([0, 4], dtype=np.int32).reshape(1, 1, 1, 2, 1)) & 0xF  # [h, k&1, k>>1, l]
    low = low.transpose(0, 1, 3, 2, 4).reshape(nb, 2, 4, 32)  # quarter k = 2*(k>>1) + (k&1)
    high = (qh >> (2 * np.arange(4, dtype=np.int32)).reshape(1, 1, 4, 1)) & 3
    q = ((low | (high << 4)) - 32).reshape(nb, 16, 16).astype(np.float32)
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(np.float32)
    d = read_f16(b, 208)[:, None]
    return ((d * sc)[..., None] * q).reshape(nb, QK_K)


# ---------------------------------------------------------------- Q8_K


def quantize_q8_k(x: F32Array) -> U8Array:
    """``quantize_row_q8_K_ref``: ``q = min(127, nearest_int(-127/max * x))``, float32 ``d``, 16 ``bsums``.

    ggml leaves ``bsums`` of an all-zero block unwritten (whatever the buffer held); here they are zero.
    """
    nb = x.shape[0]
    amax, vmax = first_absmax(x, axis=1)
    zero = amax == 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = F32(-127.0) / vmax
        q = np.minimum(127, nearest_int(iscale[:, None] * x)).astype(np.int8)
        d = (F32(1.0) / iscale).astype(np.float32)
    q[zero] = 0
    d[zero] = 0
    bsums = q.astype(np.int32).reshape(nb, 16, 16).sum(axis=2).astype(np.int16)
    out = np.empty((nb, 292), dtype=np.uint8)
    out[:, 0:4] = np.ascontiguousarray(d.astype("<f4")).view(np.uint8).reshape(nb, 4)
    out[:, 4:260] = q.view(np.uint8)
    out[:, 260:292] = np.ascontiguousarray(bsums.astype("<i2")).view(np.uint8).reshape(nb, 32)
    return out


def dequantize_q8_k(b: U8Array) -> F32Array:
    """``dequantize_row_q8_K``: ``d * q`` with a float32 ``d``."""
    d = np.ascontiguousarray(b[:, 0:4]).view("<f4").astype(np.float32)
    return d * np.ascontiguousarray(b[:, 4:260]).view(np.int8).astype(np.float32)
