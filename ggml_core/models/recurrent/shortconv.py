"""LFM2's short convolution (llama.cpp's ``build_shortconv_block``): ``in_proj`` gives ``B | C | x``; ``B·x`` goes
through a causal depthwise convolution of ``L`` taps with the cached window of ``L - 1`` inputs in front, the result
is gated by ``C`` and projected out. The window (``r``) is written back as the tail of the convolved sequence; there
is no scan state.
"""

from __future__ import annotations

from ggml_core import ops
from ggml_core._tensor import Tensor
from ggml_core.models.blocks import LayerWeight
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams
from ggml_core.models.recurrent import store_state

__all__ = ["shortconv_mixer", "shortconv_weights"]


def shortconv_weights(hp: HParams) -> list[LayerWeight]:
    """The short convolution's taps (f32) and its in / out projections (ggml shapes)."""
    e = hp.n_embd
    return [
        ("shortconv.conv.weight", (hp.shortconv_l_cache, e), True),
        ("shortconv.in_proj.weight", (e, 3 * e), False),
        ("shortconv.out_proj.weight", (e, e), False),
    ]


def shortconv_mixer(g: GraphBuilder, il: int, cur: Tensor) -> Tensor:
    """The short-convolution block of layer ``il`` on the normed input ``cur`` ``[n_embd, n_tokens]``."""
    e, n_t, r_state = g.hp.n_embd, g.n_tokens, g.kv.r[il]
    assert r_state is not None, f"layer {il} has no recurrent state"
    d_conv = g.hp.shortconv_l_cache - 1
    bcx = ops.mul_mat(g.layer(il, "shortconv.in_proj.weight"), cur)  # [3e, n_t]
    b, c, x = (ops.view_3d(bcx, e, n_t, 1, bcx.nb[1], bcx.nb[1] * n_t, i * e * 4) for i in range(3))
    window = ops.concat(ops.reshape_3d(r_state, d_conv, e, 1), ops.transpose(ops.mul(b, x)), 0)  # [d_conv+n_t, e, 1]
    tail = ops.view_3d(window, d_conv, e, 1, window.nb[1], window.nb[2], n_t * window.nb[0])
    store_state(g, tail, r_state)
    y = ops.mul(c, ops.ssm_conv(window, g.layer(il, "shortconv.conv.weight")))  # [e, n_t, 1]
    return ops.mul_mat(g.layer(il, "shortconv.out_proj.weight"), ops.reshape_2d(y, e, n_t))
