"""Cases for reductions and selections: SUM SUM_ROWS MEAN CUMSUM ARGMAX ARGSORT TOP_K COUNT_EQUAL."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ggml_core._context import Context
from ggml_core._types import GGMLType
from ggml_core.ops import SortOrder
from ggml_core.testing._case import Built, Case, Check, builder
from ggml_core.testing._inputs import Init, distinct_rows, integers
from ggml_core.testing.cases._util import leaf, permuted
from ggml_core.testing.reference import reduce as ref

__all__ = ["cases"]

F32, I32 = GGMLType.F32, GGMLType.I32


def _reduce(op: str, ne: Sequence[int], layout: str, reference: Callable[[np.ndarray], np.ndarray]) -> Case:
    def build(ctx: Context) -> Built:
        a = permuted(ctx, F32, ne, (0, 2, 1, 3)) if layout == "perm" else leaf(ctx, F32, ne, "a")
        return Built(builder(op.lower())(a), [a])

    return Case(op, {"type": F32, "ne": list(ne), "layout": layout}, build, reference)


def _argmax(ne: Sequence[int], ties: bool) -> Case:
    init: Init = (
        (lambda rng, t: rng.integers(-3, 4, (t.ne[3], t.ne[2], t.ne[1], t.ne[0])).astype(np.float32))
        if ties
        else distinct_rows()
    )

    def build(ctx: Context) -> Built:
        a = leaf(ctx, F32, ne, "a")
        return Built(builder("argmax")(a), [a], {a: init})

    return Case("ARGMAX", {"type": F32, "ne": list(ne), "ties": ties}, build, ref.argmax, Check.exact())


def _argsort(ne: Sequence[int], order: SortOrder) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, F32, ne, "a")
        return Built(builder("argsort")(a, order), [a], {a: distinct_rows()})

    return Case(
        "ARGSORT",
        {"type": F32, "ne": list(ne), "order": order},
        build,
        lambda a: ref.argsort(a, order == SortOrder.DESC),
        Check.exact(),
    )


def _top_k(ne: Sequence[int], k: int) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, F32, ne, "a")
        return Built(builder("top_k")(a, k), [a], {a: distinct_rows()})

    return Case("TOP_K", {"type": F32, "ne": list(ne), "k": k}, build, lambda a: ref.top_k(a, k), Check.row_sets())


def _count_equal(ne: Sequence[int]) -> Case:
    def build(ctx: Context) -> Built:
        a, b = leaf(ctx, I32, ne, "a"), leaf(ctx, I32, ne, "b")
        return Built(builder("count_equal")(a, b), [a, b], {a: integers(0, 3), b: integers(0, 3)})

    return Case("COUNT_EQUAL", {"type": I32, "ne": list(ne)}, build, ref.count_equal, Check.exact())


def cases() -> list[Case]:
    """Every reduction and selection case."""
    out = []
    for ne in ([10, 5, 4, 3], [1025, 3, 2, 1]):
        out.append(_reduce("SUM", ne, "cont", ref.sum_all))
        out.append(_reduce("SUM_ROWS", ne, "cont", ref.sum_rows))
        out.append(_reduce("MEAN", ne, "cont", ref.mean))
        out.append(_reduce("CUMSUM", ne, "cont", ref.cumsum))
    out.append(_reduce("SUM", [10, 5, 4, 3], "perm", ref.sum_all))
    out.append(_reduce("SUM_ROWS", [10, 5, 4, 3], "perm", ref.sum_rows))
    out.append(_reduce("MEAN", [10, 5, 4, 3], "perm", ref.mean))
    for ne in ([32, 1, 1, 1], [100, 10, 1, 1], [1024, 12, 1, 1]):
        out.append(_argmax(ne, ties=False))
    out.append(_argmax([64, 20, 1, 1], ties=True))
    for ne in ([16, 10, 2, 2], [1023, 2, 1, 1]):
        for order in SortOrder:
            out.append(_argsort(ne, order))
    for ne, k in (([16, 10, 2, 2], 1), ([16, 10, 2, 2], 4), ([1023, 2, 1, 1], 10), ([1023, 2, 1, 1], 100)):
        out.append(_top_k(ne, k))
    out.append(_count_equal([4, 500, 1, 1]))
    out.append(_count_equal([33, 7, 3, 1]))
    return out
