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
from ggml_cpu.kernels.qdot._jit import prange
from ggml_cpu.kernels.qdot._simd import dot_q, dot_q16
from ggml_cpu.kernels.qdot.legacy import SIGNATURE

__all__ = ["SPECS"]


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
                isum = 0
                summ = 0
                for j in range(8):
                    sc, mn = scale_min_k4(row, o + 4, j)
                    c = j >> 1
                    sh = (j & 1) * 4
                    isum += sc * dot_q(row, o + 16 + c * 32, sh, row, o, 0, 0, x, xo + j * 32)
                    summ += mn * (xsum[n, b * 16 + 2 * j] + xsum[n, b * 16 + 2 * j + 1])
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
                isum = 0
                summ = 0
                for j in range(8):
                    sc, mn = scale_min_k4(row, o + 4, j)
                    c = j >> 1
                    sh = (j & 1) * 4
                    isum += sc * dot_q(row, o + 48 + c * 32, sh, row, o + 16, j, 1, x, xo + j * 32)
                    summ += mn * (xsum[n, b * 16 + 2 * j] + xsum[n, b * 16 + 2 * j + 1])
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
                isum = 0
                for h in range(2):
                    for q in range(4):
                        ql = o + h * 64 + (q & 1) * 32
                        qh = o + 128 + h * 32
                        sh = (q >> 1) * 4
                        t = h * 8 + q * 2  # sub-block of 16 within the super-block
                        xb = xo + h * 128 + q * 32
                        s_a = dot_q16(row, ql, sh, row, qh, 2 * q, 3, x, xb)
                        s_b = dot_q16(row, ql + 16, sh, row, qh + 16, 2 * q, 3, x, xb + 16)
                        isum += np.int64(rowi[o + 192 + t]) * (s_a - 32 * xsum[n, b * 16 + t])
                        isum += np.int64(rowi[o + 193 + t]) * (s_b - 32 * xsum[n, b * 16 + t + 1])
                acc += (xd[n, b] * d) * np.float32(isum)
            out[n, m] = acc


#: compiled-kernel specs per weight type
SPECS: Final = {
    GGMLType.Q4_K: _jit.KernelSpec(_dot_q4_k, SIGNATURE, parallel=True, readonly=(0, 1)),
    GGMLType.Q5_K: _jit.KernelSpec(_dot_q5_k, SIGNATURE, parallel=True, readonly=(0, 1)),
    GGMLType.Q6_K: _jit.KernelSpec(_dot_q6_k, SIGNATURE, parallel=True, readonly=(0, 1)),
}
