"""The compiled activation quantizers behind :func:`ggml_cpu.kernels.qdot.activations.quantize_activations`.

Each reproduces ``ggml_core.quants``' reference quantizer for one dot type, returning the quants, the float32
(not yet f16-rounded) scales and the integer sums, and counts non-finite inputs (those rows go through numpy). Imported
only once numba is loaded (see :mod:`._jit`).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_cpu.kernels.qdot import _jit
from ggml_cpu.kernels.qdot._jit import prange

__all__ = ["SPECS"]


def _q8_32_rows(x: np.ndarray, q: np.ndarray, d: np.ndarray, sums: np.ndarray) -> int:  # pragma: no cover - compiled
    """Q8_0 / Q8_1 quants of rows ``x`` (N, K): ``d = amax/127``, ``q = roundf(x/d)``; returns # non-finite."""
    n_rows, k = x.shape
    nb = k // 32
    bad = 0
    for r in prange(n_rows):
        for b in range(nb):
            o = b * 32
            amax = np.float32(0.0)
            for j in range(32):
                a = abs(x[r, o + j])
                if not (a <= np.float32(3.4028235e38)):
                    bad += 1
                amax = amax if amax > a else a
            dd = amax / np.float32(127.0)
            inv = np.float32(1.0) / dd if dd != np.float32(0.0) else np.float32(0.0)
            total = 0
            for j in range(32):
                v = x[r, o + j] * inv
                t = np.trunc(v)
                if abs(v - t) >= np.float32(0.5):
                    t = t + (np.float32(1.0) if v > 0 else np.float32(-1.0))
                qi = np.int8(np.int32(t))
                q[r, o + j] = qi
                total += qi
            d[r, b] = dd
            sums[r, b] = total
    return bad


def _q8_k_rows(x: np.ndarray, q: np.ndarray, d: np.ndarray, sums: np.ndarray) -> int:  # pragma: no cover - compiled
    """Q8_K quants of rows ``x`` (N, K): ``iscale = -127/max``, ``q = min(127, rint(iscale·x))``, bsums per 16."""
    n_rows, k = x.shape
    nb = k // 256
    bad = 0
    for r in prange(n_rows):
        for b in range(nb):
            o = b * 256
            amax = np.float32(0.0)
            vmax = np.float32(0.0)
            for j in range(256):
                v = x[r, o + j]
                a = abs(v)
                if not (a <= np.float32(3.4028235e38)):
                    bad += 1
                if a > amax:
                    amax = a
                    vmax = v
            if amax == np.float32(0.0):
                d[r, b] = np.float32(0.0)
                for j in range(256):
                    q[r, o + j] = 0
                for j in range(16):
                    sums[r, b * 16 + j] = 0
                continue
            iscale = np.float32(-127.0) / vmax
            for g in range(16):
                total = 0
                for j in range(16):
                    qi = np.int32(np.rint(iscale * x[r, o + g * 16 + j]))
                    qi = qi if qi < 127 else 127
                    q[r, o + g * 16 + j] = np.int8(qi)
                    total += qi
                sums[r, b * 16 + g] = total
            d[r, b] = np.float32(1.0) / iscale
    return bad


_SIG_32: Final = "int64(float32[:, ::1], int8[:, ::1], float32[:, ::1], int32[:, ::1])"
#: (block length, parallel) → compiled-kernel spec
SPECS: Final = {
    (32, False): _jit.KernelSpec(_q8_32_rows, _SIG_32, name="q8_32_rows", readonly=(0,)),
    (32, True): _jit.KernelSpec(_q8_32_rows, _SIG_32, parallel=True, name="q8_32_rows_par", readonly=(0,)),
    (256, False): _jit.KernelSpec(_q8_k_rows, _SIG_32, name="q8_k_rows", readonly=(0,)),
    (256, True): _jit.KernelSpec(_q8_k_rows, _SIG_32, parallel=True, name="q8_k_rows_par", readonly=(0,)),
}
