"""Block dot products of the K-quants Q4_K, Q5_K and Q6_K with Q8_K activations (ggml's ``vec_dot_q*_K_q8_K``).

A super-block holds 256 weights in sub-blocks of 32 (Q4_K, Q5_K: 6-bit scale and min each) or 16 (Q6_K: int8
scale). Per sub-block the integer dot of the unsigned quants with the activations is exact; it is weighted by the
sub-block's integer scale, the min (Q4_K/Q5_K) or the −32 offset (Q6_K) is applied through Q8_K's ``bsums``, and
the super-block's f16 ``d`` (and ``dmin``) times the activation block's float32 ``d`` scale the result — the
arithmetic of ggml's kernels, so results differ from dequantize-then-multiply by float rounding only.

The signature is :data:`ggml_cpu.kernels.qdot.legacy.SIGNATURE` with ``xd`` = Q8_K's ``d`` per 256 and ``xsum`` =
its ``bsums`` per 16 (``xs`` unused).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core import GGMLType
from ggml_cpu.kernels.qdot import _jit
from ggml_cpu.kernels.qdot._blocks import f16_at, scale_min_k4
from ggml_cpu.kernels.qdot._jit import inline, prange
from ggml_cpu.kernels.qdot._simd import dot_q, dot_q_halves
from ggml_cpu.kernels.qdot.legacy import SIGNATURE

__all__ = ["SPECS"]

# The helpers are called with literal sub-block numbers, so that after inlining every shift is a constant (LLVM
# then unpacks the nibbles with one or two instructions instead of widening the bytes for a variable shift).


@inline
def _k45_chunk(
    row: np.ndarray, o: int, qs: int, qh: int, c: int, x: np.ndarray, xo: int, bsums: np.ndarray, bs: int
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Chunk ``c`` (64 weights: sub-blocks 2c, 2c+1) of a Q4_K (``qh`` < 0) or Q5_K super-block at ``row[o:]``:
    (Σ scale·Σq·x, Σ min·bsum)."""
    sc0, mn0 = scale_min_k4(row, o + 4, 2 * c)
    sc1, mn1 = scale_min_k4(row, o + 4, 2 * c + 1)
    hmask = 1 if qh >= 0 else 0
    hb = o + qh if qh >= 0 else o
    s0 = dot_q(row, o + qs + c * 32, 0, row, hb, 2 * c, hmask, x, xo + c * 64)
    s1 = dot_q(row, o + qs + c * 32, 4, row, hb, 2 * c + 1, hmask, x, xo + c * 64 + 32)
    i = bs + c * 4
    return sc0 * s0 + sc1 * s1, mn0 * (bsums[i] + bsums[i + 1]) + mn1 * (bsums[i + 2] + bsums[i + 3])


@inline
def _q6_quarter(
    row: np.ndarray, rowi: np.ndarray, o: int, h: int, q: int, x: np.ndarray, xo: int, bsums: np.ndarray, bs: int
) -> int:  # pragma: no cover - compiled
    """Quarter ``q`` of half ``h`` (32 weights, two sub-blocks of 16) of a Q6_K super-block: Σ scale·Σ(q-32)·x."""
    ql = o + h * 64 + (q & 1) * 32
    qh = o + 128 + h * 32
    sh = (q >> 1) * 4
    t = h * 8 + q * 2  # first sub-block of 16 within the super-block
    xb = xo + h * 128 + q * 32
    s_a, s_b = dot_q_halves(row, ql, sh, row, qh, 2 * q, 3, x, xb)
    sc_a = np.int64(rowi[o + 192 + t])
    sc_b = np.int64(rowi[o + 193 + t])
    return sc_a * (s_a - 32 * bsums[bs + t]) + sc_b * (s_b - 32 * bsums[bs + t + 1])


def _dot_q4_k(
    w: np.ndarray,
    wi: np.ndarray,
    xq: np.ndarray,
    xd: np.ndarray,
    xsum: np.ndarray,
    xs: np.ndarray,
    lut: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    n_act, k = xq.shape
    nb = k // 256
    for m in prange(w.shape[0]):
        row = w[m]
        for n in range(n_act):
            x = xq[n]
            acc = np.float32(0.0)
            for b in range(nb):
                o = b * 144
                d = f16_at(row, o, lut)
                dmin = f16_at(row, o + 2, lut)
                xo = b * 256
                bsums = xsum[n]
                i0, m0 = _k45_chunk(row, o, 16, -1, 0, x, xo, bsums, b * 16)
                i1, m1 = _k45_chunk(row, o, 16, -1, 1, x, xo, bsums, b * 16)
                i2, m2 = _k45_chunk(row, o, 16, -1, 2, x, xo, bsums, b * 16)
                i3, m3 = _k45_chunk(row, o, 16, -1, 3, x, xo, bsums, b * 16)
                isum = i0 + i1 + i2 + i3
                summ = m0 + m1 + m2 + m3
                dx = xd[n, b]
                acc += (dx * d) * np.float32(isum) - (dx * dmin) * np.float32(summ)
            out[n, m] = acc


def _dot_q5_k(
    w: np.ndarray,
    wi: np.ndarray,
    xq: np.ndarray,
    xd: np.ndarray,
    xsum: np.ndarray,
    xs: np.ndarray,
    lut: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    n_act, k = xq.shape
    nb = k // 256
    for m in prange(w.shape[0]):
        row = w[m]
        for n in range(n_act):
            x = xq[n]
            acc = np.float32(0.0)
            for b in range(nb):
                o = b * 176
                d = f16_at(row, o, lut)
                dmin = f16_at(row, o + 2, lut)
                xo = b * 256
                bsums = xsum[n]
                i0, m0 = _k45_chunk(row, o, 48, 16, 0, x, xo, bsums, b * 16)
                i1, m1 = _k45_chunk(row, o, 48, 16, 1, x, xo, bsums, b * 16)
                i2, m2 = _k45_chunk(row, o, 48, 16, 2, x, xo, bsums, b * 16)
                i3, m3 = _k45_chunk(row, o, 48, 16, 3, x, xo, bsums, b * 16)
                isum = i0 + i1 + i2 + i3
                summ = m0 + m1 + m2 + m3
                dx = xd[n, b]
                acc += (dx * d) * np.float32(isum) - (dx * dmin) * np.float32(summ)
            out[n, m] = acc


def _dot_q6_k(
    w: np.ndarray,
    wi: np.ndarray,
    xq: np.ndarray,
    xd: np.ndarray,
    xsum: np.ndarray,
    xs: np.ndarray,
    lut: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    n_act, k = xq.shape
    nb = k // 256
    for m in prange(w.shape[0]):
        row = w[m]
        rowi = wi[m]
        for n in range(n_act):
            x = xq[n]
            acc = np.float32(0.0)
            for b in range(nb):
                o = b * 210
                d = f16_at(row, o + 208, lut)
                xo = b * 256
                bsums = xsum[n]
                bs = b * 16
                isum = (
                    _q6_quarter(row, rowi, o, 0, 0, x, xo, bsums, bs)
                    + _q6_quarter(row, rowi, o, 0, 1, x, xo, bsums, bs)
                    + _q6_quarter(row, rowi, o, 0, 2, x, xo, bsums, bs)
                    + _q6_quarter(row, rowi, o, 0, 3, x, xo, bsums, bs)
                    + _q6_quarter(row, rowi, o, 1, 0, x, xo, bsums, bs)
                    + _q6_quarter(row, rowi, o, 1, 1, x, xo, bsums, bs)
                    + _q6_quarter(row, rowi, o, 1, 2, x, xo, bsums, bs)
                    + _q6_quarter(row, rowi, o, 1, 3, x, xo, bsums, bs)
                )
                acc += (xd[n, b] * d) * np.float32(isum)
            out[n, m] = acc


#: compiled-kernel specs per weight type
SPECS: Final = {
    GGMLType.Q4_K: _jit.KernelSpec(_dot_q4_k, SIGNATURE, parallel=True, readonly=(0, 1)),
    GGMLType.Q5_K: _jit.KernelSpec(_dot_q5_k, SIGNATURE, parallel=True, readonly=(0, 1)),
    GGMLType.Q6_K: _jit.KernelSpec(_dot_q6_k, SIGNATURE, parallel=True, readonly=(0, 1)),
}
