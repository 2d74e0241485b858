"""The f32 product of a prompt batch: register tiles of weight rows × activation rows, no packing (tinyBLAS's way).

``out[j, m] = Σ_k w[m, k] · x[j, k]`` with both operands' rows contiguous in ``k`` (ggml's layout: the weights'
``ne[0]`` and the activations' ``ne[0]`` are the shared dimension). A tile of :data:`TILE_M` weight rows and
:data:`TILE_N` activation rows keeps ``TILE_M × TILE_N`` vector accumulators in registers: each step over ``k``
loads ``TILE_M + TILE_N`` vectors for ``TILE_M × TILE_N`` fused multiply-adds, so the product runs at the FMA
units' rate from cache with nothing copied or packed (llama.cpp's CPU backend does the same with its tinyBLAS
``sgemm``; OpenBLAS packs both operands first). Weight tiles are the outer loop and stay in L1 while every
activation tile of a block of :func:`block_tokens` rows streams past them from L2.

Vectors are the widest this CPU has (16 float32 lanes with AVX-512, else 8), tiles as large as its vector registers
hold (5 × 5 of 32 registers, 3 × 4 of 16), chosen when this module is imported; the code is explicit LLVM vector IR
(:func:`_tile_typer`), so no fast-math flag and no auto-vectoriser is involved.

Numerics: each output is one lane-wise chain of float32 fused multiply-adds over ``k`` (``llvm.fma``; a multiply and
an add where the CPU has no FMA), the lanes then summed by a fixed halving tree, then the last ``k mod lanes``
products added one by one. That sequence does not depend on where the output sits in a tile, on edge tiles or on
how threads split the tiles, so the bits are the same at any thread count; they differ from BLAS's (another order)
by float32 rounding, which the tests bound against a float64 reference. Imported only once numba is loaded.

Measured (one thread, 128 activation rows, the bench model's 512 × 512, 1536 × 512 and 512 × 1536 weights, against
numpy's OpenBLAS with ``OPENBLAS_CORETYPE=Haswell`` in the same process): AMD EPYC Zen 5 (AVX-512) 136–158 GFLOP/s
against ~105 (1.13–1.46×); AMD EPYC Zen 4 with AVX-512 hidden (AVX2) 69–76 against 79–82 (0.85–0.96×).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

from ggml_cpu.jit import _jit

__all__ = ["F32_GEMM_SPEC", "LANES", "TILE_M", "TILE_N", "block_tokens", "f32_gemm_tiles", "tiles"]


def _host_shape() -> tuple[int, int, int, bool]:
    """(lanes, tile rows of weights, tile rows of activations, fused multiply-add) for the CPU numba targets."""
    import llvmlite.binding as llvm
    import numba

    host = getattr(numba.config, "CPU_NAME", None) is None  # numba compiles for this very CPU
    feats = llvm.get_host_cpu_features() if host else {}
    if feats.get("avx512f"):
        return 16, 5, 5, True  # 25 accumulators + 5 weight vectors + 1 activation vector = 31 of 32 registers
    if feats.get("avx2") or feats.get("avx"):
        return 8, 3, 4, bool(feats.get("fma"))  # 12 + 3 + 1 = 16 registers
    return 8, 3, 4, bool(feats.get("fma"))  # a generic target: LLVM splits the vectors as it must


#: float32 lanes of one vector, weight rows and activation rows of one register tile, whether sums use FMA
LANES, TILE_M, TILE_N, _FMA = _host_shape()


def _l2_bytes() -> int:
    """This core's L2 cache size (Linux sysfs), else 1 MiB."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            text = f.read().strip().upper()
        return int(text[:-1]) << (10 if text.endswith("K") else 20) if text[-1] in "KM" else int(text)
    except (OSError, ValueError, IndexError):
        return 1 << 20


#: an activation block (the tiles that pass one weight tile while it sits in L1) fills about half the L2 cache
_BLOCK_BYTES: Final = max(128 << 10, _l2_bytes() // 2)


def block_tokens(k: int, n: int) -> int:
    """Activation rows per block for ``n`` rows of ``k`` values: blocks of about :data:`_BLOCK_BYTES`, evened out
    over ``n`` and rounded up to a multiple of :data:`TILE_N` (each block is one more pass over the weights)."""
    most = max(TILE_N, _BLOCK_BYTES // max(1, 4 * k))
    blocks = -(-n // most)
    per = -(-n // blocks)
    return -(-per // TILE_N) * TILE_N


def tiles(m: int) -> int:
    """How many tiles of :data:`TILE_M` weight rows cover ``m`` rows (the units a thread split hands out)."""
    return -(-m // TILE_M)


def _tile_typer(
    typingctx: Any, w: Any, wo: Any, ws: Any, x: Any, xo: Any, xs: Any, k: Any, out: Any, oo: Any, os_: Any,
    rm: Any, rn: Any,
) -> Any:  # fmt: skip
    """One register tile: ``out[oo + j·os + i] = Σ_k w[wo + i·ws + k] · x[xo + j·xs + k]`` for ``i < rm ≤ TILE_M``
    and ``j < rn ≤ TILE_N``. An edge tile (``rm`` or ``rn`` short) computes the full tile with its missing rows
    reading the last real one and stores only the real outputs, so each output's operation sequence is the same
    as in a full tile."""
    if not all(isinstance(a, types.Array) and a.dtype == types.float32 for a in (w, x, out)):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> Any:
        from numba.core import cgutils

        b = builder
        f32, i64 = ir.FloatType(), ir.IntType(64)
        vec = ir.VectorType(f32, LANES)
        data = [context.make_array(sig.args[i])(context, b, args[i]).data for i in (0, 3, 7)]
        wo_, ws_, xo_, xs_, k_, oo_, os__, rm_, rn_ = (args[i] for i in (1, 2, 4, 5, 6, 8, 9, 10, 11))

        def rows(base: ir.Value, first: ir.Value, stride: ir.Value, n: int, real: ir.Value) -> list[ir.Value]:
            last = b.sub(real, ir.Constant(i64, 1))
            out_rows = []
            for i in range(n):
                r = b.select(b.icmp_signed("<", ir.Constant(i64, i), real), ir.Constant(i64, i), last)
                out_rows.append(b.gep(base, [b.add(first, b.mul(stride, r))], inbounds=True))
            return out_rows

        wp = rows(data[0], wo_, ws_, TILE_M, rm_)
        xp = rows(data[1], xo_, xs_, TILE_N, rn_)
        if _FMA:
            vfma = b.module.declare_intrinsic(f"llvm.fma.v{LANES}f32", fnty=ir.FunctionType(vec, [vec] * 3))
            sfma = b.module.declare_intrinsic("llvm.fma.f32", fnty=ir.FunctionType(f32, [f32] * 3))

            def madd(p: ir.Value, q: ir.Value, acc: ir.Value, vector: bool = True) -> ir.Value:
                return b.call(vfma if vector else sfma, [p, q, acc])
        else:

            def madd(p: ir.Value, q: ir.Value, acc: ir.Value, vector: bool = True) -> ir.Value:
                return b.fadd(b.fmul(p, q), acc)

        zero = ir.Constant(vec, [0.0] * LANES)
        accs = [[cgutils.alloca_once_value(b, zero) for _ in range(TILE_N)] for _ in range(TILE_M)]

        def load(p: ir.Value, off: ir.Value) -> ir.Value:
            return b.load(b.bitcast(b.gep(p, [off], inbounds=True), vec.as_pointer()), align=4)

        n_vec = b.udiv(k_, ir.Constant(i64, LANES))
        with cgutils.for_range(b, n_vec) as loop:
            off = b.mul(loop.index, ir.Constant(i64, LANES))
            wv = [load(p, off) for p in wp]
            for j in range(TILE_N):
                xv = load(xp[j], off)
                for i in range(TILE_M):
                    b.store(madd(wv[i], xv, b.load(accs[i][j])), accs[i][j])
        tail = b.mul(n_vec, ir.Constant(i64, LANES))
        sums = _lane_sums(b, [b.load(accs[i][j]) for i in range(TILE_M) for j in range(TILE_N)])
        for i in range(TILE_M):
            for j in range(TILE_N):
                total = cgutils.alloca_once_value(b, sums[i * TILE_N + j])
                with cgutils.for_range(b, b.sub(k_, tail)) as loop:
                    off = b.add(tail, loop.index)
                    wk, xk = b.load(b.gep(wp[i], [off], inbounds=True)), b.load(b.gep(xp[j], [off], inbounds=True))
                    b.store(madd(wk, xk, b.load(total), vector=False), total)
                in_m, in_n = (b.icmp_signed("<", ir.Constant(i64, c), r) for c, r in ((i, rm_), (j, rn_)))
                real = b.and_(in_m, in_n)
                with cgutils.if_likely(b, real):
                    at = b.add(oo_, b.add(b.mul(os__, ir.Constant(i64, j)), ir.Constant(i64, i)))
                    b.store(b.load(total), b.gep(data[2], [at], inbounds=True))
        return context.get_dummy_value()

    sig = types.void(w, types.int64, types.int64, x, types.int64, types.int64, types.int64, out, types.int64,
                     types.int64, types.int64, types.int64)  # fmt: skip
    return sig, codegen


def _lane_sums(b: ir.IRBuilder, vectors: list[ir.Value]) -> list[ir.Value]:
    """Each vector's lanes summed by the halving tree (lanes ``[0, n/2) + [n/2, n)``, then again on the first half,
    down to one lane), computed for :data:`LANES` vectors at a time: each level adds the halves of two vectors'
    segments in one vector add (2 shuffles and 1 add per pair instead of per vector), so a group of 16 costs 30
    shuffles and 15 adds where summing each alone costs 64 and 64. The operations on each vector's lanes — hence
    its bits — are the same as the tree applied to it alone."""
    f32, i32 = ir.FloatType(), ir.IntType(32)
    zero = ir.Constant(ir.VectorType(f32, LANES), [0.0] * LANES)
    sums: list[ir.Value] = []
    for first in range(0, len(vectors), LANES):
        level = vectors[first : first + LANES]
        level += [zero] * (LANES - len(level))
        segments, width = 1, LANES  # each vector holds `segments` partial sums of `width` lanes each
        while width > 1:
            half = width // 2
            lo = [c * width + d for c in range(segments) for d in range(half)]
            lo += [LANES + i for i in lo]
            hi = [i + half for i in lo]
            mask_lo, mask_hi = (ir.Constant(ir.VectorType(i32, LANES), idx) for idx in (lo, hi))
            level = [
                b.fadd(b.shuffle_vector(u, v, mask_lo), b.shuffle_vector(u, v, mask_hi))
                for u, v in zip(level[0::2], level[1::2], strict=True)
            ]
            segments, width = 2 * segments, half
        (total,) = level
        count = min(LANES, len(vectors) - first)
        sums += [b.extract_element(total, ir.Constant(i32, c)) for c in range(count)]
    return sums


_tile: Any = intrinsic(_tile_typer)


@_jit.inline
def f32_gemm_tiles(w: np.ndarray, x: np.ndarray, out: np.ndarray, p: np.ndarray, t0: int, t1: int) -> None:
    """Weight tiles ``[t0, t1)`` (of :data:`TILE_M` rows) of ``out[j, m] = Σ_k w[m, k] · x[j, k]``.

    ``p`` = (K, M, N, weight row stride, activation row stride, output row stride, activation rows per block), in
    elements. Per block of activation rows, each weight tile meets every activation tile of the block.
    """
    k_n, m_n, n_n, ws, xs, os_, jb = p[0], p[1], p[2], p[3], p[4], p[5], p[6]
    for j_block in range(0, n_n, jb):  # pragma: no cover - compiled
        j_end = min(n_n, j_block + jb)
        for t in range(t0, t1):
            m0 = t * TILE_M
            rm = min(TILE_M, m_n - m0)
            for j0 in range(j_block, j_end, TILE_N):
                _tile(w, m0 * ws, ws, x, j0 * xs, xs, k_n, out, j0 * os_ + m0, os_, rm, min(TILE_N, j_end - j0))


def _f32_gemm(w: np.ndarray, x: np.ndarray, out: np.ndarray, p: np.ndarray) -> None:
    """:func:`f32_gemm_tiles` over every weight tile."""
    f32_gemm_tiles(w, x, out, p, 0, (p[1] + TILE_M - 1) // TILE_M)  # pragma: no cover - compiled


#: f32 products of many activation rows (a prompt batch): register tiles at the FMA units' rate
F32_GEMM_SPEC: Final = _jit.KernelSpec(
    _f32_gemm, "void(float32[::1], float32[::1], float32[::1], int64[::1])", readonly=(0, 1)
)
