"""Input data: generators for leaf tensors, their bytes, their values as an op sees them, and rounding to a type.

Values always have a tensor's numpy shape ``(ne3, ne2, ne1, ne0)``. Float and quantized leafs are filled from
float values (quantized with :mod:`ggml_core.quants`); quantized types that ggml-core can dequantize but not yet
quantize get synthetic blocks (random codes, sane scales) so that their dequantization and matrix products can
still be tested.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np

from ggml_core import _convert
from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.quants import can_dequantize, can_quantize, dequantize, quantize
from ggml_core.testing._case import CaseUnavailable, Init

__all__ = [
    "INT_TYPES",
    "can_generate",
    "distinct_rows",
    "fill_bytes",
    "indices",
    "integers",
    "leaf_values",
    "round_to_type",
    "uniform",
    "unique_indices",
    "values_of",
    "zero_bytes",
]

INT_TYPES: Final = frozenset({GGMLType.I8, GGMLType.I16, GGMLType.I32, GGMLType.I64})

# --------------------------------------------------------------------------------------------- generators


def uniform(lo: float = -1.0, hi: float = 1.0) -> Init:
    """Floats uniform in [lo, hi)."""

    def init(rng: np.random.Generator, t: Tensor) -> np.ndarray:
        return rng.uniform(lo, hi, _shape(t)).astype(np.float32)

    return init


def integers(lo: int, hi: int) -> Init:
    """Integers uniform in [lo, hi)."""

    def init(rng: np.random.Generator, t: Tensor) -> np.ndarray:
        return rng.integers(lo, hi, _shape(t))

    return init


def indices(n: int) -> Init:
    """Row indices in [0, n) (repeats allowed): GET_ROWS, MUL_MAT_ID."""
    return integers(0, n)


def unique_indices(n: int) -> Init:
    """Each row (last axis) holds distinct indices in [0, n): SET_ROWS targets, MUL_MAT_ID experts per token."""

    def init(rng: np.random.Generator, t: Tensor) -> np.ndarray:
        shape = _shape(t)
        rows = int(np.prod(shape[:-1]))
        if shape[-1] > n:
            raise ValueError(f"cannot draw {shape[-1]} distinct indices below {n}")
        out = np.stack([rng.permutation(n)[: shape[-1]] for _ in range(rows)]) if rows else np.zeros((0, shape[-1]))
        return out.reshape(shape)

    return init


def distinct_rows(scale: float = 1.0) -> Init:
    """Rows of distinct values (a shuffled, evenly spaced set): ARGSORT, TOP_K and ARGMAX have a unique answer."""

    def init(rng: np.random.Generator, t: Tensor) -> np.ndarray:
        shape = _shape(t)
        n = shape[-1]
        rows = int(np.prod(shape[:-1]))
        base = (np.arange(n, dtype=np.float32) - n / 2) * np.float32(2.0 * scale / max(n, 1))
        out = np.stack([rng.permutation(base) for _ in range(rows)]) if rows else np.zeros((0, n), np.float32)
        return out.reshape(shape).astype(np.float32)

    return init


def zero_bytes(rng: np.random.Generator, t: Tensor) -> np.ndarray:
    """All-zero bytes: a valid tensor of any type, for leafs whose contents are overwritten (a CPY destination)."""
    return np.zeros(t.nbytes, np.uint8)


def _shape(t: Tensor) -> tuple[int, int, int, int]:
    return (t.ne[3], t.ne[2], t.ne[1], t.ne[0])


# --------------------------------------------------------------------------------------------- synthetic quants

#: types ggml-core may dequantize but not quantize: byte offsets of each block's scale and how to fill it (the codes
#: of every other byte index grids or lookup tables whose every entry is valid; IQ1_M spreads its scale over the
#: scale nibbles and is left out)
_SCALES: Final[dict[GGMLType, tuple[tuple[int, str], ...]]] = {
    GGMLType.IQ4_NL: ((0, "f16"),),
    GGMLType.IQ2_XXS: ((0, "f16"),),
    GGMLType.IQ2_XS: ((0, "f16"),),
    GGMLType.IQ2_S: ((0, "f16"),),
    GGMLType.IQ3_XXS: ((0, "f16"),),
    GGMLType.IQ3_S: ((0, "f16"),),
    GGMLType.IQ1_S: ((0, "f16"),),
    GGMLType.IQ4_XS: ((0, "f16"),),
    GGMLType.Q1_0: ((0, "f16"),),
    GGMLType.Q2_0: ((0, "f16"),),
    GGMLType.TQ1_0: ((52, "f16"),),
    GGMLType.TQ2_0: ((64, "f16"),),
    GGMLType.MXFP4: ((0, "e8m0"),),
    GGMLType.NVFP4: ((0, "ue4m3"), (1, "ue4m3"), (2, "ue4m3"), (3, "ue4m3")),
}


def _synthetic_blocks(rng: np.random.Generator, t: Tensor) -> np.ndarray:
    """Random codes with scales that keep values around [-1, 1]: bytes of a contiguous tensor."""
    tt = t.type
    n_blocks = t.nelements // tt.block_size
    raw = rng.integers(0, 256, (n_blocks, tt.type_size), dtype=np.uint8)
    for off, kind in _SCALES[tt]:
        if kind == "f16":
            d = rng.uniform(0.02, 0.1, n_blocks).astype(np.float16)
            raw[:, off : off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
        elif kind == "e8m0":  # 2^(e - 127); the fp4 codes reach 6
            raw[:, off] = rng.integers(122, 126, n_blocks, dtype=np.uint8)
        else:  # ue4m3 with exponents near the bias (values around 0.02 .. 0.2)
            raw[:, off] = rng.integers(0x10, 0x30, n_blocks, dtype=np.uint8)
    return raw.reshape(-1)


def can_generate(type: GGMLType) -> bool:
    """True when inputs of this type can be generated (quantizable, synthetic, plain or integer)."""
    if not type.is_quantized:
        return True
    return can_quantize(type) or (type in _SCALES and can_dequantize(type))


# --------------------------------------------------------------------------------------------- bytes and values


def fill_bytes(rng: np.random.Generator, t: Tensor, init: Init | None) -> np.ndarray:
    """The bytes (``uint8``, ``t.nbytes`` long) of a contiguous leaf ``t`` filled by ``init`` or the default."""
    tt = t.type
    if init is None:
        if tt.is_quantized and not can_quantize(tt):
            if tt in _SCALES and can_dequantize(tt):
                return _synthetic_blocks(rng, t)
            raise CaseUnavailable(
                f"no input generator for {tt.traits.name}: ggml_core.quants can neither quantize it nor "
                "make synthetic blocks of it"
            )
        init = integers(-100, 100) if tt in INT_TYPES else uniform()
    values = np.asarray(init(rng, t))
    if values.dtype == np.uint8 and values.size == t.nbytes:  # raw bytes (no ggml type is stored as uint8)
        return values.reshape(-1)
    if tt.is_quantized and not can_quantize(tt):
        raise CaseUnavailable(f"cannot quantize generated values to {tt.traits.name}")
    if tt in INT_TYPES and np.issubdtype(values.dtype, np.floating):
        values = values.astype(np.int64)
    return _convert.to_bytes(values, t)


def values_of(t: Tensor, host: dict[int, np.ndarray]) -> np.ndarray:
    """The values of ``t`` (a leaf or a view of one) computed from the leafs' host bytes, numpy shape.

    Plain types keep their dtype (F16 as float16), BF16 and quantized types come back as float32.
    """
    base = t.view_src if t.view_src is not None else t
    raw = host.get(base.id)
    if raw is None:
        raise KeyError(f"tensor {t.describe()} is neither a leaf nor a view of one; its values are not known")
    offs = t.view_offs if t.view_src is not None else 0
    return _convert.from_bytes(raw[offs:], t)


def leaf_values(t: Tensor, raw: np.ndarray) -> np.ndarray:
    """The values a contiguous leaf holds, from its bytes."""
    return _convert.from_bytes(raw, t)


# --------------------------------------------------------------------------------------------- rounding

_ROUNDERS: dict[GGMLType, Callable[[np.ndarray], np.ndarray]] = {
    GGMLType.F32: lambda v: v.astype(np.float32),
    GGMLType.F16: lambda v: v.astype(np.float32).astype(np.float16),
    GGMLType.F64: lambda v: v.astype(np.float64),
}


def round_to_type(values: np.ndarray, type: GGMLType) -> np.ndarray:
    """Values as a tensor of ``type`` stores them (F16/BF16 rounding, quantization round trip, integer cast).

    Integer types follow C's float-to-int conversion (truncation toward zero). Rows run along the last axis.
    """
    v = np.asarray(values)
    fn = _ROUNDERS.get(type)
    if fn is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            return fn(v)
    if type in INT_TYPES:
        dt = type.np_dtype
        assert dt is not None
        if np.issubdtype(v.dtype, np.floating):
            with np.errstate(invalid="ignore"):
                v = np.trunc(v)
        return v.astype(dt)
    # BF16 and quantized types: a round trip through ggml-core's bit-exact quantizer
    f = np.ascontiguousarray(v, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return dequantize(quantize(f, type), type).reshape(f.shape)
