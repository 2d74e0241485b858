"""The recurrent family (``recurrent.wgsl``), f32: SSM_CONV, SSM_SCAN, GATED_DELTA_NET, RWKV_WKV7.

The scans take one invocation per (state row, head, sequence) and loop over the tokens in the kernel. Their
initial states are first copied into the result's newest state slot by a ``load`` dispatch (the bind group has
five operand slots, fewer than these ops' operands), where the scan updates them in place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_webgpu.ops._dispatch import KERNELS, Dispatch, Launcher, Limits, f32, fits, groups_1d, slot, src

__all__: list[str] = []

T = GGMLType


def _operands(node: Tensor) -> list[Tensor]:
    return [s for s in node.src if s is not None]


def _all_f32(limits: Limits, node: Tensor) -> bool:
    """f32 operands and result (SSM_SCAN's ids are i32), each fitting one storage binding; state rows of at most
    ``MAX_ROW`` values (the scans hold one in private memory)."""
    srcs = _operands(node)
    floats, ints = (srcs[:6], srcs[6:]) if node.op == GGMLOp.SSM_SCAN else (srcs, [])
    return (
        node.type == T.F32
        and _row_length(node) <= MAX_ROW
        and all(s.type == T.F32 for s in floats)
        and all(s.type == T.I32 for s in ints)
        and fits(limits, node, *srcs)
    )


#: longest state row of a scan (``MAX_ROW`` in recurrent.wgsl)
MAX_ROW: Final = 256


def _row_length(node: Tensor) -> int:
    """Values per state row: SSM_SCAN's d_state, the others' head size (SSM_CONV has no state: 0)."""
    if node.op == GGMLOp.SSM_CONV:
        return 0
    return src(node, 0).ne[0] if node.op == GGMLOp.SSM_SCAN else src(node, 2).ne[0]


def _load(
    launcher: Launcher,
    node: Tensor,
    source: Tensor,
    shape: tuple[int, int, int, int],
    first: int,
    ids: Tensor | None = None,
) -> Dispatch:
    """Copy ``source`` (viewed as ``shape``; with ``ids``, dim 3 gathered through them) to result element ``first``
    on."""
    n = math.prod(shape)
    gather = [1, launcher.error_code(node)] if ids is not None else [0, 0]
    slots = (slot(launcher, source), None if ids is None else slot(launcher, ids), None, slot(launcher, node))
    return Dispatch("recurrent.load", groups_1d(n), slots, [n, *shape[:3], first, *gather])


@KERNELS.kernel(GGMLOp.SSM_CONV, supports=_all_f32)
def _bind_ssm_conv(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    sx, c = src(node, 0), src(node, 1)
    n = node.nelements
    slots = (slot(launcher, sx), slot(launcher, c), None, slot(launcher, node))
    return [Dispatch("recurrent.ssm_conv", groups_1d(n), slots, [n])]


def _scan(launcher: Launcher, node: Tensor, name: str, operands: Sequence[Tensor], words: list[int]) -> Dispatch:
    """The scan kernel ``name`` over five operands (slots A, B, C, E, F; the result in D), ``words[0]`` invocations."""
    a, b, c, e, f = (slot(launcher, t) for t in operands)
    return Dispatch(f"recurrent.{name}", groups_1d(words[0]), (a, b, c, slot(launcher, node), e, f), words)


@KERNELS.kernel(GGMLOp.SSM_SCAN, supports=_all_f32)
def _bind_ssm_scan(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    s, x, dt, a, b, c, ids = (src(node, i) for i in range(7))
    head_dim, n_head, _, n_s = x.ne
    load = _load(launcher, node, s, (s.ne[0], head_dim, n_head, n_s), x.nelements, ids)
    words = [head_dim * n_head * n_s, node.op_param_i32(0)]
    return [load, _scan(launcher, node, "ssm_scan", (x, dt, a, b, c), words)]


@KERNELS.kernel(GGMLOp.GATED_DELTA_NET, supports=_all_f32)
def _bind_gated_delta_net(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    q, k, v, g, beta, state = (src(node, i) for i in range(6))
    size, heads, n_t, n_s = v.ne
    load = _load(launcher, node, state, state.ne, size * heads * n_t * n_s)
    scale = np.float32(1.0) / np.sqrt(np.float32(size))
    words = [size * heads * n_s, node.op_param_i32(0), f32(scale)]
    return [load, _scan(launcher, node, "gated_delta_net", (q, k, v, g, beta), words)]


@KERNELS.kernel(GGMLOp.RWKV_WKV7, supports=_all_f32)
def _bind_rwkv_wkv7(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    r, w, k, v, a, b, state = (src(node, i) for i in range(7))
    size, heads, n_tokens = k.ne[:3]
    n_s = state.ne[1]
    loads = [
        _load(launcher, node, state, (state.ne[0], n_s, 1, 1), n_tokens * heads * size),
        _load(launcher, node, v, (size, heads, n_tokens, 1), 0),
    ]
    return [*loads, _scan(launcher, node, "rwkv_wkv7", (r, w, k, a, b), [size * heads * n_s, n_s])]
