"""Integer block dot products as explicit LLVM vector IR (numba intrinsics), the core of every quantized kernel.

Each intrinsic loads the packed quants of one (sub-)block as a byte vector, unpacks them with vector shifts and
masks into unsigned 8-bit lanes, and returns ``Σ q[j]·x[j]`` as int32 against int8 activations, written as
``reduce.add(mul(zext q, sext x))``. LLVM lowers that pattern to the best the target has (``vpdpbusd`` with
AVX-VNNI / AVX512-VNNI, ``pmaddubsw`` + ``pmaddwd`` with AVX2, ``udot``/``sdot`` or widening multiplies on ARM), so
the Python kernels around these calls stay portable. Plain numba loops cannot get there: numba widens every
integer product to int64, which quarters the SIMD width (Q4_0 matrix-vector: 1.5 ms as a loop, 0.7 ms here).

Bounds: the intrinsics read ``arr[off : off + lanes]`` without checks; the kernels index whole blocks of arrays
whose shapes the Python entry points validate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ggml_cpu.kernels.qdot import _jit

__all__ = ["dot_i8x32", "dot_nib", "dot_nib5", "dot_q", "dot_q16", "dot_q_halves"]

dot_i8x32: Any = None
dot_nib: Any = None
dot_nib5: Any = None
dot_q: Any = None
dot_q16: Any = None
dot_q_halves: Any = None


def _build() -> None:
    global dot_i8x32, dot_nib, dot_nib5, dot_q, dot_q16, dot_q_halves
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    i8, i32 = ir.IntType(8), ir.IntType(32)

    def vec(t: ir.Type, n: int) -> ir.VectorType:
        return ir.VectorType(t, n)

    def splat(builder: ir.IRBuilder, value: ir.Value, n: int) -> ir.Value:
        """``value`` (an integer of any width) truncated to i8 and broadcast to ``n`` lanes."""
        v8 = builder.trunc(value, i8) if value.type.width > 8 else value
        undef = ir.Constant(vec(i8, n), None)
        first = builder.insert_element(undef, v8, ir.Constant(i32, 0))
        return builder.shuffle_vector(first, undef, ir.Constant(vec(i32, n), [0] * n))

    def load(context: Any, builder: ir.IRBuilder, aty: Any, arr: ir.Value, off: ir.Value, n: int) -> ir.Value:
        data = context.make_array(aty)(context, builder, arr).data
        ptr = builder.gep(data, [off], inbounds=True)
        return builder.load(builder.bitcast(ptr, vec(i8, n).as_pointer()), align=1)

    def reduce_dot(builder: ir.IRBuilder, q: ir.Value, x: ir.Value, n: int, q_signed: bool = False) -> ir.Value:
        wide = vec(i32, n)
        qw = builder.sext(q, wide) if q_signed else builder.zext(q, wide)
        prod = builder.mul(qw, builder.sext(x, wide))
        name = f"llvm.vector.reduce.add.v{n}i32"
        mod = builder.module
        fn = mod.globals.get(name) or ir.Function(mod, ir.FunctionType(i32, [wide]), name)
        return builder.call(fn, [prod])

    def const(n: int, value: int) -> ir.Constant:
        return ir.Constant(vec(i8, n), [value] * n)

    @intrinsic
    def _dot_nib(typingctx: Any, w: Any, wo: Any, x: Any, xo: Any) -> Any:
        """Σ_j<16 (w[wo+j] & 15)·x[xo+j] + (w[wo+j] >> 4)·x[xo+16+j]  (Q4_0, Q4_1)."""

        def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
            wv = load(context, builder, sig.args[0], args[0], args[1], 16)
            lo = builder.and_(wv, const(16, 15))
            hi = builder.lshr(wv, const(16, 4))
            q = builder.shuffle_vector(lo, hi, ir.Constant(vec(i32, 32), list(range(32))))
            return reduce_dot(builder, q, load(context, builder, sig.args[2], args[2], args[3], 32), 32)

        return types.int32(w, wo, x, xo), codegen

    @intrinsic
    def _dot_nib5(typingctx: Any, w: Any, wo: Any, qh: Any, x: Any, xo: Any) -> Any:
        """Like ``dot_nib`` with a fifth bit per quant: bit j of the 32-bit ``qh`` for quant j  (Q5_0, Q5_1)."""

        def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
            wv = load(context, builder, sig.args[0], args[0], args[1], 16)
            lo = builder.and_(wv, const(16, 15))
            hi = builder.lshr(wv, const(16, 4))
            q = builder.shuffle_vector(lo, hi, ir.Constant(vec(i32, 32), list(range(32))))
            # bit j of qh → 16 in lane j, in byte lanes: lane j holds byte j/8 of qh, tested against 1 << (j % 8)
            h32 = builder.trunc(args[2], i32) if args[2].type.width > 32 else args[2]
            hbytes = builder.bitcast(h32, vec(i8, 4))
            spread = builder.shuffle_vector(
                hbytes, ir.Constant(vec(i8, 4), None), ir.Constant(vec(i32, 32), [j // 8 for j in range(32)])
            )
            bit = ir.Constant(vec(i8, 32), [1 << (j % 8) for j in range(32)])
            has = builder.icmp_unsigned("!=", builder.and_(spread, bit), const(32, 0))
            q = builder.or_(q, builder.select(has, const(32, 16), const(32, 0)))
            return reduce_dot(builder, q, load(context, builder, sig.args[3], args[3], args[4], 32), 32)

        return types.int32(w, wo, qh, x, xo), codegen

    @intrinsic
    def _dot_i8x32(typingctx: Any, w: Any, wo: Any, x: Any, xo: Any) -> Any:
        """Σ_j<32 w[wo+j]·x[xo+j] with both int8 (the bytes of ``w`` read as signed)  (Q8_0)."""

        def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
            wv = load(context, builder, sig.args[0], args[0], args[1], 32)
            return reduce_dot(builder, wv, load(context, builder, sig.args[2], args[2], args[3], 32), 32, True)

        return types.int32(w, wo, x, xo), codegen

    def make_dot_q(n: int) -> Callable[..., Any]:
        @intrinsic
        def _dot_q(
            typingctx: Any, a: Any, ao: Any, ash: Any, b: Any, bo: Any, bsh: Any, bmask: Any, x: Any, xo: Any
        ) -> Any:
            """Σ_j<n q_j·x[xo+j], q_j = ((a[ao+j] >> ash) & 15) | (((b[bo+j] >> bsh) & bmask) << 4)  (K-quants)."""

            def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
                av = load(context, builder, sig.args[0], args[0], args[1], n)
                q = builder.and_(builder.lshr(av, splat(builder, args[2], n)), const(n, 15))
                bv = load(context, builder, sig.args[3], args[3], args[4], n)
                hb = builder.and_(builder.lshr(bv, splat(builder, args[5], n)), splat(builder, args[6], n))
                q = builder.or_(q, builder.shl(hb, const(n, 4)))
                return reduce_dot(builder, q, load(context, builder, sig.args[7], args[7], args[8], n), n)

            return types.int32(a, ao, ash, b, bo, bsh, bmask, x, xo), codegen

        return _dot_q

    @intrinsic
    def _dot_q_halves(
        typingctx: Any, a: Any, ao: Any, ash: Any, b: Any, bo: Any, bsh: Any, bmask: Any, x: Any, xo: Any
    ) -> Any:
        """``dot_q`` over 32 lanes, returned as the two sums of lanes 0-15 and 16-31 (Q6_K's sub-blocks of 16)."""

        def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
            av = load(context, builder, sig.args[0], args[0], args[1], 32)
            q = builder.and_(builder.lshr(av, splat(builder, args[2], 32)), const(32, 15))
            bv = load(context, builder, sig.args[3], args[3], args[4], 32)
            hb = builder.and_(builder.lshr(bv, splat(builder, args[5], 32)), splat(builder, args[6], 32))
            q = builder.or_(q, builder.shl(hb, const(32, 4)))
            xv = load(context, builder, sig.args[7], args[7], args[8], 32)
            # two full-width dot products (the pattern LLVM maps to vpdpbusd): lanes 0-15 only, and all lanes
            low = builder.and_(q, ir.Constant(vec(i8, 32), [255] * 16 + [0] * 16))
            first = reduce_dot(builder, low, xv, 32)
            halves = [first, builder.sub(reduce_dot(builder, q, xv, 32), first)]
            pair = context.make_tuple(builder, sig.return_type, halves)
            return pair

        return types.UniTuple(types.int32, 2)(a, ao, ash, b, bo, bsh, bmask, x, xo), codegen

    dot_nib, dot_nib5, dot_i8x32 = _dot_nib, _dot_nib5, _dot_i8x32
    dot_q, dot_q16, dot_q_halves = make_dot_q(32), make_dot_q(16), _dot_q_halves


if _jit.enabled():
    try:
        _build()
    except Exception as exc:  # noqa: BLE001 - no intrinsics: the kernels that use them fail to compile and fall back
        _jit.note_failure("simd", exc)
