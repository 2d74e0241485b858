"""Compiled elementwise UNARY kernels on contiguous float32 (bound by :mod:`ggml_cpu.ops.unary`).

SILU is ``x / (1 + exp(-x))`` in float32 steps as ggml's scalar ``ggml_silu_f32``, with ``exp`` by
:func:`ggml_cpu.jit._row_math.exp_f32` (float64 evaluation rounded once to float32, branch-free so the loop vectorises):
the numpy path's arithmetic (float64 ``exp`` rounded to float32), so the two agree bit for bit except within
~1e-7 of a rounding tie of ``exp``. One call on the calling thread: the bits do not depend on the thread count.
Imported only once numba is loaded (see :mod:`ggml_cpu.jit._jit`).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_cpu.jit import _jit
from ggml_cpu.jit._half_kernels import half_bits_of
from ggml_cpu.jit._row_math import exp_f32

__all__ = ["GELU_SPEC", "SILU_INPLACE_SPEC", "SILU_SPEC"]


@_jit.inline
def _silu_one(v: np.float32) -> np.float32:  # pragma: no cover - compiled
    return v / (np.float32(1.0) + np.float32(exp_f32(-v)))


def _silu(x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        out[i] = _silu_one(x[i])


def _silu_inplace(x: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        x[i] = _silu_one(x[i])


#: ``out = x / (1 + exp(-x))`` elementwise over float32, ``out`` apart from ``x`` (vectorised; where the two overlap
#: LLVM's runtime alias check falls back to a scalar loop, ~6× slower: use :data:`SILU_INPLACE_SPEC`)
SILU_SPEC: Final = _jit.KernelSpec(_silu, "void(float32[::1], float32[::1])", readonly=(0,))
#: the same in place (the allocator gives an elementwise op its input's memory when the input dies there)
SILU_INPLACE_SPEC: Final = _jit.KernelSpec(_silu_inplace, "void(float32[::1])")


def _gelu(x: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        v = x[i]
        if v <= np.float32(-10.0):
            out[i] = np.float32(0.0)
        elif v >= np.float32(10.0):
            out[i] = v
        else:
            out[i] = table[half_bits_of(v)]


#: ggml's CPU GELU on float32 (``unary.gelu``): 0 at or below −10, x at or above 10, else the f16 table at f16(x)
GELU_SPEC: Final = _jit.KernelSpec(_gelu, "void(float32[::1], float32[::1], float32[::1])", readonly=(0, 1))
