"""Block dot products of the 32-element types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 with quantized activations.

Each kernel computes ``out[n, m] = Σ_blocks (integer dot of the block's quants) · scales`` for every weight row
``m`` and activation row ``n``, the way ggml's ``vec_dot_*`` does: the weights' quants against the int8 quants of
the activations (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1), scaled by the f16 scales of both blocks. The
unsigned quants' offsets (−8 for Q4_0, −16 for Q5_0) are folded into one product with the activation block's sum;
the minima of Q4_1/Q5_1 multiply Q8_1's stored ``s``. Integer sums are exact, so the result differs from the
reference path (dequantize, then a float32 product) by float rounding only.

Shared signature (see :data:`SIGNATURE`): ``w`` the weight rows (M, row bytes) C-contiguous (``wi``: the same
memory as int8), the activations ``xq`` (N, K) int8, ``xd``
their f16 scales (N, K/32), ``xsum`` their per-block sums, ``xs`` Q8_1's ``s`` (unused otherwise), ``lut`` the
65536-entry f16 → f32 table, ``out`` (N, M) float32. The loop over weight rows runs in parallel.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core import GGMLType
from ggml_cpu.kernels.qdot import _jit
from ggml_cpu.kernels.qdot._blocks import f16_at, u32_at
from ggml_cpu.kernels.qdot._jit import prange
from ggml_cpu.kernels.qdot._simd import dot_i8x32, dot_nib, dot_nib5

__all__ = ["SIGNATURE", "SPECS"]

SIGNATURE: Final = (
    "void(uint8[:, ::1], int8[:, ::1], int8[:, ::1], float32[:, ::1], int32[:, ::1], float32[:, ::1], float32[::1],"
    " float32[:, ::1])"
)

# The kernels are written in the numba subset; plain Python never runs them (they are compiled or not used).
# pragma: no cover


def _dot_q4_0(
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
    nb = k // 32
    for m in prange(w.shape[0]):
        row = w[m]
        for n in range(n_act):
            x = xq[n]
            acc = np.float32(0.0)
            for b in range(nb):
                o = b * 18
                d = f16_at(row, o, lut)
                s = dot_nib(row, o + 2, x, b * 32)
                acc += np.float32(s - 8 * xsum[n, b]) * (d * xd[n, b])
            out[n, m] = acc


def _dot_q4_1(
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
    nb = k // 32
    for m in prange(w.shape[0]):
        row = w[m]
        for n in range(n_act):
            x = xq[n]
            acc = np.float32(0.0)
            for b in range(nb):
                o = b * 20
                d = f16_at(row, o, lut)
                mn = f16_at(row, o + 2, lut)
                s = dot_nib(row, o + 4, x, b * 32)
                acc += np.float32(s) * (d * xd[n, b]) + mn * xs[n, b]
            out[n, m] = acc


def _dot_q5_0(
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
    nb = k // 32
    for m in prange(w.shape[0]):
        row = w[m]
        for n in range(n_act):
            x = xq[n]
            acc = np.float32(0.0)
            for b in range(nb):
                o = b * 22
                d = f16_at(row, o, lut)
                qh = u32_at(row, o + 2)
                s = dot_nib5(row, o + 6, qh, x, b * 32)
                acc += np.float32(s - 16 * xsum[n, b]) * (d * xd[n, b])
            out[n, m] = acc


def _dot_q5_1(
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
    nb = k // 32
    for m in prange(w.shape[0]):
        row = w[m]
        for n in range(n_act):
            x = xq[n]
            acc = np.float32(0.0)
            for b in range(nb):
                o = b * 24
                d = f16_at(row, o, lut)
                mn = f16_at(row, o + 2, lut)
                qh = u32_at(row, o + 4)
                s = dot_nib5(row, o + 8, qh, x, b * 32)
                acc += np.float32(s) * (d * xd[n, b]) + mn * xs[n, b]
            out[n, m] = acc


def _dot_q8_0(
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
    nb = k // 32
    for m in prange(w.shape[0]):
        row = w[m]
        rowi = wi[m]
        for n in range(n_act):
            x = xq[n]
            acc = np.float32(0.0)
            for b in range(nb):
                o = b * 34
                d = f16_at(row, o, lut)
                s = dot_i8x32(rowi, o + 2, x, b * 32)
                acc += np.float32(s) * (d * xd[n, b])
            out[n, m] = acc


#: compiled-kernel specs per weight type
SPECS: Final = {
    GGMLType.Q4_0: _jit.KernelSpec(_dot_q4_0, SIGNATURE, parallel=True, readonly=(0, 1)),
    GGMLType.Q4_1: _jit.KernelSpec(_dot_q4_1, SIGNATURE, parallel=True, readonly=(0, 1)),
    GGMLType.Q5_0: _jit.KernelSpec(_dot_q5_0, SIGNATURE, parallel=True, readonly=(0, 1)),
    GGMLType.Q5_1: _jit.KernelSpec(_dot_q5_1, SIGNATURE, parallel=True, readonly=(0, 1)),
    GGMLType.Q8_0: _jit.KernelSpec(_dot_q8_0, SIGNATURE, parallel=True, readonly=(0, 1)),
}
