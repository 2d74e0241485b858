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
from ggml_cpu.kernels.qdot._blocks import f16_at
from ggml_cpu.kernels.qdot._jit import prange
from ggml_cpu.kernels.qdot._simd import dot_q4_k_block, dot_q5_k_block, dot_q6_k_block
from ggml_cpu.kernels.qdot.legacy import SIGNATURE

__all__ = ["SPECS"]

# Each super-block is one intrinsic call (``_simd``): the sub-block scales multiply vector partial sums, and the
# horizontal sum happens once per super-block instead of once per sub-block.


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
                isum, summ = dot_q4_k_block(row, o, x, xo, xsum[n], b * 16)
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
                isum, summ = dot_q5_k_block(row, o, x, xo, xsum[n], b * 16)
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
        for n in range(n_act):
            x = xq[n]
            acc = np.float32(0.0)
            for b in range(nb):
                o = b * 210
                d = f16_at(row, o + 208, lut)
                xo = b * 256
                isum = dot_q6_k_block(row, o, x, xo, xsum[n], b * 16)
                acc += (xd[n, b] * d) * np.float32(isum)
            out[n, m] = acc


#: compiled-kernel specs per weight type
SPECS: Final = {
    GGMLType.Q4_K: _jit.KernelSpec(_dot_q4_k, SIGNATURE, parallel=True, readonly=(0, 1)),
    GGMLType.Q5_K: _jit.KernelSpec(_dot_q5_k, SIGNATURE, parallel=True, readonly=(0, 1)),
    GGMLType.Q6_K: _jit.KernelSpec(_dot_q6_k, SIGNATURE, parallel=True, readonly=(0, 1)),
}
