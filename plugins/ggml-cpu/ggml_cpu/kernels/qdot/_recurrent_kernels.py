"""Compiled recurrent layers: SSM_CONV, SSM_SCAN, GATED_DELTA_NET, RWKV_WKV7 (f32).

One call runs a whole batch: the token loop inside, threads over independent channels (SSM_CONV) or
(sequence, head) pairs (the scans), each in float32 in ggml's order — a running float sum per output, the state
updated as ``s·decay + b·x`` — so a layer's bits do not depend on the thread count. The numpy kernels in
:mod:`ggml_cpu.kernels.recurrent` are the same arithmetic, a token at a time; they serve where these are off.

Imported only once numba is loaded (see :mod:`._jit`).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from ggml_cpu.kernels.qdot import _jit
from ggml_cpu.kernels.qdot._jit import prange

__all__ = ["GATED_DELTA_NET_SPEC", "RWKV_WKV7_SPEC", "SSM_CONV_SPEC", "SSM_SCAN_SPEC"]

_F32 = np.float32
_SOFTPLUS_MAX: Final = np.float32(20.0)


def _ssm_conv(sx: np.ndarray, c: np.ndarray, out: np.ndarray) -> None:
    """``out[s, t, i] = Σ_k sx[s, i, t + k]·c[i, k]``, k ascending; threads over channels."""
    n_s, d_inner, width = sx.shape  # pragma: no cover - compiled
    d_conv = c.shape[1]
    n_t = width - d_conv + 1
    for i in prange(d_inner):
        for s in range(n_s):
            for t in range(n_t):
                acc = _F32(0.0)
                for k in range(d_conv):
                    acc += sx[s, i, t + k] * c[i, k]
                out[s, t, i] = acc


def _ssm_scan(
    s0: np.ndarray,
    x: np.ndarray,
    dt: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    ids: np.ndarray,
    y: np.ndarray,
    states: np.ndarray,
) -> None:
    """The selective scan: ``s0`` (rows, H, hd, ds), ``x`` (n_s, n_t, H, hd), ``dt`` (n_s, n_t, H), ``a`` (H, 1 or
    ds), ``b``/``c`` (n_s, n_t, G, ds), ``ids`` (n_s); writes ``y`` (n_s, n_t, H, hd) and ``states`` (K, n_s, H,
    hd, ds): slot 0 the final state, slot j the state j tokens before the end (slots older than the batch
    untouched)."""
    n_s, n_t, n_head, head_dim = x.shape  # pragma: no cover - compiled
    d_state = s0.shape[3]
    per_group = n_head // b.shape[2]
    k_slots = states.shape[0]
    per_state = a.shape[1] != 1
    for job in prange(n_s * n_head):
        seq = job // n_head
        h = job % n_head
        g = h // per_group
        row = ids[seq]
        st = states[0, seq, h]
        for i in range(head_dim):
            for j in range(d_state):
                st[i, j] = s0[row, h, i, j]
        for t in range(n_t):
            d = dt[seq, t, h]
            sp = d if d > _SOFTPLUS_MAX else _F32(math.log(_F32(1.0) + _F32(math.exp(d))))
            decay = _F32(math.exp(sp * a[h, 0]))
            for i in range(head_dim):
                x_dt = x[seq, t, h, i] * sp
                acc = _F32(0.0)
                for j in range(d_state):
                    if per_state:
                        decay = _F32(math.exp(sp * a[h, j]))
                    v = st[i, j] * decay + b[seq, t, g, j] * x_dt
                    acc += v * c[seq, t, g, j]
                    st[i, j] = v
                y[seq, t, h, i] = acc
            slot = n_t - 1 - t
            if 0 < slot < k_slots:
                states[slot, seq, h] = st


def _gated_delta_net(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    beta: np.ndarray,
    s0: np.ndarray,
    out: np.ndarray,
    states: np.ndarray,
    scale: float,
) -> None:
    """The gated delta rule: ``q``/``k`` (n_s_k, n_t, H_k, S), ``v`` (n_s, n_t, H, S), ``g`` (n_s, n_t, H, 1 or S),
    ``beta`` (n_s, n_t, H, 1), ``s0`` (n_s, H, S, S) with ``s0[.., j, i] = M[i][j]``; writes ``out`` (n_s, n_t, H,
    S) and ``states`` (K, n_s, H, S, S) as SSM_SCAN does."""
    n_s, n_t, n_head, size = v.shape  # pragma: no cover - compiled
    seqs_per_qk = n_s // q.shape[0]
    heads_qk = q.shape[2]
    k_slots = states.shape[0]
    kda = g.shape[3] == size
    sc = _F32(scale)
    for job in prange(n_s * n_head):
        seq = job // n_head
        h = job % n_head
        sq = seq // seqs_per_qk
        hq = h % heads_qk
        m = states[0, seq, h]
        delta = np.empty(size, dtype=np.float32)
        for j in range(size):
            for i in range(size):
                m[j, i] = s0[seq, h, j, i]
        for t in range(n_t):
            if kda:
                for i in range(size):
                    delta[i] = _F32(math.exp(g[seq, t, h, i]))
                for j in range(size):
                    for i in range(size):
                        m[j, i] = m[j, i] * delta[i]
            else:
                e = _F32(math.exp(g[seq, t, h, 0]))
                for j in range(size):
                    for i in range(size):
                        m[j, i] = m[j, i] * e
            bt = beta[seq, t, h, 0]
            for j in range(size):
                acc = _F32(0.0)
                for i in range(size):
                    acc += m[j, i] * k[sq, t, hq, i]
                delta[j] = (v[seq, t, h, j] - acc) * bt
            for j in range(size):
                for i in range(size):
                    m[j, i] = m[j, i] + k[sq, t, hq, i] * delta[j]
            for j in range(size):
                acc = _F32(0.0)
                for i in range(size):
                    acc += m[j, i] * q[sq, t, hq, i]
                out[seq, t, h, j] = acc * sc
            slot = n_t - 1 - t
            if 0 < slot < k_slots:
                states[slot, seq, h] = m


def _rwkv_wkv7(
    r: np.ndarray,
    w: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    s0: np.ndarray,
    y: np.ndarray,
    new: np.ndarray,
) -> None:
    """RWKV-7's recurrence: ``r, w, k, v, a, b`` (n_tokens, H, S) with the sequences' tokens back to back, ``s0``
    (n_s, H, S, S) as ``[i, j]`` (value row, key column); writes ``y`` (n_tokens, H, S) and ``new`` (n_s, H, S,
    S)."""
    n_tokens, n_head, size = k.shape  # pragma: no cover - compiled
    n_s = s0.shape[0]
    per_seq = n_tokens // n_s
    for job in prange(n_s * n_head):
        seq = job // n_head
        h = job % n_head
        m = new[seq, h]
        for i in range(size):
            for j in range(size):
                m[i, j] = s0[seq, h, i, j]
        for t in range(seq * per_seq, (seq + 1) * per_seq):
            for i in range(size):
                sa = _F32(0.0)
                for j in range(size):
                    sa += a[t, h, j] * m[i, j]
                vi = v[t, h, i]
                acc = _F32(0.0)
                for j in range(size):
                    s = m[i, j] * w[t, h, j] + vi * k[t, h, j] + sa * b[t, h, j]
                    m[i, j] = s
                    acc += s * r[t, h, j]
                y[t, h, i] = acc


_A3 = "float32[:, :, :]"
_A4 = "float32[:, :, :, :]"
_C4 = "float32[:, :, :, ::1]"
_C5 = "float32[:, :, :, :, ::1]"

# inputs may be read-only (weights mapped from the file): every input position is marked so
SSM_CONV_SPEC: Final = _jit.KernelSpec(
    _ssm_conv, f"void({_A3}, float32[:, :], float32[:, :, ::1])", parallel=True, readonly=(0, 1)
)
SSM_SCAN_SPEC: Final = _jit.KernelSpec(
    _ssm_scan,
    f"void({_A4}, {_A4}, {_A3}, float32[:, :], {_A4}, {_A4}, int32[::1], {_C4}, {_C5})",
    parallel=True,
    readonly=(0, 1, 2, 3, 4, 5, 6),
)
GATED_DELTA_NET_SPEC: Final = _jit.KernelSpec(
    _gated_delta_net,
    f"void({_A4}, {_A4}, {_A4}, {_A4}, {_A4}, {_A4}, {_C4}, {_C5}, float64)",
    parallel=True,
    readonly=(0, 1, 2, 3, 4, 5),
)
RWKV_WKV7_SPEC: Final = _jit.KernelSpec(
    _rwkv_wkv7,
    f"void({_A3}, {_A3}, {_A3}, {_A3}, {_A3}, {_A3}, {_A4}, {_A3}, {_A4})",
    parallel=True,
    readonly=(0, 1, 2, 3, 4, 5, 6),
)
