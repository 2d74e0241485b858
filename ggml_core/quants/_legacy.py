"""The 32-element block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1.

Each ``quantize_*`` takes a C-contiguous float32 array of shape ``(n_blocks, 32)`` and returns the blocks'
bytes, shape ``(n_blocks, type_size)``, equal to ggml's ``quantize_row_*_ref``. Each ``dequantize_*`` is the
inverse and equals ggml's ``dequantize_row_*``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ._common import (
    F32,
    F32Array,
    I32Array,
    U8Array,
    c_roundf,
    f32_to_f16_bits,
    f32_to_int_trunc,
    first_absmax,
    first_min_max,
    fold_absmax,
    le_bytes_u16,
    le_bytes_u32,
    read_f16,
    read_u32,
)

QK = 32
_HALF = QK // 2


def _inverse(d: F32Array) -> F32Array:
    """``d ? 1.0f/d : 0.0f``."""
    with np.errstate(divide="ignore"):
        return np.where(d != 0, F32(1.0) / np.where(d != 0, d, F32(1.0)), F32(0.0)).astype(np.float32)


def _to_int8(v: I32Array) -> I32Array:
    """C's conversion of an int to ``int8_t`` (keep the low byte, two's complement)."""
    return v.astype(np.int8).astype(np.int32)


def _pack_raw_nibbles(lo: I32Array, hi: I32Array) -> U8Array:
    """``(uint8_t)lo | (uint8_t)(hi << 4)``: the low value is *not* masked, exactly like ggml's Q4 packing."""
    return ((lo & 0xFF) | ((hi << 4) & 0xFF)).astype(np.uint8)


def _qh_bits(xi: I32Array) -> npt.NDArray[np.uint32]:
    """The fifth bits of 32 quants gathered into one uint32 (bit ``j`` = bit 4 of quant ``j``)."""
    bits = ((xi & 0x10) >> 4).astype(np.uint32)
    weights = np.left_shift(np.uint32(1), np.arange(QK, dtype=np.uint32))
    return (bits * weights).sum(axis=1, dtype=np.uint32)


def _minmax(x: F32Array) -> tuple[F32Array, F32Array]:
    """Block min and max (``min = FLT_MAX; max = -FLT_MAX`` then the two ``if``s of the C loop)."""
    return first_min_max(x, axis=1, sentinel=True)


def _f16_field(v: F32Array) -> U8Array:
    return le_bytes_u16(f32_to_f16_bits(v))


# ---------------------------------------------------------------- quantizers


def quantize_q4_0(x: F32Array) -> U8Array:
    """``quantize_row_q4_0_ref``: ``d = max/-8`` (max = signed value of largest magnitude), 4-bit offsets."""
    _, vmax = first_absmax(x, axis=1)
    d = vmax / F32(-8.0)
    inv = _inverse(d)
    q = np.minimum(15, _to_int8(f32_to_int_trunc(x * inv[:, None] + F32(8.5))))
    out = np.empty((x.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = _f16_field(d)
    out[:, 2:] = _pack_raw_nibbles(q[:, :_HALF], q[:, _HALF:])
    return out


def quantize_q4_1(x: F32Array) -> U8Array:
    """``quantize_row_q4_1_ref``: ``d = (max-min)/15``, ``m = min``, 4-bit quants of ``(x-min)/d``."""
    vmin, vmax = _minmax(x)
    with np.errstate(over="ignore", invalid="ignore"):
        d = (vmax - vmin) / F32(15.0)
        inv = _inverse(d)
        q = np.minimum(15, _to_int8(f32_to_int_trunc((x - vmin[:, None]) * inv[:, None] + F32(0.5))))
    out = np.empty((x.shape[0], 20), dtype=np.uint8)
    out[:, 0:2] = _f16_field(d)
    out[:, 2:4] = _f16_field(vmin)
    out[:, 4:] = _pack_raw_nibbles(q[:, :_HALF], q[:, _HALF:])
    return out


def quantize_q5_0(x: F32Array) -> U8Array:
    """``quantize_row_q5_0_ref``: ``d = max/-16``, 5-bit offsets split into nibbles and a 32-bit ``qh``."""
    _, vmax = first_absmax(x, axis=1)
    d = vmax / F32(-16.0)
    inv = _inverse(d)
    q = np.minimum(31, _to_int8(f32_to_int_trunc(x * inv[:, None] + F32(16.5)))) & 0xFF
    out = np.empty((x.shape[0], 22), dtype=np.uint8)
    out[:, 0:2] = _f16_field(d)
    out[:, 2:6] = le_bytes_u32(_qh_bits(q))
    out[:, 6:] = ((q[:, :_HALF] & 0x0F) | ((q[:, _HALF:] & 0x0F) << 4)).astype(np.uint8)
    return out


def quantize_q5_1(x: F32Array) -> U8Array:
    """``quantize_row_q5_1_ref``: ``d = (max-min)/31``, ``m = min``, 5-bit quants (no upper clamp, as in C)."""
    vmin, vmax = _minmax(x)
    with np.errstate(over="ignore", invalid="ignore"):
        d = (vmax - vmin) / F32(31.0)
        inv = _inverse(d)
        q = f32_to_int_trunc((x - vmin[:, None]) * inv[:, None] + F32(0.5)) & 0xFF
    out = np.empty((x.shape[0], 24), dtype=np.uint8)
    out[:, 0:2] = _f16_field(d)
    out[:, 2:4] = _f16_field(vmin)
    out[:, 4:8] = le_bytes_u32(_qh_bits(q))
    out[:, 8:] = ((q[:, :_HALF] & 0x0F) | ((q[:, _HALF:] & 0x0F) << 4)).astype(np.uint8)
    return out


def _q8_core(x: F32Array) -> tuple[F32Array, I32Array]:
    amax = fold_absmax(x)
    d = amax / F32(127.0)
    inv = _inverse(d)
    q = _to_int8(f32_to_int_trunc(c_roundf(x * inv[:, None])))
    return d, q


def quantize_q8_0(x: F32Array) -> U8Array:
    """``quantize_row_q8_0_ref``: ``d = amax/127``, ``q = roundf(x/d)`` (half away from zero)."""
    d, q = _q8_core(x)
    out = np.empty((x.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = _f16_field(d)
    out[:, 2:] = q.astype(np.int8).view(np.uint8)
    return out


def quantize_q8_1(x: F32Array) -> U8Array:
    """``quantize_row_q8_1_ref``: Q8_0's quants plus ``s = f16(d * sum(q))``."""
    d, q = _q8_core(x)
    s = q.sum(axis=1).astype(np.float32) * d
    out = np.empty((x.shape[0], 36), dtype=np.uint8)
    out[:, 0:2] = _f16_field(d)
    out[:, 2:4] = _f16_field(s)
    out[:, 4:] = q.astype(np.int8).view(np.uint8)
    return out


# ---------------------------------------------------------------- dequantizers


def _nibbles(qs: U8Array) -> tuple[I32Array, I32Array]:
    q = qs.astype(np.int32)
    return q & 0x0F, q >> 4


def _join(lo: F32Array, hi: F32Array) -> F32Array:
    return np.concatenate([lo, hi], axis=1)


def dequantize_q4_0(b: U8Array) -> F32Array:
    """``dequantize_row_q4_0``: ``(q - 8) * d``."""
    d = read_f16(b, 0)[:, None]
    lo, hi = _nibbles(b[:, 2:18])
    return _join((lo - 8).astype(np.float32) * d, (hi - 8).astype(np.float32) * d)


def dequantize_q4_1(b: U8Array) -> F32Array:
    """``dequantize_row_q4_1``: ``q * d + m``."""
    d = read_f16(b, 0)[:, None]
    m = read_f16(b, 2)[:, None]
    lo, hi = _nibbles(b[:, 4:20])
    return _join(lo.astype(np.float32) * d + m, hi.astype(np.float32) * d + m)


def _fifth_bits(b: U8Array, offset: int) -> I32Array:
    qh = read_u32(b, offset)[:, None]
    return (((qh >> np.arange(QK, dtype=np.uint32)) & np.uint32(1)) << np.uint32(4)).astype(np.int32)


def dequantize_q5_0(b: U8Array) -> F32Array:
    """``dequantize_row_q5_0``: ``(q - 16) * d`` with the fifth bit from ``qh``."""
    d = read_f16(b, 0)[:, None]
    high = _fifth_bits(b, 2)
    lo, hi = _nibbles(b[:, 6:22])
    q = np.concatenate([lo, hi], axis=1) | high
    return (q - 16).astype(np.float32) * d


def dequantize_q5_1(b: U8Array) -> F32Array:
    """``dequantize_row_q5_1``: ``q * d + m`` with the fifth bit from ``qh``."""
    d = read_f16(b, 0)[:, None]
    m = read_f16(b, 2)[:, None]
    high = _fifth_bits(b, 4)
    lo, hi = _nibbles(b[:, 8:24])
    q = np.concatenate([lo, hi], axis=1) | high
    return q.astype(np.float32) * d + m


def dequantize_q8_0(b: U8Array) -> F32Array:
    """``dequantize_row_q8_0``: ``q * d``."""
    d = read_f16(b, 0)[:, None]
    return np.ascontiguousarray(b[:, 2:34]).view(np.int8).astype(np.float32) * d


def dequantize_q8_1(b: U8Array) -> F32Array:
    """Q8_1 has no ``to_float`` in ggml; this is the obvious ``q * d`` (the stored sum ``s`` is ignored)."""
    d = read_f16(b, 0)[:, None]
    return np.ascontiguousarray(b[:, 4:36]).view(np.int8).astype(np.float32) * d


__all__ = [
    "dequantize_q4_0",
    "dequantize_q4_1",
    "dequantize_q5_0",
    "dequantize_q5_1",
    "dequantize_q8_0",
    "dequantize_q8_1",
    "quantize_q4_0",
    "quantize_q4_1",
    "quantize_q5_0",
    "quantize_q5_1",
    "quantize_q8_0",
    "quantize_q8_1",
]
