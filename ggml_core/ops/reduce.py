"""Reductions and selection: SUM, SUM_ROWS, MEAN, CUMSUM, ARGMAX, COUNT_EQUAL, ARGSORT, TOP_K."""

from __future__ import annotations

from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.ops._build import check, ctx_of, finish, new_result
from ggml_core.ops._enum import GGMLOp, SortOrder
from ggml_core.ops.movement import view_4d

__all__ = ["argmax", "argsort", "argsort_top_k", "count_equal", "cumsum", "mean", "sum", "sum_rows", "top_k"]

_INT32_MAX = 2**31 - 1


def sum(a: Tensor) -> Tensor:  # ggml's name (shadows the builtin in this module only)
    """``ggml_sum``: the sum of every element, as a one-element tensor of a's type."""
    return finish(new_result("SUM", a, a.type, (1,)), GGMLOp.SUM, [a])


def sum_rows(a: Tensor) -> Tensor:
    """``ggml_sum_rows``: each row summed, ``[1, ne1, ne2, ne3]`` of a's type."""
    return finish(new_result("SUM_ROWS", a, a.type, (1, a.ne[1], a.ne[2], a.ne[3])), GGMLOp.SUM_ROWS, [a])


def mean(a: Tensor) -> Tensor:
    """``ggml_mean``: each row's mean, f32 ``[1, ne1, ne2, ne3]``."""
    return finish(new_result("MEAN", a, GGMLType.F32, (1, a.ne[1], a.ne[2], a.ne[3])), GGMLOp.MEAN, [a])


def cumsum(a: Tensor) -> Tensor:
    """``ggml_cumsum``: running sums along each row (f32)."""
    check(a.type == GGMLType.F32, "CUMSUM", f"a must be f32, got {a.type.traits.name}", a)
    return finish(ctx_of("CUMSUM", a).dup_tensor(a), GGMLOp.CUMSUM, [a])


def argmax(a: Tensor) -> Tensor:
    """``ggml_argmax``: per row of the matrix a, the index of the maximum (i32 ``[ne1]``; ties: the last index)."""
    op = "ARGMAX"
    check(a.ne[2] == 1 and a.ne[3] == 1, op, f"a must be a matrix, got ne={list(a.ne)}", a)
    check(a.ne[0] <= _INT32_MAX, op, f"rows of {a.ne[0]} elements do not fit int32 indices", a)
    return finish(new_result(op, a, GGMLType.I32, (a.ne[1],)), GGMLOp.ARGMAX, [a])


def count_equal(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_count_equal``: how many elements of a and b are equal, as an i64 scalar."""
    check(a.same_shape(b), "COUNT_EQUAL", f"a and b must have one shape, got {list(a.ne)} and {list(b.ne)}", a, b)
    return finish(new_result("COUNT_EQUAL", a, GGMLType.I64, (1,)), GGMLOp.COUNT_EQUAL, [a, b])


def argsort(a: Tensor, order: SortOrder = SortOrder.ASC) -> Tensor:
    """``ggml_argsort``: per row, the indices that sort it (i32, a's shape). ggml's sort is not stable."""
    op = "ARGSORT"
    check(a.ne[0] <= _INT32_MAX, op, f"rows of {a.ne[0]} elements do not fit int32 indices", a)
    result = new_result(op, a, GGMLType.I32, a.ne)
    result.set_op_param_i32(0, int(SortOrder(order)))
    return finish(result, GGMLOp.ARGSORT, [a])


def argsort_top_k(a: Tensor, k: int) -> Tensor:
    """``ggml_argsort_top_k``: the first k columns of a descending argsort (a view)."""
    check(0 <= k <= a.ne[0], "ARGSORT", f"k={k} must be in 0..ne[0]={a.ne[0]}", a)
    result = argsort(a, SortOrder.DESC)
    return view_4d(result, k, result.ne[1], result.ne[2], result.ne[3], result.nb[1], result.nb[2], result.nb[3], 0)


def top_k(a: Tensor, k: int) -> Tensor:
    """``ggml_top_k``: per row, the indices of the k largest values (i32 ``[k, ne1, ne2, ne3]``).

    The order is not part of the contract (ggml's CPU gives them descending with the first two swapped).
    """
    check(0 <= k <= a.ne[0], "TOP_K", f"k={k} must be in 0..ne[0]={a.ne[0]}", a)
    result = new_result("TOP_K", a, GGMLType.I32, (k, a.ne[1], a.ne[2], a.ne[3]))
    return finish(result, GGMLOp.TOP_K, [a])
