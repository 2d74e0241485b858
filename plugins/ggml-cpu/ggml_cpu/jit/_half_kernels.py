"""The compiled f16 → f32 conversion behind :func:`ggml_cpu.jit.halves.f16_to_f32`.

One LLVM ``fpext half → float`` per element; the loop vectoriser turns the loop into the hardware's conversion
instruction (``vcvtph2ps`` with F16C), about 30× faster than numpy's ``astype`` here and bit-identical to it on all
65,536 bit patterns (tests/test_speed_paths.py). Imported only once numba is loaded (see :mod:`._jit`).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

from ggml_cpu.jit import _jit

__all__ = ["ROUND_SPEC", "SPEC", "half_bits_of", "half_bits_to_float", "round_to_half"]


def _half_bits_to_float_typer(typingctx: Any, bits: Any) -> Any:
    """float32 from the 16 bits of an IEEE half."""
    if bits != types.uint16:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.uint16), codegen


half_bits_to_float: Any = intrinsic(_half_bits_to_float_typer)


def _convert(h: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(h.shape[0]):
        out[i] = half_bits_to_float(h[i])


SPEC: Final = _jit.KernelSpec(_convert, "void(uint16[::1], float32[::1])", readonly=(0,))


def _round_to_half_typer(typingctx: Any, v: Any) -> Any:
    """float32 ``v`` rounded to the nearest IEEE half (ties to even, overflow to ±inf) and back: ``fptrunc`` then
    ``fpext`` (vectorised to ``vcvtps2ph`` / ``vcvtph2ps`` with F16C)."""
    if v != types.float32:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        return builder.fpext(builder.fptrunc(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.float32), codegen


round_to_half: Any = intrinsic(_round_to_half_typer)


def _round(x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        out[i] = round_to_half(x[i])


#: ``out = float32(float16(x))`` elementwise (the rounding of activations to f16, f16 weights' dot type)
ROUND_SPEC: Final = _jit.KernelSpec(_round, "void(float32[::1], float32[::1])", readonly=(0,))


def _half_bits_of_typer(typingctx: Any, v: Any) -> Any:
    """The IEEE half bits (ties to even, overflow to ±inf) of the float32 ``v``, as an index (int64)."""
    if v != types.float32:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        bits = builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
        return builder.zext(bits, ir.IntType(64))

    return types.int64(types.float32), codegen


half_bits_of: Any = intrinsic(_half_bits_of_typer)
