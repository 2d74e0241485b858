"""Recurrent layers: SSM_CONV, SSM_SCAN (Mamba), GATED_DELTA_NET (Qwen3-Next, Qwen3.5, Kimi), RWKV_WKV7.

Each op reads a per-sequence state and returns one f32 tensor holding its outputs followed by the new states,
as ggml does: the caller views the two parts out of the result. Shapes, operand order and op params are ggml's;
the meaning of every value is written out in :mod:`ggml_core.testing.reference.recurrent`.

Snapshots (``K`` > 1): SSM_SCAN and GATED_DELTA_NET can also keep the states after the last ``K`` tokens of each
sequence, slot 0 the newest, slot ``j`` the state ``j`` tokens earlier. Slots older than the sequence's length are
not written (the caller owns them).
"""

from __future__ import annotations

from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.ops._build import check, finish, new_result
from ggml_core.ops._enum import GGMLOp

__all__ = ["gated_delta_net", "rwkv_wkv7", "ssm_conv", "ssm_scan"]

_F32 = GGMLType.F32
_INT32_MAX = 2**31 - 1


def _rows_packed(t: Tensor) -> bool:
    """Elements of a row adjacent and rows adjacent in dim 1 (ggml's ``nb[0]``/``nb[1]`` checks)."""
    return t.nb[0] == t.type.type_size and t.nb[1] == t.ne[0] * t.nb[0]


def _all_f32(op: str, *ts: Tensor) -> None:
    for t in ts:
        check(t.type == _F32, op, f"operands must be f32, got {t.type.traits.name} ({t.name or 'unnamed'})", t)


def ssm_conv(sx: Tensor, c: Tensor) -> Tensor:
    """``ggml_ssm_conv``: a depthwise causal 1-D convolution over each sequence's padded window.

    ``sx`` is ``[d_conv - 1 + n_t, d_inner, n_s]`` (the previous ``d_conv - 1`` inputs then the ``n_t`` new ones, per
    channel), ``c`` is ``[d_conv, d_inner]``; the result is f32 ``[d_inner, n_t, n_s]`` with
    ``out[i, t, s] = Σ_k sx[t + k, i, s] · c[k, i]``.
    """
    op = "SSM_CONV"
    _all_f32(op, sx, c)
    check(sx.ne[3] == 1, op, f"sx must be 3-D [d_conv-1+n_t, d_inner, n_s], got ne={list(sx.ne)}", sx)
    check(c.ne[2] == 1 and c.ne[3] == 1, op, f"c must be a matrix [d_conv, d_inner], got ne={list(c.ne)}", c)
    d_conv, d_inner = c.ne[0], c.ne[1]
    n_t = sx.ne[0] - d_conv + 1
    check(n_t >= 0, op, f"sx.ne[0]={sx.ne[0]} is shorter than the kernel's d_conv-1={d_conv - 1}", sx, c)
    check(sx.ne[1] == d_inner, op, f"sx has {sx.ne[1]} channels, c has {d_inner}", sx, c)
    check(sx.nb[0] == 4 and c.nb[0] == 4 and sx.nb[1] == sx.ne[0] * 4, op, "sx's rows and c's rows must be packed", sx)
    return finish(new_result(op, sx, _F32, (d_inner, n_t, sx.ne[2])), GGMLOp.SSM_CONV, [sx, c])


def ssm_scan(s: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, ids: Tensor, K: int = 1) -> Tensor:
    """``ggml_ssm_scan``: the selective state-space scan of Mamba-1 (``A`` per state) and Mamba-2 (``A`` per head).

    Operands: ``s`` states ``[d_state, head_dim, n_head, n_rs]``, ``x`` ``[head_dim, n_head, n_t, n_s]``, ``dt``
    ``[n_head, n_t, n_s]``, ``A`` ``[d_state or 1, n_head]``, ``B``/``C`` ``[d_state, n_group, n_t, n_s]``, ``ids``
    i32 ``[n_s]`` (the state row each sequence starts from). Per token, with ``δ = softplus(dt[h])`` and head ``h``
    in group ``h // (n_head / n_group)``: ``state = state · exp(δ·A[h]) + B[g] · (x · δ)`` and ``y = state · C[g]``
    (summed over ``d_state``). The result is a flat f32 tensor: ``y`` as ``[head_dim, n_head, n_t, n_s]``, then
    ``K`` slots of ``n_s`` final states ``[d_state, head_dim, n_head]`` (op param 0 is ``K``).
    """
    op = "SSM_SCAN"
    _all_f32(op, s, x, dt, A, B, C)
    check(ids.type == GGMLType.I32, op, f"ids must be i32, got {ids.type.traits.name}", ids)
    check(1 <= K <= _INT32_MAX, op, f"K (snapshot slots) must be at least 1, got {K}")
    check(s.is_contiguous and dt.is_contiguous and A.is_contiguous, op, "s, dt and A must be contiguous", s, dt, A)
    check(all(_rows_packed(t) for t in (x, B, C)), op, "x, B and C must have packed rows (nb[0], nb[1])", x, B, C)
    check(B.same_shape(C), op, f"B and C differ in shape: {list(B.ne)} vs {list(C.ne)}", B, C)
    d_state, head_dim, n_head, n_t, n_s = s.ne[0], x.ne[0], x.ne[1], x.ne[2], x.ne[3]
    check(list(dt.ne) == [n_head, n_t, n_s, 1], op, f"dt must be [{n_head}, {n_t}, {n_s}], got {list(dt.ne)}", dt)
    check(s.ne[1] == head_dim and s.ne[2] == n_head, op, f"s must be [d_state, {head_dim}, {n_head}, n_rs]", s, x)
    check(B.ne[0] == d_state and B.ne[2] == n_t and B.ne[3] == n_s, op, f"B must be [{d_state}, n_group, {n_t}, "
          f"{n_s}], got {list(B.ne)}", B)  # fmt: skip
    check(B.ne[1] > 0 and n_head % B.ne[1] == 0, op, f"n_head={n_head} is not a multiple of n_group={B.ne[1]}", B)
    check(ids.ne[0] == n_s and ids.nelements == n_s, op, f"ids must be a vector of {n_s} sequence rows", ids)
    check(A.ne[1] == n_head and A.ne[2] == 1 and A.ne[3] == 1, op, f"A must be [d_state or 1, {n_head}]", A)
    check(A.ne[0] in (1, d_state), op, f"A.ne[0] must be 1 (Mamba-2) or d_state={d_state} (Mamba-1)", A)
    check(A.ne[0] == 1 or K == 1, op, "snapshots (K > 1) need a per-head A (Mamba-2)", A)
    out = new_result(op, s, _F32, (x.nelements + K * d_state * head_dim * n_head * n_s,))
    out.set_op_param_i32(0, K)
    return finish(out, GGMLOp.SSM_SCAN, [s, x, dt, A, B, C, ids])


def gated_delta_net(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, K: int = 1) -> Tensor:
    """``ggml_gated_delta_net``: the gated delta rule of linear attention, token by token.

    ``v`` is ``[S, H, n_t, n_s]``; ``q``/``k`` are ``[S, H_k, n_t, n_s_k]`` (head ``h`` reads q/k head ``h % H_k``,
    sequence ``s`` reads ``s // (n_s / n_s_k)``); ``g`` is ``[1 or S, H, n_t, n_s]`` (a scalar gate per head, or one
    per key row: KDA), ``beta`` ``[1, H, n_t, n_s]``, ``state`` ``[S, S, H, n_s]`` with ``state[j, i] = M[i][j]``.
    Per token: ``M ← M · exp(g)`` (rows), ``δ = β (v − Mᵀk)``, ``M ← M + k δᵀ``, ``out = Mᵀq / √S``. The result is
    f32 ``[S·H, n_t·n_s + K·S·n_s]``: outputs ``[S, H, n_t, n_s]``, then ``K`` slots of states (op param 0 is ``K``).
    """
    op = "GATED_DELTA_NET"
    _all_f32(op, q, k, v, g, beta, state)
    check(K >= 1 and K <= _INT32_MAX, op, f"K (snapshot slots) must be at least 1, got {K}")
    for t in (q, k, v):
        check(t.is_contiguous_rows, op, "q, k and v must have contiguous rows", t)
    for t in (g, beta, state):
        check(t.is_contiguous, op, "g, beta and state must be contiguous", t)
    S, H, n_t, n_s = v.ne
    for t in (q, k):
        check(t.ne[0] == S, op, f"q and k rows must be {S} long like v's, got {t.ne[0]}", t, v)
        check(t.ne[1] > 0 and H % t.ne[1] == 0, op, f"v's {H} heads are not a multiple of q/k's {t.ne[1]}", t, v)
        check(t.ne[2] == n_t, op, f"q/k have {t.ne[2]} tokens, v has {n_t}", t, v)
        check(t.ne[3] > 0 and n_s % t.ne[3] == 0, op, f"v's {n_s} sequences are not a multiple of {t.ne[3]}", t, v)
    check(q.same_shape(k), op, f"q and k differ in shape: {list(q.ne)} vs {list(k.ne)}", q, k)
    check(g.ne[0] in (1, S) and list(g.ne[1:]) == [H, n_t, n_s], op, f"g must be [1 or {S}, {H}, {n_t}, {n_s}]", g)
    check(list(beta.ne) == [1, H, n_t, n_s], op, f"beta must be [1, {H}, {n_t}, {n_s}], got {list(beta.ne)}", beta)
    check(list(state.ne) == [S, S, H, n_s], op, f"state must be [{S}, {S}, {H}, {n_s}], got {list(state.ne)}", state)
    out = new_result(op, v, _F32, (S * H, n_t * n_s + K * S * n_s))
    out.set_op_param_i32(0, K)
    return finish(out, GGMLOp.GATED_DELTA_NET, [q, k, v, g, beta, state])


def rwkv_wkv7(r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor) -> Tensor:
    """``ggml_rwkv_wkv7``: RWKV-7's weighted key-value recurrence.

    ``r, w, k, v, a, b`` are ``[S, H, n_tokens]`` (the tokens of ``n_s`` sequences back to back, equally many each),
    ``state`` holds ``S·S·H`` values per sequence (``state[h, i, j]``, value row ``i``, key column ``j``). Per token
    and head: ``sa_i = Σ_j a_j·M[i, j]``, ``M[i, j] ← M[i, j]·w_j + v_i·k_j + sa_i·b_j``, ``out_i = Σ_j M[i, j]·r_j``.
    The result is f32 ``[S·H, n_tokens + S·n_s]``: outputs, then the new states.
    """
    op = "RWKV_WKV7"
    _all_f32(op, r, w, k, v, a, b, state)
    for t in (r, w, k, v, a, b, state):
        check(t.is_contiguous, op, "every operand must be contiguous", t)
    S, H, n_tokens = k.ne[0], k.ne[1], k.ne[2]
    for t in (r, w, v, a, b):
        check(list(t.ne[:3]) == [S, H, n_tokens], op, f"operands must be [{S}, {H}, {n_tokens}] like k", t, k)
    n_s = state.ne[1]
    check(state.nelements == S * S * H * n_s, op, f"state must hold {S}·{S}·{H} values per sequence", state)
    check(n_s > 0 and n_tokens % n_s == 0, op, f"{n_tokens} tokens do not split evenly over {n_s} sequences", state)
    return finish(new_result(op, k, _F32, (S * H, n_tokens + S * n_s)), GGMLOp.RWKV_WKV7, [r, w, k, v, a, b, state])
