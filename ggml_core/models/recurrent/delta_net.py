"""The gated delta-net mixer of Qwen3-Next and Qwen3.5 (llama.cpp's ``build_layer_attn_linear`` over
``llm_build_delta_net_base``): its weights and its graph.

``attn_qkv`` projects the normed input to ``q | k | v`` (``n_group`` key heads and ``dt_rank`` value heads of
``d_state`` each), ``attn_gate`` to the output gate ``z``. ``q | k | v`` goes through the causal depthwise
convolution (no bias) with the cached window in front (``r``: the last ``d_conv - 1`` inputs), then SiLU; q and k
are L2-normed per head; one GATED_DELTA_NET node runs the recurrence from the cached state (``s``:
``[d_state, d_state, dt_rank]``) over every token of the batch (llama.cpp's fused path, which its CPU backend takes
for one token and for many alike) and its result holds the new state after the outputs. The outputs are RMS-normed
per head, gated by ``silu(z)`` and projected out by ``ssm_out``.

The two families differ in how the per-head ``beta`` and decay come in and how key heads serve value heads:

- Qwen3.5 (``interleaved=False``): ``ssm_beta`` and ``ssm_alpha`` are separate projections; value head ``h`` reads
  key head ``h % n_group`` (GATED_DELTA_NET's own broadcast).
- Qwen3-Next (``interleaved=True``): one ``ssm_ba`` projection holds, per key head, its value heads' betas then
  their alphas; value head ``h`` reads key head ``h // (dt_rank / n_group)`` (q and k repeated head by head).
"""

from __future__ import annotations

import numpy as np

from ggml_core import ops
from ggml_core._tensor import Tensor
from ggml_core.models.blocks import LayerWeight, rms_norm
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams
from ggml_core.models.recurrent import store_state

__all__ = ["delta_net_mixer", "delta_net_weights"]

_ES = 4  # f32 activations


def delta_net_weights(hp: HParams, *, interleaved: bool) -> list[LayerWeight]:
    """The tensors of a gated delta-net mixer (ggml shapes), as llama.cpp loads them for Qwen3-Next
    (``interleaved``: one ``ssm_ba``) or Qwen3.5 (``ssm_beta`` and ``ssm_alpha``)."""
    e, d_inner, n_v = hp.n_embd, hp.ssm_d_inner, hp.ssm_dt_rank
    conv_dim = d_inner + 2 * hp.ssm_n_group * hp.ssm_d_state
    gates: list[LayerWeight] = (
        [("ssm_ba.weight", (e, 2 * n_v), False)]
        if interleaved
        else [("ssm_beta.weight", (e, n_v), False), ("ssm_alpha.weight", (e, n_v), False)]
    )
    return [  # (name, ggml ne, f32 only): the convolution and the per-head vectors stay f32, as llama.cpp keeps them
        ("attn_qkv.weight", (e, conv_dim), False),
        ("attn_gate.weight", (e, d_inner), False),
        ("ssm_conv1d.weight", (hp.ssm_d_conv, conv_dim), True),
        ("ssm_dt.bias", (n_v,), True),
        ("ssm_a", (n_v,), True),
        *gates,
        ("ssm_norm.weight", (hp.ssm_d_state,), True),
        ("ssm_out.weight", (d_inner, e), False),
    ]


def _l2_norm(t: Tensor, eps: float) -> Tensor:
    """llama.cpp's ``build_gdn_l2_norm``: ``rms_norm(x, eps/n) / sqrt(n)`` over rows of ``n`` (float32 constants)."""
    n = np.float32(t.ne[0])
    return ops.scale(ops.rms_norm(t, float(np.float32(eps) / n)), float(np.float32(1.0) / np.sqrt(n)))


def _beta_and_decay(g: GraphBuilder, il: int, cur: Tensor, interleaved: bool) -> tuple[Tensor, Tensor]:
    """``beta = sigmoid(b)`` and the log-decay ``softplus(a + dt_bias) · ssm_a``, each ``[1, dt_rank, n_t, 1]``."""
    hp, n_t = g.hp, g.n_tokens
    n_k, n_v = hp.ssm_n_group, hp.ssm_dt_rank
    if interleaved:  # per key head: its value heads' b, then their a
        per = n_v // n_k
        ba = ops.reshape_4d(ops.mul_mat(g.layer(il, "ssm_ba.weight"), cur), 2 * per, n_k, n_t, 1)
        b = ops.cont(ops.view_4d(ba, per, n_k, n_t, 1, ba.nb[1], ba.nb[2], ba.nb[3], 0))
        a = ops.cont_3d(ops.view_4d(ba, per, n_k, n_t, 1, ba.nb[1], ba.nb[2], ba.nb[3], per * _ES), n_v, n_t, 1)
    else:
        b = ops.mul_mat(g.layer(il, "ssm_beta.weight"), cur)
        a = ops.reshape_3d(ops.mul_mat(g.layer(il, "ssm_alpha.weight"), cur), n_v, n_t, 1)
    beta = ops.sigmoid(ops.reshape_4d(b, 1, n_v, n_t, 1))
    decay = ops.mul(ops.softplus(ops.add(a, g.layer(il, "ssm_dt.bias"))), g.layer(il, "ssm_a"))
    return beta, ops.reshape_4d(decay, 1, n_v, n_t, 1)


def delta_net_mixer(g: GraphBuilder, il: int, cur: Tensor, *, interleaved: bool) -> Tensor:
    """The gated delta-net mixer of layer ``il`` on the normed input ``cur`` ``[n_embd, n_tokens]``; ``[n_embd,
    n_tokens]`` out. ``interleaved``: Qwen3-Next's ``ssm_ba`` and key-head order, else Qwen3.5's."""
    hp, kv, n_t = g.hp, g.kv, g.n_tokens
    d_conv, d_inner, size = hp.ssm_d_conv, hp.ssm_d_inner, hp.ssm_d_state
    n_k, n_v = hp.ssm_n_group, hp.ssm_dt_rank
    key_dim = size * n_k
    conv_dim = d_inner + 2 * key_dim
    r_state, s_state = kv.r[il], kv.s[il]
    assert r_state is not None and s_state is not None, f"layer {il} has no recurrent state"

    qkv = ops.mul_mat(g.layer(il, "attn_qkv.weight"), cur)  # [conv_dim, n_t]
    z = ops.mul_mat(g.layer(il, "attn_gate.weight"), cur)  # [d_inner, n_t]
    beta, decay = _beta_and_decay(g, il, cur, interleaved)

    # convolution over [cached window | this batch], then keep the window's new tail
    window = ops.concat(ops.reshape_3d(r_state, d_conv - 1, conv_dim, 1), ops.transpose(qkv), 0)
    tail = ops.view_3d(window, d_conv - 1, conv_dim, 1, window.nb[1], window.nb[2], n_t * window.nb[0])
    store_state(g, tail, r_state)
    conv = ops.silu(ops.ssm_conv(window, g.layer(il, "ssm_conv1d.weight")))  # [conv_dim, n_t, 1]

    nb1 = conv.nb[1]
    q = ops.view_4d(conv, size, n_k, n_t, 1, size * _ES, nb1, nb1 * n_t, 0)
    k = ops.view_4d(conv, size, n_k, n_t, 1, size * _ES, nb1, nb1 * n_t, key_dim * _ES)
    v = ops.view_4d(conv, size, n_v, n_t, 1, size * _ES, nb1, nb1 * n_t, 2 * key_dim * _ES)
    q, k = _l2_norm(q, hp.rms_eps), _l2_norm(k, hp.rms_eps)
    if interleaved and n_k != n_v:  # each key head serves its value heads in a row: repeat it head by head
        per = n_v // n_k
        q = ops.reshape_4d(ops.repeat_4d(ops.reshape_4d(q, size, 1, n_k, n_t), size, per, n_k, n_t), size, n_v, n_t, 1)
        k = ops.reshape_4d(ops.repeat_4d(ops.reshape_4d(k, size, 1, n_k, n_t), size, per, n_k, n_t), size, n_v, n_t, 1)

    state = ops.reshape_4d(s_state, size, size, n_v, 1)
    result = ops.gated_delta_net(q, k, v, decay, beta, state, 1).set_name(f"gdn-{il}")
    out_bytes = size * n_v * n_t * _ES
    store_state(g, ops.view_1d(result, size * size * n_v, out_bytes), s_state)
    row = size * _ES
    out = ops.view_4d(result, size, n_v, n_t, 1, row, row * n_v, row * n_v * n_t, 0)

    out = ops.mul(rms_norm(g, out, g.layer(il, "ssm_norm.weight")), ops.silu(ops.reshape_4d(z, size, n_v, n_t, 1)))
    return ops.mul_mat(g.layer(il, "ssm_out.weight"), ops.reshape_2d(out, d_inner, n_t))
