"""Compiled row kernels of the decode step's small ops: RMS_NORM (+ the MUL after it), SOFT_MAX, ROPE's rotation,
SET_ROWS, SWIGLU, f16 products (the KV cache) read in f16 directly, and few-row products of f32 weights.

Each kernel is one call into compiled code with every operand passed as a flat 1-D view of its memory (from the
tensor's first element) plus element strides in one int64 parameter array, so a call unboxes a handful of
arguments and allocates nothing. The arithmetic is the numpy reference path's, operation for operation, in the same
precision (float32 products and sums rounded as ggml's C does, double sums where ggml uses ``ggml_float``), so the
results equal it bit for bit except where stated in :mod:`ggml_cpu.kernels.compiled` (transcendentals from libm
instead of numpy's SIMD versions, and sum orders). Imported only once numba is loaded (see :mod:`._jit`).

Rows: a tensor of ``ne = (n, n1, n2, n3)`` has rows ``(i1, i2, i3)`` at element ``i1·s1 + i2·s2 + i3·s3``; the
row's elements are contiguous (the Python side checks ``nb[0]`` equals the element size).
"""

from __future__ import annotations

import math
from typing import Any, Final

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

from ggml_cpu.kernels.qdot import _half_kernels, _jit
from ggml_cpu.kernels.qdot._jit import prange

__all__ = [
    "F32_DOT_SPEC",
    "GEGLU_SPEC",
    "GLU_SPEC",
    "HALF_DOT_SPECS",
    "RMS_NORM_SPEC",
    "ROPE_POS_SPEC",
    "ROPE_SPEC",
    "SET_ROWS_BLOCK",
    "SET_ROWS_SPECS",
    "SOFT_MAX_SPEC",
]

#: float32 from the 16 bits of an IEEE half (an LLVM ``fpext``; see :mod:`._half_kernels`)
_half_bits_to_float: Any = _half_kernels._half_bits_to_float
#: the f16 bits of a float32 (round to nearest even), as an index: GELU's table lookup
_half_bits_of: Any = _half_kernels._half_bits_of

_INPUTS = (0, 2)  # argument positions that may be read-only (weights mapped from a file)


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


_as_elem: Any = intrinsic(_as_elem_typer)


def _round_half_typer(typingctx: Any, v: Any) -> Any:
    """float32 → nearest f16 (ties to even) → float32: ggml rounding activations to an f16 dot type."""
    if v != types.float32:
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        return builder.fpext(builder.fptrunc(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.float32), codegen


_round_half: Any = intrinsic(_round_half_typer)


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


# ------------------------------------------------------------------------------------------------ RMS_NORM (+ MUL)


@_jit.inline
def rms_norm_rows(
    x: np.ndarray, out: np.ndarray, b: np.ndarray, mout: np.ndarray, p: np.ndarray, eps: float, r0: int, r1: int
) -> None:  # pragma: no cover - compiled
    """Rows ``[r0, r1)``: ``out = x / sqrt(mean(x²) + eps)`` per row; with ``p[10]`` set also ``mout = out · b``
    (b repeated)."""
    n, n1, n2 = p[0], p[1], p[2]
    fused = p[10]
    e = np.float32(eps)
    i1, i2, i3 = row_at(r0, n1, n2)
    for _ in range(r1 - r0):
        xo = i1 * p[4] + i2 * p[5] + i3 * p[6]
        oo = i1 * p[7] + i2 * p[8] + i3 * p[9]
        xr, orow = x[xo : xo + n], out[oo : oo + n]
        total = 0.0
        for i in range(n):
            v = xr[i]
            total += np.float64(v * v)  # float products, double sum
        mean = np.float32(total / n)
        scale = np.float32(1.0) / np.sqrt(mean + e)
        for i in range(n):
            orow[i] = xr[i] * scale
        if fused:
            bo = (i1 % p[12]) * p[15] + (i2 % p[13]) * p[16] + (i3 % p[14]) * p[17]
            mo = i1 * p[18] + i2 * p[19] + i3 * p[20]
            br, mrow = b[bo : bo + n], mout[mo : mo + n]  # b's rows are n long (checked)
            for i in range(n):
                mrow[i] = orow[i] * br[i]
        i1, i2, i3 = next_row(i1, i2, i3, n1, n2)


def _rms_norm(x: np.ndarray, out: np.ndarray, b: np.ndarray, mout: np.ndarray, p: np.ndarray, eps: float) -> None:
    """:func:`rms_norm_rows` over every row."""
    rms_norm_rows(x, out, b, mout, p, eps, 0, p[1] * p[2] * p[3])  # pragma: no cover - compiled


RMS_NORM_SPEC: Final = _jit.KernelSpec(
    _rms_norm,
    "void(float32[::1], float32[::1], float32[::1], float32[::1], int64[::1], float64)",
    readonly=_INPUTS,
)


# ------------------------------------------------------------------------------------------------ SOFT_MAX


def _soft_max(
    x: np.ndarray, out: np.ndarray, mask: np.ndarray, sinks: np.ndarray, slopes: np.ndarray, p: np.ndarray,
    scale: float,
) -> None:  # fmt: skip
    """ggml's soft_max_ext per row: ``w = x·scale + slope·mask``, ``e = exp(w − max)``, ``e / Σe`` (Σ in double).

    With ``p[18]`` set (the caller guarantees x = 0 wherever the mask is −inf, and slopes of 1: a fused KV-cache
    product's scores) a row's trailing run of −inf mask columns is not walked: each of them is ``w = −inf``, adds
    0 to Σ and never wins the max, so they are written as ``exp(−inf − max) / Σ`` (0, or NaN where the max is) —
    the values the full walk gives. A decode step's 256-cell window with a few cells in use skips most columns."""
    n, n1, n2, n3 = p[0], p[1], p[2], p[3]
    has_mask, has_sinks, trim = p[10], p[17], p[18]
    sc = np.float32(scale)
    for i3 in range(n3):  # pragma: no cover - compiled
        for i2 in range(n2):
            slope = slopes[i2]
            mo2 = (i2 % p[11]) * p[15] + (i3 % p[12]) * p[16]
            for i1 in range(n1):
                xo = i1 * p[4] + i2 * p[5] + i3 * p[6]
                oo = i1 * p[7] + i2 * p[8] + i3 * p[9]
                mo = i1 * p[14] + mo2
                xr, orow = x[xo : xo + n], out[oo : oo + n]
                mrow = mask[mo : mo + n] if has_mask else mask
                end = n
                if trim and has_mask:
                    while end > 0 and mrow[end - 1] == -np.inf:
                        end -= 1
                    if end == 0:  # every column masked: the full walk (its NaN rows, as ggml's)
                        end = n
                mx = np.float32(-np.inf)
                for i in range(end):
                    w = xr[i] * sc
                    if has_mask:
                        w = w + slope * mrow[i]
                    orow[i] = w
                    if w > mx or w != w:  # a NaN wins, as numpy's max
                        mx = w
                if n == 0:
                    mx = np.float32(0.0)
                sk = np.float32(0.0)
                if has_sinks:
                    sk = sinks[i2]
                    if sk > mx or sk != sk:  # np.maximum: a NaN wins
                        mx = sk
                total = 0.0
                for i in range(end):
                    orow[i] = exp_f32(orow[i] - mx)
                for i in range(end):
                    total += np.float64(orow[i])
                if has_sinks:
                    total += np.float64(exp_f32(sk - mx))
                inv = np.float32(1.0 / total)
                for i in range(end):
                    orow[i] = orow[i] * inv
                tail = exp_f32(np.float32(-np.inf) - mx) * inv  # each trailing masked column's value
                for i in range(end, n):
                    orow[i] = tail


SOFT_MAX_SPEC: Final = _jit.KernelSpec(
    _soft_max,
    "void(float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], int64[::1], float64)",
    readonly=(0, 2, 3, 4),
)


# ------------------------------------------------------------------------------------------------ ROPE


@_jit.inline
def _rotate_row(
    xr: np.ndarray,
    orow: np.ndarray,
    cr: np.ndarray,
    sr: np.ndarray,
    n_pairs: int,
    first: int,
    step: int,
    delta: int,
) -> None:  # pragma: no cover - compiled
    """``orow`` = ``xr`` with the pairs ``(first + i·step, + delta)`` rotated by ``cr[i]`` / ``sr[i]``."""
    for i in range(xr.shape[0]):  # in place this copies each value onto itself
        orow[i] = xr[i]
    for i in range(n_pairs):
        j = first + i * step
        x0 = xr[j]
        x1 = xr[j + delta]
        c = cr[i]
        s = sr[i]
        orow[j] = x0 * c - x1 * s
        orow[j + delta] = x0 * s + x1 * c


@_jit.inline
def rope_rows(
    x: np.ndarray, out: np.ndarray, cos: np.ndarray, sin: np.ndarray, p: np.ndarray, r0: int, r1: int
) -> None:  # pragma: no cover - compiled
    """Rows ``[r0, r1)``: rotate the pairs ``(first + i·step, + delta)`` of each row by the token's ``cos``/``sin``
    (tokens = dim 2); the other channels are copied."""
    n, n1, n2 = p[0], p[1], p[2]
    first, step, delta = p[10], p[11], p[12]
    n_pairs = cos.shape[1]
    i1, i2, i3 = row_at(r0, n1, n2)
    for _ in range(r1 - r0):
        xo = i1 * p[4] + i2 * p[5] + i3 * p[6]
        oo = i1 * p[7] + i2 * p[8] + i3 * p[9]
        xr, orow = x[xo : xo + n], out[oo : oo + n]
        _rotate_row(xr, orow, cos[i2], sin[i2], n_pairs, first, step, delta)
        i1, i2, i3 = next_row(i1, i2, i3, n1, n2)


def _rope(x: np.ndarray, out: np.ndarray, cos: np.ndarray, sin: np.ndarray, p: np.ndarray) -> None:
    """:func:`rope_rows` over every row."""
    rope_rows(x, out, cos, sin, p, 0, p[1] * p[2] * p[3])  # pragma: no cover - compiled


ROPE_SPEC: Final = _jit.KernelSpec(
    _rope,
    "void(float32[::1], float32[::1], float32[:, ::1], float32[:, ::1], int64[::1])",
    readonly=(0, 2, 3),
)


def _rope_pos(x: np.ndarray, out: np.ndarray, pos: np.ndarray, p: np.ndarray, f: np.ndarray, cs: np.ndarray) -> None:
    """:func:`_rope` with each token's cos / sin computed here from its position, operation for operation as
    ``attention.rope_cos_sin`` (theta advanced by float32 products, YaRN's ramp in float32 and its one float64
    blend, ``cos``/``sin`` in float64 rounded once, times ``mscale``); ``cs`` holds one token's table."""
    n, n1, n2, n3 = p[0], p[1], p[2], p[3]
    first, step, delta, n_pairs = p[10], p[11], p[12], p[13]
    ts, fscale, ext, mscale = np.float32(f[0]), np.float32(f[1]), np.float32(f[2]), np.float32(f[3])
    low, high = np.float32(f[4]), np.float32(f[5])
    span = high - low
    span = span if span > np.float32(0.001) else np.float32(0.001)
    for i2 in range(n2):  # pragma: no cover - compiled
        theta_e = np.float32(pos[i2])
        for i in range(n_pairs):
            theta = fscale * theta_e
            if ext != np.float32(0.0):
                y = (np.float32(i) - low) / span
                y = y if y > np.float32(0.0) else np.float32(0.0)
                y = y if y < np.float32(1.0) else np.float32(1.0)
                ramp = (np.float32(1.0) - y) * ext
                second = theta_e * ramp
                theta = np.float32(np.float64(theta) * np.float64(np.float32(1.0) - ramp) + np.float64(second))
            cs[i] = np.float32(math.cos(np.float64(theta))) * mscale
            cs[n_pairs + i] = np.float32(math.sin(np.float64(theta))) * mscale
            theta_e = theta_e * ts
        for i3 in range(n3):
            for i1 in range(n1):
                xo = i1 * p[4] + i2 * p[5] + i3 * p[6]
                oo = i1 * p[7] + i2 * p[8] + i3 * p[9]
                _rotate_row(x[xo : xo + n], out[oo : oo + n], cs[:n_pairs], cs[n_pairs:], n_pairs, first, step, delta)


ROPE_POS_SPEC: Final = _jit.KernelSpec(
    _rope_pos,
    "void(float32[::1], float32[::1], int32[::1], int64[::1], float64[::1], float32[::1])",
    readonly=(0, 2, 4),
)


# ------------------------------------------------------------------------------------------------ SET_ROWS


@_jit.inline
def set_rows_rows(src: np.ndarray, idx: np.ndarray, dst: np.ndarray, p: np.ndarray, r0: int, r1: int) -> int:
    """Rows ``[r0, r1)`` of src (rows ``(r, i2, i3)``): row ``r`` into row ``idx[r, i2 % c1, i3 % c2]`` of dst,
    converted to dst's type; returns 1 (writing nothing more) at the first index outside ``0..p[10]-1``.

    With ``p[17]`` = C > 0 (one-value rows, one index plane: a transposed V cache, whose source rows are C values
    per token, each going to its channel's row of the cache), ``[r0, r1)`` are blocks of :data:`SET_ROWS_BLOCK`
    channels instead: rows ``t·C + c`` for every token ``t`` and the block's channels ``c`` (:func:`_set_columns`)."""
    n, n1, n2 = p[0], p[1], p[2]  # pragma: no cover - compiled
    if p[17] > 0:
        return _set_columns(src, idx, dst, p, r0, r1)
    limit, d0 = p[10], p[16]
    start, i2, i3 = row_at(r0, n1, n2)
    left = r1 - r0
    while left > 0:
        io = (i2 % p[13]) * p[12] + (i3 % p[15]) * p[14]
        end = min(n1, start + left)
        left -= end - start
        for r in range(start, end):
            j = np.int64(idx[io + r * p[11]])
            if j < 0 or j >= limit:
                return 1
            so = r * p[4] + i2 * p[5] + i3 * p[6]
            do = j * p[7] + i2 * p[8] + i3 * p[9]
            if n == 1:  # a transposed V cache: one value per row, no row views (their refcounting costs more)
                dst[do] = _as_elem(src[so], dst)
                continue
            sr = src[so : so + n]
            drow = dst[do : do + (n - 1) * d0 + 1]
            for i in range(n):
                drow[i * d0] = _as_elem(sr[i], dst)
        start, i2 = 0, i2 + 1
        if i2 == n2:
            i2, i3 = 0, i3 + 1
    return 0


#: channels of one block of :func:`_set_columns` (16 f32 source values: one cache line per token)
SET_ROWS_BLOCK: Final = 16


@_jit.inline
def _set_columns(src: np.ndarray, idx: np.ndarray, dst: np.ndarray, p: np.ndarray, b0: int, b1: int) -> int:
    """Channel blocks ``[b0, b1)`` of a SET_ROWS of one-value rows ``r = t·C + c`` (``C = p[17]``; one index plane):
    per token, the block's channels in order. Writing row by row sends consecutive values to C different cache
    rows, C cache lines in flight per token; block by block the lines of 16 channels stay in L1 across the tokens,
    and two threads' blocks never share a line, so the store splits across threads (rows of one value could not:
    neighbouring tokens' values share lines). Measured in docs/performance.md (SET_ROWS)."""
    chans, limit, s_idx, s_src, s_dst = p[17], p[10], p[11], p[4], p[7]  # pragma: no cover - compiled
    tokens = p[1] // chans
    c0 = b0 * SET_ROWS_BLOCK
    c1 = min(chans, b1 * SET_ROWS_BLOCK)
    for t in range(tokens):
        first = t * chans
        for c in range(c0, c1):
            r = first + c
            j = np.int64(idx[r * s_idx])
            if j < 0 or j >= limit:
                return 1
            dst[j * s_dst] = _as_elem(src[r * s_src], dst)
    return 0


def _set_rows(src: np.ndarray, idx: np.ndarray, dst: np.ndarray, p: np.ndarray) -> int:
    """:func:`set_rows_rows` over every row (every channel block with ``p[17]`` set)."""
    blocks = (p[17] + SET_ROWS_BLOCK - 1) // SET_ROWS_BLOCK  # pragma: no cover - compiled
    return set_rows_rows(src, idx, dst, p, 0, blocks if p[17] > 0 else p[1] * p[2] * p[3])


SET_ROWS_SPECS: Final = {
    (dst, ix): _jit.KernelSpec(
        _set_rows,
        f"int64(float32[::1], {ix}[::1], {dst}[::1], int64[::1])",
        readonly=(0, 1),
        name=f"_set_rows_{dst}_{ix}",
    )
    for dst in ("float32", "uint16")
    for ix in ("int32", "int64")
}


# ------------------------------------------------------------------------------------------------ GLU


@_jit.inline
def _glu_row(
    x: np.ndarray, g: np.ndarray, out: np.ndarray, p: np.ndarray, i1: int, i2: int, i3: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Row ``(i1, i2, i3)`` of a GLU's value, gate and output: ``p`` = (ne0..3, the value's strides 1..3, the
    output's, the gate's, the value's first element, the gate's first element)."""
    n = p[0]
    xo = p[13] + i1 * p[4] + i2 * p[5] + i3 * p[6]
    go = p[14] + i1 * p[10] + i2 * p[11] + i3 * p[12]
    oo = i1 * p[7] + i2 * p[8] + i3 * p[9]
    return x[xo : xo + n], g[go : go + n], out[oo : oo + n]


@_jit.inline
def swiglu_rows(
    x: np.ndarray, g: np.ndarray, out: np.ndarray, p: np.ndarray, r0: int, r1: int
) -> None:  # pragma: no cover - compiled
    """Rows ``[r0, r1)``: ``out = x / (1 + exp(−x)) · g`` (the exponential in double, rounded once to float32, as
    the reference)."""
    n, n1, n2 = p[0], p[1], p[2]
    i1, i2, i3 = row_at(r0, n1, n2)
    for _ in range(r1 - r0):
        xr, gr, orow = _glu_row(x, g, out, p, i1, i2, i3)
        for i in range(n):
            v = xr[i]
            e = exp_f32(-v)  # exp in double, rounded once (as the numpy path)
            orow[i] = v / (np.float32(1.0) + e) * gr[i]
        i1, i2, i3 = next_row(i1, i2, i3, n1, n2)


def _swiglu(x: np.ndarray, g: np.ndarray, out: np.ndarray, p: np.ndarray) -> None:
    """:func:`swiglu_rows` over every row."""
    swiglu_rows(x, g, out, p, 0, p[1] * p[2] * p[3])  # pragma: no cover - compiled


GLU_SPEC: Final = _jit.KernelSpec(
    _swiglu, "void(float32[::1], float32[::1], float32[::1], int64[::1])", readonly=(0, 1)
)


def _geglu(x: np.ndarray, g: np.ndarray, out: np.ndarray, p: np.ndarray, table: np.ndarray) -> None:
    """GEGLU over every row (:func:`swiglu_rows`' operands and walk): ``out = gelu(x) · g`` with ggml's CPU GELU —
    0 at or below −10, x at or above 10, else ``table`` (65,536 float32 values) at the f16 bits of x — then one
    float32 product, as the numpy path (``unary.gelu`` times the gate)."""
    n, n1, n2 = p[0], p[1], p[2]
    i1, i2, i3 = 0, 0, 0
    for _ in range(p[1] * p[2] * p[3]):  # pragma: no cover - compiled
        xr, gr, orow = _glu_row(x, g, out, p, i1, i2, i3)
        for i in range(n):
            v = xr[i]
            if v <= np.float32(-10.0):
                a = np.float32(0.0)
            elif v >= np.float32(10.0):
                a = v
            else:
                a = table[_half_bits_of(v)]
            orow[i] = a * gr[i]
        i1, i2, i3 = next_row(i1, i2, i3, n1, n2)


GEGLU_SPEC: Final = _jit.KernelSpec(
    _geglu, "void(float32[::1], float32[::1], float32[::1], int64[::1], float32[::1])", readonly=(0, 1, 4)
)


# ------------------------------------------------------------------------------------------------ f16 products


def _half_dot(w: np.ndarray, x: np.ndarray, out: np.ndarray, p: np.ndarray, xh: np.ndarray, mask: np.ndarray) -> None:
    """``out[n, m] = Σ_k f16(x[n, k]) · w[m, k]`` per (i2, i3), w f16 bits read directly (broadcast r2, r3).

    The sum over k is float32, reassociated into SIMD lanes (see :data:`HALF_DOT_SPEC`); ``xh`` (one row of K
    floats per i2) holds an activation row rounded to f16. Terms past an activation row's last non-zero value are
    not read (a zero times a finite weight adds nothing: the unused cells of a KV cache). With ``p[16]`` set,
    ``mask`` holds SOFT_MAX's mask rows (row n, strides ``p[17:20]``, broadcast ``p[20:22]``) and outputs whose mask
    is −inf are written as 0 without reading their weight row (the softmax gives them 0 either way).
    """
    k_n, m_n, n_n, b2, b3, r2, r3 = p[0], p[1], p[2], p[3], p[4], p[5], p[6]
    has_mask = p[16]
    for i2 in prange(b2):  # pragma: no cover - compiled
        xrow = xh[i2 * k_n : (i2 + 1) * k_n]
        for i3 in range(b3):
            wo = (i3 // r3) * p[9] + (i2 // r2) * p[8]
            mo2 = (i2 % p[20]) * p[18] + (i3 % p[21]) * p[19]
            for r in range(n_n):
                xo = r * p[10] + i2 * p[11] + i3 * p[12]
                xr = x[xo : xo + k_n]
                k_end = 0
                for k in range(k_n):
                    v = np.float32(_round_half(xr[k]))
                    xrow[k] = v
                    if v != 0.0:
                        k_end = k + 1
                oo = r * p[13] + i2 * p[14] + i3 * p[15]
                orow = out[oo : oo + m_n]
                mo = mo2 + r * p[17]
                for m in range(m_n):
                    if has_mask and mask[mo + m] == -np.inf:
                        orow[m] = 0.0
                        continue
                    ro = wo + m * p[7]
                    wr = w[ro : ro + k_end]
                    acc = np.float32(0.0)
                    for k in range(k_end):
                        acc += xrow[k] * _half_bits_to_float(wr[k])
                    orow[m] = acc


_HALF_SIGNATURE: Final = "void(uint16[::1], float32[::1], float32[::1], int64[::1], float32[::1], float32[::1])"
#: threads over the (activation) heads, and on the calling thread; every output is computed by the same code
#: either way, so the bits do not depend on the thread count
HALF_DOT_SPECS: Final = (
    _jit.KernelSpec(_half_dot, _HALF_SIGNATURE, parallel=True, readonly=(0, 1, 5), fastmath=frozenset({"reassoc"})),
    _jit.KernelSpec(
        _half_dot, _HALF_SIGNATURE, readonly=(0, 1, 5), fastmath=frozenset({"reassoc"}), name="_half_dot_serial"
    ),
)


# ------------------------------------------------------------------------------------------------ f32 products


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


_row_dot: Any = intrinsic(_row_dot_typer)


@_jit.inline
def f32_dot_rows(w: np.ndarray, x: np.ndarray, out: np.ndarray, p: np.ndarray, r0: int, r1: int) -> None:
    """Weight rows ``[r0, r1)`` of ``out[j, m] = Σ_k w[m, k] · x[j, k]`` for the few activation rows ``j``.

    ``p`` = (K, M, N, weight row stride, activation row stride, output row stride), in elements. The sum over k is
    float32 in SIMD lanes (:func:`_row_dot_typer`; ggml's ``vec_dot_f32`` sums in lanes too); each output is one
    row's dot product whatever the split, so the bits do not depend on the thread count.
    """
    k_n, n_n, ws, xs, os_ = p[0], p[2], p[3], p[4], p[5]
    for m in range(r0, r1):  # pragma: no cover - compiled
        for j in range(n_n):
            out[j * os_ + m] = _row_dot(w, m * ws, x, j * xs, k_n)


def _f32_dot(w: np.ndarray, x: np.ndarray, out: np.ndarray, p: np.ndarray) -> None:
    """:func:`f32_dot_rows` over every weight row."""
    f32_dot_rows(w, x, out, p, 0, p[1])  # pragma: no cover - compiled


#: few-row products of f32 weights (decode): the weights stream from memory once, at its bandwidth
F32_DOT_SPEC: Final = _jit.KernelSpec(
    _f32_dot, "void(float32[::1], float32[::1], float32[::1], int64[::1])", readonly=(0, 1)
)
