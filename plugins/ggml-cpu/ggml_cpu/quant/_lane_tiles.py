"""The repacked weights' lane tiles (:mod:`.repack`) as LLVM vector IR: 16 weight rows against a few activation rows.

Two builds of one tile, chosen by the CPU's features (:data:`ggml_cpu.jit._simd.HAS_AVX2_SUMS`):

* :func:`lane_tile` — one weight row per int32 lane of a 512-bit vector, one ``vpdpbusd`` per 4 activation bytes
  (512-bit VNNI; on other targets LLVM splits the vectors and the portable integer sums of
  :mod:`ggml_cpu.jit._simd` run);
* :func:`lane_tile_avx2` — the same layout, operands and float steps on AVX2 without VNNI: ``vpmaddubsw`` pairs
  summed in int16 as far as they cannot overflow, then one ``vpmaddwd``. The same bits as :func:`lane_tile`.

Bounds are not checked: the drivers in :mod:`.repack` index whole groups of arrays they have shaped themselves.
Imported only once numba is loaded (see :mod:`ggml_cpu.jit._jit`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from ggml_cpu.jit._simd import HAS_AVX2_SUMS, Operands, const, declare, i8, i32, quad_sums_from, vec

__all__ = ["LANE_TILES", "LANE_XROWS", "NIBBLE_TILES", "lane_tile", "lane_tile_avx2"]

#: activation rows per repacked tile call (the widest first; 1 takes the rest)
LANE_XROWS = (8, 4, 1)
f32, i64 = ir.FloatType(), ir.IntType(64)
v8, vf8 = vec(i32, 8), ir.VectorType(f32, 8)


def tile_intrinsic(codegen: Callable[..., ir.Value]) -> Any:
    """The intrinsic of a lane tile's ``codegen``, typed by :func:`lane_tile`'s arguments."""

    def typer(
        typingctx: Any, q: Any, qo: Any, s1: Any, s2: Any, so: Any, xq: Any, n0: Any, dx: Any, sx: Any,
        nsub: Any, c: Any, out: Any, m0: Any,
    ) -> Any:  # fmt: skip
        return types.int64(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0), codegen

    return intrinsic(typer)


class TileArgs:
    """A lane tile's operands (the arguments of :func:`lane_tile`): its scalars, array pointers and, per
    activation row from ``n0``, the base pointers of that row of ``xq``, ``dx``, ``sx`` and ``out``."""

    def __init__(self, context: Any, builder: ir.IRBuilder, sig: Any, args: Any, xrows: int) -> None:
        op = Operands(context, builder, sig, args)
        self.b = builder
        self.qo, self.so, n0, self.nsub, self.c, m0 = args[1], args[4], args[6], args[9], args[10], args[12]
        self.qp, self.s1p, self.s2p = op._array(0).data, op._array(2).data, op._array(3).data
        zero = ir.Constant(i64, 0)
        rows = [op.plus(n0, n) for n in range(xrows)]
        self.xbase = [op.row_ptr(5, r, zero) for r in rows]
        self.dbase = [op.row_ptr(7, r, zero) for r in rows]
        self.sbase = [op.row_ptr(8, r, zero) for r in rows]
        self.obase = [op.row_ptr(11, r, m0) for r in rows]

    def splat(self, v: ir.Value, t: ir.VectorType) -> ir.Value:
        """``v`` in every lane of ``t``."""
        first = self.b.insert_element(ir.Constant(t, None), v, ir.Constant(i32, 0))
        return self.b.shuffle_vector(first, ir.Constant(t, None), ir.Constant(vec(i32, t.count), [0] * t.count))

    def at(self, base: ir.Value, off: ir.Value, t: ir.Type, align: int) -> ir.Value:
        """A ``t`` loaded from element ``off`` of ``base``."""
        b = self.b
        return b.load(b.bitcast(b.gep(base, [off], inbounds=True), t.as_pointer()), align=align)


def lane_tile(group: int, has_min: bool, xrows: int, nib: bool = False) -> Callable[..., Any]:
    """16 repacked weight rows against ``xrows`` activation rows from ``n0``, written to ``out[n0 + n, m0:m0+16]``.

    The repacked layout (:mod:`.repack`) puts one weight row in each of the 16 int32 lanes of a 512-bit vector:
    per sub-block of ``group`` values, ``group/4`` vectors of 16 rows × 4 unsigned quant bytes, so one
    ``vpdpbusd`` with 4 activation bytes broadcast to every lane advances 16 dot products at once and a lane
    ends the sub-block holding its row's exact integer sum (ggml's repacked GEMMs do the same). The sum starts at
    ``−c·Σx`` (the quant offset ``c``: Q4_0 8, Q5_0 16, Q8_0 128, Q6_K 32) and is scaled once per sub-block:
    ``acc += dx · (s1 · isum)`` with ``has_min`` also subtracting ``s2 · Σx`` (Q4_K/Q5_K's ``dmin·m``).

    With ``nib`` (4-bit quants: Q4_0, Q4_K) two steps share one vector, step ``t`` in the low nibbles and step
    ``t + group/8`` in the high ones: half the bytes to read, which is what one activation row (decode) is
    bound by; two masks and a shift unpack them.

    Arguments: ``q`` uint8 (repacked quants), ``qo`` the group's first byte, ``s1``/``s2`` float32 per (group,
    sub-block, lane) from ``so``, ``xq`` int8 (N, K), ``n0``, ``dx`` float32 and ``sx`` int32 (N, K/group): each
    activation sub-block's scale and quant sum, ``nsub``, ``c``, ``out`` float32 (N, ≥ m0 + 16), ``m0``.
    """
    steps = group // 4
    v16f = ir.VectorType(f32, 16)
    v16i = ir.VectorType(i32, 16)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        b = builder
        a = TileArgs(context, builder, sig, args, xrows)
        qo, so, nsub, c, qp, s1p, s2p = a.qo, a.so, a.nsub, a.c, a.qp, a.s1p, a.s2p
        xbase, dbase, sbase, obase, splat, at = a.xbase, a.dbase, a.sbase, a.obase, a.splat, a.at
        accf = [cgutils.alloca_once_value(b, ir.Constant(v16f, [0.0] * 16)) for _ in range(xrows)]
        fma = declare(b, "llvm.fma.v16f32", ir.FunctionType(v16f, [v16f, v16f, v16f]))
        neg_c = b.trunc(b.neg(c), i32)

        with cgutils.for_range(b, nsub) as loop:
            j = loop.index
            sxs = [b.load(b.gep(sbase[n], [j], inbounds=True)) for n in range(xrows)]
            if has_min:
                acc = [ir.Constant(v16i, [0] * 16) for _ in range(xrows)]
            else:
                acc = [splat(b.mul(sxs[n], neg_c), v16i) for n in range(xrows)]
            qj = b.add(qo, b.mul(j, ir.Constant(i64, group * (8 if nib else 16))))
            xj = b.mul(j, ir.Constant(i64, group))
            vectors = []
            for t in range(steps // 2 if nib else steps):
                wv = at(qp, b.add(qj, ir.Constant(i64, 64 * t)), vec(i8, 64), 1)
                if nib:
                    vectors.append((t, b.and_(wv, const(64, 15))))
                    vectors.append((t + steps // 2, b.lshr(wv, const(64, 4))))
                else:
                    vectors.append((t, wv))
            for t, wv in vectors:
                for n in range(xrows):
                    xv = at(xbase[n], b.add(xj, ir.Constant(i64, 4 * t)), i32, 1)
                    xb = b.bitcast(splat(xv, v16i), vec(i8, 64))
                    acc[n] = quad_sums_from(b, acc[n], wv, xb, small=False)
            sj = b.add(so, b.mul(j, ir.Constant(i64, 16)))
            s1v = at(s1p, sj, v16f, 4)
            s2v = at(s2p, sj, v16f, 4) if has_min else None
            for n in range(xrows):
                f = b.fmul(b.sitofp(acc[n], v16f), s1v)
                if s2v is not None:
                    f = b.fsub(f, b.fmul(s2v, splat(b.sitofp(sxs[n], f32), v16f)))
                dxv = splat(b.load(b.gep(dbase[n], [j], inbounds=True)), v16f)
                b.store(b.call(fma, [f, dxv, b.load(accf[n])]), accf[n])
        for n in range(xrows):
            b.store(b.load(accf[n]), b.bitcast(obase[n], v16f.as_pointer()), align=4)
        return ir.Constant(i64, 0)

    return tile_intrinsic(codegen)


def lane_tile_avx2(group: int, has_min: bool, xrows: int, nib: bool = False) -> Callable[..., Any]:
    """:func:`lane_tile` for AVX2 without VNNI: the same layout, operands and float steps, so the same bits.

    A 512-bit vector of 16 lanes is two 256-bit halves here. Per weight vector and activation row the products
    are ``vpmaddubsw`` (byte pairs → int16), summed as int16 over as many steps as cannot overflow (``q ≤ 15``:
    8 steps, a whole sub-block; ``q ≤ 31``: 4; ``q ≤ 63``: 2; each pair is at most ``2·q·127``), then widened
    once by ``vpmaddwd`` with ones: the exact integer sums of :func:`lane_tile`. Quants with an offset of 128
    (Q8_0; Q5_0 shares its layout) would overflow the pairs, so that layout subtracts the offset and takes
    ``(|q|, x·sign(q))`` (``vpsignb``) from a zero start, as the offset tiles do. Activation rows go four at a
    time (8 would need 16 int16 accumulators, all of AVX2's registers); the sub-block's weights, in L1, are
    read again for the next four.
    """
    steps = group // 4
    signed = group == 32 and not has_min and not nib  # Q5_0 / Q8_0: the offset is c (16 or 128)
    qmax = 15 if nib else (63 if group == 16 else 31)
    flush = 1 if signed else max(1, 32767 // (2 * qmax * 127))
    v32b, v16s = vec(i8, 32), vec(ir.IntType(16), 16)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        b = builder
        a = TileArgs(context, builder, sig, args, xrows)
        qo, so, nsub, c, qp, s1p, s2p = a.qo, a.so, a.nsub, a.c, a.qp, a.s1p, a.s2p
        xbase, dbase, sbase, obase, splat, at = a.xbase, a.dbase, a.sbase, a.obase, a.splat, a.at
        accf = [[cgutils.alloca_once_value(b, ir.Constant(vf8, [0.0] * 8)) for _ in range(2)] for _ in range(xrows)]
        fma = declare(b, "llvm.fma.v8f32", ir.FunctionType(vf8, [vf8, vf8, vf8]))
        ub = declare(b, "llvm.x86.avx2.pmadd.ub.sw", ir.FunctionType(v16s, [v32b, v32b]))
        wd = declare(b, "llvm.x86.avx2.pmadd.wd", ir.FunctionType(v8, [v16s, v16s]))
        psign = declare(b, "llvm.x86.avx2.psign.b", ir.FunctionType(v32b, [v32b, v32b]))
        absb = declare(b, "llvm.abs.v32i8", ir.FunctionType(v32b, [v32b, ir.IntType(1)]))
        ones = ir.Constant(v16s, [1] * 16)
        neg_c = b.trunc(b.neg(c), i32)
        c8 = splat(b.trunc(c, i8), v32b)  # c in every byte

        with cgutils.for_range(b, nsub) as loop:
            j = loop.index
            sxs = [b.load(b.gep(sbase[n], [j], inbounds=True)) for n in range(xrows)]
            qj = b.add(qo, b.mul(j, ir.Constant(i64, group * (8 if nib else 16))))
            xj = b.mul(j, ir.Constant(i64, group))
            sj = b.add(so, b.mul(j, ir.Constant(i64, 16)))
            s1v = [at(s1p, b.add(sj, ir.Constant(i64, 8 * h)), vf8, 4) for h in range(2)]
            s2v = [at(s2p, b.add(sj, ir.Constant(i64, 8 * h)), vf8, 4) for h in range(2)] if has_min else None
            for first in range(0, xrows, 4):
                rows = range(first, min(first + 4, xrows))
                vectors = []  # (step, [two halves]) in load order
                for t in range(steps // 2 if nib else steps):
                    halves = [at(qp, b.add(qj, ir.Constant(i64, 64 * t + 32 * h)), v32b, 1) for h in range(2)]
                    if nib:
                        vectors.append((t, [b.and_(v, const(32, 15)) for v in halves]))
                        vectors.append((t + steps // 2, [b.lshr(v, const(32, 4)) for v in halves]))
                    else:
                        vectors.append((t, halves))
                acc: dict[int, list[ir.Value]] = {}
                for n in rows:
                    start = ir.Constant(v8, [0] * 8) if has_min or signed else splat(b.mul(sxs[n], neg_c), v8)
                    acc[n] = [start, start]
                part: dict[int, list[ir.Value] | None] = {n: None for n in rows}
                for count, (t, wv) in enumerate(vectors, start=1):
                    if signed:
                        ws = [b.sub(v, c8) for v in wv]  # q − c, signed
                        wa = [b.call(absb, [v, ir.Constant(ir.IntType(1), 0)]) for v in ws]
                    for n in rows:
                        xv = at(xbase[n], b.add(xj, ir.Constant(i64, 4 * t)), i32, 1)
                        xb = b.bitcast(splat(xv, v8), v32b)
                        prods = []
                        for h in range(2):
                            if signed:
                                prods.append(b.call(ub, [wa[h], b.call(psign, [xb, ws[h]])]))
                            else:
                                prods.append(b.call(ub, [wv[h], xb]))
                        old = part[n]
                        summed = prods if old is None else [b.add(u, v) for u, v in zip(old, prods, strict=True)]
                        part[n] = summed
                        if count % flush == 0 or count == len(vectors):
                            widened = [b.call(wd, [p, ones]) for p in summed]
                            acc[n] = [b.add(u, v) for u, v in zip(acc[n], widened, strict=True)]
                            part[n] = None
                for n in rows:
                    dxv = splat(b.load(b.gep(dbase[n], [j], inbounds=True)), vf8)
                    sxf = splat(b.sitofp(sxs[n], f32), vf8) if s2v is not None else None
                    for h in range(2):
                        f = b.fmul(b.sitofp(acc[n][h], vf8), s1v[h])
                        if s2v is not None:
                            f = b.fsub(f, b.fmul(s2v[h], sxf))
                        b.store(b.call(fma, [f, dxv, b.load(accf[n][h])]), accf[n][h])
        for n in range(xrows):
            for h in range(2):
                ptr = b.gep(obase[n], [ir.Constant(i64, 8 * h)], inbounds=True)
                b.store(b.load(accf[n][h]), b.bitcast(ptr, vf8.as_pointer()), align=4)
        return ir.Constant(i64, 0)

    return tile_intrinsic(codegen)


_tile: Final = lane_tile_avx2 if HAS_AVX2_SUMS else lane_tile
#: repacked weights (:mod:`.repack`): (sub-block length, has minima) → {activation rows: tile intrinsic}
LANE_TILES: Final = {
    (group, has_min): {xr: _tile(group, has_min, xr) for xr in LANE_XROWS}
    for group, has_min in ((32, False), (32, True), (16, False))
}
#: the same for 4-bit quants stored two to a byte (``nib=True``): (32, has minima) → {rows: tile}
NIBBLE_TILES: Final = {
    (32, has_min): {xr: _tile(32, has_min, xr, nib=True) for xr in LANE_XROWS} for has_min in (False, True)
}
