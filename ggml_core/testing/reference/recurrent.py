"""numpy references for the recurrent ops: SSM_CONV, SSM_SCAN, GATED_DELTA_NET, RWKV_WKV7.

Written from each op's definition in float64, token by token, in numpy shape order ``(ne3, ne2, ne1, ne0)``; each
returns the op's whole result (outputs, then states) flattened, as float32. With snapshots (``k_slots`` > 1) the
sequences must be at least ``k_slots`` tokens long: older slots are left to the caller by the op and are zero here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["gated_delta_net", "rwkv_wkv7", "softplus", "ssm_conv", "ssm_scan"]


def softplus(x: np.ndarray) -> np.ndarray:
    """ggml's softplus: ``x`` above 20, else ``log(1 + exp(x))``."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def ssm_conv(sx: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``out[s, t, i] = Σ_k sx[s, i, t + k] · c[i, k]`` (numpy order), shape ``(1, n_s, n_t, d_inner)``."""
    x = np.asarray(sx, dtype=np.float64)[0]  # (n_s, d_inner, d_conv-1+n_t)
    w = np.asarray(c, dtype=np.float64)[0, 0]  # (d_inner, d_conv)
    d_conv = w.shape[1]
    n_t = x.shape[2] - d_conv + 1
    out = np.zeros((x.shape[0], n_t, x.shape[1]))
    for t in range(n_t):
        out[:, t, :] = (x[:, :, t : t + d_conv] * w[None]).sum(axis=2)
    return out[None].astype(np.float32)


def ssm_scan(
    s: np.ndarray,
    x: np.ndarray,
    dt: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    ids: np.ndarray,
    k_slots: int = 1,
) -> np.ndarray:
    """The selective scan; ``s`` ``(n_rs, n_head, head_dim, d_state)``, ``x`` ``(n_s, n_t, n_head, head_dim)``,
    ``dt`` ``(1, n_s, n_t, n_head)``, ``a`` ``(1, 1, n_head, 1 or d_state)``, ``b``/``c``
    ``(n_s, n_t, n_group, d_state)``, ``ids`` ``(1, 1, 1, n_s)``."""
    s0 = np.asarray(s, dtype=np.float64)
    xx = np.asarray(x, dtype=np.float64)
    n_s, n_t, n_head, head_dim = xx.shape
    d_state = s0.shape[3]
    delta = softplus(np.asarray(dt, dtype=np.float64)[0])  # (n_s, n_t, n_head)
    aa = np.asarray(a, dtype=np.float64)[0, 0]  # (n_head, 1 or d_state)
    bb, cc = np.asarray(b, dtype=np.float64), np.asarray(c, dtype=np.float64)
    group = np.arange(n_head) // (n_head // bb.shape[2])
    y = np.zeros_like(xx)
    per_slot = n_s * n_head * head_dim * d_state
    states = np.zeros(k_slots * per_slot).reshape(k_slots, n_s, n_head, head_dim, d_state)
    for seq in range(n_s):
        st = s0[int(np.asarray(ids).reshape(-1)[seq])].copy()  # (n_head, head_dim, d_state)
        for t in range(n_t):
            d = delta[seq, t][:, None, None]  # (n_head, 1, 1)
            decay = np.exp(d * aa[:, None, :])  # (n_head, 1, 1 or d_state)
            bx = bb[seq, t, group][:, None, :] * (xx[seq, t][:, :, None] * d)  # (n_head, head_dim, d_state)
            st = st * decay + bx
            y[seq, t] = (st * cc[seq, t, group][:, None, :]).sum(axis=2)
            slot = n_t - 1 - t
            if slot < k_slots:
                states[slot, seq] = st
    return np.concatenate([y.reshape(-1), states.reshape(-1)]).astype(np.float32)


def gated_delta_net(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    beta: np.ndarray,
    state: np.ndarray,
    k_slots: int = 1,
) -> np.ndarray:
    """The gated delta rule; ``v`` ``(n_s, n_t, H, S)``, ``q``/``k`` ``(n_s_k, n_t, H_k, S)``, ``g``
    ``(n_s, n_t, H, 1 or S)``, ``beta`` ``(n_s, n_t, H, 1)``, ``state`` ``(n_s, H, S, S)`` with
    ``state[.., j, i] = M[i][j]``."""
    qq, kk, vv = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    gg, bt, s0 = (np.asarray(t, dtype=np.float64) for t in (g, beta, state))
    n_s, n_t, heads, size = vv.shape
    out = np.zeros_like(vv)
    per_slot = n_s * heads * size * size
    states = np.zeros(k_slots * per_slot).reshape(k_slots, n_s, heads, size, size)
    scale = 1.0 / np.sqrt(np.float32(size))
    for seq in range(n_s):
        seq_qk = seq // (n_s // qq.shape[0])
        for h in range(heads):
            h_qk = h % qq.shape[2]
            m = s0[seq, h].T.copy()  # m[i, j] = M[i][j]
            for t in range(n_t):
                m *= np.exp(gg[seq, t, h])[:, None]  # row i scaled by exp(g) (g[i] for KDA)
                key = kk[seq_qk, t, h_qk]
                d = bt[seq, t, h, 0] * (vv[seq, t, h] - m.T @ key)
                m += np.outer(key, d)
                out[seq, t, h] = (m.T @ qq[seq_qk, t, h_qk]) * scale
                slot = n_t - 1 - t
                if slot < k_slots:
                    states[slot, seq, h] = m.T
    return np.concatenate([out.reshape(-1), states.reshape(-1)]).astype(np.float32)


def rwkv_wkv7(
    r: np.ndarray, w: np.ndarray, k: np.ndarray, v: np.ndarray, a: np.ndarray, b: np.ndarray, state: np.ndarray
) -> np.ndarray:
    """RWKV-7's recurrence; ``r, w, k, v, a, b`` ``(1, n_tokens, H, S)``, ``state`` ``(1, 1, n_s, S·S·H)``."""
    rr, ww, kk, vv, aa, bb = (np.asarray(t, dtype=np.float64)[0] for t in (r, w, k, v, a, b))
    n_tokens, heads, size = kk.shape
    s0 = np.asarray(state, dtype=np.float64).reshape(-1, heads, size, size)  # (n_s, H, i, j)
    n_s = s0.shape[0]
    per_seq = n_tokens // n_s
    out = np.zeros_like(kk)
    new = np.zeros_like(s0)
    for seq in range(n_s):
        m = s0[seq].copy()
        for t in range(seq * per_seq, (seq + 1) * per_seq):
            sa = np.einsum("hij,hj->hi", m, aa[t])
            m = m * ww[t][:, None, :] + vv[t][:, :, None] * kk[t][:, None, :] + sa[:, :, None] * bb[t][:, None, :]
            out[t] = np.einsum("hij,hj->hi", m, rr[t])
        new[seq] = m
    return np.concatenate([out.reshape(-1), new.reshape(-1)]).astype(np.float32)
