"""What the compiled row kernels share: rows by index, float32 ↔ f16 and float64 bit intrinsics, ``exp`` of a
float32 rounded once, and the f32 dot product of two rows as explicit vector IR.

The row kernels (``ggml_cpu.ops._*_kernels``) do the numpy reference path's arithmetic operation for operation, in
the same precision (float32 products and sums rounded as ggml's C does, double sums where ggml uses
``ggml_float``), so their results equal it bit for bit except where :mod:`ggml_cpu.ops._compiled` states otherwise
(transcendentals from libm instead of numpy's SIMD versions, and sum orders). Each kernel is one call with every
operand passed as a flat 1-D view of its memory (from the tensor's first element) plus element strides in one int64
parameter array.

Rows: a tensor of ``ne = (n, n1, n2, n3)`` has rows ``(i1, i2, i3)`` at element ``i1·s1 + i2·s2 + i3·s3``; the
row's elements are contiguous (the Python side checks ``nb[0]`` equals the element size). Imported only once numba
is loaded (see :mod:`._jit`).
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

from ggml_cpu.jit import _jit

__all__ = ["as_elem", "exp_f32", "next_row", "round_half", "row_at", "row_dot"]


@_jit.inline
def row_at(r: int, n1: int, n2: int) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """Row ``r`` of a tensor with ``n1 × n2 × ·`` rows as ``(i1, i2, i3)`` (rows counted ``i1`` fastest)."""
    t = r // n1
    return r - t * n1, t % n2, t // n2


@_jit.inline
def next_row(i1: int, i2: int, i3: int, n1: int, n2: int) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """The row after ``(i1, i2, i3)``."""
    i1 += 1
    if i1 == n1:
        i1, i2 = 0, i2 + 1
        if i2 == n2:
            i2, i3 = 0, i3 + 1
    return i1, i2, i3


def _as_elem_typer(typingctx: Any, v: Any, like: Any) -> Any:
    """``v`` (float32) converted to the element type of the array ``like``: f16 bits (round to nearest even, as
    numpy's ``astype(float16)``) for uint16 arrays, unchanged for float32 arrays."""
    if v != types.float32 or not isinstance(like, types.Array) or like.dtype not in (types.uint16, types.float32):
        return None
    to_half = like.dtype == types.uint16

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        if to_half:
            return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
        return args[0]

    return like.dtype(types.float32, like), codegen


as_elem: Any = intrinsic(_as_elem_typer)


def _round_half_typer(typingctx: Any, v: Any) -> Any:
    """float32 → nearest f16 (ties to even) → float32: ggml rounding activations to an f16 dot type."""
    if v != types.float32:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        return builder.fpext(builder.fptrunc(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.float32), codegen


round_half: Any = intrinsic(_round_half_typer)


def _f64_from_bits_typer(typingctx: Any, bits: Any) -> Any:
    """The float64 whose IEEE bits are the int64 ``bits`` (an LLVM bitcast)."""
    if bits != types.int64:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


_f64_from_bits: Any = intrinsic(_f64_from_bits_typer)


_LOG2E: Final = 1.4426950408889634


_LN2_HI: Final = 0.6931471803691238  # ln 2 split so that n·_LN2_HI is exact for |n| < 2¹¹


_LN2_LO: Final = 1.9082149292705877e-10


#: 1/k! for k = 11 … 0 (Horner order)
_EXP_COEFFS: Final = tuple(1.0 / math.factorial(k) for k in range(11, -1, -1))


def _bits_of_f64_typer(typingctx: Any, x: Any) -> Any:
    """The int64 IEEE bits of the float64 ``x`` (an LLVM bitcast)."""
    if x != types.float64:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


_bits_of_f64: Any = intrinsic(_bits_of_f64_typer)


def _muladd_typer(typingctx: Any, a: Any, b: Any, c: Any) -> Any:
    """``a·b + c`` in float64 as ``llvm.fmuladd``: one fused multiply-add where the CPU has one."""
    if not all(v == types.float64 for v in (a, b, c)):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        f64 = ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.fmuladd.f64", fnty=ir.FunctionType(f64, [f64] * 3))
        return builder.call(fn, list(args))

    return types.float64(types.float64, types.float64, types.float64), codegen


_muladd: Any = intrinsic(_muladd_typer)


#: 1.5 · 2⁵²: a float64 integer n in ±2⁵¹ plus this holds n in its low mantissa bits (n as int64 without a
#: float → integer conversion, which AVX2 has no vector instruction for)
_ROUND_MAGIC: Final = 6755399441055744.0


_ROUND_MAGIC_BITS: Final = 0x4338000000000000


@_jit.inline
def exp_f32(x: float) -> float:  # pragma: no cover - compiled
    """``exp(x)`` of a float32, evaluated in float64 and rounded once to float32: branch-free, so loops of it
    vectorise (libm's ``expf`` / ``exp`` are scalar calls). Range reduction ``x = n·ln2 + r`` (|r| ≤ ln2/2) and
    the degree-11 Taylor polynomial (Horner, fused multiply-adds where the CPU has them): relative error below
    1e-14 before the rounding to float32, so the result is the correctly rounded float32 except within ~1e-7 of a
    rounding tie. ``2ⁿ`` is built from n's bits by integer vector ops (:data:`_ROUND_MAGIC`). Overflows to inf
    above 89, underflows to 0 below −104 (as float32 would), NaN stays NaN."""
    xd = np.float64(x)
    xc = xd if xd > -104.0 else -104.0
    xc = xc if xc < 89.0 else 89.0
    n = np.floor(xc * _LOG2E + 0.5)
    r = (xc - n * _LN2_HI) - n * _LN2_LO
    c = _EXP_COEFFS
    q = c[0]
    q = _muladd(q, r, c[1])
    q = _muladd(q, r, c[2])
    q = _muladd(q, r, c[3])
    q = _muladd(q, r, c[4])
    q = _muladd(q, r, c[5])
    q = _muladd(q, r, c[6])
    q = _muladd(q, r, c[7])
    q = _muladd(q, r, c[8])
    q = _muladd(q, r, c[9])
    q = _muladd(q, r, c[10])
    q = _muladd(q, r, c[11])
    ni = _bits_of_f64(n + _ROUND_MAGIC) - _ROUND_MAGIC_BITS  # n as int64, exactly (|n| ≤ 151)
    res = np.float32(q * _f64_from_bits((ni + 1023) << 52))
    return res if x == x else np.float32(x)


_LANES = 16  # float32 lanes of one vector (512 bits; LLVM splits it into two 256-bit halves on AVX2)


_UNROLL = 4  # independent accumulators: a float add's latency hidden behind the next vectors' loads


def _row_dot_typer(typingctx: Any, w: Any, wo: Any, x: Any, xo: Any, k: Any) -> Any:
    """``Σ_k w[wo + k] · x[xo + k]`` of two float32 arrays, as explicit vector IR: 4 accumulators of 16 lanes over
    each 64 values, then 16 at a time into the first, the four added pairwise, one ordered horizontal sum, and the
    last ``k mod 16`` terms added one by one. No fast-math flag is needed (the lanes are written out), so the sum
    order — hence the bits — is the same wherever the kernel is compiled: in the one-thread kernel and inlined
    into the helpers' loop alike."""
    if not all(isinstance(a, types.Array) and a.dtype == types.float32 for a in (w, x)):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        from numba.core import cgutils

        b = builder
        f32, i64 = ir.FloatType(), ir.IntType(64)
        vec = ir.VectorType(f32, _LANES)
        wp = b.gep(context.make_array(sig.args[0])(context, b, args[0]).data, [args[1]], inbounds=True)
        xp = b.gep(context.make_array(sig.args[2])(context, b, args[2]).data, [args[3]], inbounds=True)
        k = args[4]
        accs = [cgutils.alloca_once_value(b, ir.Constant(vec, [0.0] * _LANES)) for _ in range(_UNROLL)]

        def add_lanes(acc: Any, off: ir.Value) -> None:
            wv = b.load(b.bitcast(b.gep(wp, [off], inbounds=True), vec.as_pointer()), align=4)
            xv = b.load(b.bitcast(b.gep(xp, [off], inbounds=True), vec.as_pointer()), align=4)
            b.store(b.fadd(b.load(acc), b.fmul(wv, xv)), acc)

        step = _LANES * _UNROLL
        n_big = b.udiv(k, ir.Constant(i64, step))
        with cgutils.for_range(b, n_big) as loop:
            base = b.mul(loop.index, ir.Constant(i64, step))
            for u in range(_UNROLL):
                add_lanes(accs[u], b.add(base, ir.Constant(i64, _LANES * u)))
        done = b.mul(n_big, ir.Constant(i64, step))
        n_vec = b.udiv(b.sub(k, done), ir.Constant(i64, _LANES))
        with cgutils.for_range(b, n_vec) as loop:
            add_lanes(accs[0], b.add(done, b.mul(loop.index, ir.Constant(i64, _LANES))))
        lanes = [b.load(a) for a in accs]
        pair = b.fadd(b.fadd(lanes[0], lanes[1]), b.fadd(lanes[2], lanes[3]))
        fred = b.module.declare_intrinsic(
            "llvm.vector.reduce.fadd.v16f32", fnty=ir.FunctionType(f32, [f32, vec])
        )  # fmt: skip
        total = cgutils.alloca_once_value(b, b.call(fred, [ir.Constant(f32, -0.0), pair]))
        tail = b.add(done, b.mul(n_vec, ir.Constant(i64, _LANES)))
        with cgutils.for_range(b, b.sub(k, tail)) as loop:
            off = b.add(tail, loop.index)
            wv, xv = b.load(b.gep(wp, [off], inbounds=True)), b.load(b.gep(xp, [off], inbounds=True))
            b.store(b.fadd(b.load(total), b.fmul(wv, xv)), total)
        return b.load(total)

    return types.float32(w, types.int64, x, types.int64, types.int64), codegen


row_dot: Any = intrinsic(_row_dot_typer)
