"""lfm2 (``llm_build_lfm2``, LiquidAI LFM2): short-convolution layers and attention layers (QK-norm, NEOX rope),
each followed by a SwiGLU FFN; a layer is a convolution where its ``attention.head_count_kv`` is 0. The final norm's
weight is ``token_embd_norm``; with ``attention.sliding_window`` the attention layers see a window.
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
from ggml_core.models.recurrent.shortconv import shortconv_mixer, shortconv_weights
from ggml_core.ops import ROPE_TYPE_NEOX

__all__ = ["ARCH"]


def layer_weights(hp: HParams, il: int) -> list[blocks.LayerWeight]:
    norm: list[blocks.LayerWeight] = [("attn_norm.weight", (hp.n_embd,), True)]
    return (norm + shortconv_weights(hp) if hp.is_recurrent(il) else blocks.attn_weights(hp)) + blocks.ffn_weights(hp)


def build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    h = blocks.rms_norm(g, x, g.layer(il, "attn_norm.weight")).set_name(f"attn_norm-{il}")
    if g.hp.is_recurrent(il):
        h = shortconv_mixer(g, il, h)
    else:
        h = blocks.attn_out(g, il, blocks.attention(g, il, *blocks.qkv(g, il, h)))
    x = ops.add(g.last_only(il, x), g.last_only(il, h)).set_name(f"ffn_inp-{il}")
    h = blocks.rms_norm(g, x, g.layer(il, "ffn_norm.weight")).set_name(f"ffn_norm-{il}")
    return ops.add(x, blocks.glu_ffn(g, il, h)).set_name(f"l_out-{il}")


def _read(f: GGUFFile, hp: HParams) -> HParams:
    k = hp.arch + "."
    l_cache = f.get_int(k + "shortconv.l_cache", minimum=2)
    n_swa = f.get_int(k + "attention.sliding_window", 0, minimum=0)
    swa = tuple(not hp.is_recurrent(il) for il in range(hp.n_layer)) if n_swa else ()
    return replace(hp, shortconv_l_cache=l_cache, qk_norm=True, n_swa=n_swa, swa_layers=swa)


ARCH = Architecture(
    name="lfm2",
    description="LiquidAI LFM2: short-convolution and attention layers (QK-norm), SwiGLU",
    rope_type=ROPE_TYPE_NEOX,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
    recurrent=True,
    output_norm="token_embd_norm.weight",
)
