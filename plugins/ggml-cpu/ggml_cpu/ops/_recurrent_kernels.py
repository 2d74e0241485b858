"""Compiled recurrent layers: SSM_CONV, SSM_SCAN, GATED_DELTA_NET, RWKV_WKV7 (f32).

One call runs a whole batch: the token loop inside, threads over independent blocks of channels (SSM_CONV) or
(sequence, head) pairs (the scans), each in float32 — the state updated as ggml does (``s·decay + b·x``), every
loop over contiguous memory (a token's operands copied into rows first), a sum of 32 terms or more in sixteen
running sums added pairwise (:func:`_dot`; fewer terms: one running sum) — so a layer's bits depend neither on the
thread count nor on the SIMD width. Each kernel also comes compiled for one thread (``spec_pair``): the same code.
The numpy kernels in :mod:`ggml_cpu.ops.recurrent` are the same updates, a token at a time (their sums in
numpy's order); they serve where these are off.

Imported only once numba is loaded (see :mod:`ggml_cpu.jit._jit`).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from ggml_cpu.jit import _jit
from ggml_cpu.jit._jit import prange

__all__ = ["GATED_DELTA_NET_SPECS", "RWKV_WKV7_SPECS", "SSM_CONV_SPECS", "SSM_SCAN_SPECS"]

_F32 = np.float32
_SOFTPLUS_MAX: Final = np.float32(20.0)


_CONV_BLOCK: Final = 64


def _ssm_conv(sx: np.ndarray, c: np.ndarray, out: np.ndarray) -> None:
    """``out[s, t, i] = Σ_k sx[s, i, t + k]·c[i, k]``, k ascending from 0; threads over blocks of 64 channels. A
    block's window and weights are first transposed into rows of channels, so every sum runs over contiguous
    channels (the window is channel-major, the output token-major)."""
    n_s, d_inner, width = sx.shape  # pragma: no cover - compiled
    d_conv = c.shape[1]
    n_t = width - d_conv + 1
    for blk in prange((d_inner + _CONV_BLOCK - 1) // _CONV_BLOCK):
        i0 = blk * _CONV_BLOCK
        nb = min(_CONV_BLOCK, d_inner - i0)
        win = np.empty((width, _CONV_BLOCK), dtype=np.float32)
        ct = np.empty((d_conv, _CONV_BLOCK), dtype=np.float32)
        for ii in range(nb):
            for k in range(d_conv):
                ct[k, ii] = c[i0 + ii, k]
        for s in range(n_s):
            for ii in range(nb):
                for w in range(width):
                    win[w, ii] = sx[s, i0 + ii, w]
            for t in range(n_t):
                o = out[s, t, i0 : i0 + nb]
                w0, c0 = win[t], ct[0]
                for ii in range(nb):
                    o[ii] = _F32(0.0) + w0[ii] * c0[ii]
                for k in range(1, d_conv):
                    wk, ck = win[t + k], ct[k]
                    for ii in range(nb):
                        o[ii] = o[ii] + wk[ii] * ck[ii]


@_jit.inline
def _dot(x: np.ndarray, y: np.ndarray, n: int) -> np.float32:  # pragma: no cover - compiled
    """``Σ x[i]·y[i]`` in float32 over contiguous rows: in order below 32 terms; from 32, sixteen running sums
    (sum ``l`` takes ``i ≡ l`` mod 16 up to the last whole 16) added pairwise, then the rest in order. The order is
    fixed, so the bits are the same on any SIMD width; the sixteen sums vectorise."""
    if n < 32:
        acc = _F32(0.0)
        for i in range(n):
            acc += x[i] * y[i]
        return acc
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = _F32(0.0)
    a8 = a9 = a10 = a11 = a12 = a13 = a14 = a15 = _F32(0.0)
    n16 = n - n % 16
    for r in range(n16 // 16):
        # slices indexed by constants: no negative-index wrap-around in the body, so LLVM packs the sixteen sums
        xs = x[r * 16 : r * 16 + 16]
        ys = y[r * 16 : r * 16 + 16]
        a0 += xs[0] * ys[0]
        a1 += xs[1] * ys[1]
        a2 += xs[2] * ys[2]
        a3 += xs[3] * ys[3]
        a4 += xs[4] * ys[4]
        a5 += xs[5] * ys[5]
        a6 += xs[6] * ys[6]
        a7 += xs[7] * ys[7]
        a8 += xs[8] * ys[8]
        a9 += xs[9] * ys[9]
        a10 += xs[10] * ys[10]
        a11 += xs[11] * ys[11]
        a12 += xs[12] * ys[12]
        a13 += xs[13] * ys[13]
        a14 += xs[14] * ys[14]
        a15 += xs[15] * ys[15]
    a0, a1, a2, a3 = a0 + a8, a1 + a9, a2 + a10, a3 + a11
    a4, a5, a6, a7 = a4 + a12, a5 + a13, a6 + a14, a7 + a15
    a0, a1, a2, a3 = a0 + a4, a1 + a5, a2 + a6, a3 + a7
    acc = (a0 + a2) + (a1 + a3)
    for i in range(n16, n):
        acc += x[i] * y[i]
    return acc


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
    untouched). A token's B, C (and per-state decays) are copied into contiguous rows first, so the state update
    and the sum (:func:`_dot`) run over contiguous memory."""
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
        bb = np.empty(d_state, dtype=np.float32)
        cc = np.empty(d_state, dtype=np.float32)
        da = np.empty(d_state, dtype=np.float32)
        if n_t == 0:
            for i in range(head_dim):
                for j in range(d_state):
                    st[i, j] = s0[row, h, i, j]
        for t in range(n_t):
            d = dt[seq, t, h]
            sp = d if d > _SOFTPLUS_MAX else _F32(math.log(_F32(1.0) + _F32(math.exp(d))))
            decay = _F32(math.exp(sp * a[h, 0]))
            for j in range(d_state):
                bb[j] = b[seq, t, g, j]
                cc[j] = c[seq, t, g, j]
            if per_state:
                for j in range(d_state):
                    da[j] = _F32(math.exp(sp * a[h, j]))
            for i in range(head_dim):
                x_dt = x[seq, t, h, i] * sp
                si = st[i]
                if t == 0:  # the row comes in from the cache right before its first update (one pass over it)
                    for j in range(d_state):
                        si[j] = s0[row, h, i, j]
                if per_state:
                    for j in range(d_state):
                        si[j] = si[j] * da[j] + bb[j] * x_dt
                else:
                    for j in range(d_state):
                        si[j] = si[j] * decay + bb[j] * x_dt
                y[seq, t, h, i] = _dot(si, cc, d_state)
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
    S) and ``states`` (K, n_s, H, S, S) as SSM_SCAN does. Row ``j`` of the state goes through a token in one visit
    (decay, ``delta[j]`` from it, its rank-1 update, ``out[j]``), each step over contiguous memory."""
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
        kb = np.empty(size, dtype=np.float32)
        qb = np.empty(size, dtype=np.float32)
        eg = np.empty(size, dtype=np.float32)
        if n_t == 0:
            for j in range(size):
                for i in range(size):
                    m[j, i] = s0[seq, h, j, i]
        for t in range(n_t):
            for i in range(size):
                kb[i] = k[sq, t, hq, i]
                qb[i] = q[sq, t, hq, i]
            e = _F32(math.exp(g[seq, t, h, 0]))
            if kda:
                for i in range(size):
                    eg[i] = _F32(math.exp(g[seq, t, h, i]))
            bt = beta[seq, t, h, 0]
            for j in range(size):
                mj = m[j]
                if t == 0:  # the row comes in from the cache right before its first update
                    for i in range(size):
                        mj[i] = s0[seq, h, j, i]
                if kda:
                    for i in range(size):
                        mj[i] = mj[i] * eg[i]
                else:
                    for i in range(size):
                        mj[i] = mj[i] * e
                dj = (v[seq, t, h, j] - _dot(mj, kb, size)) * bt
                for i in range(size):
                    mj[i] = mj[i] + kb[i] * dj
                out[seq, t, h, j] = _dot(mj, qb, size) * sc
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

# inputs may be read-only (weights mapped from the file): every input position is marked so; the scans' initial
# states come C-contiguous (the callers' ``np.ascontiguousarray``, a no-op for a cache's rows) so their copy vectorises
#: SSM_CONV threaded over channel blocks, and on one thread (a decode step's few thousand products)
SSM_CONV_SPECS: Final = _jit.spec_pair(_ssm_conv, f"void({_A3}, float32[:, :], float32[:, :, ::1])", "_ssm_conv")
#: each kernel threaded over its jobs, and on one thread (run by whichever is faster on the machine as it is)
SSM_SCAN_SPECS: Final = _jit.spec_pair(
    _ssm_scan,
    f"void({_C4}, {_A4}, {_A3}, float32[:, :], {_A4}, {_A4}, int32[::1], {_C4}, {_C5})",
    "_ssm_scan",
    readonly=(0, 1, 2, 3, 4, 5, 6),
)
GATED_DELTA_NET_SPECS: Final = _jit.spec_pair(
    _gated_delta_net,
    f"void({_A4}, {_A4}, {_A4}, {_A4}, {_A4}, {_C4}, {_C4}, {_C5}, float64)",
    "_gated_delta_net",
    readonly=(0, 1, 2, 3, 4, 5),
)
RWKV_WKV7_SPECS: Final = _jit.spec_pair(
    _rwkv_wkv7,
    f"void({_A3}, {_A3}, {_A3}, {_A3}, {_A3}, {_A3}, {_A4}, {_A3}, {_A4})",
    "_rwkv_wkv7",
    readonly=(0, 1, 2, 3, 4, 5, 6),
)
