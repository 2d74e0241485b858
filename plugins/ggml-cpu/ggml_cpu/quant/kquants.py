"""Block dot products of the K-quants Q4_K, Q5_K and Q6_K with Q8_K activations (ggml's ``vec_dot_q*_K_q8_K``).

A super-block holds 256 weights in sub-blocks of 32 (Q4_K, Q5_K: 6-bit scale and min each) or 16 (Q6_K: int8
scale). Per sub-block the integer dot of the unsigned quants with the activations is exact; it is weighted by the
sub-block's integer scale, the min (Q4_K/Q5_K) or the −32 offset (Q6_K) is applied through Q8_K's ``bsums``, and
the super-block's f16 ``d`` (and ``dmin``) times the activation block's float32 ``d`` scale the result — the
arithmetic of ggml's kernels, so results differ from dequantize-then-multiply by float rounding only. Each
super-block is one intrinsic call (:mod:`ggml_cpu.jit._simd`), for four activation rows at a time where there are four.

The signature is :data:`ggml_cpu.quant.legacy.SIGNATURE` with ``xd`` = Q8_K's ``d`` per 256 and ``xsum`` =
its ``bsums`` per 16 (``xs`` unused).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np

from ggml_core import GGMLType
from ggml_cpu.jit import _jit
from ggml_cpu.jit._blocks import f16_at
from ggml_cpu.jit._jit import inline, prange
from ggml_cpu.jit._simd import dot_q4_k, dot_q4_k_4, dot_q5_k, dot_q5_k_4, dot_q6_k, dot_q6_k_4
from ggml_cpu.quant._act_kernels import DOT_Q8_K, quantize_into
from ggml_cpu.quant.legacy import READONLY, SIGNATURE

__all__ = ["SPECS"]

_Q4_K, _Q5_K, _Q6_K = 0, 1, 2


@inline
def _sums4(
    kind: int, row: np.ndarray, o: int, xq: np.ndarray, n0: int, xo: int, xsum: np.ndarray, bo: int
) -> tuple[int, int, int, int, int, int, int, int]:  # pragma: no cover - compiled
    """(Σ scale·Σq·x, Σ min·bsum) of the super-block at ``row[o:]`` for rows n0..n0+3 (Q6_K: offset included)."""
    if kind == _Q4_K:
        return dot_q4_k_4(row, o, xq, n0, xo, xsum, bo)
    if kind == _Q5_K:
        return dot_q5_k_4(row, o, xq, n0, xo, xsum, bo)
    i0, i1, i2, i3 = dot_q6_k_4(row, o, xq, n0, xo, xsum, bo)
    return i0, 0, i1, 0, i2, 0, i3, 0


@inline
def _sums1(
    kind: int, row: np.ndarray, o: int, xq: np.ndarray, n: int, xo: int, xsum: np.ndarray, bo: int
) -> tuple[int, int]:  # pragma: no cover - compiled
    if kind == _Q4_K:
        return dot_q4_k(row, o, xq, n, xo, xsum, bo)
    if kind == _Q5_K:
        return dot_q5_k(row, o, xq, n, xo, xsum, bo)
    return dot_q6_k(row, o, xq, n, xo, xsum, bo), 0


@inline
def _term(kind: int, isum: int, summ: int, d: float, dmin: float, dx: float) -> float:  # pragma: no cover - compiled
    if kind == _Q6_K:
        return (dx * d) * np.float32(isum)
    return (dx * d) * np.float32(isum) - (dx * dmin) * np.float32(summ)


def _kernel(kind: int) -> Callable[..., int]:
    """The kernel for one weight type: ``kind`` is a constant of the closure, so numba folds every branch on it."""

    dot = DOT_Q8_K

    def kernel(
        x: np.ndarray,
        quant: bool,
        w: np.ndarray,
        wi: np.ndarray,
        xq: np.ndarray,
        xd: np.ndarray,
        xsum: np.ndarray,
        xs: np.ndarray,
        lut: np.ndarray,
        out: np.ndarray,
    ) -> int:  # pragma: no cover - compiled
        if quant:
            bad = quantize_into(dot, x, xq, xd, xsum, xs, lut)
            if bad:
                return bad
        n_act, k = xq.shape
        nb = k // 256
        size = 144 if kind == _Q4_K else 176 if kind == _Q5_K else 210
        d_at = 208 if kind == _Q6_K else 0
        n4 = n_act - n_act % 4
        for m in prange(w.shape[0]):
            row = w[m]
            for n0 in range(0, n4, 4):
                a0 = a1 = a2 = a3 = np.float32(0.0)
                for b in range(nb):
                    o = b * size
                    d = f16_at(row, o + d_at, lut)
                    dmin = f16_at(row, o + 2, lut) if kind != _Q6_K else np.float32(0.0)
                    i0, m0, i1, m1, i2, m2, i3, m3 = _sums4(kind, row, o, xq, n0, b * 256, xsum, b * 16)
                    a0 += _term(kind, i0, m0, d, dmin, xd[n0, b])
                    a1 += _term(kind, i1, m1, d, dmin, xd[n0 + 1, b])
                    a2 += _term(kind, i2, m2, d, dmin, xd[n0 + 2, b])
                    a3 += _term(kind, i3, m3, d, dmin, xd[n0 + 3, b])
                out[n0, m] = a0
                out[n0 + 1, m] = a1
                out[n0 + 2, m] = a2
                out[n0 + 3, m] = a3
            for n in range(n4, n_act):
                acc = np.float32(0.0)
                for b in range(nb):
                    o = b * size
                    d = f16_at(row, o + d_at, lut)
                    dmin = f16_at(row, o + 2, lut) if kind != _Q6_K else np.float32(0.0)
                    isum, summ = _sums1(kind, row, o, xq, n, b * 256, xsum, b * 16)
                    acc += _term(kind, isum, summ, d, dmin, xd[n, b])
                out[n, m] = acc
        return 0

    return kernel


#: compiled-kernel specs per weight type: (threads over the weight rows, one thread for small products)
SPECS: Final = {
    GGMLType.Q4_K: _jit.spec_pair(_kernel(_Q4_K), SIGNATURE, "_dot_q4_k", READONLY),
    GGMLType.Q5_K: _jit.spec_pair(_kernel(_Q5_K), SIGNATURE, "_dot_q5_k", READONLY),
    GGMLType.Q6_K: _jit.spec_pair(_kernel(_Q6_K), SIGNATURE, "_dot_q6_k", READONLY),
}
