"""The compiled products of MUL_MAT's float weights: f16 weights (the KV cache) read in f16 directly, and few-row
products of f32 weights.

Each kernel is one call into compiled code with every operand passed as a flat 1-D view of its memory (from the
tensor's first element) plus element strides in one int64 parameter array (:mod:`ggml_cpu.jit._row_math`), so a call
unboxes a handful of arguments and allocates nothing. Imported only once numba is loaded (see
:mod:`ggml_cpu.jit._jit`).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_cpu.jit import _jit
from ggml_cpu.jit._half_kernels import half_bits_to_float
from ggml_cpu.jit._jit import prange
from ggml_cpu.jit._row_math import round_half, row_dot

__all__ = ["F32_DOT_SPEC", "HALF_DOT_SPECS", "f32_dot_rows"]


def _half_dot(w: np.ndarray, x: np.ndarray, out: np.ndarray, p: np.ndarray, xh: np.ndarray, mask: np.ndarray) -> None:
    """``out[n, m] = Σ_k f16(x[n, k]) · w[m, k]`` per (i2, i3), w f16 bits read directly (broadcast r2, r3).

    The sum over k is float32, reassociated into SIMD lanes (see :data:`HALF_DOT_SPEC`); ``xh`` (one row of K
    floats per i2) holds an activation row rounded to f16. Terms past an activation row's last non-zero value are
    not read (a zero times a finite weight adds nothing: the unused cells of a KV cache). With ``p[16]`` set,
    ``mask`` holds SOFT_MAX's mask rows (row n, strides ``p[17:20]``, broadcast ``p[20:22]``) and outputs whose mask
    is −inf are written as 0 without reading their weight row (the softmax gives them 0 either way).
    """
    k_n, m_n, n_n, b2, b3, r2, r3 = p[0], p[1], p[2], p[3], p[4], p[5], p[6]
    has_mask = p[16]
    for i2 in prange(b2):  # pragma: no cover - compiled
        xrow = xh[i2 * k_n : (i2 + 1) * k_n]
        for i3 in range(b3):
            wo = (i3 // r3) * p[9] + (i2 // r2) * p[8]
            mo2 = (i2 % p[20]) * p[18] + (i3 % p[21]) * p[19]
            for r in range(n_n):
                xo = r * p[10] + i2 * p[11] + i3 * p[12]
                xr = x[xo : xo + k_n]
                k_end = 0
                for k in range(k_n):
                    v = np.float32(round_half(xr[k]))
                    xrow[k] = v
                    if v != 0.0:
                        k_end = k + 1
                oo = r * p[13] + i2 * p[14] + i3 * p[15]
                orow = out[oo : oo + m_n]
                mo = mo2 + r * p[17]
                for m in range(m_n):
                    if has_mask and mask[mo + m] == -np.inf:
                        orow[m] = 0.0
                        continue
                    ro = wo + m * p[7]
                    wr = w[ro : ro + k_end]
                    acc = np.float32(0.0)
                    for k in range(k_end):
                        acc += xrow[k] * half_bits_to_float(wr[k])
                    orow[m] = acc


_HALF_SIGNATURE: Final = "void(uint16[::1], float32[::1], float32[::1], int64[::1], float32[::1], float32[::1])"


#: threads over the (activation) heads, and on the calling thread; every output is computed by the same code
#: either way, so the bits do not depend on the thread count
HALF_DOT_SPECS: Final = (
    _jit.KernelSpec(_half_dot, _HALF_SIGNATURE, parallel=True, readonly=(0, 1, 5), fastmath=frozenset({"reassoc"})),
    _jit.KernelSpec(
        _half_dot, _HALF_SIGNATURE, readonly=(0, 1, 5), fastmath=frozenset({"reassoc"}), name="_half_dot_serial"
    ),
)


@_jit.inline
def f32_dot_rows(w: np.ndarray, x: np.ndarray, out: np.ndarray, p: np.ndarray, r0: int, r1: int) -> None:
    """Weight rows ``[r0, r1)`` of ``out[j, m] = Σ_k w[m, k] · x[j, k]`` for the few activation rows ``j``.

    ``p`` = (K, M, N, weight row stride, activation row stride, output row stride), in elements. The sum over k is
    float32 in SIMD lanes (:func:`_row_dot_typer`; ggml's ``vec_dot_f32`` sums in lanes too); each output is one
    row's dot product whatever the split, so the bits do not depend on the thread count.
    """
    k_n, n_n, ws, xs, os_ = p[0], p[2], p[3], p[4], p[5]
    for m in range(r0, r1):  # pragma: no cover - compiled
        for j in range(n_n):
            out[j * os_ + m] = row_dot(w, m * ws, x, j * xs, k_n)


def _f32_dot(w: np.ndarray, x: np.ndarray, out: np.ndarray, p: np.ndarray) -> None:
    """:func:`f32_dot_rows` over every weight row."""
    f32_dot_rows(w, x, out, p, 0, p[1])  # pragma: no cover - compiled


#: few-row products of f32 weights (decode): the weights stream from memory once, at its bandwidth
F32_DOT_SPEC: Final = _jit.KernelSpec(
    _f32_dot, "void(float32[::1], float32[::1], float32[::1], int64[::1])", readonly=(0, 1)
)
