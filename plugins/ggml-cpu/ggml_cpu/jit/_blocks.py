"""Field readers shared by the block kernels (inlined by numba): f16 scales, 32-bit masks, K-quant scales."""

from __future__ import annotations

from typing import Any

import numpy as np

from ggml_cpu.jit import _jit
from ggml_cpu.jit._jit import inline

__all__ = ["f16_at", "f16_bits", "f32_bits", "f32_from_bits", "scale_min_k4", "u32_at"]


@inline
def f16_at(row: np.ndarray, o: int, lut: np.ndarray) -> float:  # pragma: no cover - compiled
    """The little-endian f16 at ``row[o:o+2]`` as float32 (through the 65536-entry table ``lut``)."""
    return lut[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)]


@inline
def u32_at(row: np.ndarray, o: int) -> int:  # pragma: no cover - compiled
    """The little-endian uint32 at ``row[o:o+4]``."""
    return np.int64(row[o]) | (np.int64(row[o + 1]) << 8) | (np.int64(row[o + 2]) << 16) | (np.int64(row[o + 3]) << 24)


@inline
def scale_min_k4(row: np.ndarray, o: int, j: int) -> tuple[int, int]:  # pragma: no cover - compiled
    """Scale and min of sub-block ``j`` from the 12 packed bytes at ``row[o:o+12]`` (ggml's ``get_scale_min_k4``)."""
    if j < 4:
        return np.int64(row[o + j]) & 63, np.int64(row[o + 4 + j]) & 63
    sc = (np.int64(row[o + 4 + j]) & 15) | ((np.int64(row[o + j - 4]) >> 6) << 4)
    mn = (np.int64(row[o + 4 + j]) >> 4) | ((np.int64(row[o + j]) >> 6) << 4)
    return sc, mn


def _make_f32_bits() -> Any:
    """``f32_bits(v)``: the IEEE bits of a float32 as uint32 (an LLVM bitcast; numpy's ``view`` outside numba)."""
    if not _jit.numba_loaded():
        return lambda v: int(np.float32(v).view(np.uint32))
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    def typer(typingctx: Any, v: Any) -> Any:
        if v != types.float32:
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.bitcast(args[0], ir.IntType(32))

        return types.uint32(v), codegen

    return intrinsic(typer)


#: the bits of a float32 value (compiled: a bitcast)
f32_bits: Any = _make_f32_bits()


def _make_f32_from_bits() -> Any:
    """``f32_from_bits(bits)``: the float32 whose IEEE bits are the int32 ``bits`` (the inverse of :data:`f32_bits`)."""
    if not _jit.numba_loaded():
        return lambda bits: np.float32(np.int32(bits).view(np.float32))
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    def typer(typingctx: Any, bits: Any) -> Any:
        if bits != types.int32:
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.bitcast(args[0], ir.FloatType())

        return types.float32(bits), codegen

    return intrinsic(typer)


#: the float32 of int32 bits (compiled: a bitcast)
f32_from_bits: Any = _make_f32_from_bits()


@inline
def f16_bits(v: float) -> int:  # pragma: no cover - compiled
    """The f16 bit pattern nearest to the float32 ``v`` (ties to even, overflow to ±inf), as numpy's ``astype``.

    Finite inputs only (the activation quantizers route non-finite rows to numpy). Follows IEEE 754 rounding:
    normal results keep the top 10 mantissa bits, rounded on the 13 dropped ones; subnormal results shift the
    implicit bit in first and look at every dropped bit for the tie.
    """
    f = np.int64(f32_bits(v))
    sgn = (f >> 16) & 0x8000
    fexp = f & 0x7F800000
    if fexp >= 0x47800000:  # |v| ≥ 65536: ±inf
        return sgn | 0x7C00
    if fexp <= 0x38000000:  # |v| < 2⁻¹⁴: subnormal or zero
        if fexp < 0x33000000:
            return sgn
        sig = (0x00800000 + (f & 0x007FFFFF)) >> (113 - (fexp >> 23))
        if (sig & 0x3FFF) != 0x1000 or (f & 0x7FF) != 0:
            sig += 0x1000
        return sgn + (sig >> 13)
    sig = f & 0x007FFFFF
    if (sig & 0x3FFF) != 0x1000:
        sig += 0x1000
    return sgn + (sig >> 13) + ((fexp - 0x38000000) >> 13)  # a carry out of the mantissa bumps the exponent
