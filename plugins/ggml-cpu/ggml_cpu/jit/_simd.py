"""Integer block dot products as explicit LLVM vector IR (numba intrinsics), the core of every quantized kernel.

Plain numba loops cannot reach the hardware's int8 dot products: numba widens every integer product to int64, which
quarters the SIMD width (Q4_0 matrix-vector: 4.1 ms as a plain loop, 1.5 ms with SLP vectorisation, 0.65 ms here,
one core). These intrinsics build the vector code themselves:

* quants are loaded as byte vectors and unpacked with vector shifts and masks into 8-bit lanes, **once** per block
  for up to four activation rows;
* :func:`quad_sums` forms 8 lanes of exact partial sums ``Σ_{4 bytes} q·x`` (unsigned × signed bytes): the
  ``vpdpbusd`` instruction where the CPU has VNNI and numba targets the host CPU, otherwise the same sums written
  generically (correct on every target, slower; also forced by ``GGML_CPU_VNNI=0``). Signed quants (Q4_0, Q5_0 after
  their offset, Q8_0) go in as ``|q|`` with the activation's sign flipped where ``q < 0``, as ggml's kernels do;
* the partial sums are scaled lane-wise — by the sub-block scales (K-quants: integer, one horizontal sum per
  super-block) or by ``d_w·d_x`` as floats (legacy types: an 8-lane float accumulator per row, one horizontal sum
  per row) — so no horizontal sum is paid per small block.

Operands: ``w`` a weight row (uint8), ``o`` a block's byte offset in it, ``xq`` the int8 activations (N, K)
C-contiguous, ``n0`` the first of the activation rows, ``xo`` the block's first column, ``bsums`` Q8_K's int32 sums
per 16 (N, K/16) and ``bo`` the super-block's first of them. Bounds are not checked: the kernels index whole blocks
of arrays whose shapes the Python entry points validate.

Imported only once numba is loaded (see :mod:`._jit`); the CPU's features are read once, at import.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Final

import llvmlite.binding as llvm
import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from ggml_cpu.jit import _jit

__all__ = [
    "HAS_AVX2_SUMS",
    "HAS_VNNI",
    "HAS_VNNI512",
    "ROW_DOTS",
    "TILE_DOTS",
    "Operands",
    "const",
    "declare",
    "dot_q4_k",
    "dot_q4_k_4",
    "dot_q5_k",
    "dot_q5_k_4",
    "dot_q6_k",
    "dot_q6_k_4",
    "quad_sums_from",
    "vec",
]


def _host_features() -> dict[str, bool]:
    """LLVM's features of this CPU when numba compiles for it (empty when it targets a named CPU, or LLVM cannot
    tell: the generic sums, correct on every target)."""
    if getattr(numba.config, "CPU_NAME", None) is not None:
        return {}
    try:
        return {name: bool(on) for name, on in llvm.get_host_cpu_features().items()}
    except RuntimeError as exc:
        _jit.note_failure("CPU feature detection", exc)
        return {}


_FEATS: Final = _host_features()
#: True when the kernels use the x86 ``vpdpbusd`` instruction directly (AVX-VNNI, or AVX512-VNNI with VL; off with
#: ``GGML_CPU_VNNI=0``)
HAS_VNNI: Final = bool(_FEATS.get("avxvnni") or (_FEATS.get("avx512vnni") and _FEATS.get("avx512vl"))) and (
    os.environ.get("GGML_CPU_VNNI", "1") != "0"
)
_VNNI512: Final = bool(_FEATS.get("avx512vnni") and _FEATS.get("avx512bw"))  # ``vpdpbusd`` on 64 bytes
_AVX2: Final = bool(_FEATS.get("avx2"))
_F16C: Final = bool(_FEATS.get("f16c"))
#: True when ``vpdpbusd`` runs on 512-bit vectors (the repacked tiles' speed depends on it)
HAS_VNNI512: Final = HAS_VNNI and _VNNI512
#: True when the integer sums use AVX2's ``vpmaddubsw`` / ``vpmaddwd`` pairs because VNNI is absent
HAS_AVX2_SUMS: Final = _AVX2 and not HAS_VNNI

i8, i32, f32 = ir.IntType(8), ir.IntType(32), ir.FloatType()
v8, vf8 = ir.VectorType(i32, 8), ir.VectorType(f32, 8)


def vec(t: ir.Type, n: int) -> ir.VectorType:
    return ir.VectorType(t, n)


def const(n: int, value: int) -> ir.Constant:
    return ir.Constant(vec(i8, n), [value & 0xFF] * n)


def declare(builder: ir.IRBuilder, name: str, fnty: ir.FunctionType) -> ir.Function:
    mod = builder.module
    return mod.globals.get(name) or ir.Function(mod, fnty, name)


def reduce_add(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
    n = v.type.count
    return builder.call(declare(builder, f"llvm.vector.reduce.add.v{n}i32", ir.FunctionType(i32, [v.type])), [v])


class Operands:
    """Typed access to an intrinsic's array arguments."""

    def __init__(self, context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> None:
        self.context, self.builder, self.sig, self.args = context, builder, sig, args

    def _array(self, i: int) -> Any:
        return self.context.make_array(self.sig.args[i])(self.context, self.builder, self.args[i])

    def plus(self, v: ir.Value, k: int) -> ir.Value:
        return self.builder.add(v, ir.Constant(v.type, k))

    def bytes(self, i: int, off: ir.Value, n: int) -> ir.Value:
        """``n`` bytes of the 1-D array argument ``i`` from element ``off``."""
        ptr = self.builder.gep(self._array(i).data, [off], inbounds=True)
        return self.builder.load(self.builder.bitcast(ptr, vec(i8, n).as_pointer()), align=1)

    def row_ptr(self, i: int, row: ir.Value, col: ir.Value) -> ir.Value:
        """Pointer to element (row, col) of the C-contiguous 2-D array argument ``i``."""
        ary = self._array(i)
        width = cgutils.unpack_tuple(self.builder, ary.shape, 2)[1]
        return self.builder.gep(ary.data, [self.builder.add(self.builder.mul(row, width), col)], inbounds=True)

    def row_bytes(self, i: int, row: ir.Value, col: ir.Value, n: int) -> ir.Value:
        ptr = self.row_ptr(i, row, col)
        return self.builder.load(self.builder.bitcast(ptr, vec(i8, n).as_pointer()), align=1)

    def row_i32(self, i: int, row: ir.Value, col: ir.Value, n: int) -> ir.Value:
        ptr = self.row_ptr(i, row, col)
        return self.builder.load(self.builder.bitcast(ptr, vec(i32, n).as_pointer()), align=4)


def prefetch(b: ir.IRBuilder, ptr: ir.Value) -> None:
    """``prefetcht0 ptr``: a hint that never faults, whatever the address."""
    i8p = ir.IntType(8).as_pointer()
    fn = declare(b, "llvm.prefetch.p0i8", ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]))
    b.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])


def f16_value(b: ir.IRBuilder, base: ir.Value, off: ir.Value, lut: ir.Value) -> ir.Value:
    """The little-endian f16 at byte ``off`` of ``base`` as float32: one ``vcvtph2ps`` with F16C (exact, as the
    table), else through the 65536-entry table ``lut`` (a load that misses the cache once the weights stream
    past it)."""
    if _F16C:
        ptr = b.bitcast(b.gep(base, [off], inbounds=True), ir.IntType(16).as_pointer())
        return b.fpext(b.bitcast(b.load(ptr, align=1), ir.HalfType()), ir.FloatType())
    lo = b.zext(b.load(b.gep(base, [off], inbounds=True)), ir.IntType(64))
    hi = b.zext(b.load(b.gep(base, [b.add(off, ir.Constant(off.type, 1))], inbounds=True)), ir.IntType(64))
    idx = b.or_(lo, b.shl(hi, ir.Constant(ir.IntType(64), 8)))
    return b.load(b.gep(lut, [idx], inbounds=True))


def pair_quads(builder: ir.IRBuilder, q: ir.Value, x: ir.Value, small: bool) -> ir.Value:
    """<n/4 x i32>: lane i = Σ_{j=4i}^{4i+3} q[j]·x[j] for ``n`` unsigned q and signed x bytes, without VNNI.

    ``small`` promises ``q ≤ 128`` and ``|x| ≤ 127``, so each pair ``q·x + q'·x'`` fits in int16 (at most
    32,512): with AVX2 that is ``vpmaddubsw`` (pairs → int16) then ``vpmaddwd`` by ones (→ int32), ggml's
    AVX2 sums, exact under the promise. Otherwise the products are widened to int32 and added in pairs, then
    pairs of pairs (a shape LLVM turns into ``vpmaddwd`` where it can): exact for any bytes, on any target.
    """
    b = builder
    n = q.type.count
    if _AVX2 and small:
        v16 = vec(ir.IntType(16), 16)
        ub = declare(b, "llvm.x86.avx2.pmadd.ub.sw", ir.FunctionType(v16, [vec(i8, 32), vec(i8, 32)]))
        wd = declare(b, "llvm.x86.avx2.pmadd.wd", ir.FunctionType(v8, [v16, v16]))
        ones = ir.Constant(v16, [1] * 16)
        parts = []
        for h in range(0, n, 32):
            half = ir.Constant(vec(i32, 32), list(range(h, h + 32)))
            qh = q if n == 32 else b.shuffle_vector(q, q, half)
            xh = x if n == 32 else b.shuffle_vector(x, x, half)
            parts.append(b.call(wd, [b.call(ub, [qh, xh]), ones]))
        while len(parts) > 1:  # concatenate the halves' lanes in order
            width = parts[0].type.count
            parts = [
                b.shuffle_vector(u, v, ir.Constant(vec(i32, 2 * width), list(range(2 * width))))
                for u, v in zip(parts[0::2], parts[1::2], strict=True)
            ]
        return parts[0]
    total = b.mul(b.zext(q, vec(i32, n)), b.sext(x, vec(i32, n)))
    for width in (n // 2, n // 4):  # pairs, then pairs of pairs
        even, odd = (ir.Constant(vec(i32, width), [2 * i + k for i in range(width)]) for k in (0, 1))
        total = b.add(b.shuffle_vector(total, total, even), b.shuffle_vector(total, total, odd))
    return total


def quad_sums(builder: ir.IRBuilder, q: ir.Value, x: ir.Value) -> ir.Value:
    """<8 x i32>: lane i = Σ_{j=4i}^{4i+3} q[j]·x[j] for 32 unsigned q and signed x bytes (``vpdpbusd``), for
    ``q ≤ 128`` and ``|x| ≤ 127`` (every caller's quants; the Q8 activations are within ±127)."""
    if HAS_VNNI:
        fn = declare(builder, "llvm.x86.avx512.vpdpbusd.256", ir.FunctionType(v8, [v8, v8, v8]))
        return builder.call(fn, [ir.Constant(v8, [0] * 8), builder.bitcast(q, v8), builder.bitcast(x, v8)])
    return pair_quads(builder, q, x, small=True)


def scaled_quad_sums(builder: ir.IRBuilder, q: ir.Value, x: ir.Value, sc: ir.Value) -> ir.Value:
    """:func:`quad_sums` times the <8 x i32> scales ``sc`` (|sc| < 2^15). Without VNNI on AVX2 the scales go
    into the ``vpmaddwd`` in place of its ones, as ggml's AVX2 K-quant dots do: lane i is then
    ``sc_i·p_2i + sc_i·p_2i+1``, the same integer as ``sc_i·(p_2i + p_2i+1)`` (no overflow: the pair sums are
    at most 32,512), without a ``vpmulld`` per sub-block."""
    b = builder
    if HAS_VNNI or not _AVX2:
        return b.mul(quad_sums(b, q, x), sc)
    v16 = vec(ir.IntType(16), 16)
    ub = declare(b, "llvm.x86.avx2.pmadd.ub.sw", ir.FunctionType(v16, [vec(i8, 32), vec(i8, 32)]))
    wd = declare(b, "llvm.x86.avx2.pmadd.wd", ir.FunctionType(v8, [v16, v16]))
    narrow = b.trunc(sc, vec(ir.IntType(16), 8))
    sc16 = b.shuffle_vector(narrow, narrow, ir.Constant(vec(i32, 16), [i // 2 for i in range(16)]))
    return b.call(wd, [b.call(ub, [q, x]), sc16])


def broadcast(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
    first = builder.insert_element(ir.Constant(v8, None), v, ir.Constant(i32, 0))
    return builder.shuffle_vector(first, ir.Constant(v8, None), ir.Constant(v8, [0] * 8))


def tuple_of(op: Operands, values: list[ir.Value]) -> ir.Value:
    return op.context.make_tuple(op.builder, op.sig.return_type, values) if len(values) > 1 else values[0]


def result(n: int) -> Any:
    return types.UniTuple(types.int32, n) if n > 1 else types.int32


def fifth_bits(op: Operands, q: ir.Value, qh: ir.Value) -> ir.Value:
    """q | 16 where bit j of the 32-bit ``qh`` is set (byte lanes: lane j tests byte j/8 against 1 << j%8)."""
    b = op.builder
    h32 = b.trunc(qh, i32) if qh.type.width > 32 else qh
    spread = b.shuffle_vector(
        b.bitcast(h32, vec(i8, 4)),
        ir.Constant(vec(i8, 4), None),
        ir.Constant(vec(i32, 32), [j // 8 for j in range(32)]),
    )
    bit = ir.Constant(vec(i8, 32), [(1 << (j % 8)) & 0xFF for j in range(32)])
    has = b.icmp_unsigned("!=", b.and_(spread, bit), const(32, 0))
    return b.or_(q, b.select(has, const(32, 16), const(32, 0)))


def k45(with_qh: bool, rows: int) -> Callable[..., Any]:
    """A Q4_K (or Q5_K) super-block against ``rows`` rows → (Σ scale·Σq·x, Σ min·bsum) per row."""

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        op = Operands(context, builder, sig, args)
        b, off = builder, args[1]
        n0, xo, bo = args[3], args[4], args[6]

        def sbyte(k: int) -> ir.Value:  # scales[k] of the 12 packed bytes at o+4, as i32
            return b.zext(b.load(b.gep(op._array(0).data, [op.plus(off, 4 + k)], inbounds=True)), i32)

        def c(v: int) -> ir.Constant:
            return ir.Constant(i32, v)

        scales, mins = ir.Constant(v8, None), ir.Constant(v8, None)
        for j in range(8):  # ggml's get_scale_min_k4
            if j < 4:
                sc, mn = b.and_(sbyte(j), c(63)), b.and_(sbyte(j + 4), c(63))
            else:
                sc = b.or_(b.and_(sbyte(j + 4), c(15)), b.shl(b.lshr(sbyte(j - 4), c(6)), c(4)))
                mn = b.or_(b.lshr(sbyte(j + 4), c(4)), b.shl(b.lshr(sbyte(j), c(6)), c(4)))
            scales, mins = b.insert_element(scales, sc, c(j)), b.insert_element(mins, mn, c(j))
        qh = op.bytes(0, op.plus(off, 16), 32) if with_qh else None
        accs = [ir.Constant(v8, [0] * 8) for _ in range(rows)]
        for j in range(8):
            qs = op.bytes(0, op.plus(off, (48 if with_qh else 16) + (j >> 1) * 32), 32)
            q = b.and_(b.lshr(qs, const(32, (j & 1) * 4)), const(32, 15))
            if qh is not None:
                q = b.or_(q, b.shl(b.and_(b.lshr(qh, const(32, j)), const(32, 1)), const(32, 4)))
            sc = b.shuffle_vector(scales, ir.Constant(v8, None), ir.Constant(v8, [j] * 8))
            for r in range(rows):
                x = op.row_bytes(2, op.plus(n0, r), op.plus(xo, j * 32), 32)
                accs[r] = b.add(accs[r], scaled_quad_sums(b, q, x, sc))
        out = []
        undef16 = ir.Constant(vec(i32, 16), None)
        for r in range(rows):
            bs = op.row_i32(5, op.plus(n0, r), bo, 16)
            pairs = b.add(
                b.shuffle_vector(bs, undef16, ir.Constant(v8, [2 * i for i in range(8)])),
                b.shuffle_vector(bs, undef16, ir.Constant(v8, [2 * i + 1 for i in range(8)])),
            )
            out += [reduce_add(b, accs[r]), reduce_add(b, b.mul(mins, pairs))]
        return tuple_of(op, out)

    def typer(typingctx: Any, w: Any, o: Any, xq: Any, n0: Any, xo: Any, bsums: Any, bo: Any) -> Any:
        return result(2 * rows)(w, o, xq, n0, xo, bsums, bo), codegen

    return intrinsic(typer)


def q6k(rows: int) -> Callable[..., Any]:
    """A Q6_K super-block against ``rows`` rows → Σ_t scale_t·Σ_{j in t}(q_j − 32)·x_j per row."""

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        op = Operands(context, builder, sig, args)
        b, off = builder, args[1]
        n0, xo, bo = args[3], args[4], args[6]
        scales = b.sext(op.bytes(0, op.plus(off, 192), 16), vec(i32, 16))
        accs = [ir.Constant(v8, [0] * 8) for _ in range(rows)]
        for h in range(2):
            qh = op.bytes(0, op.plus(off, 128 + h * 32), 32)
            for q in range(4):
                ql = op.bytes(0, op.plus(off, h * 64 + (q & 1) * 32), 32)
                lo = b.and_(b.lshr(ql, const(32, (q >> 1) * 4)), const(32, 15))
                hi = b.shl(b.and_(b.lshr(qh, const(32, 2 * q)), const(32, 3)), const(32, 4))
                qv = b.or_(lo, hi)
                t = h * 8 + q * 2  # the quarter's two sub-blocks of 16: lanes 0-3 and 4-7 of the partial sums
                sc = b.shuffle_vector(scales, ir.Constant(vec(i32, 16), None), ir.Constant(v8, [t] * 4 + [t + 1] * 4))
                for r in range(rows):
                    x = op.row_bytes(2, op.plus(n0, r), op.plus(xo, h * 128 + q * 32), 32)
                    accs[r] = b.add(accs[r], scaled_quad_sums(b, qv, x, sc))
        out = []
        for r in range(rows):
            bs = op.row_i32(5, op.plus(n0, r), bo, 16)
            offset = b.mul(reduce_add(b, b.mul(scales, bs)), ir.Constant(i32, 32))
            out.append(b.sub(reduce_add(b, accs[r]), offset))
        return tuple_of(op, out)

    def typer(typingctx: Any, w: Any, o: Any, xq: Any, n0: Any, xo: Any, bsums: Any, bo: Any) -> Any:
        return result(rows)(w, o, xq, n0, xo, bsums, bo), codegen

    return intrinsic(typer)


def nibbles(b: ir.IRBuilder, w: ir.Value) -> ir.Value:
    """The 32 quants of 16 packed bytes: low nibbles first, then the high ones (ggml's legacy layout)."""
    return b.shuffle_vector(
        b.and_(w, const(16, 15)), b.lshr(w, const(16, 4)), ir.Constant(vec(i32, 32), list(range(32)))
    )


def signed_pair(b: ir.IRBuilder, q: ir.Value, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(|q|, x·sign(q)) for signed q: their unsigned × signed products are q·x (|x| ≤ 127, as Q8 gives)."""
    n = q.type.count
    if _AVX2 and n % 32 == 0:  # ggml's AVX2 pair: vpsignb (x·sign(q), 0 where q = 0) and |q|
        v32 = vec(i8, 32)
        sign = declare(b, "llvm.x86.avx2.psign.b", ir.FunctionType(v32, [v32, v32]))
        halves = [ir.Constant(vec(i32, 32), list(range(h, h + 32))) for h in range(0, n, 32)]
        parts = [b.call(sign, [b.shuffle_vector(x, x, h), b.shuffle_vector(q, q, h)]) for h in halves]
        xs = parts[0] if n == 32 else b.shuffle_vector(parts[0], parts[1], ir.Constant(vec(i32, 64), list(range(64))))
        absolute = declare(b, f"llvm.abs.v{n}i8", ir.FunctionType(q.type, [q.type, ir.IntType(1)]))
        return b.call(absolute, [q, ir.Constant(ir.IntType(1), 0)]), xs
    zero = const(n, 0)
    neg = b.icmp_signed("<", q, zero)
    return b.select(neg, b.sub(zero, q), q), b.select(neg, b.sub(zero, x), x)


def legacy_row(kind: str, rows: int) -> Callable[..., Any]:
    """A whole weight row of ``nb`` legacy blocks against ``rows`` activation rows → float32 per row.

    Per block the integer partial sums (``quad_sums``, exact) become floats, are scaled by ``d_w·d_x`` and added
    to an 8-lane float accumulator; one horizontal sum per row. Q4_1/Q5_1 add ``m·s`` per block (scalar).
    """
    size = {"q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24, "q8_0": 34}[kind]
    qs_at = {"q4_0": 2, "q4_1": 4, "q5_0": 6, "q5_1": 8, "q8_0": 2}[kind]
    has_min = kind in ("q4_1", "q5_1")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        op = Operands(context, builder, sig, args)
        b = builder
        n0, nb = args[2], args[6]
        lut = op._array(5).data
        accs = [cgutils.alloca_once_value(b, ir.Constant(vf8, [0.0] * 8)) for _ in range(rows)]
        mins = [cgutils.alloca_once_value(b, ir.Constant(f32, 0.0)) for _ in range(rows)] if has_min else []
        rdata = op._array(0).data

        def f16(off: ir.Value) -> ir.Value:
            return f16_value(b, rdata, off, lut)

        with cgutils.for_range(b, nb) as loop:
            blk = loop.index
            o = b.mul(blk, ir.Constant(blk.type, size))
            d = f16(o)
            if kind == "q8_0":
                q = op.bytes(0, op.plus(o, qs_at), 32)
            else:
                q = nibbles(b, op.bytes(0, op.plus(o, qs_at), 16))
                if kind in ("q5_0", "q5_1"):
                    q = fifth_bits_at(op, q, op.plus(o, 2 if kind == "q5_0" else 4))
                if kind in ("q4_0", "q5_0"):
                    q = b.sub(q, const(32, 8 if kind == "q4_0" else 16))
            mn = f16(op.plus(o, 2)) if has_min else None
            xo = b.mul(blk, ir.Constant(blk.type, 32))
            for r in range(rows):
                nr = op.plus(n0, r)
                x = op.row_bytes(1, nr, xo, 32)
                if kind in ("q4_1", "q5_1"):
                    qa, xa = q, x
                else:
                    qa, xa = signed_pair(b, q, x)
                part = b.sitofp(quad_sums(b, qa, xa), vf8)
                scale = b.fmul(d, b.load(op.row_ptr(3, nr, blk)))
                lanes = b.shuffle_vector(
                    b.insert_element(ir.Constant(vf8, None), scale, ir.Constant(i32, 0)),
                    ir.Constant(vf8, None),
                    ir.Constant(v8, [0] * 8),
                )
                b.store(b.fadd(b.load(accs[r]), b.fmul(part, lanes)), accs[r])
                if mn is not None:
                    b.store(b.fadd(b.load(mins[r]), b.fmul(mn, b.load(op.row_ptr(4, nr, blk)))), mins[r])
        fred = declare(b, "llvm.vector.reduce.fadd.v8f32", ir.FunctionType(f32, [f32, vf8]))
        out = []
        for r in range(rows):
            total = b.call(fred, [ir.Constant(f32, 0.0), b.load(accs[r])])
            out.append(b.fadd(total, b.load(mins[r])) if has_min else total)
        return op.context.make_tuple(b, op.sig.return_type, out) if rows > 1 else out[0]

    def typer(typingctx: Any, w: Any, xq: Any, n0: Any, xd: Any, xs: Any, lut: Any, nb: Any) -> Any:
        res = types.UniTuple(types.float32, rows) if rows > 1 else types.float32
        return res(w, xq, n0, xd, xs, lut, nb), codegen

    return intrinsic(typer)


def offset_tile(kind: str, wrows: int, xrows: int) -> Callable[..., Any]:
    """``wrows`` weight rows from row ``m0`` against ``xrows`` activation rows from ``n0`` → float32 per pair
    (weight row major), for the types whose quants carry an offset: Q4_0 (q − 8), Q5_0 (q − 16), Q8_0 (q, read
    as the unsigned q + 128 and offset by −128).

    The unsigned quants go straight into ``vpdpbusd`` with the accumulator starting at ``offs``' lanes —
    ``−c·Σ_4 x`` per group of four activations, prepared once per product — so each lane is exactly the lane
    of :func:`legacy_row` (``Σ (q − c)·x`` over the same four bytes), without the sign juggling; each unpacked
    weight block and each activation block is used for every pair of the tile. Weight rows go two to a
    512-bit vector (one row's 8 lanes in each half, the activation block in both), and every lane takes
    :func:`legacy_row`'s float steps in the same order, so the results are the same bits.
    """
    size, qs_at = {"q4_0": (18, 2), "q5_0": (22, 6), "q8_0": (34, 2)}[kind]
    # without VNNI, Q8_0's q + 128 would overflow the int16 pairs of :func:`pair_quads`: its quants go in signed
    # instead, as ``(|q|, x·sign(q))`` from a zero start (the same exact integer sums, hence the same bits)
    signed = kind == "q8_0" and not HAS_VNNI
    groups = [(r, r + 1) for r in range(0, wrows - 1, 2)] + ([(wrows - 1,)] if wrows % 2 else [])

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        op = Operands(context, builder, sig, args)
        b = builder
        m0, n0, nb = args[1], args[3], args[7]
        lut = op._array(6).data
        vfs = {len(g): ir.VectorType(f32, 8 * len(g)) for g in groups}
        accs = [[cgutils.alloca_once_value(b, ir.Constant(vfs[len(g)], [0.0] * 8 * len(g))) for _ in range(xrows)]
                for g in groups]  # fmt: skip
        zero = ir.Constant(m0.type, 0)
        # the rows' first elements, outside the block loop (fewer live values: no spills in the loop)
        wbase = [op.row_ptr(0, op.plus(m0, r), zero) for r in range(wrows)]
        # the same bytes of the next tile's rows, prefetched while this tile runs: the hardware prefetcher
        # follows one stream, not ``wrows`` interleaved ones (a prefetch past the matrix's end cannot fault)
        width = cgutils.unpack_tuple(b, op._array(0).shape, 2)[1]
        skip = b.mul(width, ir.Constant(width.type, wrows))
        pbase = [b.gep(wbase[r], [skip]) for r in range(wrows)]
        xbase = [op.row_ptr(2, op.plus(n0, n), zero) for n in range(xrows)]
        dbase = [op.row_ptr(4, op.plus(n0, n), zero) for n in range(xrows)]
        obase = [op.row_ptr(5, op.plus(n0, n), zero) for n in range(xrows)]

        def load(base: ir.Value, off: ir.Value, t: ir.Type, align: int = 1) -> ir.Value:
            return b.load(b.bitcast(b.gep(base, [off], inbounds=True), t.as_pointer()), align=align)

        def f16(r: int, off: ir.Value) -> ir.Value:
            return f16_value(b, wbase[r], off, lut)

        def quants(r: int, o: ir.Value) -> ir.Value:
            if kind == "q8_0":
                raw = load(wbase[r], op.plus(o, qs_at), vec(i8, 32))
                return raw if signed else b.xor(raw, const(32, 0x80))
            q = nibbles(b, load(wbase[r], op.plus(o, qs_at), vec(i8, 16)))
            if kind == "q5_0":
                q = fifth_bits(op, q, load(wbase[r], op.plus(o, 2), i32))
            return q

        def twice(v: ir.Value) -> ir.Value:  # a vector next to itself
            n = v.type.count
            return b.shuffle_vector(v, v, ir.Constant(vec(i32, 2 * n), list(range(n)) * 2))

        with cgutils.for_range(b, nb) as loop:
            blk = loop.index
            o = b.mul(blk, ir.Constant(blk.type, size))
            xo = b.mul(blk, ir.Constant(blk.type, 32))
            ds = [f16(r, o) for r in range(wrows)]
            for r in range(wrows):
                prefetch(b, b.gep(pbase[r], [o]))
            qs = []
            for g in groups:
                q = quants(g[0], o)
                if len(g) == 2:
                    q = b.shuffle_vector(q, quants(g[1], o), ir.Constant(vec(i32, 64), list(range(64))))
                qs.append(q)
            for n in range(xrows):
                x = load(xbase[n], xo, vec(i8, 32))
                base = load(obase[n], b.mul(blk, ir.Constant(blk.type, 8)), v8, 4)
                xd = b.load(b.gep(dbase[n], [blk], inbounds=True))
                x2, base2 = (twice(x), twice(base)) if len(groups[0]) == 2 else (x, base)
                for gi, g in enumerate(groups):
                    wide = len(g) == 2
                    vf = vfs[len(g)]
                    xg, start = (x2, base2) if wide else (x, base)
                    if signed:
                        qa, xa = signed_pair(b, qs[gi], xg)
                        start = ir.Constant(start.type, [0] * start.type.count)
                    else:
                        qa, xa = qs[gi], xg
                    # Q8_0's unsigned q + 128 is not small: where VNNI cannot take 64 bytes, the exact sums
                    small = kind != "q8_0" or signed
                    part = b.sitofp(quad_sums_from(b, start, qa, xa, small), vf)
                    lanes = ir.Constant(vf, None)
                    for h, r in enumerate(g):
                        lanes = b.insert_element(lanes, b.fmul(ds[r], xd), ir.Constant(i32, h))
                    spread = ir.Constant(vec(i32, 8 * len(g)), [h for h in range(len(g)) for _ in range(8)])
                    lanes = b.shuffle_vector(lanes, ir.Constant(vf, None), spread)  # each row's scale × 8
                    b.store(b.fadd(b.load(accs[gi][n]), b.fmul(part, lanes)), accs[gi][n])
        fred = declare(b, "llvm.vector.reduce.fadd.v8f32", ir.FunctionType(f32, [f32, vf8]))
        zf = ir.Constant(f32, 0.0)
        sums: dict[tuple[int, int], ir.Value] = {}
        for gi, g in enumerate(groups):
            for n in range(xrows):
                acc = b.load(accs[gi][n])
                for h, r in enumerate(g):
                    half = b.shuffle_vector(acc, acc, ir.Constant(v8, list(range(8 * h, 8 * h + 8))))
                    sums[r, n] = b.call(fred, [zf, half if len(g) == 2 else acc])
        out = [sums[r, n] for r in range(wrows) for n in range(xrows)]
        return op.context.make_tuple(b, op.sig.return_type, out) if len(out) > 1 else out[0]

    def typer(typingctx: Any, w: Any, m0: Any, xq: Any, n0: Any, xd: Any, offs: Any, lut: Any, nb: Any) -> Any:
        n = wrows * xrows
        res = types.UniTuple(types.float32, n) if n > 1 else types.float32
        return res(w, m0, xq, n0, xd, offs, lut, nb), codegen

    return intrinsic(typer)


def quad_sums_from(builder: ir.IRBuilder, acc: ir.Value, q: ir.Value, x: ir.Value, small: bool) -> ir.Value:
    """``acc`` plus :func:`quad_sums` for 32 or 64 bytes (one ``vpdpbusd`` with VNNI); ``small`` as in
    :func:`pair_quads` (without it, and without VNNI, any unsigned bytes)."""
    n = q.type.count
    vn = vec(i32, n // 4)
    if HAS_VNNI and (n == 32 or _VNNI512):
        fn = declare(builder, f"llvm.x86.avx512.vpdpbusd.{8 * n}", ir.FunctionType(vn, [vn, vn, vn]))
        return builder.call(fn, [acc, builder.bitcast(q, vn), builder.bitcast(x, vn)])
    return builder.add(acc, pair_quads(builder, q, x, small))


def fifth_bits_at(op: Operands, q: ir.Value, at: ir.Value) -> ir.Value:
    """``fifth_bits`` with the 32-bit mask read from the row at byte ``at``."""
    b = op.builder
    ptr = b.gep(op._array(0).data, [at], inbounds=True)
    qh = b.load(b.bitcast(ptr, i32.as_pointer()), align=1)
    return fifth_bits(op, q, qh)


# one activation row (→ int32, or (int32, int32) for Q4_K/Q5_K) and four rows (→ a tuple of 4 or 8)
dot_q4_k: Final = k45(False, 1)  #: Q4_K super-block: (Σ scale·Σq·x, Σ min·bsum)
dot_q4_k_4: Final = k45(False, 4)
dot_q5_k: Final = k45(True, 1)  #: Q5_K super-block: as Q4_K
dot_q5_k_4: Final = k45(True, 4)
dot_q6_k: Final = q6k(1)  #: Q6_K super-block: Σ scale·Σ(q−32)·x
dot_q6_k_4: Final = q6k(4)
#: legacy type name → (whole row against 1 activation row, against 4 rows), each → float32
ROW_DOTS: Final = {
    name: (legacy_row(name, 1), legacy_row(name, 4)) for name in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0")
}
#: Q4_0 / Q5_0 / Q8_0: (weight rows, activation rows) → the tile intrinsic (``offset_tile``)
TILE_DOTS: Final = {
    name: {(wr, xr): offset_tile(name, wr, xr) for wr in (1, 4) for xr in (1, 4)} for name in ("q4_0", "q5_0", "q8_0")
}
