"""Block dot products of the 32-element types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 with quantized activations.

The kernel computes ``out[n, m] = Σ_blocks (integer dot of the block's quants) · scales`` for every weight row
``m`` and activation row ``n``, the way ggml's ``vec_dot_*`` does: the weights' quants against the int8 quants of
the activations (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1), scaled by the f16 scales of both blocks. The
unsigned quants' offsets (−8 for Q4_0, −16 for Q5_0) are folded into one product with the activation block's sum;
the minima of Q4_1/Q5_1 multiply Q8_1's stored ``s``. Integer sums are exact, so the result differs from the
reference path (dequantize, then a float32 product) by float rounding only.

Each weight row is one intrinsic call (:mod:`ggml_cpu.jit._simd`): per block the exact integer partial sums become
floats scaled by ``d_w·d_x`` in an 8-lane accumulator, with one horizontal sum per row (ggml sums the blocks in a
different order: the results differ by float rounding). Activation rows are taken four at a time, so each block is
unpacked once for four dot products; the loop over weight rows runs in parallel. One kernel source serves the five types
(``kind``, a constant when each is compiled).

Activation quantization is fused in: with ``quant`` set, the kernel first quantizes the float32 rows ``x`` into
``xq``/``xd``/``xsum``/``xs`` (:func:`._act_kernels.quantize_into`, bit for bit as
:func:`.activations.quantize_activations`) and returns the number of non-finite inputs without computing when there
are any (the caller then quantizes with numpy and calls again with ``quant`` off); otherwise it returns 0.

Signature :data:`SIGNATURE`: ``x`` float32 (N, K), ``quant``, ``w`` the weight rows (M, row bytes) C-contiguous
(``wi``: the same memory as int8), the activations ``xq`` (N, K) int8, ``xd`` their scales (N, K/32,
f16-rounded), ``xsum`` their per-block sums, ``xs`` Q8_1's ``s`` (any (N, K/32) array for the other types),
``lut`` the f16 → f32 table, ``out`` (N, M).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np

from ggml_core import GGMLType
from ggml_cpu.jit import _jit, _simd
from ggml_cpu.jit._jit import inline, prange
from ggml_cpu.quant._act_kernels import DOT_Q8_0, DOT_Q8_1, quantize_into

__all__ = ["READONLY", "SIGNATURE", "SPECS"]

SIGNATURE: Final = (
    "int64(float32[:, ::1], boolean, uint8[:, ::1], int8[:, ::1], int8[:, ::1], float32[:, ::1], int32[:, ::1],"
    " float32[:, ::1], float32[::1], float32[:, ::1])"
)
#: the arguments that may be read-only arrays: the activations, the weights and their int8 view
READONLY: Final = (0, 2, 3)

_Q4_0, _Q4_1, _Q5_0, _Q5_1, _Q8_0 = 0, 1, 2, 3, 4

# whole-row intrinsics (one and four activation rows) per type
_Q4_0_1, _Q4_0_4 = _simd.ROW_DOTS["q4_0"]
_Q4_1_1, _Q4_1_4 = _simd.ROW_DOTS["q4_1"]
_Q5_0_1, _Q5_0_4 = _simd.ROW_DOTS["q5_0"]
_Q5_1_1, _Q5_1_4 = _simd.ROW_DOTS["q5_1"]
_Q8_0_1, _Q8_0_4 = _simd.ROW_DOTS["q8_0"]

# the offset types' tiles: (weight rows, activation rows) → intrinsic
_TILES: Final = _simd.TILE_DOTS
_T4_0 = tuple(_TILES["q4_0"][s] for s in ((4, 4), (4, 1), (1, 4), (1, 1)))
_T5_0 = tuple(_TILES["q5_0"][s] for s in ((4, 4), (4, 1), (1, 4), (1, 1)))
_T8_0 = tuple(_TILES["q8_0"][s] for s in ((4, 4), (4, 1), (1, 4), (1, 1)))
_T4_0_44, _T4_0_41, _T4_0_14, _T4_0_11 = _T4_0
_T5_0_44, _T5_0_41, _T5_0_14, _T5_0_11 = _T5_0
_T8_0_44, _T8_0_41, _T8_0_14, _T8_0_11 = _T8_0
#: the quant offset of the offset types (their tiles read q + offset as unsigned bytes)
_OFFSET: Final = {_Q4_0: 8, _Q5_0: 16, _Q8_0: 128}
#: weight matrices of at least this many bytes stream from memory on every decode step (larger than the caches
#: hold next to the rest of a model): for fewer than 4 activation rows their rows go one at a time, one
#: sequential stream the hardware prefetcher follows, instead of 4 rows side by side (4 interleaved streams of a
#: row's length each). Same bits either way. Measured on a Zen 4 guest (AVX-512 VNNI), one thread, 1 row:
#: Gemma 3's 262144 × 640 Q8_0 output 20–23 → 9.9–10.3 ms (7.5 → 18 GB/s; numpy's sum of the bytes: 28 GB/s),
#: 65536 × 640 5.7 → 3.0 ms; but on cache-hot 4096 × 512 Q8_0, 4 rows side by side are faster (0.08 → 0.11 ms).
_STREAM_BYTES: Final = 8 << 20


@_jit.callee
def _offsets(xq: np.ndarray, c: int, offs: np.ndarray) -> None:  # pragma: no cover - compiled
    """``offs[n, j] = −c · Σ_{i<4} xq[n, 4j + i]``: the tiles' accumulator start, which takes the quant offset off."""
    for n in range(xq.shape[0]):
        for j in range(offs.shape[1]):
            s = np.int32(xq[n, 4 * j]) + np.int32(xq[n, 4 * j + 1]) + np.int32(xq[n, 4 * j + 2])
            offs[n, j] = np.int32(-c) * (s + np.int32(xq[n, 4 * j + 3]))


@inline
def _tile(
    kind: int, shape: int, w: np.ndarray, m0: int, xq: np.ndarray, n0: int, xd: np.ndarray, offs: np.ndarray,
    lut: np.ndarray, nb: int,
) -> tuple[float, ...]:  # fmt: skip  # pragma: no cover - compiled
    """The ``shape`` (0: 4×4, 1: 4×1, 2: 1×4, 3: 1×1 weight × activation rows) tile of an offset type."""
    if kind == _Q4_0:
        if shape == 0:
            return _T4_0_44(w, m0, xq, n0, xd, offs, lut, nb)
        if shape == 1:
            return _T4_0_41(w, m0, xq, n0, xd, offs, lut, nb)
        if shape == 2:
            return _T4_0_14(w, m0, xq, n0, xd, offs, lut, nb)
        return (_T4_0_11(w, m0, xq, n0, xd, offs, lut, nb),)
    if kind == _Q5_0:
        if shape == 0:
            return _T5_0_44(w, m0, xq, n0, xd, offs, lut, nb)
        if shape == 1:
            return _T5_0_41(w, m0, xq, n0, xd, offs, lut, nb)
        if shape == 2:
            return _T5_0_14(w, m0, xq, n0, xd, offs, lut, nb)
        return (_T5_0_11(w, m0, xq, n0, xd, offs, lut, nb),)
    if shape == 0:
        return _T8_0_44(w, m0, xq, n0, xd, offs, lut, nb)
    if shape == 1:
        return _T8_0_41(w, m0, xq, n0, xd, offs, lut, nb)
    if shape == 2:
        return _T8_0_14(w, m0, xq, n0, xd, offs, lut, nb)
    return (_T8_0_11(w, m0, xq, n0, xd, offs, lut, nb),)


@inline
def _row4(
    kind: int, row: np.ndarray, xq: np.ndarray, n0: int, xd: np.ndarray, xs: np.ndarray, lut: np.ndarray, nb: int
) -> tuple[float, float, float, float]:  # pragma: no cover - compiled
    if kind == _Q4_0:
        return _Q4_0_4(row, xq, n0, xd, xs, lut, nb)
    if kind == _Q4_1:
        return _Q4_1_4(row, xq, n0, xd, xs, lut, nb)
    if kind == _Q5_0:
        return _Q5_0_4(row, xq, n0, xd, xs, lut, nb)
    if kind == _Q5_1:
        return _Q5_1_4(row, xq, n0, xd, xs, lut, nb)
    return _Q8_0_4(row, xq, n0, xd, xs, lut, nb)


@inline
def _row1(
    kind: int, row: np.ndarray, xq: np.ndarray, n: int, xd: np.ndarray, xs: np.ndarray, lut: np.ndarray, nb: int
) -> float:  # pragma: no cover - compiled
    if kind == _Q4_0:
        return _Q4_0_1(row, xq, n, xd, xs, lut, nb)
    if kind == _Q4_1:
        return _Q4_1_1(row, xq, n, xd, xs, lut, nb)
    if kind == _Q5_0:
        return _Q5_0_1(row, xq, n, xd, xs, lut, nb)
    if kind == _Q5_1:
        return _Q5_1_1(row, xq, n, xd, xs, lut, nb)
    return _Q8_0_1(row, xq, n, xd, xs, lut, nb)


def _kernel(kind: int) -> Callable[..., int]:
    """The kernel for one weight type: ``kind`` is a constant of the closure, so numba folds every branch on it."""

    dot = DOT_Q8_1 if kind in (_Q4_1, _Q5_1) else DOT_Q8_0
    offset = _OFFSET.get(kind, 0)  # 0: no tiles (Q4_1, Q5_1)

    def kernel(
        x: np.ndarray,
        quant: bool,
        w: np.ndarray,
        wi: np.ndarray,
        xq: np.ndarray,
        xd: np.ndarray,
        xsum: np.ndarray,
        xs: np.ndarray,
        lut: np.ndarray,
        out: np.ndarray,
    ) -> int:  # pragma: no cover - compiled
        if quant:
            bad = quantize_into(dot, x, xq, xd, xsum, xs, lut)
            if bad:
                return bad
        n_act, k = xq.shape
        nb = k // 32
        n4 = n_act - n_act % 4
        if offset:
            offs = np.empty((n_act, k // 4), np.int32)
            _offsets(xq, offset, offs)
            n_w = w.shape[0]
            one_by_one = n4 == 0 and n_w * w.shape[1] >= _STREAM_BYTES  # decode rows of a streamed matrix
            for mb in prange((n_w + 3) // 4):
                m0 = 4 * mb
                # fewer than 4 activation rows (decode) too: 4 weight rows side by side (the 4×1 tile, the same
                # bits as 1×1) keep four independent float accumulators where one row at a time waits on one
                # (measured on Sapphire Rapids, one thread, µs: Q8_0 512 × 512 14.5 → 10.4, 1536 × 512 42 → 32,
                # 262144 × 640 from memory 75 → 29 ms; Q4_0 13.3 → 11.9, 42 → 39, 49 → 39 ms)
                if m0 + 4 <= n_w and not one_by_one:
                    for n0 in range(0, n4, 4):
                        t = _tile(kind, 0, w, m0, xq, n0, xd, offs, lut, nb)
                        for i in range(16):
                            out[n0 + i % 4, m0 + i // 4] = t[i]
                    for n in range(n4, n_act):
                        t = _tile(kind, 1, w, m0, xq, n, xd, offs, lut, nb)
                        for i in range(4):
                            out[n, m0 + i] = t[i]
                else:
                    for m in range(m0, min(m0 + 4, n_w)):
                        for n0 in range(0, n4, 4):
                            t = _tile(kind, 2, w, m, xq, n0, xd, offs, lut, nb)
                            for i in range(4):
                                out[n0 + i, m] = t[i]
                        for n in range(n4, n_act):
                            out[n, m] = _tile(kind, 3, w, m, xq, n, xd, offs, lut, nb)[0]
            return 0
        for m in prange(w.shape[0]):
            row = w[m]
            for n0 in range(0, n4, 4):
                a0, a1, a2, a3 = _row4(kind, row, xq, n0, xd, xs, lut, nb)
                out[n0, m] = a0
                out[n0 + 1, m] = a1
                out[n0 + 2, m] = a2
                out[n0 + 3, m] = a3
            for n in range(n4, n_act):
                out[n, m] = _row1(kind, row, xq, n, xd, xs, lut, nb)
        return 0

    return kernel


#: compiled-kernel specs per weight type: (threads over the weight rows, one thread for small products)
SPECS: Final = {
    GGMLType.Q4_0: _jit.spec_pair(_kernel(_Q4_0), SIGNATURE, "_dot_q4_0", READONLY),
    GGMLType.Q4_1: _jit.spec_pair(_kernel(_Q4_1), SIGNATURE, "_dot_q4_1", READONLY),
    GGMLType.Q5_0: _jit.spec_pair(_kernel(_Q5_0), SIGNATURE, "_dot_q5_0", READONLY),
    GGMLType.Q5_1: _jit.spec_pair(_kernel(_Q5_1), SIGNATURE, "_dot_q5_1", READONLY),
    GGMLType.Q8_0: _jit.spec_pair(_kernel(_Q8_0), SIGNATURE, "_dot_q8_0", READONLY),
}
