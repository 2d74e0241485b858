"""Work bounds from op parameters: nodes whose cost is set by their op_params, not by the memory they were given.

Most ops cost about as much as the bytes they read and write, and every computed node's memory lies in buffers the
client was granted, so the memory budget bounds their work. A few do not: a pooling window or a convolution kernel
makes each output element cost many operations, so a one-element input and output can ask for billions. For those
the server estimates the multiply-adds a direct kernel does (ggml's own loops: every output element visits its
whole window or kernel) and refuses the node, naming the op and the bound, before anything is computed:

- POOL_1D / POOL_2D: the window (``k0``, ``k0·k1``) at most ``max_window`` taps, and ``output × window`` at most
  ``max_node_work``;
- CONV_2D / CONV_2D_DW / IM2COL: ``output × IC·KH·KW`` (``KH·KW`` depthwise, 1 for IM2COL) at most ``max_node_work``;
- CONV_TRANSPOSE_1D / CONV_TRANSPOSE_2D: ``input × OC × kernel`` at most ``max_node_work``.

Ops whose parameters set the size of their output (PAD, UPSCALE, ARANGE, TIMESTEP_EMBEDDING, ROLL, IM2COL, ...)
are bounded by that output's memory, which must lie in a buffer of the connection (the node is rebuilt and
compared with what was sent, so the parameters cannot claim another size).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ggml_core import GGMLOp, Tensor
from ggml_rpc.server._limits import ServerLimits
from ggml_rpc.server._validate import Refused

__all__ = ["check_work", "node_work"]


def _src(t: Tensor, i: int) -> Tensor:
    s = t.src[i]
    assert s is not None  # the builders made the node: its operands are there
    return s


def _pool_1d(t: Tensor) -> tuple[int, int]:
    return t.op_param_i32(1), t.nelements * t.op_param_i32(1)


def _pool_2d(t: Tensor) -> tuple[int, int]:
    window = t.op_param_i32(1) * t.op_param_i32(2)
    return window, t.nelements * window


def _conv_2d(t: Tensor) -> tuple[int, int]:
    a = _src(t, 0)  # [KW, KH, IC, OC]
    return 0, t.nelements * a.ne[0] * a.ne[1] * a.ne[2]


def _conv_2d_dw(t: Tensor) -> tuple[int, int]:
    a = _src(t, 0)  # [KW, KH, 1, C]
    return 0, t.nelements * a.ne[0] * a.ne[1]


def _conv_transpose(t: Tensor) -> tuple[int, int]:
    a, b = _src(t, 0), _src(t, 1)  # every input element meets every (output channel, kernel tap)
    per_input = a.nelements // max(1, b.ne[1] if t.op == GGMLOp.CONV_TRANSPOSE_1D else b.ne[2])
    return 0, b.nelements * per_input


def _im2col(t: Tensor) -> tuple[int, int]:
    return 0, t.nelements


_WORK: Final[dict[GGMLOp, Callable[[Tensor], tuple[int, int]]]] = {
    GGMLOp.POOL_1D: _pool_1d,
    GGMLOp.POOL_2D: _pool_2d,
    GGMLOp.CONV_2D: _conv_2d,
    GGMLOp.CONV_2D_DW: _conv_2d_dw,
    GGMLOp.CONV_TRANSPOSE_1D: _conv_transpose,
    GGMLOp.CONV_TRANSPOSE_2D: _conv_transpose,
    GGMLOp.IM2COL: _im2col,
}


def node_work(t: Tensor) -> tuple[int, int] | None:
    """(window taps, multiply-adds) of a node whose cost its op parameters set; None for other ops."""
    fn = _WORK.get(GGMLOp(t.op))
    return fn(t) if fn is not None else None


def check_work(t: Tensor, limits: ServerLimits) -> None:
    """:class:`Refused`, naming the op and the bound, when node ``t`` would cost more than the limits allow."""
    got = node_work(t)
    if got is None:
        return
    window, work = got
    op = GGMLOp(t.op).name
    if window > limits.max_window:
        raise Refused(
            f"GRAPH_COMPUTE: node {t.name!r} ({op}) has a window of {window} taps; this server allows at most "
            f"{limits.max_window} (max_window)"
        )
    if work > limits.max_node_work:
        raise Refused(
            f"GRAPH_COMPUTE: node {t.name!r} ({op}) needs about {work} multiply-adds; this server allows at most "
            f"{limits.max_node_work} per node (max_node_work)"
        )
