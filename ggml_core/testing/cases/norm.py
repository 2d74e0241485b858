"""Cases for normalisations: NORM, RMS_NORM, L2_NORM (per row, contiguous and strided) and GROUP_NORM."""

from __future__ import annotations

from collections.abc import Sequence

from ggml_core._context import Context
from ggml_core._types import GGMLType
from ggml_core.testing._case import Built, Case, builder
from ggml_core.testing.cases._util import leaf, strided_rows
from ggml_core.testing.reference import norm as ref

__all__ = ["cases"]

F32 = GGMLType.F32


def _row_norm(op: str, ne: Sequence[int], eps: float, layout: str) -> Case:
    fn = {"NORM": ref.norm, "RMS_NORM": ref.rms_norm, "L2_NORM": ref.l2_norm}[op]

    def build(ctx: Context) -> Built:
        a = strided_rows(ctx, F32, ne, 5) if layout == "rows" else leaf(ctx, F32, ne, "a")
        return Built(builder(op.lower())(a, eps), [a])

    return Case(op, {"type": F32, "ne": list(ne), "eps": eps, "layout": layout}, build, lambda a: fn(a, eps))


def _group_norm(ne: Sequence[int], n_groups: int, eps: float) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, F32, ne, "a")
        return Built(builder("group_norm")(a, n_groups, eps), [a])

    return Case(
        "GROUP_NORM",
        {"type": F32, "ne": list(ne), "n_groups": n_groups, "eps": eps},
        build,
        lambda a: ref.group_norm(a, n_groups, eps),
    )


def cases() -> list[Case]:
    """Every normalisation case."""
    out = []
    for op in ("NORM", "RMS_NORM", "L2_NORM"):
        for eps in (0.0, 1e-6, 1e-1) if op != "L2_NORM" else (1e-12, 1e-1):
            for n in (64, 1025):
                out.append(_row_norm(op, [n, 5, 4, 3], eps, "cont"))
            out.append(_row_norm(op, [64, 5, 4, 3], eps, "rows"))
    out.append(_group_norm([8, 8, 12, 2], 4, 1e-6))
    out.append(_group_norm([7, 5, 7, 1], 3, 1e-6))
    out.append(_group_norm([16, 4, 32, 1], 32, 1e-5))
    return out
