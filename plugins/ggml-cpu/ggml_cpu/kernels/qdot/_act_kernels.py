"""The compiled activation quantizers behind :func:`ggml_cpu.kernels.qdot.activations.quantize_activations`.

Each reproduces ggml-cpu's x86 ``from_float`` for one dot type (:func:`.activations.from_float`), returning the
quants, the float32 (not yet f16-rounded) scales and the integer sums, and counts non-finite inputs (those rows go
through numpy). Imported only once numba is loaded (see :mod:`._jit`).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_cpu.kernels.qdot import _jit
from ggml_cpu.kernels.qdot._blocks import f16_bits
from ggml_cpu.kernels.qdot._jit import inline, prange

__all__ = ["DOT_Q8_0", "DOT_Q8_1", "DOT_Q8_K", "SPECS", "q8_32_row", "q8_k_row", "quantize_into"]


@inline
def q8_32_row(x: np.ndarray, r: int, q: np.ndarray, d: np.ndarray, sums: np.ndarray) -> int:  # pragma: no cover
    """Q8_0 / Q8_1 quants of row ``r`` of ``x`` as ggml-cpu's x86 code: ``d = amax/127``, ``q = rint(x·(127/amax))``
    (half to even); returns # non-finite."""
    nb = x.shape[1] // 32
    bad = 0
    for b in range(nb):
        o = b * 32
        amax = np.float32(0.0)
        for j in range(32):
            a = abs(x[r, o + j])
            if not (a <= np.float32(3.4028235e38)):
                bad += 1
            amax = amax if amax > a else a
        dd = amax / np.float32(127.0)
        inv = np.float32(127.0) / amax if amax != np.float32(0.0) else np.float32(0.0)
        total = 0
        for j in range(32):
            qi = np.int8(np.int32(np.rint(x[r, o + j] * inv)))
            q[r, o + j] = qi
            total += qi
        d[r, b] = dd
        sums[r, b] = total
    return bad


@inline
def q8_k_row(x: np.ndarray, r: int, q: np.ndarray, d: np.ndarray, sums: np.ndarray) -> int:  # pragma: no cover
    """Q8_K quants of row ``r`` of ``x``: ``iscale = -127/max``, ``q = min(127, rint(iscale·x))``, bsums per 16."""
    nb = x.shape[1] // 256
    bad = 0
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


def _q8_32_rows(x: np.ndarray, q: np.ndarray, d: np.ndarray, sums: np.ndarray) -> int:  # pragma: no cover - compiled
    """Q8_0 / Q8_1 quants of rows ``x`` (N, K) (float32 ``d``, not yet f16-rounded); returns # non-finite."""
    bad = 0
    for r in prange(x.shape[0]):
        bad += q8_32_row(x, r, q, d, sums)
    return bad


def _q8_k_rows(x: np.ndarray, q: np.ndarray, d: np.ndarray, sums: np.ndarray) -> int:  # pragma: no cover - compiled
    """Q8_K quants of rows ``x`` (N, K); returns # non-finite."""
    bad = 0
    for r in prange(x.shape[0]):
        bad += q8_k_row(x, r, q, d, sums)
    return bad


#: dot-type codes of :func:`quantize_into`
DOT_Q8_0, DOT_Q8_1, DOT_Q8_K = 0, 1, 2


@inline
def quantize_into(
    dot: int,
    x: np.ndarray,
    xq: np.ndarray,
    xd: np.ndarray,
    xsum: np.ndarray,
    xs: np.ndarray,
    lut: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """Every row of ``x`` quantized into the buffers, exactly as :func:`..activations.quantize_activations` does.

    Q8_0 / Q8_1: ``xd`` the f16-rounded scales, Q8_1's ``xs = f16(Σq · d)`` (from the unrounded ``d``), through
    the f16 → f32 table ``lut``; Q8_K: float32 ``d`` and ``bsums``. Returns the number of non-finite
    inputs (then the buffers are incomplete: the caller quantizes with numpy instead).
    """
    bad = 0
    for r in range(x.shape[0]):
        if dot == DOT_Q8_K:
            bad += q8_k_row(x, r, xq, xd, xsum)
        else:
            bad += q8_32_row(x, r, xq, xd, xsum)
    if bad or dot == DOT_Q8_K:
        return bad
    for r in range(x.shape[0]):
        for b in range(xd.shape[1]):
            if dot == DOT_Q8_1:
                xs[r, b] = lut[f16_bits(np.float32(xsum[r, b]) * xd[r, b])]
            xd[r, b] = lut[f16_bits(xd[r, b])]
    return 0


_SIG_32: Final = "int64(float32[:, ::1], int8[:, ::1], float32[:, ::1], int32[:, ::1])"
#: (block length, parallel) → compiled-kernel spec
SPECS: Final = {
    (32, False): _jit.KernelSpec(_q8_32_rows, _SIG_32, name="q8_32_rows", readonly=(0,)),
    (32, True): _jit.KernelSpec(_q8_32_rows, _SIG_32, parallel=True, name="q8_32_rows_par", readonly=(0,)),
    (256, False): _jit.KernelSpec(_q8_k_rows, _SIG_32, name="q8_k_rows", readonly=(0,)),
    (256, True): _jit.KernelSpec(_q8_k_rows, _SIG_32, parallel=True, name="q8_k_rows_par", readonly=(0,)),
}
