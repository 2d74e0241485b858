"""Per-row ops (``rows.wgsl``): NORM, RMS_NORM, L2_NORM, SUM_ROWS, MEAN, ARGSORT, TOP_K."""

from __future__ import annotations

from typing import Final

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_webgpu._dispatch import (
    Dispatch,
    Launcher,
    Limits,
    f32,
    fits,
    groups_1d,
    kernel,
    slot,
    src,
)

T = GGMLType

__all__ = ['SORT_MAX_ROW']


# ------------------------------------------------------------------------------------------------ norms, SOFT_MAX


_NORMS: Final = {GGMLOp.NORM: 0, GGMLOp.RMS_NORM: 1, GGMLOp.L2_NORM: 2}


def _norm_ok(limits: Limits, node: Tensor) -> bool:
    a = src(node, 0)
    return a.type == T.F32 and node.type == T.F32 and a.ne == node.ne and fits(limits, a, node)


@kernel(GGMLOp.NORM, GGMLOp.RMS_NORM, GGMLOp.L2_NORM, supports=_norm_ok)
def _bind_norm(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = src(node, 0)
    words = [node.nrows, _NORMS[node.op], f32(node.op_param_f32(0))]
    return [Dispatch("rows.norm", node.nrows, (slot(launcher, a), None, None, slot(launcher, node)), words)]


# ------------------------------------------------------------------------------------------------ reductions, sorting

#: longest row ARGSORT / TOP_K rank (each element counts the row: ne0^2 comparisons per row)
SORT_MAX_ROW: Final = 8192


def _sum_rows_ok(limits: Limits, node: Tensor) -> bool:
    a = src(node, 0)
    return a.type == T.F32 and node.type == T.F32 and fits(limits, a, node)


@kernel(GGMLOp.SUM_ROWS, GGMLOp.MEAN, supports=_sum_rows_ok)
def _bind_sum_rows(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = src(node, 0)
    words = [a.nrows, int(node.op == GGMLOp.MEAN)]
    return [Dispatch("rows.sum_rows", a.nrows, (slot(launcher, a), None, None, slot(launcher, node)), words)]


def _sort_ok(limits: Limits, node: Tensor) -> bool:
    a = src(node, 0)
    return a.type == T.F32 and node.type == T.I32 and a.ne[0] <= SORT_MAX_ROW and fits(limits, a, node)


@kernel(GGMLOp.ARGSORT, GGMLOp.TOP_K, supports=_sort_ok)
def _bind_sort(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = src(node, 0)
    desc = node.op == GGMLOp.TOP_K or node.op_param_i32(0) == 1
    return [_elementwise_over(a, "rows.rank_sort", launcher, node, [int(desc)])]


def _elementwise_over(source: Tensor, kernel_name: str, launcher: Launcher, node: Tensor, op: list[int]) -> Dispatch:
    """One invocation per element of ``source`` (not of the result)."""
    n = source.nelements
    slots = (slot(launcher, source), None, None, slot(launcher, node))
    return Dispatch(kernel_name, groups_1d(n), slots, [n, *op])


def _f32_in(limits: Limits, node: Tensor) -> bool:
    a = src(node, 0)
    want = T.I32 if node.op == GGMLOp.ARGMAX else T.F32
    return a.type == T.F32 and node.type == want and fits(limits, a, node)


@kernel(GGMLOp.ARGMAX, GGMLOp.CUMSUM, GGMLOp.SUM, supports=_f32_in)
def _bind_scan(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = src(node, 0)
    slots = (slot(launcher, a), None, None, slot(launcher, node))
    if node.op == GGMLOp.ARGMAX:
        return [Dispatch("rows.argmax", a.ne[1], slots, [a.ne[1]])]
    if node.op == GGMLOp.CUMSUM:
        return [Dispatch("rows.cumsum", groups_1d(a.nrows), slots, [a.nrows])]
    return [Dispatch("rows.sum_all", 1, slots, [1])]
