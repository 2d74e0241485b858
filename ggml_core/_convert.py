"""Conversions between numpy arrays and a tensor's bytes (used by Tensor.set_data / to_numpy / numpy_view).

The conversions read a tensor's layout only (type, shape, strides, offset): :class:`TensorLayout` names what they
read, so that this module sits below :mod:`ggml_core._tensor`, which implements it and calls down into it.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ggml_core._errors import TensorDataError, TensorError
from ggml_core._types import GGMLType

__all__ = ["TensorLayout", "as_array", "from_bytes", "np_shape", "strided_view", "to_bytes"]


class TensorLayout(Protocol):
    """What a conversion reads of a tensor (:class:`~ggml_core.Tensor` has all of it)."""

    @property
    def type(self) -> GGMLType:
        """Element type."""

    @property
    def ne(self) -> tuple[int, int, int, int]:
        """Elements per dimension, ``ne[0]`` fastest."""

    @property
    def nb(self) -> tuple[int, int, int, int]:
        """Stride in bytes per dimension."""

    @property
    def data_offset(self) -> int | None:
        """Byte offset of element 0 in the tensor's buffer, once bound."""

    @property
    def nelements(self) -> int:
        """Total number of elements."""

    @property
    def nbytes(self) -> int:
        """Bytes from the first to one past the last element, following the strides."""

    @property
    def row_size(self) -> int:
        """Bytes of one contiguous row of ``ne[0]`` elements."""


def np_shape(t: TensorLayout) -> tuple[int, int, int, int]:
    """The numpy shape of a tensor: ``(ne3, ne2, ne1, ne0)``."""
    return (t.ne[3], t.ne[2], t.ne[1], t.ne[0])


def as_array(data: object, t: TensorLayout) -> np.ndarray:
    """``data`` as a numeric numpy array for tensor ``t``: TensorDataError for ragged lists and non-numeric data."""
    try:
        array = np.asarray(data)
    except (ValueError, TypeError) as exc:
        raise TensorDataError(t, f"data is not a rectangular array of numbers ({exc})") from None
    if array.dtype.kind not in "biuf":
        raise TensorDataError(
            t, f"cannot store {array.dtype} data (kind {array.dtype.kind!r}); pass booleans, integers or floats"
        )
    return array


def _check_range(flat: np.ndarray, dt: np.dtype, t: TensorLayout) -> None:
    """Refuse values that the cast to ``dt`` would wrap (integers) or overflow to inf (floats)."""
    if flat.size == 0 or np.can_cast(flat.dtype, dt, "safe"):
        return
    name = t.type.traits.name
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = flat.min(), flat.max()
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise TensorDataError(t, f"value {bad} is outside {name}'s range {info.min}..{info.max} (it would wrap)")
    elif flat.dtype.kind == "f":
        fmax = np.finfo(dt).max
        # round-to-nearest-even gives inf from fmax + half its spacing on (f16: 65520, f32: 2^128 - 2^103)
        ulp = float(np.spacing(np.nextafter(fmax, fmax.dtype.type(0))))  # spacing(fmax) itself is inf
        limit = float(fmax) + ulp / 2
        finite = np.abs(flat[np.isfinite(flat)])
        if finite.size and float(finite.max()) >= limit:
            raise TensorDataError(
                t, f"value {float(finite.max()):g} overflows {name} (largest finite value {float(fmax):g})"
            )


def to_bytes(array: np.ndarray, t: TensorLayout) -> np.ndarray:
    """Convert ``array`` to the bytes of a contiguous tensor ``t`` (uint8, length ``t.nbytes``).

    Values are checked against the type first: integers outside an integer type's range and finite floats beyond
    a float type's largest value raise :class:`TensorDataError` instead of wrapping or becoming inf.
    """
    if array.size != t.nelements:
        raise TensorError(t, f"data has {array.size} elements (shape {array.shape}), the tensor holds {t.nelements}")
    flat = array.reshape(np_shape(t))
    tt = t.type
    if tt.is_quantized or tt in (GGMLType.BF16, GGMLType.F16):
        if not np.issubdtype(flat.dtype, np.floating):
            raise TensorDataError(t, f"cannot store {flat.dtype} data in a {tt.traits.name} tensor; pass floats")
        _check_range(flat, np.dtype(np.float16 if tt == GGMLType.F16 else np.float32), t)
        from ggml_core.quants import quantize

        return quantize(flat.astype(np.float32, copy=False), tt).reshape(-1)
    dt = tt.np_dtype
    assert dt is not None
    if np.issubdtype(dt, np.integer) and np.issubdtype(flat.dtype, np.floating):
        raise TensorDataError(
            t, f"cannot store {flat.dtype} data in a {tt.traits.name} tensor without rounding; cast it"
        )
    _check_range(flat, np.dtype(dt), t)
    return np.ascontiguousarray(flat, dtype=dt).view(np.uint8).reshape(-1)


def from_bytes(raw: np.ndarray, t: TensorLayout, *, dequantize: bool = True) -> np.ndarray:
    """Turn the bytes ``raw`` covering ``t``'s extent (``t.nbytes`` long) into a new array of ``t``'s numpy shape."""
    view = _strided(raw, 0, t)
    tt = t.type
    if tt.is_quantized or tt == GGMLType.BF16:
        if tt.is_quantized and not dequantize:
            return np.array(view)
        from ggml_core.quants import dequantize as deq

        return deq(np.ascontiguousarray(view), tt).reshape(np_shape(t))
    return np.array(view)


def strided_view(host: np.ndarray, t: TensorLayout) -> np.ndarray:
    """A zero-copy view of ``t`` inside the host byte array ``host`` (plain types only)."""
    if t.type.is_quantized:
        raise TensorError(t, "quantized tensors have no element view; use to_numpy()")
    assert t.data_offset is not None
    return _strided(host, t.data_offset, t)


def _strided(raw: np.ndarray, offset: int, t: TensorLayout) -> np.ndarray:
    tt = t.type
    if offset + t.nbytes > raw.size:
        raise TensorError(t, f"needs bytes up to {offset + t.nbytes}, its memory has {raw.size}")
    if tt.is_quantized or tt == GGMLType.BF16:
        # rows of bytes; BF16 rows are handed on to the converter as bytes too
        width = t.row_size
        shape: tuple[int, ...] = (t.ne[3], t.ne[2], t.ne[1], width)
        strides: tuple[int, ...] = (t.nb[3], t.nb[2], t.nb[1], 1)
        if tt == GGMLType.BF16 and t.nb[0] != 2:
            shape = (t.ne[3], t.ne[2], t.ne[1], t.ne[0], 2)
            strides = (t.nb[3], t.nb[2], t.nb[1], t.nb[0], 1)
            v = np.lib.stride_tricks.as_strided(raw[offset:], shape=shape, strides=strides, writeable=False)
            return np.ascontiguousarray(v).reshape(t.ne[3], t.ne[2], t.ne[1], t.ne[0] * 2)
        return np.lib.stride_tricks.as_strided(raw[offset:], shape=shape, strides=strides, writeable=False)
    dt = tt.np_dtype
    assert dt is not None
    return np.ndarray(
        shape=np_shape(t), dtype=dt, buffer=raw.data, offset=offset, strides=(t.nb[3], t.nb[2], t.nb[1], t.nb[0])
    )
