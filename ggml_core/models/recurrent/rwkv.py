"""RWKV-7's blocks (llama.cpp's ``llm_build_rwkv7_base``): LayerNorm, the token shift, the time mix and the channel
mix, with their weights.

A layer's rolling state (``r``, ``2·n_embd``) holds the last token's two normed inputs (before the time mix, before
the channel mix): the "previous token" of the batch's first token. The WKV state (``s``, ``n_embd·head_size``) is
RWKV_WKV7's, copied out of its result, which holds it after the outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ggml_core import ops
from ggml_core._tensor import Tensor
from ggml_core.models.blocks import LayerWeight
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams
from ggml_core.models.recurrent import store_state

__all__ = [
    "channel_mix",
    "channel_mix_weights",
    "layer_norm",
    "shifted",
    "time_mix",
    "time_mix_weights",
]

#: the six token-shift interpolations of the time mix, in ``time_mix_lerp_fused``'s order
_LERPS: Final = ("r", "w", "k", "v", "a", "g")
#: the decay's ``exp(-e^{-0.5}·sigmoid(·))``, as llama.cpp rounds e^{-0.5}
_DECAY: Final = -0.606531
#: the per-head GroupNorm's eps of the WKV output (llama.cpp's ``64e-5``)
_HEAD_NORM_EPS: Final = 64e-5
#: the L2 norm's eps of the removal key
_L2_EPS: Final = 1e-12
#: :attr:`GraphBuilder.carry`'s key for the first layer's values (the value residual of the later layers)
_V_FIRST: Final = "rwkv.v_first"


def layer_norm(g: GraphBuilder, x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """``norm(x)·w + b`` over ne[0] with the family's eps (llama.cpp's ``LLM_NORM``; ``rms_eps`` holds RWKV's
    ``attention.layer_norm_epsilon``)."""
    return ops.add(ops.mul(ops.norm(x, g.hp.rms_eps), w), b)


def shifted(g: GraphBuilder, state: Tensor, x: Tensor) -> Tensor:
    """The previous token's ``x`` for every token of the batch: ``state`` (the last one of the batch before,
    ``[n_embd, 1]``) for the first, then ``x``'s rows but the last."""
    n_t = g.n_tokens
    if n_t == 1:
        return state
    return ops.concat(state, ops.view_2d(x, x.ne[0], n_t - 1, x.nb[1], 0), 1)


def time_mix_weights(hp: HParams, il: int) -> list[LayerWeight]:
    """The time mix's tensors (ggml shapes) as llama.cpp's ``LLM_ARCH_RWKV7`` loads them; the first layer's value
    residual (``time_mix_v*``), which llama.cpp loads and never uses, is left out."""
    e = hp.n_embd
    out: list[LayerWeight] = [("time_mix_lerp_fused.weight", (e, 1, 1, len(_LERPS)), True)]
    for name, rank in (("w", hp.n_lora_decay), ("a", hp.n_lora_iclr), ("v", hp.n_lora_value_res_mix)):
        if name == "v" and il == 0:
            continue
        out += [
            (f"time_mix_{name}0.weight", (e,), True),
            (f"time_mix_{name}1.weight", (e, rank), False),
            (f"time_mix_{name}2.weight", (rank, e), False),
        ]
    out += [
        ("time_mix_g1.weight", (e, hp.n_lora_gate), False),
        ("time_mix_g2.weight", (hp.n_lora_gate, e), False),
        ("time_mix_k_k.weight", (e,), True),
        ("time_mix_k_a.weight", (e,), True),
        ("time_mix_r_k.weight", (e,), True),
        ("time_mix_key.weight", (e, e), False),
        ("time_mix_value.weight", (e, e), False),
        ("time_mix_receptance.weight", (e, e), False),
        ("time_mix_ln.weight", (e,), True),
        ("time_mix_ln.bias", (e,), True),
        ("time_mix_output.weight", (e, e), False),
    ]
    return out


def channel_mix_weights(hp: HParams) -> list[LayerWeight]:
    """The channel mix's tensors (ggml shapes)."""
    e = hp.n_embd
    return [
        ("channel_mix_lerp_k.weight", (e, 1, 1), True),
        ("channel_mix_key.weight", (e, hp.n_ff), False),
        ("channel_mix_value.weight", (hp.n_ff, e), False),
    ]


def _lora(g: GraphBuilder, il: int, name: str, x: Tensor, act: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """``{name}2 · act({name}1 · x)`` (no activation where ``act`` is None)."""
    h = ops.mul_mat(g.layer(il, f"time_mix_{name}1.weight"), x)
    if act is not None:
        h = act(h)
    return ops.mul_mat(g.layer(il, f"time_mix_{name}2.weight"), h)


def time_mix(g: GraphBuilder, il: int, cur: Tensor, x_prev: Tensor) -> Tensor:
    """RWKV-7's time mix of layer ``il`` on the normed input ``cur`` ``[n_embd, n_tokens]`` and its token shift
    ``x_prev``.

    The six interpolations between ``cur`` and ``x_prev`` give r, the decay w, k, v, the in-context learning rate a
    and the gate; v mixes with the first layer's values (a sigmoid LoRA of the mix); the removal key is
    ``l2_norm(k·k_k)`` per head, and k is scaled by ``1 + (a - 1)·k_a``; RWKV_WKV7 runs from the cached state (its
    ``a`` is the negated removal key, ``b`` the removal key times a); then a per-head GroupNorm, the bonus
    ``v·Σ(k·r·r_k)`` per head, the gate and the output projection.
    """
    hp = g.hp
    e, n_t, s = hp.n_embd, g.n_tokens, hp.wkv_head_size
    n_h = e // s
    state = g.kv.s[il]
    assert state is not None, f"layer {il} has no recurrent state"

    sx = ops.repeat_4d(ops.sub(x_prev, cur), e, n_t, 1, len(_LERPS))
    xxx = ops.add(ops.mul(sx, g.layer(il, "time_mix_lerp_fused.weight")), cur)
    xr, xw, xk, xv, xa, xg = (ops.view_2d(xxx, e, n_t, xxx.nb[1], i * e * n_t * 4) for i in range(len(_LERPS)))

    r = ops.mul_mat(g.layer(il, "time_mix_receptance.weight"), xr)
    w = ops.add(_lora(g, il, "w", xw, ops.tanh), g.layer(il, "time_mix_w0.weight"))
    w = ops.exp(ops.scale(ops.sigmoid(w), _DECAY))
    k = ops.mul_mat(g.layer(il, "time_mix_key.weight"), xk)
    v = ops.mul_mat(g.layer(il, "time_mix_value.weight"), xv)
    v_first = g.carry.get(_V_FIRST)
    if v_first is None:
        g.carry[_V_FIRST] = v
    else:  # the value residual: v + (v_first - v)·sigmoid(v0 + LoRA(xv))
        mix = ops.sigmoid(ops.add(_lora(g, il, "v", xv), g.layer(il, "time_mix_v0.weight")))
        v = ops.add(v, ops.mul(ops.sub(v_first, v), mix))
    gate = _lora(g, il, "g", xg, ops.sigmoid)
    a = ops.sigmoid(ops.add(_lora(g, il, "a", xa), g.layer(il, "time_mix_a0.weight")))

    kk = ops.l2_norm(ops.reshape_3d(ops.mul(k, g.layer(il, "time_mix_k_k.weight")), s, n_h, n_t), _L2_EPS)
    ka = ops.mul(k, g.layer(il, "time_mix_k_a.weight"))
    k = ops.add(k, ops.sub(ops.mul(a, ka), ka))

    r, w, k, v, a = (ops.reshape_3d(t, s, n_h, n_t) for t in (r, w, k, v, a))
    wkv = ops.rwkv_wkv7(r, w, k, v, ops.neg(kk), ops.mul(kk, a), state)
    store_state(g, ops.view_1d(wkv, e * s, e * n_t * 4), state)

    out = ops.norm(ops.view_3d(wkv, s, n_h, n_t, s * 4, e * 4, 0), _HEAD_NORM_EPS)  # the outputs, per head
    out = ops.reshape_2d(out, e, n_t)
    out = ops.add(ops.mul(out, g.layer(il, "time_mix_ln.weight")), g.layer(il, "time_mix_ln.bias"))
    r_k = ops.reshape_2d(g.layer(il, "time_mix_r_k.weight"), s, n_h)
    bonus = ops.sum_rows(ops.mul(ops.mul(k, r), r_k))  # [1, n_h, n_t]
    out = ops.add(out, ops.reshape_2d(ops.mul(v, bonus), e, n_t))
    out = ops.mul(out, gate)
    return ops.mul_mat(g.layer(il, "time_mix_output.weight"), out).set_name(f"time_mix_out-{il}")


def channel_mix(g: GraphBuilder, il: int, cur: Tensor, x_prev: Tensor) -> Tensor:
    """RWKV-7's channel mix: ``value · relu(key · (cur + (x_prev - cur)·lerp_k))²``."""
    xk = ops.add(ops.mul(ops.sub(x_prev, cur), g.layer(il, "channel_mix_lerp_k.weight")), cur)
    k = ops.sqr(ops.relu(ops.mul_mat(g.layer(il, "channel_mix_key.weight"), xk)))
    return ops.mul_mat(g.layer(il, "channel_mix_value.weight"), k).set_name(f"channel_mix_out-{il}")
