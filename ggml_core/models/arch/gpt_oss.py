"""gpt-oss (``llm_build_openai_moe_iswa``, GGUF architecture ``gpt-oss``): a pre-norm mixture of experts with

- q/k/v and output projections with biases; attention sinks: one learned logit per head (``attn_sinks``) that
  joins every softmax denominator (SOFT_MAX ext's sinks, FLASH_ATTN_EXT's ``add_sinks``); scale ``1/sqrt(n_rot)``;
- sliding-window and full layers alternating (llama.cpp's ``load_swa_pattern(2)``: even layers local, window
  ``attention.sliding_window``; the file's ``attention.sliding_window_pattern`` overrides), NEOX rope with YaRN
  (``rope.scaling.*``), ``rope.freq_base_swa`` on the local layers if set;
- the FFN norm is named ``post_attention_norm``; the router has a bias; experts are chosen by the top k router
  logits and weighted by a softmax over those k (``SOFTMAX_WEIGHT`` gating, no renormalisation); every expert
  matrix has per-expert biases (ADD_ID); the activation is SWIGLU_OAI (alpha 1.702, limit 7); experts are
  ``expert_feed_forward_length`` wide and usually MXFP4.
"""

from __future__ import annotations

from dataclasses import replace

from ggml_core._errors import GGUFError
from ggml_core._tensor import Tensor
from ggml_core.models import blocks
from ggml_core.models.arch._base import Architecture
from ggml_core.models.arch.llama import pre_norm_block
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams, get_f32, swa_pattern
from ggml_core.ops import ROPE_TYPE_NEOX

__all__ = ["ARCH"]

#: llama.cpp's ``load_swa_pattern(ml, 2)`` for gpt-oss: local, full, local, full, ...
SWA_PATTERN = 2
#: the FFN's norm weight (llama.cpp's ``LLM_TENSOR_ATTN_POST_NORM``)
FFN_NORM = "post_attention_norm.weight"


def layer_weights(hp: HParams, il: int) -> list[blocks.LayerWeight]:
    """Attention with biases and sinks, then the post-attention norm, the biased router and experts."""
    return blocks.attn_weights(hp) + blocks.moe_weights(hp, norm=FFN_NORM)


def build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    """llama's pre-norm block over gpt-oss's hyperparameters (sinks, biases, routing, SWIGLU_OAI)."""
    return pre_norm_block(g, il, x, FFN_NORM)


def _read(f: GGUFFile, hp: HParams) -> HParams:
    k = hp.arch + "."
    if not hp.is_moe:
        raise GGUFError(f.path, f"metadata '{k}expert_count'", "is missing or 0: gpt-oss needs its experts")
    if hp.n_rot != hp.head_dim_k:  # llama.cpp sizes the heads and the softmax scale by n_rot
        raise GGUFError(
            f.path, f"metadata '{k}rope.dimension_count'", f"{hp.n_rot} differs from the head size {hp.head_dim_k}"
        )
    n_swa = f.get_int(k + "attention.sliding_window", minimum=0)
    hp = replace(
        hp,
        n_ff=f.get_int(k + "expert_feed_forward_length", minimum=1),
        qkv_bias=True,
        attn_out_bias=True,
        attn_sinks=True,
        moe_gating="softmax_weight",
        moe_act="swiglu_oai",
        moe_biases=True,
        n_swa=n_swa,
        rope_freq_base_swa=get_f32(f, k + "rope.freq_base_swa", 0.0),
    )
    return replace(hp, swa_layers=swa_pattern(f, hp, SWA_PATTERN) if n_swa else ())


ARCH = Architecture(
    name="gpt-oss",
    description="gpt-oss: attention sinks, alternating sliding-window layers, YaRN, biased top-k-softmax MoE, "
    "SWIGLU_OAI, MXFP4 experts",
    rope_type=ROPE_TYPE_NEOX,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
    moe=True,
)
