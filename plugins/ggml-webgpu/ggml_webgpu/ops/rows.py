"""Per-row ops (``rows.wgsl``): NORM, RMS_NORM, L2_NORM, SUM_ROWS, MEAN, ARGSORT, TOP_K."""

from __future__ import annotations

from typing import Final

from ggml_core import GGMLOp, GGMLType, Tensor, TensorFlag
from ggml_webgpu.ops._dispatch import (
    KERNELS,
    Dispatch,
    Launcher,
    Limits,
    f32,
    fits,
    groups_1d,
    slot,
    src,
)

T = GGMLType

__all__ = ["SORT_MAX_ROW", "bind_norm_mul", "fusable_norm_mul"]


# ------------------------------------------------------------------------------------------------ norms, SOFT_MAX


_NORMS: Final = {GGMLOp.NORM: 0, GGMLOp.RMS_NORM: 1, GGMLOp.L2_NORM: 2}


def _norm_ok(limits: Limits, node: Tensor) -> bool:
    a = src(node, 0)
    return a.type == T.F32 and node.type == T.F32 and a.ne == node.ne and fits(limits, a, node)


@KERNELS.kernel(GGMLOp.NORM, GGMLOp.RMS_NORM, GGMLOp.L2_NORM, supports=_norm_ok)
def _bind_norm(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = src(node, 0)
    words = [node.nrows, _NORMS[node.op], f32(node.op_param_f32(0)), 0]
    return [Dispatch("rows.norm", node.nrows, (slot(launcher, a), None, None, slot(launcher, node)), words)]


def fusable_norm_mul(limits: Limits, norm: Tensor, mul: Tensor, use_counts: dict[int, int]) -> bool:
    """Whether ``mul`` = MUL(``norm``, weights) can be one dispatch with ``norm`` (ggml's RMS_NORM + MUL fusion):
    ``norm`` is a supported f32 NORM/RMS_NORM/L2_NORM whose only use is ``mul`` and which is no graph output, and
    ``mul`` multiplies it (as its first operand, of the same shape) by f32 weights repeated over it (any strides)."""
    if norm.op not in _NORMS or mul.op != GGMLOp.MUL or mul.src[0] is not norm or not _norm_ok(limits, norm):
        return False
    w = mul.src[1]
    return (
        w is not None
        and w is not norm
        and use_counts.get(norm.id, 0) == 1
        and not norm.flags & TensorFlag.OUTPUT
        and mul.type == T.F32
        and w.type == T.F32
        and mul.ne == norm.ne
        and all(n % m == 0 for n, m in zip(mul.ne, w.ne, strict=True))
        and fits(limits, w, mul)
    )


def bind_norm_mul(launcher: Launcher, norm: Tensor, mul: Tensor) -> list[Dispatch]:
    """One dispatch for ``norm`` and the MUL that consumes it (see :func:`fusable_norm_mul`): writes ``mul``."""
    a, w = src(norm, 0), src(mul, 1)
    words = [norm.nrows, _NORMS[norm.op], f32(norm.op_param_f32(0)), 1]
    slots = (slot(launcher, a), slot(launcher, w), None, slot(launcher, mul))
    return [Dispatch("rows.norm", norm.nrows, slots, words)]


# ------------------------------------------------------------------------------------------------ reductions, sorting

#: longest row ARGSORT / TOP_K rank (each element counts the row: ne0^2 comparisons per row)
SORT_MAX_ROW: Final = 8192


def _sum_rows_ok(limits: Limits, node: Tensor) -> bool:
    a = src(node, 0)
    return a.type == T.F32 and node.type == T.F32 and fits(limits, a, node)


@KERNELS.kernel(GGMLOp.SUM_ROWS, GGMLOp.MEAN, supports=_sum_rows_ok)
def _bind_sum_rows(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = src(node, 0)
    words = [a.nrows, int(node.op == GGMLOp.MEAN)]
    return [Dispatch("rows.sum_rows", a.nrows, (slot(launcher, a), None, None, slot(launcher, node)), words)]


def _sort_ok(limits: Limits, node: Tensor) -> bool:
    a = src(node, 0)
    return a.type == T.F32 and node.type == T.I32 and a.ne[0] <= SORT_MAX_ROW and fits(limits, a, node)


@KERNELS.kernel(GGMLOp.ARGSORT, GGMLOp.TOP_K, supports=_sort_ok)
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


@KERNELS.kernel(GGMLOp.ARGMAX, GGMLOp.CUMSUM, GGMLOp.SUM, supports=_f32_in)
def _bind_scan(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = src(node, 0)
    slots = (slot(launcher, a), None, None, slot(launcher, node))
    if node.op == GGMLOp.ARGMAX:
        return [Dispatch("rows.argmax", a.ne[1], slots, [a.ne[1]])]
    if node.op == GGMLOp.CUMSUM:
        return [Dispatch("rows.cumsum", groups_1d(a.nrows), slots, [a.nrows])]
    return [Dispatch("rows.sum_all", 1, slots, [1])]
