"""Plain float storage types: F32, F16 and BF16 (ggml's ``ggml_fp32_to_fp16`` / ``ggml_compute_fp32_to_bf16``)."""

from __future__ import annotations

import numpy as np

from ._common import F32Array, U8Array, U16Array, f32_to_f16_bits


def f32_to_bf16_bits(x: F32Array) -> U16Array:
    """ggml's f32 → bf16: round to nearest even (overflow → ±inf); a NaN keeps its top 16 bits, quiet bit set."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    is_nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    nan_bits = (u >> np.uint32(16)) | np.uint32(64)
    return np.where(is_nan, nan_bits, rounded).astype(np.uint16)


def bf16_bits_to_f32(h: U16Array) -> F32Array:
    """bf16 → f32: the 16 bits become the top half of the float32."""
    return (np.asarray(h, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def quantize_f32(x: F32Array) -> U8Array:
    """Rows of float32 as their little-endian bytes."""
    return np.ascontiguousarray(x, dtype="<f4").view(np.uint8)


def quantize_f16(x: F32Array) -> U8Array:
    """Rows of float32 rounded to f16 (nearest even, overflow → inf, NaN → ±0x7e00) as little-endian bytes."""
    return np.ascontiguousarray(f32_to_f16_bits(x).astype("<u2")).view(np.uint8)


def quantize_bf16(x: F32Array) -> U8Array:
    """Rows of float32 rounded to bf16 with ggml's rule, as little-endian bytes."""
    return np.ascontiguousarray(f32_to_bf16_bits(x).astype("<u2")).view(np.uint8)


def dequantize_f32(b: U8Array) -> F32Array:
    """Little-endian float32 bytes → float32 (a copy)."""
    return np.ascontiguousarray(b).view("<f4").astype(np.float32)


def dequantize_f16(b: U8Array) -> F32Array:
    """Little-endian f16 bytes → float32 (exact)."""
    return np.ascontiguousarray(b).view("<f2").astype(np.float32)


def dequantize_bf16(b: U8Array) -> F32Array:
    """Little-endian bf16 bytes → float32 (exact)."""
    return bf16_bits_to_f32(np.ascontiguousarray(b).view("<u2"))
