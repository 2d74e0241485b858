"""llama (``llm_build_llama``): GQA, NORMAL rope (``rope_freqs`` factors for Llama 3), SwiGLU; with
``llama.expert_count`` > 0 the Mixtral mixture of experts.

Per layer: ``x += Wo·attn(rope(Wq·n), rope(Wk·n), Wv·n)`` with ``n = rms_norm(x)·attn_norm``, then
``x += ffn(rms_norm(x)·ffn_norm)``.
"""

from __future__ import annotations

from dataclasses import replace

from ggml_core import ops
from ggml_core._tensor import Tensor
from ggml_core.models import blocks
from ggml_core.models.arch._base import Architecture
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams
from ggml_core.ops import ROPE_TYPE_NORMAL

__all__ = ["ARCH", "build_layer", "layer_weights", "pre_norm_block"]


def layer_weights(hp: HParams, il: int) -> list[blocks.LayerWeight]:
    """Attention, then the FFN or the experts (the FFN in a MoE model's leading dense layers)."""
    return blocks.attn_weights(hp) + (blocks.moe_weights(hp) if hp.layer_is_moe(il) else blocks.ffn_weights(hp))


def pre_norm_block(g: GraphBuilder, il: int, x: Tensor, ffn_norm: str = "ffn_norm.weight") -> Tensor:
    """``x += attn(norm(x))``, then ``x += ffn(norm(x))`` (the experts in a MoE model); ``ffn_norm``: the name of
    the second norm's weight (gpt-oss calls it ``post_attention_norm``)."""
    h = blocks.rms_norm(g, x, g.layer(il, "attn_norm.weight")).set_name(f"attn_norm-{il}")
    attn = blocks.attn_out(g, il, blocks.attention(g, il, *blocks.qkv(g, il, h)))
    x = g.last_only(il, ops.add(attn, x).set_name(f"ffn_inp-{il}"))
    h = blocks.rms_norm(g, x, g.layer(il, ffn_norm)).set_name(f"ffn_norm-{il}")
    ffn = blocks.moe_ffn(g, il, h) if g.hp.layer_is_moe(il) else blocks.glu_ffn(g, il, h)
    return ops.add(ffn, x).set_name(f"l_out-{il}")


def build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    """The pre-norm block of llama (and of qwen2, qwen3: their differences live in the hyperparameters)."""
    return pre_norm_block(g, il, x)


def _read(f: GGUFFile, hp: HParams) -> HParams:
    return replace(hp, moe_norm_w=True)  # llm_build_llama: Mixtral's chosen weights renormalised


ARCH = Architecture(
    name="llama",
    description="Llama 1-3, Mistral, Mixtral (MoE): GQA, NORMAL rope, SwiGLU",
    rope_type=ROPE_TYPE_NORMAL,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
    moe=True,
)
