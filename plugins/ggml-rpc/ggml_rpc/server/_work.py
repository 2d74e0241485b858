"""Work bounds from op parameters: nodes whose cost is set by their op_params, not by the memory they were given.

Most ops cost about as much as the bytes they read and write, and every computed node's memory lies in buffers the
client was granted, so the memory budget bounds their work. A few do not: a pooling window or a convolution kernel
makes each output element cost many operations, so a one-element input and output can ask for billions. For those
the server estimates the multiply-adds a direct kernel does (ggml's own loops: every output element visits its
whole window or kernel) and refuses the node, naming the op and the bound, before anything is computed:

- POOL_1D / POOL_2D: the window (``k0``, ``k0·k1``) at most ``max_window`` taps, and ``output × window`` at most
  ``max_node_work``;
- CONV_2D / CONV_2D_DW / IM2COL: ``output × IC·KH·KW`` (``KH·KW`` depthwise, 1 for IM2COL) at most ``max_node_work``;
- CONV_TRANSPOSE_1D / CONV_TRANSPOSE_2D: ``input × OC × kernel`` at most ``max_node_work``;
- UPSCALE: interpolating one axis at a time needs intermediates of every output plane at the input's size and of
  (rows of one axis, columns of the other), which a hostile shape makes far larger than input and output
  (``[65536, 1]`` → ``[1, 65536]``: 16 GiB); their bytes, ``4 · planes · (H_in·W_in + taps · (OH·W_in + H_in·OW +
  OH·OW))`` (taps 1 nearest, 2 bilinear, 4 bicubic);
- FLASH_ATTN_EXT: the scores of every (query, KV position) pair of every head, ``12 · q3 · H · N · n_kv`` bytes (the
  scores and two softmax temporaries in float32), which head size 1 makes thousands of times the operands;
- MUL_MAT_ID: the activation row of every (token, used expert) pair, twice, ``8 · n_tokens · n_used · K``: a small
  ``ids`` with many experts per token multiplies b's memory by ``n_used``;
- OUT_PROD: a repeated over b's dims 2 and 3 before the product, ``4 · b3 · b2 · K · M``.

Scratch is not refused outright (a long-context prefill legitimately needs gigabytes): while a graph computes, its
largest node's scratch is taken from the device's memory budget, the same pool ALLOC_BUFFER grants come from, and a
graph whose scratch does not fit what is left is refused (:func:`graph_scratch`; ``max_node_scratch`` can cap one
node's scratch outright).

Ops whose parameters set the size of their output (PAD, UPSCALE, ARANGE, TIMESTEP_EMBEDDING, ROLL, IM2COL, ...)
are bounded by that output's memory, which must lie in a buffer of the connection (the node is rebuilt and
compared with what was sent, so the parameters cannot claim another size).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from ggml_core import GGMLOp, Tensor
from ggml_rpc.server._limits import ServerLimits
from ggml_rpc.server._validate import Refused

__all__ = ["check_work", "graph_scratch", "node_work"]


def _src(t: Tensor, i: int) -> Tensor:
    s = t.src[i]
    assert s is not None  # the builders made the node: its operands are there
    return s


Cost = tuple[int, int, int]  #: (window taps, multiply-adds, scratch bytes)


def _pool_1d(t: Tensor) -> Cost:
    return t.op_param_i32(1), t.nelements * t.op_param_i32(1), 0


def _pool_2d(t: Tensor) -> Cost:
    window = t.op_param_i32(1) * t.op_param_i32(2)
    return window, t.nelements * window, 0


def _conv_2d(t: Tensor) -> Cost:
    a = _src(t, 0)  # [KW, KH, IC, OC]
    return 0, t.nelements * a.ne[0] * a.ne[1] * a.ne[2], 0


def _conv_2d_dw(t: Tensor) -> Cost:
    a = _src(t, 0)  # [KW, KH, 1, C]
    return 0, t.nelements * a.ne[0] * a.ne[1], 0


def _conv_transpose(t: Tensor) -> Cost:
    a, b = _src(t, 0), _src(t, 1)  # every input element meets every (output channel, kernel tap)
    per_input = a.nelements // max(1, b.ne[1] if t.op == GGMLOp.CONV_TRANSPOSE_1D else b.ne[2])
    return 0, b.nelements * per_input, 0


def _im2col(t: Tensor) -> Cost:
    return 0, t.nelements, 0


def _upscale(t: Tensor) -> Cost:
    a = _src(t, 0)
    taps = {0: 1, 1: 2, 2: 4}.get(t.op_param_i32(0) & 0xFF, 4)  # nearest, bilinear, bicubic
    planes = t.ne[2] * t.ne[3]
    h_in, w_in, oh, ow = a.ne[1], a.ne[0], t.ne[1], t.ne[0]
    scratch = 4 * planes * (h_in * w_in + taps * (oh * w_in + h_in * ow + oh * ow))
    return 0, t.nelements * taps * taps, scratch


def _flash_attn(t: Tensor) -> Cost:
    q, k = _src(t, 0), _src(t, 1)  # q [D, N, H, q3], k [D, n_kv, Hk, k3]
    return 0, 0, 12 * q.ne[3] * q.ne[2] * q.ne[1] * k.ne[1]


def _mul_mat_id(t: Tensor) -> Cost:
    b, ids = _src(t, 1), _src(t, 2)  # b [K, ne11, n_tokens], ids [n_used, n_tokens]
    return 0, 0, 8 * ids.ne[1] * ids.ne[0] * b.ne[0]


def _out_prod(t: Tensor) -> Cost:
    a, b = _src(t, 0), _src(t, 1)  # a [M, K, a2, a3], b [N, K, b2, b3]
    return 0, 0, 4 * b.ne[3] * b.ne[2] * a.ne[1] * a.ne[0] + 4 * t.nelements


_WORK: Final[dict[GGMLOp, Callable[[Tensor], Cost]]] = {
    GGMLOp.POOL_1D: _pool_1d,
    GGMLOp.POOL_2D: _pool_2d,
    GGMLOp.CONV_2D: _conv_2d,
    GGMLOp.CONV_2D_DW: _conv_2d_dw,
    GGMLOp.CONV_TRANSPOSE_1D: _conv_transpose,
    GGMLOp.CONV_TRANSPOSE_2D: _conv_transpose,
    GGMLOp.IM2COL: _im2col,
    GGMLOp.UPSCALE: _upscale,
    GGMLOp.FLASH_ATTN_EXT: _flash_attn,
    GGMLOp.MUL_MAT_ID: _mul_mat_id,
    GGMLOp.OUT_PROD: _out_prod,
}


def graph_scratch(nodes: Iterable[Tensor]) -> int:
    """Bytes of scratch the largest node of a graph may need (kernels run one node at a time)."""
    most = 0
    for t in nodes:
        got = node_work(t)
        if got is not None:
            most = max(most, got[2])
    return most


def node_work(t: Tensor) -> Cost | None:
    """(window taps, multiply-adds, scratch bytes) of a node whose cost its parameters set; None for other ops."""
    fn = _WORK.get(GGMLOp(t.op))
    return fn(t) if fn is not None else None


def check_work(t: Tensor, limits: ServerLimits) -> None:
    """:class:`Refused`, naming the op and the bound, when node ``t`` would cost more than the limits allow."""
    got = node_work(t)
    if got is None:
        return
    window, work, scratch = got
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
    if limits.max_node_scratch is not None and scratch > limits.max_node_scratch:
        raise Refused(
            f"GRAPH_COMPUTE: node {t.name!r} ({op}) would need about {scratch} bytes of scratch memory; this server "
            f"allows at most {limits.max_node_scratch} per node (max_node_scratch)"
        )
