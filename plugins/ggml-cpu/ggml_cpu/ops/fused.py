"""Pairs of nodes computed by one thunk: RMS_NORM → MUL, and an f16 KV-cache product → the SOFT_MAX that alone reads
it (ggml's fusion rule: the first node's value is an intermediate nobody else sees)."""

from __future__ import annotations

from ggml_core import GGMLOp, Tensor, TensorFlag
from ggml_cpu.ops._base import Thunk
from ggml_cpu.ops.attention import alibi_slopes, bind_batch_attention, bind_soft_max
from ggml_cpu.ops.matmul import bind_half_product
from ggml_cpu.ops.norm import bind_rms_norm

__all__ = ["bind_pair"]


def _only_reader(t: Tensor, reader: Tensor, uses: dict[int, int]) -> bool:
    return uses.get(t.id, 0) == 1 and not t.flags & TensorFlag.OUTPUT and reader.src[0] is t


def bind_pair(node: Tensor, nxt: Tensor, uses: dict[int, int]) -> Thunk | None:
    """One thunk computing ``node`` and the node right after it when they fuse, else None: RMS_NORM → MUL, and a
    KV-cache product → the SOFT_MAX that alone reads it (masked cells skipped, see :func:`bind_half_product`).
    ``uses`` counts how many nodes of the graph read each tensor (by id): as in ggml's fusion, a node read by one
    node and not flagged OUTPUT is an intermediate whose value nobody else sees."""
    return _labelled(_bind_pair(node, nxt, uses), nxt)


def _labelled(thunk: Thunk | None, nxt: Tensor) -> Thunk | None:
    """``thunk`` with ``fused`` = the second node's op name (profilers show ``MUL_MAT+SOFT_MAX``)."""
    if thunk is not None:
        setattr(thunk, "fused", nxt.op.name)  # noqa: B010 - an attribute on a closure
    return thunk


def _bind_pair(node: Tensor, nxt: Tensor, uses: dict[int, int]) -> Thunk | None:
    if node.op == GGMLOp.RMS_NORM and nxt.op == GGMLOp.MUL and nxt.src[0] is node:
        return bind_rms_norm(node, nxt)
    if node.op == GGMLOp.MUL_MAT and nxt.op == GGMLOp.SOFT_MAX and _only_reader(node, nxt, uses):
        a, b = node.src[0], node.src[1]
        if a is None or b is None:
            return None
        batch = bind_batch_attention(node, nxt)  # a prompt batch: BLAS per head + numpy softmax
        if batch is not None:
            return batch
        product = bind_half_product(a, b, node, nxt)
        slopes = alibi_slopes(node.ne[2], 0.0)
        soft_max = bind_soft_max(nxt, slopes, zero_under_mask=True) if product is not None else None
        if product is None or soft_max is None:
            return None

        def run() -> None:
            product()
            soft_max()

        return run
    return None
