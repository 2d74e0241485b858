"""nemotron_h (``llm_build_nemotron_h``, NVIDIA Nemotron-H): each layer is one of a Mamba-2 mixer, an attention
block without positions (no rope), or a squared-ReLU MLP — per layer, ``head_count_kv`` and ``feed_forward_length``
both 0 mark Mamba-2, a width of 0 alone attention, a width an MLP. Per layer: ``x += block(rms_norm(x)·attn_norm)``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ggml_core import ops
from ggml_core._errors import GGUFError
from ggml_core._tensor import Tensor
from ggml_core.models import blocks
from ggml_core.models.arch._base import Architecture
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams, get_f32, read_ssm
from ggml_core.models.recurrent.mamba import mamba2_mixer, mamba2_weights
from ggml_core.ops import ROPE_TYPE_NORMAL

__all__ = ["ARCH"]


def layer_weights(hp: HParams, il: int) -> list[blocks.LayerWeight]:
    e = hp.n_embd
    norm: list[blocks.LayerWeight] = [("attn_norm.weight", (e,), True)]
    if hp.is_recurrent(il):
        return norm + mamba2_weights(hp)
    if hp.has_attention(il):
        return blocks.attn_weights(hp)
    f = hp.n_ff_layers[il]
    return [*norm, ("ffn_up.weight", (e, f), False), ("ffn_down.weight", (f, e), False)]


def _attention(g: GraphBuilder, il: int, h: Tensor) -> Tensor:
    """q, k, v projections and the cache's attention, with no rope (Nemotron-H's attention has no positions)."""
    hp, n = g.hp, g.n_tokens
    q = ops.reshape_3d(ops.mul_mat(g.layer(il, "attn_q.weight"), h), hp.head_dim_k, hp.n_head, n)
    k = ops.reshape_3d(ops.mul_mat(g.layer(il, "attn_k.weight"), h), hp.head_dim_k, hp.n_head_kv, n)
    v = ops.mul_mat(g.layer(il, "attn_v.weight"), h)
    return blocks.attn_out(g, il, blocks.attention(g, il, q, k, v))


def build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    h = blocks.rms_norm(g, x, g.layer(il, "attn_norm.weight")).set_name(f"attn_norm-{il}")
    if g.hp.is_recurrent(il):
        h = mamba2_mixer(g, il, h)
    elif g.hp.has_attention(il):
        h = _attention(g, il, h)
    else:  # squared-ReLU MLP
        up = ops.sqr(ops.relu(ops.mul_mat(g.layer(il, "ffn_up.weight"), h)))
        h = ops.mul_mat(g.layer(il, "ffn_down.weight"), up).set_name(f"ffn_out-{il}")
    return ops.add(g.last_only(il, h), g.last_only(il, x)).set_name(f"l_out-{il}")


def _read(f: GGUFFile, hp: HParams) -> HParams:
    k = hp.arch + "."
    key_kv, key_ff = k + "attention.head_count_kv", k + "feed_forward_length"
    kv = np.broadcast_to(np.asarray(f.get(key_kv, hp.n_head_kv)).reshape(-1), (hp.n_layer,))
    ff = hp.n_ff_layers or (hp.n_ff,) * hp.n_layer
    if not hp.n_ff_layers:
        raise GGUFError(f.path, f"metadata '{key_ff}'", "must give one width per layer (0 where the layer has no MLP)")
    recurrent = tuple(bool(kv[il] == 0 and ff[il] == 0) for il in range(hp.n_layer))
    attention = tuple(bool(kv[il] > 0 and ff[il] == 0) for il in range(hp.n_layer))
    if any(kv[il] > 0 and ff[il] > 0 for il in range(hp.n_layer)):
        raise GGUFError(f.path, f"metadata '{key_kv}'", "a layer with KV heads must have feed_forward_length 0")
    hp = read_ssm(f, hp, group_count=True)
    eps = get_f32(f, k + "attention.layer_norm_rms_epsilon", get_f32(f, k + "attention.layer_norm_epsilon", hp.rms_eps))
    return replace(
        hp,
        recurrent_layers=recurrent,
        attention_layers=attention,
        rms_eps=eps,
        attn_scale=get_f32(f, k + "attention.scale", 0.0),
    )


ARCH = Architecture(
    name="nemotron_h",
    description="NVIDIA Nemotron-H: Mamba-2, attention (no rope) and squared-ReLU MLP layers",
    rope_type=ROPE_TYPE_NORMAL,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
    recurrent=True,
)
