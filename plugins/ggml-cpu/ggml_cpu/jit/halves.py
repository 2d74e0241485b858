"""f16 → f32 conversion for whole tensors (f16 KV caches and f16 weights are converted on every product), and
float32 values rounded to f16 (activations of f16 products, ggml's dot type for f16 weights).

numpy's ``astype`` converts halves one element at a time (about 1.2 ns each here); the compiled kernel of
:mod:`._half_kernels` uses the hardware conversion. Without numba the numpy path gives the same bits.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_cpu.jit import _jit

__all__ = ["F16_VALUES", "f16_to_f32", "round_f16"]

#: the float32 value of every f16 bit pattern (indexed by the bits): the kernels' table where the CPU has no F16C
F16_VALUES: Final = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)

#: below this many elements numpy's own conversion costs less than the call into the kernel
_MIN_ELEMENTS: Final = 4096


def f16_to_f32(a: np.ndarray) -> np.ndarray:
    """A new float32 array with ``a``'s shape and values (``a``: float16 or uint16 bit patterns, any strides)."""
    if a.size < _MIN_ELEMENTS or not _jit.enabled():
        return (a.view(np.float16) if a.dtype == np.uint16 else a).astype(np.float32)
    from ggml_cpu.jit._half_kernels import SPEC

    kernel = _jit.get(SPEC)
    if kernel is None:
        return (a.view(np.float16) if a.dtype == np.uint16 else a).astype(np.float32)
    bits = np.ascontiguousarray(a).view(np.uint16).reshape(-1)  # a copy of 2 bytes per element at most
    out = np.empty(a.shape, np.float32)
    kernel(bits, out.reshape(-1))
    return out


def round_f16(a: np.ndarray) -> np.ndarray:
    """A new float32 array: ``a`` (float32, any strides) rounded to float16 and back, as ``a.astype(np.float16)
    .astype(np.float32)`` (ties to even, overflow to ±inf) — compiled, about 10× faster than numpy's two casts."""
    if a.size < _MIN_ELEMENTS or not _jit.enabled() or a.dtype != np.float32:
        with np.errstate(over="ignore", invalid="ignore"):
            return a.astype(np.float16).astype(np.float32)
    from ggml_cpu.jit._half_kernels import ROUND_SPEC

    kernel = _jit.get(ROUND_SPEC)
    if kernel is None:
        with np.errstate(over="ignore", invalid="ignore"):
            return a.astype(np.float16).astype(np.float32)
    src = np.ascontiguousarray(a)
    out = np.empty(a.shape, np.float32)
    kernel(src.reshape(-1), out.reshape(-1))
    return out
