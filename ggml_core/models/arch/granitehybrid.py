"""granitehybrid (``llm_build_granite_hybrid``, IBM Granite 4): Mamba-2 layers and attention layers, each followed by
an FFN (or experts with a shared expert); a layer is recurrent where its ``attention.head_count_kv`` is 0.

Per layer: ``x += s·mixer(rms_norm(x)·attn_norm)`` (Mamba-2 or attention), then ``x += s·ffn(rms_norm(x)·ffn_norm)``
with Granite's residual scale ``s``; the embeddings are scaled, the attention has its own softmax scale, the logits
are divided by the logit scale.
"""

from __future__ import annotations

from dataclasses import replace

from ggml_core import ops
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
    mixer = (
        [("attn_norm.weight", (hp.n_embd,), True), *mamba2_weights(hp)]
        if hp.is_recurrent(il)
        else blocks.attn_weights(hp)
    )
    return mixer + (blocks.moe_weights(hp) if hp.is_moe else blocks.ffn_weights(hp))


def _residual(g: GraphBuilder, t: Tensor) -> Tensor:
    return ops.scale(t, g.hp.residual_scale) if g.hp.residual_scale else t


def build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    h = blocks.rms_norm(g, x, g.layer(il, "attn_norm.weight")).set_name(f"attn_norm-{il}")
    if g.hp.is_recurrent(il):
        h = mamba2_mixer(g, il, h)
    else:
        h = blocks.attn_out(g, il, blocks.attention(g, il, *blocks.qkv(g, il, h)))
    x = ops.add(_residual(g, g.last_only(il, h)), g.last_only(il, x)).set_name(f"ffn_inp-{il}")
    h = blocks.rms_norm(g, x, g.layer(il, "ffn_norm.weight")).set_name(f"ffn_norm-{il}")
    ffn = blocks.moe_ffn(g, il, h) if g.hp.is_moe else blocks.glu_ffn(g, il, h)
    return ops.add(_residual(g, ffn), x).set_name(f"l_out-{il}")


def _read(f: GGUFFile, hp: HParams) -> HParams:
    k = hp.arch + "."
    hp = read_ssm(f, hp, group_count=True)
    return replace(
        hp,
        embd_scale=get_f32(f, k + "embedding_scale", 1.0),
        residual_scale=get_f32(f, k + "residual_scale", 0.0),
        logit_scale=get_f32(f, k + "logit_scale", 0.0),
        attn_scale=get_f32(f, k + "attention.scale", 0.0),
        moe_norm_w=True,  # build_moe_ffn with norm_w: the chosen weights renormalised
        n_ff_shexp=f.get_int(k + "expert_shared_feed_forward_length", 0, minimum=0),
    )


ARCH = Architecture(
    name="granitehybrid",
    description="IBM Granite 4 (hybrid): Mamba-2 and attention layers, SwiGLU or experts, Granite's scales",
    rope_type=ROPE_TYPE_NORMAL,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
    moe=True,
    recurrent=True,
)
