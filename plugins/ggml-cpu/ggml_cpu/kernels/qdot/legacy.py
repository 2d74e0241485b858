"""Block dot products of the 32-element types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 with quantized activations.

The kernel computes ``out[n, m] = Σ_blocks (integer dot of the block's quants) · scales`` for every weight row
``m`` and activation row ``n``, the way ggml's ``vec_dot_*`` does: the weights' quants against the int8 quants of
the activations (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1), scaled by the f16 scales of both blocks. The
unsigned quants' offsets (−8 for Q4_0, −16 for Q5_0) are folded into one product with the activation block's sum;
the minima of Q4_1/Q5_1 multiply Q8_1's stored ``s``. Integer sums are exact, so the result differs from the
reference path (dequantize, then a float32 product) by float rounding only.

One kernel source serves the five types (``kind``, a constant when each is compiled). Activation rows are taken
four at a time, so each block is unpacked once for four dot products; the loop over weight rows runs in parallel.

Signature :data:`SIGNATURE`: ``w`` the weight rows (M, row bytes) C-contiguous (``wi``: the same memory
as int8), the activations ``xq`` (N, K) int8, ``xd`` their scales (N, K/32, f16-rounded), ``xsum`` their per-block
sums, ``xs`` Q8_1's ``s`` (any (N, K/32) array for the other types), ``lut`` the f16 → f32 table, ``out`` (N, M).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np

from ggml_core import GGMLType
from ggml_cpu.kernels.qdot import _jit
from ggml_cpu.kernels.qdot._blocks import f16_at, u32_at
from ggml_cpu.kernels.qdot._jit import inline, prange
from ggml_cpu.kernels.qdot._simd import dot_i8, dot_i8_4, dot_nib, dot_nib5, dot_nib5_4, dot_nib_4

__all__ = ["SIGNATURE", "SPECS"]

SIGNATURE: Final = (
    "void(uint8[:, ::1], int8[:, ::1], int8[:, ::1], float32[:, ::1], int32[:, ::1], float32[:, ::1], float32[::1],"
    " float32[:, ::1])"
)

_Q4_0, _Q4_1, _Q5_0, _Q5_1, _Q8_0 = 0, 1, 2, 3, 4


@inline
def _block_bytes(kind: int) -> int:  # pragma: no cover - compiled
    if kind == _Q8_0:
        return 34
    return 18 + 2 * kind  # Q4_0 18, Q4_1 20, Q5_0 22, Q5_1 24


@inline
def _sums4(
    kind: int, row: np.ndarray, rowi: np.ndarray, o: int, xq: np.ndarray, n0: int, xo: int
) -> tuple[int, int, int, int]:  # pragma: no cover - compiled
    """Σ q·x of the block at ``row[o:]`` for activation rows n0..n0+3."""
    if kind == _Q8_0:
        return dot_i8_4(rowi, o + 2, xq, n0, xo)
    if kind == _Q4_0:
        return dot_nib_4(row, o + 2, xq, n0, xo)
    if kind == _Q4_1:
        return dot_nib_4(row, o + 4, xq, n0, xo)
    if kind == _Q5_0:
        return dot_nib5_4(row, o + 6, u32_at(row, o + 2), xq, n0, xo)
    return dot_nib5_4(row, o + 8, u32_at(row, o + 4), xq, n0, xo)


@inline
def _sums1(
    kind: int, row: np.ndarray, rowi: np.ndarray, o: int, xq: np.ndarray, n: int, xo: int
) -> int:  # pragma: no cover - compiled
    """Σ q·x of the block at ``row[o:]`` for activation row n."""
    if kind == _Q8_0:
        return dot_i8(rowi, o + 2, xq, n, xo)
    if kind == _Q4_0:
        return dot_nib(row, o + 2, xq, n, xo)
    if kind == _Q4_1:
        return dot_nib(row, o + 4, xq, n, xo)
    if kind == _Q5_0:
        return dot_nib5(row, o + 6, u32_at(row, o + 2), xq, n, xo)
    return dot_nib5(row, o + 8, u32_at(row, o + 4), xq, n, xo)


@inline
def _term(
    kind: int, s: int, d: float, mn: float, xd: np.ndarray, xsum: np.ndarray, xs: np.ndarray, n: int, b: int
) -> float:  # pragma: no cover - compiled
    """The block's contribution to output (n, m): ggml's float arithmetic on the integer dot ``s``."""
    if kind == _Q4_0:
        return np.float32(s - 8 * xsum[n, b]) * (d * xd[n, b])
    if kind == _Q5_0:
        return np.float32(s - 16 * xsum[n, b]) * (d * xd[n, b])
    if kind == _Q8_0:
        return np.float32(s) * (d * xd[n, b])
    return np.float32(s) * (d * xd[n, b]) + mn * xs[n, b]  # Q4_1, Q5_1: + m·s


def _kernel(kind: int) -> Callable[..., None]:
    """The kernel for one weight type: ``kind`` is a constant of the closure, so numba folds every branch on it."""

    def kernel(
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
        size = _block_bytes(kind)
        has_min = kind in (_Q4_1, _Q5_1)
        n4 = n_act - n_act % 4
        for m in prange(w.shape[0]):
            row = w[m]
            rowi = wi[m]
            for n0 in range(0, n4, 4):
                a0 = a1 = a2 = a3 = np.float32(0.0)
                for b in range(nb):
                    o = b * size
                    d = f16_at(row, o, lut)
                    mn = f16_at(row, o + 2, lut) if has_min else np.float32(0.0)
                    s0, s1, s2, s3 = _sums4(kind, row, rowi, o, xq, n0, b * 32)
                    a0 += _term(kind, s0, d, mn, xd, xsum, xs, n0, b)
                    a1 += _term(kind, s1, d, mn, xd, xsum, xs, n0 + 1, b)
                    a2 += _term(kind, s2, d, mn, xd, xsum, xs, n0 + 2, b)
                    a3 += _term(kind, s3, d, mn, xd, xsum, xs, n0 + 3, b)
                out[n0, m] = a0
                out[n0 + 1, m] = a1
                out[n0 + 2, m] = a2
                out[n0 + 3, m] = a3
            for n in range(n4, n_act):
                acc = np.float32(0.0)
                for b in range(nb):
                    o = b * size
                    d = f16_at(row, o, lut)
                    mn = f16_at(row, o + 2, lut) if has_min else np.float32(0.0)
                    acc += _term(kind, _sums1(kind, row, rowi, o, xq, n, b * 32), d, mn, xd, xsum, xs, n, b)
                out[n, m] = acc

    return kernel


#: compiled-kernel specs per weight type
SPECS: Final = {
    GGMLType.Q4_0: _jit.KernelSpec(_kernel(_Q4_0), SIGNATURE, parallel=True, readonly=(0, 1), name="_dot_q4_0"),
    GGMLType.Q4_1: _jit.KernelSpec(_kernel(_Q4_1), SIGNATURE, parallel=True, readonly=(0, 1), name="_dot_q4_1"),
    GGMLType.Q5_0: _jit.KernelSpec(_kernel(_Q5_0), SIGNATURE, parallel=True, readonly=(0, 1), name="_dot_q5_0"),
    GGMLType.Q5_1: _jit.KernelSpec(_kernel(_Q5_1), SIGNATURE, parallel=True, readonly=(0, 1), name="_dot_q5_1"),
    GGMLType.Q8_0: _jit.KernelSpec(_kernel(_Q8_0), SIGNATURE, parallel=True, readonly=(0, 1), name="_dot_q8_0"),
}
