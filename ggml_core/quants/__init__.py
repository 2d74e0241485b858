"""Bit-exact numpy re-implementation of ggml's reference quantizers and dequantizers.

``quantize(data, type)`` turns float rows (last axis) into the bytes ggml's ``quantize_row_*_ref`` produces;
``dequantize(data, type)`` turns such bytes back into float32 exactly like ggml's ``dequantize_row_*``. The calling
convention is that of ``gguf.quants``: the last axis holds the rows, everything before it is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt

from .._types import GGMLType, as_type
from . import _floats, _kquants, _legacy, _others
from ._common import F32Array, U8Array, read_f16
from ._kquants import unpack_k4_scales

__all__ = [
    "can_dequantize",
    "can_quantize",
    "dequantize",
    "dequantize_rows_into",
    "quantizable_types",
    "quantize",
    "quantize_rows_into",
    "read_f16",
    "unpack_k4_scales",
]

_Kernel = Callable[[np.ndarray], np.ndarray]

_QUANTIZE: Final[dict[GGMLType, _Kernel]] = {
    GGMLType.F32: _floats.quantize_f32,
    GGMLType.F16: _floats.quantize_f16,
    GGMLType.BF16: _floats.quantize_bf16,
    GGMLType.Q4_0: _legacy.quantize_q4_0,
    GGMLType.Q4_1: _legacy.quantize_q4_1,
    GGMLType.Q5_0: _legacy.quantize_q5_0,
    GGMLType.Q5_1: _legacy.quantize_q5_1,
    GGMLType.Q8_0: _legacy.quantize_q8_0,
    GGMLType.Q8_1: _legacy.quantize_q8_1,
    GGMLType.Q2_K: _kquants.quantize_q2_k,
    GGMLType.Q3_K: _kquants.quantize_q3_k,
    GGMLType.Q4_K: _kquants.quantize_q4_k,
    GGMLType.Q5_K: _kquants.quantize_q5_k,
    GGMLType.Q6_K: _kquants.quantize_q6_k,
    GGMLType.Q8_K: _kquants.quantize_q8_k,
    GGMLType.IQ4_NL: _others.quantize_iq4_nl,
}

_DEQUANTIZE: Final[dict[GGMLType, _Kernel]] = {
    GGMLType.F32: _floats.dequantize_f32,
    GGMLType.F16: _floats.dequantize_f16,
    GGMLType.BF16: _floats.dequantize_bf16,
    GGMLType.Q4_0: _legacy.dequantize_q4_0,
    GGMLType.Q4_1: _legacy.dequantize_q4_1,
    GGMLType.Q5_0: _legacy.dequantize_q5_0,
    GGMLType.Q5_1: _legacy.dequantize_q5_1,
    GGMLType.Q8_0: _legacy.dequantize_q8_0,
    GGMLType.Q8_1: _legacy.dequantize_q8_1,
    GGMLType.Q2_K: _kquants.dequantize_q2_k,
    GGMLType.Q3_K: _kquants.dequantize_q3_k,
    GGMLType.Q4_K: _kquants.dequantize_q4_k,
    GGMLType.Q5_K: _kquants.dequantize_q5_k,
    GGMLType.Q6_K: _kquants.dequantize_q6_k,
    GGMLType.Q8_K: _kquants.dequantize_q8_k,
    GGMLType.IQ4_NL: _others.dequantize_iq4_nl,
    GGMLType.IQ4_XS: _others.dequantize_iq4_xs,
    GGMLType.MXFP4: _others.dequantize_mxfp4,
    GGMLType.NVFP4: _others.dequantize_nvfp4,
    GGMLType.TQ1_0: _others.dequantize_tq1_0,
    GGMLType.TQ2_0: _others.dequantize_tq2_0,
    GGMLType.Q1_0: _others.dequantize_q1_0,
}

#: Elements handled per kernel call. The K-quant searches run dozens of passes over their inputs; chunks of this
#: size keep the working set in cache and bound the temporaries (the work inside a chunk is fully vectorised).
_CHUNK_ELEMENTS: Final = 1 << 18


def _chunk_blocks(t: GGMLType) -> int:
    return max(1, _CHUNK_ELEMENTS // t.block_size)


def can_quantize(type: GGMLType | str | int) -> bool:
    """True if :func:`quantize` supports ``type``; unknown names raise ``ValueError``."""
    return as_type(type) in _QUANTIZE


def can_dequantize(type: GGMLType | str | int) -> bool:
    """True if :func:`dequantize` supports ``type``; unknown names raise ``ValueError``."""
    return as_type(type) in _DEQUANTIZE


def quantizable_types() -> tuple[GGMLType, ...]:
    """All types :func:`quantize` accepts, in ggml id order."""
    return tuple(sorted(_QUANTIZE))


def _supported(table: dict[GGMLType, _Kernel]) -> str:
    return ", ".join(t.name for t in sorted(table))


def _resolve(type: GGMLType | str | int, table: dict[GGMLType, _Kernel], verb: str) -> GGMLType:
    t = as_type(type)
    if t not in table:
        raise ValueError(f"cannot {verb} {t.name}: not implemented; supported types: {_supported(table)}")
    return t


def _as_float_array(data: npt.ArrayLike, t: GGMLType) -> np.ndarray:
    arr = np.asarray(data)
    kind = arr.dtype.kind
    if kind != "f" and arr.dtype.name != "bfloat16":
        raise TypeError(f"quantize to {t.name} needs floating-point data, got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError(f"quantize to {t.name} needs at least one dimension (rows along the last axis), got a scalar")
    n = arr.shape[-1]
    if n % t.block_size:
        raise ValueError(
            f"quantize to {t.name}: the last dimension ({n}) must be a multiple of the {t.name} block size "
            f"({t.block_size})"
        )
    return arr


def _run_blocks(kernel: _Kernel, t: GGMLType, blocks: np.ndarray, out: np.ndarray) -> None:
    """``out = kernel(blocks)`` a chunk of blocks at a time (bounding the kernel's temporaries)."""
    step = _chunk_blocks(t)
    with np.errstate(all="ignore"):  # like the C code, overflow and NaN arithmetic are silent
        for start in range(0, blocks.shape[0], step):
            out[start : start + step] = kernel(np.ascontiguousarray(blocks[start : start + step]))


def _quantize_into(t: GGMLType, arr: np.ndarray, out: U8Array) -> None:
    """Quantize the float rows of ``arr`` (checked by ``_as_float_array``) into ``out``'s bytes."""
    with np.errstate(over="ignore", invalid="ignore"):
        blocks = np.ascontiguousarray(arr, dtype=np.float32).reshape(-1, t.block_size)
    _run_blocks(_QUANTIZE[t], t, blocks, out.reshape(-1, t.type_size))


def quantize(data: npt.ArrayLike, type: GGMLType | str | int) -> U8Array:
    """Quantize float rows (last axis) to ``type``; returns ``uint8`` of shape ``(*lead, row_bytes)``.

    The bytes equal ggml's reference quantizer (``quantize_row_*_ref``) for finite input; F16 rounds to nearest
    even with overflow to inf, BF16 uses ggml's rounding (NaN keeps its top bits, quiet bit set).
    """
    t = _resolve(type, _QUANTIZE, "quantize to")
    arr = _as_float_array(data, t)
    lead, n = arr.shape[:-1], arr.shape[-1]
    n_blocks_row = n // t.block_size
    out = np.empty((*lead, n_blocks_row * t.type_size), dtype=np.uint8)
    if out.size:
        _quantize_into(t, arr, out)
    return out


def dequantize(data: npt.ArrayLike, type: GGMLType | str | int) -> F32Array:
    """Dequantize ``uint8`` rows (last axis, ``row_bytes``) of ``type`` to float32 ``(*lead, n)``.

    Equals ggml's ``dequantize_row_*`` (its ``to_float``) bit for bit.
    """
    t = _resolve(type, _DEQUANTIZE, "dequantize")
    arr = np.asarray(data)
    if arr.dtype != np.uint8:
        raise TypeError(f"dequantize {t.name} needs uint8 bytes, got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError(f"dequantize {t.name} needs at least one dimension (bytes along the last axis)")
    nbytes = arr.shape[-1]
    if nbytes % t.type_size:
        raise ValueError(
            f"dequantize {t.name}: the last dimension ({nbytes} bytes) must be a multiple of the {t.name} block "
            f"size in bytes ({t.type_size} bytes per {t.block_size} elements)"
        )
    lead = arr.shape[:-1]
    out = np.empty((*lead, nbytes // t.type_size * t.block_size), dtype=np.float32)
    if out.size == 0:
        return out
    blocks = np.ascontiguousarray(arr).reshape(-1, t.type_size)
    _run_blocks(_DEQUANTIZE[t], t, blocks, out.reshape(-1, t.block_size))
    return out


def quantize_rows_into(src: npt.ArrayLike, type: GGMLType | str | int, out: U8Array) -> U8Array:
    """Quantize the float rows of 2-D ``src`` into the preallocated, C-contiguous ``uint8`` array ``out``.

    ``out`` must have shape ``(rows, row_bytes)``; it is returned for convenience.
    """
    t = _resolve(type, _QUANTIZE, "quantize to")
    arr = _as_float_array(src, t)
    if arr.ndim != 2:
        raise ValueError(f"quantize_rows_into ({t.name}) needs 2-D source rows, got shape {arr.shape}")
    rows, n = arr.shape
    want = (rows, n // t.block_size * t.type_size)
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.shape != want or not out.flags.c_contiguous:
        got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else _type_name(out)
        raise ValueError(f"quantize_rows_into ({t.name}): out must be C-contiguous uint8 of shape {want}, got {got}")
    if out.size:
        _quantize_into(t, arr, out)
    return out


def dequantize_rows_into(src: U8Array, type: GGMLType | str | int, out: F32Array) -> F32Array:
    """Dequantize the byte rows of 2-D ``src`` into the preallocated, C-contiguous float32 array ``out``."""
    t = _resolve(type, _DEQUANTIZE, "dequantize")
    arr = np.asarray(src)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] % t.type_size:
        raise ValueError(
            f"dequantize_rows_into ({t.name}): src must be 2-D uint8 with rows a multiple of {t.type_size} bytes, "
            f"got {arr.dtype} {arr.shape}"
        )
    want = (arr.shape[0], arr.shape[1] // t.type_size * t.block_size)
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != want or not out.flags.c_contiguous:
        got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else _type_name(out)
        raise ValueError(
            f"dequantize_rows_into ({t.name}): out must be C-contiguous float32 of shape {want}, got {got}"
        )
    if out.size:
        _run_blocks(
            _DEQUANTIZE[t], t, np.ascontiguousarray(arr).reshape(-1, t.type_size), out.reshape(-1, t.block_size)
        )
    return out


def _type_name(obj: object) -> str:
    """Name of ``obj``'s Python type (for error messages)."""
    return obj.__class__.__name__
