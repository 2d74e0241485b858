"""Integer block dot products as explicit LLVM vector IR (numba intrinsics), the core of every quantized kernel.

Each intrinsic loads the packed quants of one block (legacy types: 32 weights) or super-block (K-quants: 256) as
byte vectors, unpacks them with vector shifts and masks into unsigned 8-bit lanes **once**, and dots them with the
int8 activations of ``R`` rows (``R`` = 1 or 4: several activation rows share the unpacking). Products are written
as ``reduce.add(mul(zext q, sext x))``, which LLVM lowers to what the target has (``vpdpbusd`` with AVX-VNNI /
AVX512-VNNI, ``pmaddubsw`` + ``pmaddwd`` with AVX2, widening multiplies elsewhere), so the Python kernels around
these calls stay portable. Plain numba loops cannot get there: numba widens every integer product to int64, which
quarters the SIMD width (Q4_0 matrix-vector: 1.5 ms as a loop, 0.7 ms with these intrinsics, on one core).

Where sub-blocks carry their own scales (K-quants), one horizontal sum per sub-block would cost more than the
products: the K-quant intrinsics keep 4-byte partial sums in a vector (``vpdpbusd``'s lanes), multiply them by the
scales lane-wise and reduce once per super-block. Where the CPU has VNNI (and numba targets the host CPU) that uses
the ``vpdpbusd`` intrinsic; elsewhere (or with ``GGML_CPU_VNNI=0``) the same partial sums are written generically
(correct on every target, slower).

Operands: ``w`` a weight row (uint8, or int8 for Q8_0), ``wo`` the block's byte offset in it, ``xq`` the int8
activations (N, K) C-contiguous, ``n0`` the first of the ``R`` activation rows, ``xo`` the block's first column,
``bsums`` Q8_K's int32 sums per 16 (N, K/16) and ``bo`` the super-block's first of them. Bounds are not checked:
the kernels index whole blocks of arrays whose shapes the Python entry points validate.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ggml_cpu.kernels.qdot import _jit

__all__ = [
    "HAS_VNNI",
    "dot_i8",
    "dot_i8_4",
    "dot_nib",
    "dot_nib5",
    "dot_nib5_4",
    "dot_nib_4",
    "dot_q4_k",
    "dot_q4_k_4",
    "dot_q5_k",
    "dot_q5_k_4",
    "dot_q6_k",
    "dot_q6_k_4",
]

#: True when the kernels use the x86 ``vpdpbusd`` instruction directly (set when the intrinsics are built)
HAS_VNNI = False

# one activation row (→ int32, or (int32, int32) for Q4_K/Q5_K) and four rows (→ a tuple of 4 or 8)
dot_nib: Any = None  #: Q4_0, Q4_1: Σ (nibble quants)·x over one block of 32
dot_nib_4: Any = None
dot_nib5: Any = None  #: Q5_0, Q5_1: the same with the fifth bits from the 32-bit ``qh`` argument
dot_nib5_4: Any = None
dot_i8: Any = None  #: Q8_0: Σ q·x with signed quants
dot_i8_4: Any = None
dot_q4_k: Any = None  #: Q4_K super-block: (Σ scale·Σq·x, Σ min·bsum)
dot_q4_k_4: Any = None
dot_q5_k: Any = None  #: Q5_K super-block: as Q4_K
dot_q5_k_4: Any = None
dot_q6_k: Any = None  #: Q6_K super-block: Σ scale·Σ(q−32)·x
dot_q6_k_4: Any = None


def _build() -> None:
    import llvmlite.binding as llvm
    import numba
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.core.extending import intrinsic

    i8, i32 = ir.IntType(8), ir.IntType(32)
    v8 = ir.VectorType(i32, 8)

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

    host = getattr(numba.config, "CPU_NAME", None) is None  # numba compiles for this very CPU
    feats = llvm.get_host_cpu_features() if host else {}
    vnni = bool(feats.get("avxvnni") or (feats.get("avx512vnni") and feats.get("avx512vl")))
    vnni = vnni and os.environ.get("GGML_CPU_VNNI", "1") != "0"

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

    def dot(builder: ir.IRBuilder, q: ir.Value, x: ir.Value, q_signed: bool = False) -> ir.Value:
        """Σ q·x as int32 (the pattern LLVM maps to vpdpbusd / pmaddubsw)."""
        wide = vec(i32, q.type.count)
        qw = builder.sext(q, wide) if q_signed else builder.zext(q, wide)
        return reduce_add(builder, builder.mul(qw, builder.sext(x, wide)))

    def quad_sums(builder: ir.IRBuilder, q: ir.Value, x: ir.Value) -> ir.Value:
        """<8 x i32>: lane i = Σ_{j=4i}^{4i+3} q[j]·x[j] for 32 unsigned q and signed x bytes (``vpdpbusd``)."""
        if vnni:
            fn = declare(builder, "llvm.x86.avx512.vpdpbusd.256", ir.FunctionType(v8, [v8, v8, v8]))
            return builder.call(fn, [ir.Constant(v8, [0] * 8), builder.bitcast(q, v8), builder.bitcast(x, v8)])
        prod = builder.mul(builder.zext(q, vec(i32, 32)), builder.sext(x, vec(i32, 32)))
        undef = ir.Constant(vec(i32, 32), None)
        total = None
        for k in range(4):
            part = builder.shuffle_vector(prod, undef, ir.Constant(v8, [4 * i + k for i in range(8)]))
            total = part if total is None else builder.add(total, part)
        return total

    def broadcast(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
        first = builder.insert_element(ir.Constant(v8, None), v, ir.Constant(i32, 0))
        return builder.shuffle_vector(first, ir.Constant(v8, None), ir.Constant(v8, [0] * 8))

    def tuple_of(op: Operands, values: list[ir.Value]) -> ir.Value:
        return op.context.make_tuple(op.builder, op.sig.return_type, values) if len(values) > 1 else values[0]

    def result(n: int) -> Any:
        return types.UniTuple(types.int32, n) if n > 1 else types.int32

    # ---- unpacking: each returns [(q vector of 32 unsigned (or signed) bytes, activation column offset), ...]

    def unpack_nib(op: Operands) -> ir.Value:
        b = op.builder
        w = op.bytes(0, op.args[1], 16)
        lo, hi = b.and_(w, const(16, 15)), b.lshr(w, const(16, 4))
        return b.shuffle_vector(lo, hi, ir.Constant(vec(i32, 32), list(range(32))))

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

    def legacy(kind: str, rows: int) -> Callable[..., Any]:
        """A block of 32 against ``rows`` activation rows → ``rows`` int32 (Q4_x: nib, Q5_x: nib5, Q8_0: i8)."""

        def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
            op = Operands(context, builder, sig, args)
            if kind == "i8":
                q = op.bytes(0, args[1], 32)
            elif kind == "nib":
                q = unpack_nib(op)
            else:
                q = fifth_bits(op, unpack_nib(op), args[2])
            xi = 3 if kind == "nib5" else 2  # position of xq among the arguments
            n0, xo = args[xi + 1], args[xi + 2]
            sums = [dot(builder, q, op.row_bytes(xi, op.plus(n0, r), xo, 32), kind == "i8") for r in range(rows)]
            return tuple_of(op, sums)

        if kind == "nib5":

            def typer5(typingctx: Any, w: Any, wo: Any, qh: Any, xq: Any, n0: Any, xo: Any) -> Any:
                return result(rows)(w, wo, qh, xq, n0, xo), codegen

            return intrinsic(typer5)

        def typer(typingctx: Any, w: Any, wo: Any, xq: Any, n0: Any, xo: Any) -> Any:
            return result(rows)(w, wo, xq, n0, xo), codegen

        return intrinsic(typer)

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
                    accs[r] = b.add(accs[r], b.mul(quad_sums(b, q, x), sc))
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
                    sc = b.shuffle_vector(
                        scales, ir.Constant(vec(i32, 16), None), ir.Constant(v8, [t] * 4 + [t + 1] * 4)
                    )
                    for r in range(rows):
                        x = op.row_bytes(2, op.plus(n0, r), op.plus(xo, h * 128 + q * 32), 32)
                        accs[r] = b.add(accs[r], b.mul(quad_sums(b, qv, x), sc))
            out = []
            for r in range(rows):
                bs = op.row_i32(5, op.plus(n0, r), bo, 16)
                offset = b.mul(reduce_add(b, b.mul(scales, bs)), ir.Constant(i32, 32))
                out.append(b.sub(reduce_add(b, accs[r]), offset))
            return tuple_of(op, out)

        def typer(typingctx: Any, w: Any, o: Any, xq: Any, n0: Any, xo: Any, bsums: Any, bo: Any) -> Any:
            return result(rows)(w, o, xq, n0, xo, bsums, bo), codegen

        return intrinsic(typer)

    global HAS_VNNI, dot_nib, dot_nib_4, dot_nib5, dot_nib5_4, dot_i8, dot_i8_4
    global dot_q4_k, dot_q4_k_4, dot_q5_k, dot_q5_k_4, dot_q6_k, dot_q6_k_4
    HAS_VNNI = vnni
    dot_nib, dot_nib_4 = legacy("nib", 1), legacy("nib", 4)
    dot_nib5, dot_nib5_4 = legacy("nib5", 1), legacy("nib5", 4)
    dot_i8, dot_i8_4 = legacy("i8", 1), legacy("i8", 4)
    dot_q4_k, dot_q4_k_4 = k45(False, 1), k45(False, 4)
    dot_q5_k, dot_q5_k_4 = k45(True, 1), k45(True, 4)
    dot_q6_k, dot_q6_k_4 = q6k(1), q6k(4)


if _jit.enabled():
    try:
        _build()
    except Exception as exc:  # noqa: BLE001 - no intrinsics: the kernels that use them fail to compile and fall back
        _jit.note_failure("simd", exc)
