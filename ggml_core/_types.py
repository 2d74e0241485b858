"""ggml's tensor element types: ids, block sizes and byte sizes (ggml.h / ggml.c ``type_traits``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

import numpy as np

from ggml_core._errors import UnknownTypeError

__all__ = ["QK_K", "GGMLType", "TypeTraits", "as_type", "row_size", "type_traits"]

#: elements per super-block of the K-quants
QK_K: Final = 256


class GGMLType(enum.IntEnum):
    """``enum ggml_type`` with ggml's numbering (ids 4, 5, 31-33, 36-38 were removed upstream)."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41
    Q2_0 = 42

    @property
    def traits(self) -> TypeTraits:
        """Block size, type size and flags of this type."""
        return _TRAITS[self]

    @property
    def block_size(self) -> int:
        """Elements per block (1 for plain types)."""
        return _TRAITS[self].block_size

    @property
    def type_size(self) -> int:
        """Bytes per block."""
        return _TRAITS[self].type_size

    @property
    def is_quantized(self) -> bool:
        """True for block-quantized types."""
        return _TRAITS[self].is_quantized

    @property
    def np_dtype(self) -> np.dtype | None:
        """The numpy dtype of one element for plain types (BF16 is stored as ``uint16``); None for quantized."""
        return _TRAITS[self].np_dtype


@dataclass(frozen=True, slots=True)
class TypeTraits:
    """What ggml's ``type_traits`` table says about one type."""

    type: GGMLType
    name: str
    block_size: int
    type_size: int
    is_quantized: bool
    np_dtype: np.dtype | None


def _t(t: GGMLType, blck: int, size: int, dtype: str | None = None) -> TypeTraits:
    name = t.name.lower().replace("_k", "_K")  # ggml's type names: "q4_K", "iq2_xxs"
    return TypeTraits(t, name, blck, size, dtype is None, None if dtype is None else np.dtype(dtype))


_TRAITS: Final[dict[GGMLType, TypeTraits]] = {
    tr.type: tr
    for tr in (
        _t(GGMLType.F32, 1, 4, "<f4"),
        _t(GGMLType.F16, 1, 2, "<f2"),
        _t(GGMLType.Q4_0, 32, 18),
        _t(GGMLType.Q4_1, 32, 20),
        _t(GGMLType.Q5_0, 32, 22),
        _t(GGMLType.Q5_1, 32, 24),
        _t(GGMLType.Q8_0, 32, 34),
        _t(GGMLType.Q8_1, 32, 36),
        _t(GGMLType.Q2_K, QK_K, 84),
        _t(GGMLType.Q3_K, QK_K, 110),
        _t(GGMLType.Q4_K, QK_K, 144),
        _t(GGMLType.Q5_K, QK_K, 176),
        _t(GGMLType.Q6_K, QK_K, 210),
        _t(GGMLType.Q8_K, QK_K, 292),
        _t(GGMLType.IQ2_XXS, QK_K, 66),
        _t(GGMLType.IQ2_XS, QK_K, 74),
        _t(GGMLType.IQ3_XXS, QK_K, 98),
        _t(GGMLType.IQ1_S, QK_K, 50),
        _t(GGMLType.IQ4_NL, 32, 18),
        _t(GGMLType.IQ3_S, QK_K, 110),
        _t(GGMLType.IQ2_S, QK_K, 82),
        _t(GGMLType.IQ4_XS, QK_K, 136),
        _t(GGMLType.I8, 1, 1, "<i1"),
        _t(GGMLType.I16, 1, 2, "<i2"),
        _t(GGMLType.I32, 1, 4, "<i4"),
        _t(GGMLType.I64, 1, 8, "<i8"),
        _t(GGMLType.F64, 1, 8, "<f8"),
        _t(GGMLType.IQ1_M, QK_K, 56),
        _t(GGMLType.BF16, 1, 2, "<u2"),
        _t(GGMLType.TQ1_0, QK_K, 54),
        _t(GGMLType.TQ2_0, QK_K, 66),
        _t(GGMLType.MXFP4, 32, 17),
        _t(GGMLType.NVFP4, 64, 36),
        _t(GGMLType.Q1_0, 128, 18),
        _t(GGMLType.Q2_0, 64, 18),
    )
}


def type_traits(t: GGMLType | str | int) -> TypeTraits:
    """Traits of a type given as enum member, name (``"q4_0"``/``"Q4_0"``) or ggml id."""
    return _TRAITS[as_type(t)]


def as_type(t: GGMLType | str | int) -> GGMLType:
    """Normalise a type given as enum member, name or id; raises ``ValueError`` naming the bad value."""
    if isinstance(t, GGMLType):
        return t
    if isinstance(t, str):
        try:
            return GGMLType[t.upper()]
        except KeyError:
            names = ", ".join(m.name for m in GGMLType)
            raise UnknownTypeError(t, f"unknown ggml type {t!r}; known types: {names}") from None
    if isinstance(t, (int, np.integer)) and not isinstance(t, bool):
        try:
            return GGMLType(int(t))
        except ValueError:
            raise UnknownTypeError(t, f"unknown ggml type id {int(t)}") from None
    raise UnknownTypeError(t, f"expected a GGMLType, a type name or a type id, got {type(t).__name__} {t!r}")


def row_size(t: GGMLType | str | int, ne0: int) -> int:
    """Bytes of one row of ``ne0`` elements (``ggml_row_size``); ``ne0`` must be a multiple of the block size."""
    tr = type_traits(t)
    if ne0 % tr.block_size:
        raise ValueError(f"row of {ne0} elements is not a multiple of {tr.name}'s block size {tr.block_size}")
    return ne0 // tr.block_size * tr.type_size
