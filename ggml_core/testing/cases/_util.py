"""Helpers shared by the case families: leafs, non-contiguous operands, type lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ggml_core._context import Context
from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.testing._case import builder

__all__ = [
    "FLOATS",
    "QUANTIZED",
    "WEIGHT_TYPES",
    "leaf",
    "permuted",
    "strided_rows",
]

#: the plain float types most ops accept
FLOATS: Final = (GGMLType.F32, GGMLType.F16)

#: every storage quantization type (Q8_1 and Q8_K exist only as matrix-product activation types)
QUANTIZED: Final = tuple(t for t in GGMLType if t.is_quantized and t not in (GGMLType.Q8_1, GGMLType.Q8_K))

#: weight types of matrix products: f32, f16, bf16 and every quantized type
WEIGHT_TYPES: Final = (GGMLType.F32, GGMLType.F16, GGMLType.BF16, *QUANTIZED)


def leaf(ctx: Context, type: GGMLType, ne: Sequence[int], name: str = "") -> Tensor:
    """A new contiguous leaf tensor."""
    return ctx.new_tensor(type, list(ne), name)


def permuted(ctx: Context, type: GGMLType, ne: Sequence[int], perm: Sequence[int], name: str = "") -> Tensor:
    """A non-contiguous operand of shape ``ne``: ``permute(leaf, *perm)`` of a leaf laid out in another order.

    ``perm`` follows ``ggml_permute``: source dimension i goes to result dimension ``perm[i]``.
    """
    ne4 = [*ne, *[1] * (4 - len(ne))]
    src_ne = [ne4[perm[i]] for i in range(4)]
    base = leaf(ctx, type, src_ne, name)
    return builder("permute")(base, *perm)


def strided_rows(ctx: Context, type: GGMLType, ne: Sequence[int], extra: int | None = None, name: str = "") -> Tensor:
    """A non-contiguous operand of shape ``ne`` whose rows lie ``extra`` elements apart (a view of a wider leaf)."""
    ne4 = [*ne, *[1] * (4 - len(ne))]
    pad = type.block_size if extra is None else extra
    base = leaf(ctx, type, [ne4[0] + pad, *ne4[1:]], name)
    return builder("view_4d")(base, ne4[0], ne4[1], ne4[2], ne4[3], base.nb[1], base.nb[2], base.nb[3], 0)
