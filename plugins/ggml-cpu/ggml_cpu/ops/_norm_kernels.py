"""RMS_NORM's compiled row kernel (+ the MUL after it): ``out = x / sqrt(mean(x²) + eps)`` per row, float32
products summed in double as ggml does.

Each kernel is one call into compiled code with every operand passed as a flat 1-D view of its memory (from the
tensor's first element) plus element strides in one int64 parameter array (:mod:`ggml_cpu.jit._row_math`), so a call
unboxes a handful of arguments and allocates nothing. Imported only once numba is loaded (see
:mod:`ggml_cpu.jit._jit`).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_cpu.jit import _jit
from ggml_cpu.jit._row_math import next_row, row_at

__all__ = ["RMS_NORM_SPEC", "rms_norm_rows"]

_INPUTS = (0, 2)  # argument positions that may be read-only (weights mapped from a file)


@_jit.inline
def rms_norm_rows(
    x: np.ndarray, out: np.ndarray, b: np.ndarray, mout: np.ndarray, p: np.ndarray, eps: float, r0: int, r1: int
) -> None:  # pragma: no cover - compiled
    """Rows ``[r0, r1)``: ``out = x / sqrt(mean(x²) + eps)`` per row; with ``p[10]`` set also ``mout = out · b``
    (b repeated)."""
    n, n1, n2 = p[0], p[1], p[2]
    fused = p[10]
    e = np.float32(eps)
    i1, i2, i3 = row_at(r0, n1, n2)
    for _ in range(r1 - r0):
        xo = i1 * p[4] + i2 * p[5] + i3 * p[6]
        oo = i1 * p[7] + i2 * p[8] + i3 * p[9]
        xr, orow = x[xo : xo + n], out[oo : oo + n]
        total = 0.0
        for i in range(n):
            v = xr[i]
            total += np.float64(v * v)  # float products, double sum
        mean = np.float32(total / n)
        scale = np.float32(1.0) / np.sqrt(mean + e)
        for i in range(n):
            orow[i] = xr[i] * scale
        if fused:
            bo = (i1 % p[12]) * p[15] + (i2 % p[13]) * p[16] + (i3 % p[14]) * p[17]
            mo = i1 * p[18] + i2 * p[19] + i3 * p[20]
            br, mrow = b[bo : bo + n], mout[mo : mo + n]  # b's rows are n long (checked)
            for i in range(n):
                mrow[i] = orow[i] * br[i]
        i1, i2, i3 = next_row(i1, i2, i3, n1, n2)


def _rms_norm(x: np.ndarray, out: np.ndarray, b: np.ndarray, mout: np.ndarray, p: np.ndarray, eps: float) -> None:
    """:func:`rms_norm_rows` over every row."""
    rms_norm_rows(x, out, b, mout, p, eps, 0, p[1] * p[2] * p[3])  # pragma: no cover - compiled


RMS_NORM_SPEC: Final = _jit.KernelSpec(
    _rms_norm,
    "void(float32[::1], float32[::1], float32[::1], float32[::1], int64[::1], float64)",
    readonly=_INPUTS,
)
