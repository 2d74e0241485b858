"""The gated units' compiled row kernels: SWIGLU (``exp`` in double rounded once, as the numpy path) and GEGLU
(ggml's f16 table of GELU).

Each kernel is one call into compiled code with every operand passed as a flat 1-D view of its memory (from the
tensor's first element) plus element strides in one int64 parameter array (:mod:`ggml_cpu.jit._row_math`), so a call
unboxes a handful of arguments and allocates nothing. Imported only once numba is loaded (see
:mod:`ggml_cpu.jit._jit`).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_cpu.jit import _jit
from ggml_cpu.jit._half_kernels import half_bits_of
from ggml_cpu.jit._row_math import exp_f32, next_row, row_at

__all__ = ["GEGLU_SPEC", "GLU_SPEC", "swiglu_rows"]


@_jit.inline
def _glu_row(
    x: np.ndarray, g: np.ndarray, out: np.ndarray, p: np.ndarray, i1: int, i2: int, i3: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Row ``(i1, i2, i3)`` of a GLU's value, gate and output: ``p`` = (ne0..3, the value's strides 1..3, the
    output's, the gate's, the value's first element, the gate's first element)."""
    n = p[0]
    xo = p[13] + i1 * p[4] + i2 * p[5] + i3 * p[6]
    go = p[14] + i1 * p[10] + i2 * p[11] + i3 * p[12]
    oo = i1 * p[7] + i2 * p[8] + i3 * p[9]
    return x[xo : xo + n], g[go : go + n], out[oo : oo + n]


@_jit.inline
def swiglu_rows(
    x: np.ndarray, g: np.ndarray, out: np.ndarray, p: np.ndarray, r0: int, r1: int
) -> None:  # pragma: no cover - compiled
    """Rows ``[r0, r1)``: ``out = x / (1 + exp(−x)) · g`` (the exponential in double, rounded once to float32, as
    the reference)."""
    n, n1, n2 = p[0], p[1], p[2]
    i1, i2, i3 = row_at(r0, n1, n2)
    for _ in range(r1 - r0):
        xr, gr, orow = _glu_row(x, g, out, p, i1, i2, i3)
        for i in range(n):
            v = xr[i]
            e = exp_f32(-v)  # exp in double, rounded once (as the numpy path)
            orow[i] = v / (np.float32(1.0) + e) * gr[i]
        i1, i2, i3 = next_row(i1, i2, i3, n1, n2)


def _swiglu(x: np.ndarray, g: np.ndarray, out: np.ndarray, p: np.ndarray) -> None:
    """:func:`swiglu_rows` over every row."""
    swiglu_rows(x, g, out, p, 0, p[1] * p[2] * p[3])  # pragma: no cover - compiled


GLU_SPEC: Final = _jit.KernelSpec(
    _swiglu, "void(float32[::1], float32[::1], float32[::1], int64[::1])", readonly=(0, 1)
)


def _geglu(x: np.ndarray, g: np.ndarray, out: np.ndarray, p: np.ndarray, table: np.ndarray) -> None:
    """GEGLU over every row (:func:`swiglu_rows`' operands and walk): ``out = gelu(x) · g`` with ggml's CPU GELU —
    0 at or below −10, x at or above 10, else ``table`` (65,536 float32 values) at the f16 bits of x — then one
    float32 product, as the numpy path (``unary.gelu`` times the gate)."""
    n, n1, n2 = p[0], p[1], p[2]
    i1, i2, i3 = 0, 0, 0
    for _ in range(p[1] * p[2] * p[3]):  # pragma: no cover - compiled
        xr, gr, orow = _glu_row(x, g, out, p, i1, i2, i3)
        for i in range(n):
            v = xr[i]
            if v <= np.float32(-10.0):
                a = np.float32(0.0)
            elif v >= np.float32(10.0):
                a = v
            else:
                a = table[half_bits_of(v)]
            orow[i] = a * gr[i]
        i1, i2, i3 = next_row(i1, i2, i3, n1, n2)


GEGLU_SPEC: Final = _jit.KernelSpec(
    _geglu, "void(float32[::1], float32[::1], float32[::1], int64[::1], float32[::1])", readonly=(0, 1, 4)
)
