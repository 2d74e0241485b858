"""Numeric helpers shared by the quantizers: ggml's rounding rules in float32, f16 scales, sequential sums.

Every quantizer in this package works on a 2-D float32 array of *blocks* (one block per row) and reproduces
ggml's C reference code bit for bit. The C code does its arithmetic in single precision (x86-64 SSE, no fused
multiply-add), left to right, so the helpers here keep every intermediate in ``np.float32`` and sum terms in
their original order.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

F32 = np.float32
F32Array = npt.NDArray[np.float32]
I32Array = npt.NDArray[np.int32]
U8Array = npt.NDArray[np.uint8]
U16Array = npt.NDArray[np.uint16]

#: ``GROUP_MAX_EPS`` of ggml-quants.c: sub-blocks whose largest magnitude is below this count as all zero
GROUP_MAX_EPS: Final = np.float32(1e-15)

_MAGIC: Final = np.float32(12582912.0)  # 1.5 * 2**23, the constant of ggml's ``nearest_int``


def nearest_int(x: F32Array) -> I32Array:
    """ggml's ``nearest_int``: add 1.5·2²³ in float32 and read the low mantissa bits back.

    For ``|x| <= 4194303`` this is round-half-to-even. Outside that range (where ggml's ``assert`` is compiled
    out) the same bit pattern is produced as in C, so even nonsense values agree.
    """
    bits = np.add(x, _MAGIC, dtype=np.float32).view(np.int32)
    bits &= np.int32(0x007FFFFF)
    bits -= np.int32(0x00400000)
    return bits


def c_roundf(x: F32Array) -> F32Array:
    """C's ``roundf``: round half away from zero (numpy's ``rint`` rounds half to even)."""
    r = np.rint(x)
    t = np.trunc(x)
    tie = np.abs(x - t) == F32(0.5)  # x - trunc(x) is exact in float32
    return np.where(tie, t + np.sign(x), r).astype(np.float32, copy=False)


def f32_to_int_trunc(x: F32Array) -> I32Array:
    """C's float → integer conversion (truncation toward zero, as ``cvttss2si`` does for in-range values)."""
    with np.errstate(invalid="ignore"):
        return x.astype(np.int32)


def f32_to_f16_bits(x: F32Array) -> U16Array:
    """``GGML_FP32_TO_FP16``: round to nearest even, overflow to ±inf; returns the raw 16-bit patterns.

    A NaN becomes ggml's canonical ``0x7e00`` with the sign kept (numpy would keep payload bits instead).
    """
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        sign = (x.view(np.uint32) >> np.uint32(16)).astype(np.uint16) & np.uint16(0x8000)
        h = np.where(nan, sign | np.uint16(0x7E00), h).astype(np.uint16)
    return h


def round_f16(x: F32Array) -> F32Array:
    """Round float32 values to the nearest f16 and widen them again (what storing an f16 scale does)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def seq_sum(terms: F32Array) -> F32Array:
    """Sum along axis 0 strictly left to right in float32, starting from ``0.0f`` like ``s = 0; s += t[i]``.

    numpy's ``sum`` uses pairwise summation, which rounds differently from the C loops it must match.
    """
    acc = F32(0.0) + terms[0]
    for i in range(1, terms.shape[0]):
        acc += terms[i]
    return acc


def seq_sum_from_first(terms: F32Array) -> F32Array:
    """Like :func:`seq_sum` but the accumulator starts at ``terms[0]`` (C: ``s = t[0]; for i>=1: s += t[i]``)."""
    acc = terms[0].copy()
    for i in range(1, terms.shape[0]):
        acc += terms[i]
    return acc


def first_absmax(x: F32Array, axis: int = 0) -> tuple[F32Array, F32Array]:
    """Along ``axis``: ``amax = max|x|`` (from 0) and ``max``, the signed value that first reaches it.

    This is the C idiom ``if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }`` with ``amax = max = 0``:
    ties keep the first index, a NaN never wins (the comparison is false) and an all-zero run gives ``+0.0`` for
    both (never ``-0.0``).
    """
    ax = np.abs(x)
    idx = np.expand_dims(np.argmax(np.where(np.isnan(ax), F32(-1.0), ax), axis=axis), axis)
    amax = np.take_along_axis(ax, idx, axis=axis).squeeze(axis)
    vmax = np.take_along_axis(x, idx, axis=axis).squeeze(axis)
    zero = ~(amax > 0)
    amax = np.where(zero, F32(0.0), amax).astype(np.float32, copy=False)
    vmax = np.where(zero, F32(0.0), vmax).astype(np.float32, copy=False)
    return amax, vmax


def _take(x: F32Array, idx: npt.NDArray[np.intp], axis: int) -> F32Array:
    return np.take_along_axis(x, np.expand_dims(idx, axis), axis=axis).squeeze(axis)


def first_min_max(x: F32Array, axis: int, sentinel: bool) -> tuple[F32Array, F32Array]:
    """Along ``axis``: the minimum and maximum *as the C loop meets them*.

    ``sentinel=True`` is ``min = FLT_MAX; max = -FLT_MAX; if (v < min) min = v; if (v > max) max = v;``
    (NaNs are skipped); ``sentinel=False`` starts from ``min = max = x[0]`` (a NaN there sticks, later NaNs are
    skipped). Among equal values the first wins, which only matters for the sign of a zero.
    """
    big = F32(np.finfo(np.float32).max)
    vmin = _take(x, np.argmin(x, axis=axis), axis)
    vmax = _take(x, np.argmax(x, axis=axis), axis)
    if np.isnan(vmin).any() or np.isnan(vmax).any():  # argmin/argmax stop at the first NaN
        nan = np.isnan(x)
        lo = np.where(nan, F32(np.inf), x)
        hi = np.where(nan, F32(-np.inf), x)
        vmin = _take(lo, np.argmin(lo, axis=axis), axis)
        vmax = _take(hi, np.argmax(hi, axis=axis), axis)
        if not sentinel:
            first_nan = np.take(nan, 0, axis=axis)
            vmin = np.where(first_nan, F32(np.nan), vmin).astype(np.float32)
            vmax = np.where(first_nan, F32(np.nan), vmax).astype(np.float32)
    if sentinel:
        vmin = np.where(vmin < big, vmin, big).astype(np.float32)
        vmax = np.where(vmax > -big, vmax, -big).astype(np.float32)
    return vmin, vmax


def fold_absmax(x: F32Array) -> F32Array:
    """Along axis 1: ``amax = 0; amax = MAX(amax, fabsf(v))`` with ggml's ``MAX(a, b) = a > b ? a : b``.

    A NaN replaces the running value and the next element replaces the NaN, so with NaNs the result is the
    maximum after the last NaN (or NaN if the row ends with one).
    """
    ax = np.abs(x)
    amax = ax.max(axis=1)
    bad = np.isnan(amax)
    if not bad.any():
        return amax
    n = x.shape[1]
    pos = np.arange(n)
    last_nan = np.where(np.isnan(ax), pos, -1).max(axis=1)
    after = np.where(pos[None, :] > last_nan[:, None], ax, F32(0.0)).max(axis=1)
    return np.where(last_nan == n - 1, F32(np.nan), after).astype(np.float32)


def le_bytes_u32(v: npt.NDArray[np.integer]) -> U8Array:
    """Little-endian bytes of uint32 values: shape ``(..., 4)``."""
    return np.ascontiguousarray(v.astype("<u4")).view(np.uint8).reshape(*v.shape, 4)


def le_bytes_u16(v: npt.NDArray[np.integer]) -> U8Array:
    """Little-endian bytes of uint16 values: shape ``(..., 2)``."""
    return np.ascontiguousarray(v.astype("<u2")).view(np.uint8).reshape(*v.shape, 2)


def read_f16(blocks: U8Array, offset: int) -> F32Array:
    """The little-endian f16 at byte ``offset`` of every block (rows of ``blocks``), widened to float32."""
    raw = np.ascontiguousarray(blocks[:, offset : offset + 2])
    return raw.view("<f2")[:, 0].astype(np.float32)


def read_u32(blocks: U8Array, offset: int) -> npt.NDArray[np.uint32]:
    """The little-endian uint32 at byte ``offset`` of every block."""
    raw = np.ascontiguousarray(blocks[:, offset : offset + 4])
    return raw.view("<u4")[:, 0].astype(np.uint32)
