"""The compiled activation quantizers behind :func:`ggml_cpu.quant.activations.quantize_activations`.

Each reproduces ggml-cpu's x86 ``from_float`` for one dot type (:func:`.activations.from_float`), returning the
quants, the float32 (not yet f16-rounded) scales and the integer sums, and counts non-finite inputs (those rows go
through numpy). Imported only once numba is loaded (see :mod:`ggml_cpu.jit._jit`).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_cpu.jit import _jit
from ggml_cpu.jit._blocks import f16_bits, f32_bits, f32_from_bits
from ggml_cpu.jit._jit import inline, prange

__all__ = ["DOT_Q8_0", "DOT_Q8_1", "DOT_Q8_K", "SPECS", "q8_32_row", "q8_k_row", "quantize_into"]


#: the sign bit cleared: a float32's bits as int32 then order as its magnitude (inf above every finite, NaN above)
_MAG: Final = np.int32(0x7FFFFFFF)
_INF_BITS: Final = np.int32(0x7F800000)
#: 1.5·2²³ (see :func:`q8_32_row`); an explicit rounding the SLP vectoriser packs, where it leaves ``np.rint`` scalar
_ROUND: Final = np.float32(12582912.0)


@inline
def _max_magnitude(xi: np.ndarray, o: int, n: int) -> int:  # pragma: no cover - compiled
    """The largest ``|x|`` of ``x[o : o + n]`` as its float32 bits, ``xi`` being ``x``'s bits as int32: an integer
    max, which vectorises where a float max (NaN-ordered) does not."""
    m = np.int32(0)
    for j in range(n):
        v = xi[o + j] & _MAG
        m = v if v > m else m
    return m


@inline
def _non_finite(xi: np.ndarray, o: int, n: int) -> int:  # pragma: no cover - compiled
    """How many of ``x[o : o + n]`` are infinite or NaN (``xi``: the bits as int32)."""
    bad = 0
    for j in range(n):
        if (xi[o + j] & _MAG) >= _INF_BITS:
            bad += 1
    return bad


@inline
def q8_32_row(x: np.ndarray, r: int, q: np.ndarray, d: np.ndarray, sums: np.ndarray) -> int:  # pragma: no cover
    """Q8_0 / Q8_1 quants of row ``r`` of ``x`` as ggml-cpu's x86 code: ``d = amax/127``, ``q = rint(x·(127/amax))``
    (half to even); returns # non-finite (those blocks are left unwritten: the caller quantizes with numpy)."""
    nb = x.shape[1] // 32
    xr, qr = x[r], q[r]
    xi = xr.view(np.int32)
    bad = 0
    for b in range(nb):
        o = b * 32
        m = _max_magnitude(xi, o, 32)
        if m >= _INF_BITS:
            bad += _non_finite(xi, o, 32)
            continue
        amax = f32_from_bits(np.int32(m))
        inv = np.float32(127.0) / amax if m != 0 else np.float32(0.0)
        total = np.int32(0)
        for j in range(32):  # rint: |x·inv| <= 127, so adding 1.5·2²³ rounds it half to even into the low bits
            t = xr[o + j] * inv + _ROUND
            qi = np.int32(f32_bits(t) & np.uint32(0x7FFFFF)) - np.int32(0x400000)
            qr[o + j] = np.int8(qi)
            total += qi
        d[r, b] = amax / np.float32(127.0)
        sums[r, b] = total
    return bad


@inline
def q8_k_row(x: np.ndarray, r: int, q: np.ndarray, d: np.ndarray, sums: np.ndarray) -> int:  # pragma: no cover
    """Q8_K quants of row ``r`` of ``x``: ``iscale = -127/max`` with ``max`` the first value of largest magnitude,
    ``q = min(127, rint(iscale·x))``, bsums per 16; returns # non-finite (those blocks are left unwritten)."""
    nb = x.shape[1] // 256
    xr, qr = x[r], q[r]
    xi = xr.view(np.int32)
    bad = 0
    for b in range(nb):
        o = b * 256
        m = _max_magnitude(xi, o, 256)
        if m >= _INF_BITS:
            bad += _non_finite(xi, o, 256)
            continue
        if m == 0:
            d[r, b] = np.float32(0.0)
            for j in range(256):
                qr[o + j] = 0
            for j in range(16):
                sums[r, b * 16 + j] = 0
            continue
        first = 256  # the reference keeps the first of equal magnitudes (it updates on ``>``): its sign counts
        for j in range(256):
            c = j if (xi[o + j] & _MAG) == m else 256
            first = c if c < first else first
        iscale = np.float32(-127.0) / xr[o + first]
        for j in range(256):
            qi = np.int32(np.rint(iscale * xr[o + j]))
            qr[o + j] = np.int8(qi if qi < 127 else 127)
        for g in range(16):
            total = np.int32(0)
            for j in range(16):
                total += np.int32(qr[o + g * 16 + j])
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


@_jit.callee
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
