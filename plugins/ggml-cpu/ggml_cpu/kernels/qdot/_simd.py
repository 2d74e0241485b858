"""Integer block dot products as explicit LLVM vector IR (numba intrinsics), the core of every quantized kernel.

Each intrinsic loads the packed quants of one (sub-)block as a byte vector, unpacks them with vector shifts and
masks into unsigned 8-bit lanes, and returns ``Σ q[j]·x[j]`` as int32 against int8 activations, written as
``reduce.add(mul(zext q, sext x))``. LLVM lowers that pattern to the best the target has (``vpdpbusd`` with
AVX-VNNI / AVX512-VNNI, ``pmaddubsw`` + ``pmaddwd`` with AVX2, ``udot``/``sdot`` or widening multiplies on ARM), so
the Python kernels around these calls stay portable. Plain numba loops cannot get there: numba widens every
integer product to int64, which quarters the SIMD width (Q4_0 matrix-vector: 1.5 ms as a loop, 0.7 ms here).

Where sub-blocks carry their own scales (Q6_K: 16 per super-block), one horizontal sum per sub-block costs more
than the products. :data:`dot_q6_k_block` instead keeps 4-byte partial sums in a vector (``vpdpbusd``'s lanes),
multiplies them by the scales lane-wise and reduces once per super-block. Where the CPU has VNNI (and numba
targets the host CPU) that uses the ``vpdpbusd`` intrinsic; elsewhere (or with ``GGML_CPU_VNNI=0``) the same
partial sums are written generically (correct on every target, slower).

Bounds: the intrinsics read ``arr[off : off + lanes]`` without checks; the kernels index whole blocks of arrays
whose shapes the Python entry points validate.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ggml_cpu.kernels.qdot import _jit

__all__ = [
    "HAS_VNNI",
    "dot_i8x32",
    "dot_nib",
    "dot_nib5",
    "dot_q",
    "dot_q4_k_block",
    "dot_q5_k_block",
    "dot_q6_k_block",
    "dot_q16",
    "dot_q_halves",
]

#: True when the kernels use the x86 ``vpdpbusd`` instruction directly (set by ``_build``)
HAS_VNNI = False
dot_q4_k_block: Any = None
dot_q5_k_block: Any = None
dot_q6_k_block: Any = None

dot_i8x32: Any = None
dot_nib: Any = None
dot_nib5: Any = None
dot_q: Any = None
dot_q16: Any = None
dot_q_halves: Any = None


def _build() -> None:
    global dot_i8x32, dot_nib, dot_nib5, dot_q, dot_q16, dot_q_halves, HAS_VNNI
    global dot_q4_k_block, dot_q5_k_block, dot_q6_k_block
    import llvmlite.binding as llvm
    import numba
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

    host = getattr(numba.config, "CPU_NAME", None) is None  # numba compiles for this very CPU
    feats = llvm.get_host_cpu_features() if host else {}
    vnni = bool(feats.get("avxvnni") or (feats.get("avx512vnni") and feats.get("avx512vl")))
    vnni = vnni and os.environ.get("GGML_CPU_VNNI", "1") != "0"

    def quad_sums(builder: ir.IRBuilder, q: ir.Value, x: ir.Value) -> ir.Value:
        """<8 x i32>: lane i = Σ_{j=4i}^{4i+3} q[j]·x[j] for 32 unsigned q and signed x bytes (``vpdpbusd``)."""
        v8 = vec(i32, 8)
        if vnni:
            name = "llvm.x86.avx512.vpdpbusd.256"
            mod = builder.module
            fn = mod.globals.get(name) or ir.Function(mod, ir.FunctionType(v8, [v8, v8, v8]), name)
            zero = ir.Constant(v8, [0] * 8)
            return builder.call(fn, [zero, builder.bitcast(q, v8), builder.bitcast(x, v8)])
        prod = builder.mul(builder.zext(q, vec(i32, 32)), builder.sext(x, vec(i32, 32)))
        undef = ir.Constant(vec(i32, 32), None)
        total = None
        for k in range(4):
            part = builder.shuffle_vector(prod, undef, ir.Constant(v8, [4 * i + k for i in range(8)]))
            total = part if total is None else builder.add(total, part)
        return total

    def reduce_i32(builder: ir.IRBuilder, v: ir.Value, n: int) -> ir.Value:
        name = f"llvm.vector.reduce.add.v{n}i32"
        mod = builder.module
        fn = mod.globals.get(name) or ir.Function(mod, ir.FunctionType(i32, [vec(i32, n)]), name)
        return builder.call(fn, [v])

    @intrinsic
    def _dot_q6_k_block(typingctx: Any, row: Any, o: Any, x: Any, xo: Any, bsums: Any, bo: Any) -> Any:
        """One Q6_K super-block at ``row[o:o+210]`` against ``x[xo:xo+256]`` with Q8_K ``bsums[bo:bo+16]``:
        ``Σ_t scale_t · Σ_{j in t} (q_j - 32)·x_j`` over its 16 sub-blocks ``t`` (an int32)."""

        def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
            rty, xty, bty = sig.args[0], sig.args[2], sig.args[4]
            off = args[1]

            def at(base: ir.Value, k: int) -> ir.Value:
                return builder.add(base, ir.Constant(base.type, k))

            scales = builder.sext(load(context, builder, rty, args[0], at(off, 192), 16), vec(i32, 16))
            acc = ir.Constant(vec(i32, 8), [0] * 8)
            for h in range(2):
                qh = load(context, builder, rty, args[0], at(off, 128 + h * 32), 32)
                for q in range(4):
                    ql = load(context, builder, rty, args[0], at(off, h * 64 + (q & 1) * 32), 32)
                    lo = builder.and_(builder.lshr(ql, const(32, (q >> 1) * 4)), const(32, 15))
                    hi = builder.shl(builder.and_(builder.lshr(qh, const(32, 2 * q)), const(32, 3)), const(32, 4))
                    xv = load(context, builder, xty, args[2], at(args[3], h * 128 + q * 32), 32)
                    t = h * 8 + q * 2
                    pick = ir.Constant(vec(i32, 8), [t] * 4 + [t + 1] * 4)
                    sc = builder.shuffle_vector(scales, ir.Constant(vec(i32, 16), None), pick)
                    acc = builder.add(acc, builder.mul(quad_sums(builder, builder.or_(lo, hi), xv), sc))
            bdata = context.make_array(bty)(context, builder, args[4]).data
            bptr = builder.gep(bdata, [args[5]], inbounds=True)
            bs = builder.load(builder.bitcast(bptr, vec(i32, 16).as_pointer()), align=4)
            offset = builder.mul(reduce_i32(builder, builder.mul(scales, bs), 16), ir.Constant(i32, 32))
            return builder.sub(reduce_i32(builder, acc, 8), offset)

        return types.int32(row, o, x, xo, bsums, bo), codegen

    def make_k45(with_qh: bool) -> Callable[..., Any]:
        @intrinsic
        def _dot_k45_block(typingctx: Any, row: Any, o: Any, x: Any, xo: Any, bsums: Any, bo: Any) -> Any:
            """One Q4_K (``with_qh`` False) or Q5_K super-block against ``x[xo:xo+256]`` and Q8_K ``bsums``:
            ``(Σ_j scale_j · Σ_{i in j} q_i·x_i,  Σ_j min_j · bsum_j)`` over its 8 sub-blocks of 32."""

            def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
                rty, xty, bty = sig.args[0], sig.args[2], sig.args[4]
                off = args[1]

                def at(base: ir.Value, k: int) -> ir.Value:
                    return builder.add(base, ir.Constant(base.type, k))

                data = context.make_array(rty)(context, builder, args[0]).data

                def byte(k: int) -> ir.Value:  # scales[k] (the 12 packed bytes at o+4) as i32
                    ptr = builder.gep(data, [at(off, 4 + k)], inbounds=True)
                    return builder.zext(builder.load(ptr), i32)

                def c(v: int) -> ir.Constant:
                    return ir.Constant(i32, v)

                scs, mns = [], []
                for j in range(8):  # ggml's get_scale_min_k4
                    if j < 4:
                        scs.append(builder.and_(byte(j), c(63)))
                        mns.append(builder.and_(byte(j + 4), c(63)))
                    else:
                        hi_s = builder.shl(builder.lshr(byte(j - 4), c(6)), c(4))
                        hi_m = builder.shl(builder.lshr(byte(j), c(6)), c(4))
                        scs.append(builder.or_(builder.and_(byte(j + 4), c(15)), hi_s))
                        mns.append(builder.or_(builder.lshr(byte(j + 4), c(4)), hi_m))
                v8 = vec(i32, 8)
                acc = ir.Constant(v8, [0] * 8)
                qs0 = 48 if with_qh else 16
                qh = load(context, builder, rty, args[0], at(off, 16), 32) if with_qh else None
                for j in range(8):
                    qs = load(context, builder, rty, args[0], at(off, qs0 + (j >> 1) * 32), 32)
                    q = builder.and_(builder.lshr(qs, const(32, (j & 1) * 4)), const(32, 15))
                    if qh is not None:
                        bit = builder.and_(builder.lshr(qh, const(32, j)), const(32, 1))
                        q = builder.or_(q, builder.shl(bit, const(32, 4)))
                    xv = load(context, builder, xty, args[2], at(args[3], j * 32), 32)
                    sc = builder.shuffle_vector(
                        builder.insert_element(ir.Constant(v8, None), scs[j], c(0)),
                        ir.Constant(v8, None),
                        ir.Constant(v8, [0] * 8),
                    )
                    acc = builder.add(acc, builder.mul(quad_sums(builder, q, xv), sc))
                bdata = context.make_array(bty)(context, builder, args[4]).data
                bptr = builder.gep(bdata, [args[5]], inbounds=True)
                bs = builder.load(builder.bitcast(bptr, vec(i32, 16).as_pointer()), align=4)
                undef16 = ir.Constant(vec(i32, 16), None)
                pairs = builder.add(
                    builder.shuffle_vector(bs, undef16, ir.Constant(v8, [2 * i for i in range(8)])),
                    builder.shuffle_vector(bs, undef16, ir.Constant(v8, [2 * i + 1 for i in range(8)])),
                )
                mv = ir.Constant(v8, None)
                for j in range(8):
                    mv = builder.insert_element(mv, mns[j], c(j))
                summ = reduce_i32(builder, builder.mul(mv, pairs), 8)
                return context.make_tuple(builder, sig.return_type, [reduce_i32(builder, acc, 8), summ])

            return types.UniTuple(types.int32, 2)(row, o, x, xo, bsums, bo), codegen

        return _dot_k45_block

    HAS_VNNI = vnni
    dot_q4_k_block, dot_q5_k_block = make_k45(False), make_k45(True)
    dot_q6_k_block = _dot_q6_k_block
    dot_nib, dot_nib5, dot_i8x32 = _dot_nib, _dot_nib5, _dot_i8x32
    dot_q, dot_q16, dot_q_halves = make_dot_q(32), make_dot_q(16), _dot_q_halves


if _jit.enabled():
    try:
        _build()
    except Exception as exc:  # noqa: BLE001 - no intrinsics: the kernels that use them fail to compile and fall back
        _jit.note_failure("simd", exc)
