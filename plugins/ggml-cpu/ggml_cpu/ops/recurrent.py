"""Recurrent layers: SSM_CONV, SSM_SCAN, GATED_DELTA_NET, RWKV_WKV7 (f32).

Each result is one flat f32 tensor: the outputs, then the new states, laid out as ggml's CPU kernels write them.
The arithmetic is float32 (states updated token by token as ggml updates them). The compiled kernels
(:mod:`._recurrent_kernels`) run a whole batch in one call, threaded over channels or (sequence, head) pairs or
on one thread, whichever is faster on the machine as it is (the same bits either way); their sums of 32 terms or
more run in sixteen running sums. The numpy path here (loops over tokens, vectorised over heads and channels) serves
where they are off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_cpu.ops._base import KERNELS, Thunk, arr, check_index_range, f32
from ggml_cpu.ops._compiled import kernel
from ggml_cpu.threads import Faster

__all__: list[str] = []

_F32 = np.float32


def _f32_with(n_srcs: int) -> Callable[[Tensor], bool]:
    """Support: f32 operands (i32 state rows), all ``n_srcs`` of them present."""

    def supports(node: Tensor) -> bool:
        srcs = node.src[:n_srcs]
        if node.type != GGMLType.F32 or any(s is None for s in srcs):
            return False
        return all(s.type in (GGMLType.F32, GGMLType.I32) for s in srcs if s is not None)

    return supports


def _flat(node: Tensor) -> np.ndarray:
    return arr(node).reshape(-1)


#: below this many products an SSM_CONV runs on the calling thread (a decode step: a few thousand)
_CONV_SERIAL_WORK = 1 << 16


def _kernel(name: str, key: object = None) -> Any:
    """The compiled kernel ``name`` (``key``: which of a pair) of :mod:`._recurrent_kernels`, or None (numpy
    path)."""
    return kernel(name, key, module="_recurrent_kernels")


def _faster(name: str, node: Tensor) -> Any:
    """The compiled pair ``name`` (threaded over its jobs, on one thread: the same bits) as one callable running
    the faster on the machine as it is (:class:`ggml_cpu.threads.Faster`, shared by nodes of one op and shape), or
    None (numpy path)."""
    threaded, serial = _kernel(name, 0), _kernel(name, 1)
    if threaded is None or serial is None:
        return None
    shapes = tuple(tuple(s.ne) for s in node.src if s is not None)
    return Faster(threaded, serial, key=(node.op.name, shapes))


def _softplus(x: np.ndarray) -> np.ndarray:
    """ggml's ``x > 20 ? x : logf(1 + expf(x))`` in float32."""
    with np.errstate(over="ignore"):
        return np.where(x > _F32(20.0), x, np.log(_F32(1.0) + np.exp(x))).astype(_F32)


@KERNELS.kernel(GGMLOp.SSM_CONV, supports=_f32_with(2))
def _bind_ssm_conv(node: Tensor) -> Thunk:
    sx, c = node.src[0], node.src[1]
    assert sx is not None and c is not None
    d_conv, n_t = c.ne[0], node.ne[1]
    small = node.nelements * d_conv < _CONV_SERIAL_WORK
    fast = _kernel("SSM_CONV_SPECS", 1) if small else _faster("SSM_CONV_SPECS", node)

    def run() -> None:
        x = f32(sx)[0]  # (n_s, d_inner, d_conv-1+n_t)
        w = f32(c)[0, 0]  # (d_inner, d_conv)
        out = arr(node)[0]  # (n_s, n_t, d_inner)
        if fast is not None and out.flags.c_contiguous:
            fast(x, w, out)
            return
        acc = np.zeros((x.shape[0], x.shape[1], n_t), _F32)
        for k in range(d_conv):  # sumf += s[k + t] * c[k], k ascending
            acc += x[:, :, k : k + n_t] * w[:, k : k + 1]
        out[...] = acc.transpose(0, 2, 1)

    return run


@KERNELS.kernel(GGMLOp.SSM_SCAN, supports=_f32_with(7))
def _bind_ssm_scan(node: Tensor) -> Thunk:
    s, x, dt, a, b, c, ids = node.src[:7]
    assert s is not None and x is not None and dt is not None and a is not None
    assert b is not None and c is not None and ids is not None
    k_slots = node.op_param_i32(0)
    d_state, head_dim, n_head, n_rs = s.ne
    n_t, n_s = x.ne[2], x.ne[3]
    group = np.arange(n_head) // (n_head // b.ne[1])
    n_y = x.nelements
    fast = _faster("SSM_SCAN_SPECS", node)

    def run() -> None:
        rows = arr(ids).reshape(-1)
        check_index_range(node, rows, n_rs, "ids (state row)")
        out = _flat(node)
        y = out[:n_y].reshape(n_s, n_t, n_head, head_dim)
        states = out[n_y:].reshape(k_slots, n_s, n_head, head_dim, d_state)
        if fast is not None:
            ids32 = np.ascontiguousarray(rows, dtype=np.int32)
            s0 = np.ascontiguousarray(f32(s))
            fast(s0, f32(x), f32(dt)[0], f32(a)[0, 0], f32(b), f32(c), ids32, y, states)
            return
        s0, xx, delta = f32(s), f32(x), _softplus(f32(dt)[0])  # delta: (n_s, n_t, n_head)
        aa = f32(a)[0, 0]  # (n_head, 1 or d_state)
        bb, cc = f32(b), f32(c)  # (n_s, n_t, n_group, d_state)
        with np.errstate(over="ignore", under="ignore"):
            for seq in range(n_s):
                st = s0[int(rows[seq])].copy()  # (n_head, head_dim, d_state)
                for t in range(n_t):
                    d = delta[seq, t][:, None, None]
                    decay = np.exp(d * aa[:, None, :])  # (n_head, 1, 1 or d_state)
                    x_dt = xx[seq, t][:, :, None] * d
                    st = st * decay + bb[seq, t, group][:, None, :] * x_dt
                    y[seq, t] = (st * cc[seq, t, group][:, None, :]).sum(axis=2, dtype=_F32)
                    slot = n_t - 1 - t
                    if slot < k_slots:
                        states[slot, seq] = st

    return run


@KERNELS.kernel(GGMLOp.GATED_DELTA_NET, supports=_f32_with(6))
def _bind_gated_delta_net(node: Tensor) -> Thunk:
    q, k, v, g, beta, state = node.src[:6]
    assert q is not None and k is not None and v is not None
    assert g is not None and beta is not None and state is not None
    k_slots = node.op_param_i32(0)
    size, heads, n_t, n_s = v.ne
    heads_qk, seqs_qk = q.ne[1], q.ne[3]
    head_of = np.arange(heads) % heads_qk  # value head h reads query/key head h % H_k
    scale = _F32(1.0) / np.sqrt(_F32(size))
    kda = g.ne[0] == size
    fast = _faster("GATED_DELTA_NET_SPECS", node)

    def run() -> None:
        qq, kk, vv = f32(q), f32(k), f32(v)  # (n_s[_k], n_t, H[_k], S)
        gg, bt, s0 = f32(g), f32(beta), f32(state)  # g: (n_s, n_t, H, 1 or S); state: (n_s, H, S, S)
        out = _flat(node)
        att = out[: size * heads * n_t * n_s].reshape(n_s, n_t, heads, size)
        snaps = out[size * heads * n_t * n_s :].reshape(k_slots, n_s, heads, size, size)
        if fast is not None:
            fast(qq, kk, vv, gg, bt, np.ascontiguousarray(s0), att, snaps, float(scale))
            return
        for seq in range(n_s):
            sq = seq // (n_s // seqs_qk)
            m = s0[seq].copy()  # m[h, j, i] = M[i][j]
            for t in range(n_t):
                decay = np.exp(gg[seq, t])  # (H, 1 or S)
                m *= decay[:, None, :] if kda else decay[:, :, None]
                key, query = kk[sq, t, head_of], qq[sq, t, head_of]  # (H, S)
                delta = (vv[seq, t] - np.einsum("hji,hi->hj", m, key)) * bt[seq, t]  # (H, S)
                m += delta[:, :, None] * key[:, None, :]
                att[seq, t] = np.einsum("hji,hi->hj", m, query) * scale
                slot = n_t - 1 - t
                if slot < k_slots:
                    snaps[slot, seq] = m

    return run


@KERNELS.kernel(GGMLOp.RWKV_WKV7, supports=_f32_with(7))
def _bind_rwkv_wkv7(node: Tensor) -> Thunk:
    operands = [t for t in node.src[:6] if t is not None]
    state = node.src[6]
    assert len(operands) == 6 and state is not None
    size, heads, n_tokens = operands[2].ne[:3]
    n_s = state.ne[1]
    per_seq = n_tokens // n_s
    fast = _faster("RWKV_WKV7_SPECS", node)

    def run() -> None:
        r, w, k, v, a, b = (f32(t)[0].reshape(n_tokens, heads, size) for t in operands)
        s0 = f32(state).reshape(n_s, heads, size, size)  # (seq, h, i, j): value row i, key column j
        out = _flat(node)
        y = out[: n_tokens * heads * size].reshape(n_tokens, heads, size)
        new = out[n_tokens * heads * size :].reshape(n_s, heads, size, size)
        if fast is not None:
            fast(r, w, k, v, a, b, s0, y, new)
            return
        for seq in range(n_s):
            m = s0[seq].copy()
            for t in range(seq * per_seq, (seq + 1) * per_seq):
                sa = np.einsum("hij,hj->hi", m, a[t])
                m = m * w[t][:, None, :] + v[t][:, :, None] * k[t][:, None, :] + sa[:, :, None] * b[t][:, None, :]
                y[t] = np.einsum("hij,hj->hi", m, r[t])
            new[seq] = m

    return run
