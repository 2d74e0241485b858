"""gemma3 (``llm_build_gemma3_iswa``): local sliding-window layers and global layers, five to one.

- the embeddings are scaled by ``sqrt(n_embd)``; norms are RMS norms whose stored weights already hold Gemma's
  ``1 + w`` (llama.cpp's converter adds the 1);
- q and k get per-head RMS norms, then NEOX rope: on the local layers base ``rope.freq_base_swa`` (default 10,000)
  and never scaled, on the global ones ``rope.freq_base`` (1e6) with the file's rope scaling (4B/12B/27B: linear,
  factor 8); q is scaled by ``1/sqrt(head_dim)`` (27B: ``1/sqrt(n_embd/n_head)``) and the softmax by 1;
- every sixth layer (``il % 6 == 5``) is global unless ``attention.sliding_window_pattern`` says otherwise (a
  period or one bool per layer), the others attend over the last ``attention.sliding_window`` positions (iSWA
  cache: they keep only their window); without a window every layer is global;
- post-attention and post-FFN norms on the branches; GEGLU FFN (tanh GELU); final logit softcapping if the file
  sets ``final_logit_softcapping``.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ggml_core import ops
from ggml_core._errors import GGUFError
from ggml_core._tensor import Tensor
from ggml_core.models import blocks
from ggml_core.models.arch._base import Architecture
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams, get_f32, swa_pattern
from ggml_core.ops import ROPE_TYPE_NEOX

__all__ = ["ARCH", "build_layer", "layer_weights", "read_gemma"]

#: llama.cpp's ``set_swa_pattern(6)``: five local layers, then one global
SWA_PATTERN = 6
#: the local layers' rope base without ``rope.freq_base_swa`` (llama.cpp's ``rope_freq_base_train_swa`` default)
LOCAL_ROPE_BASE = 10000.0


def layer_weights(hp: HParams, il: int) -> list[blocks.LayerWeight]:
    """Attention (with QK-norm for gemma3), FFN, and the two post norms."""
    e = hp.n_embd
    post = [("post_attention_norm.weight", (e,), True), ("post_ffw_norm.weight", (e,), True)]
    return blocks.attn_weights(hp) + blocks.ffn_weights(hp) + post


def build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    """Gemma's sandwich block (gemma2 and gemma3)."""
    h = blocks.rms_norm(g, x, g.layer(il, "attn_norm.weight")).set_name(f"attn_norm-{il}")
    q, k, v = blocks.qkv(g, il, h)
    q = ops.scale(q, g.hp.q_scale)
    attn = blocks.attention(g, il, q, k, v)
    attn = ops.mul_mat(g.layer(il, "attn_output.weight"), attn).set_name(f"attn_out-{il}")
    attn, x = g.last_only(il, attn), g.last_only(il, x)
    attn = blocks.rms_norm(g, attn, g.layer(il, "post_attention_norm.weight")).set_name(f"attn_post_norm-{il}")
    sa = ops.add(attn, x).set_name(f"sa_out-{il}")
    h = blocks.rms_norm(g, sa, g.layer(il, "ffn_norm.weight")).set_name(f"ffn_norm-{il}")
    ffn = blocks.rms_norm(g, blocks.glu_ffn(g, il, h), g.layer(il, "post_ffw_norm.weight"))
    return ops.add(ffn, sa).set_name(f"l_out-{il}")


def read_gemma(
    f: GGUFFile,
    hp: HParams,
    *,
    pattern: int,
    big_layers: int,
    n_swa_default: int,
    swa_base_default: float = 0.0,
    swa_scale: float = 0.0,
) -> HParams:
    """What gemma2 and gemma3 share: embedding scale, q scale, post norms, GEGLU, the local/global pattern (the
    file's ``attention.sliding_window_pattern``, else period ``pattern``), the local layers' rope.

    ``big_layers``: the layer count of the 27B model, whose q scale is ``1/sqrt(n_embd/n_head)``.
    ``swa_base_default``: the local layers' rope base without ``rope.freq_base_swa`` (0: the global base);
    ``swa_scale``: their rope frequency scale (0: the global one).
    """
    k = hp.arch + "."
    n_swa = f.get_int(k + "attention.sliding_window", n_swa_default, minimum=0)
    head = hp.n_embd // hp.n_head if hp.n_layer == big_layers else hp.head_dim_k
    final = f.get_float(k + "final_logit_softcapping", 0.0)
    if final < 0:
        raise GGUFError(f.path, f"metadata '{k}final_logit_softcapping'", f"{final} must be >= 0")
    return replace(
        hp,
        embd_scale=math.sqrt(hp.n_embd),
        q_scale=1.0 / math.sqrt(head),
        post_norms=True,
        ffn_act="gelu",
        final_softcap=final,
        n_swa=n_swa,
        swa_layers=swa_pattern(f, hp, pattern) if n_swa else (),
        rope_freq_base_swa=get_f32(f, k + "rope.freq_base_swa", swa_base_default) if n_swa else 0.0,
        rope_freq_scale_swa=swa_scale if n_swa else 0.0,
    )


def _read(f: GGUFFile, hp: HParams) -> HParams:
    hp = read_gemma(
        f, hp, pattern=SWA_PATTERN, big_layers=62, n_swa_default=0, swa_base_default=LOCAL_ROPE_BASE, swa_scale=1.0
    )
    return replace(hp, qk_norm=True)


ARCH = Architecture(
    name="gemma3",
    description="Gemma 3 (text): 5 local (sliding window, rope 10k) to 1 global layer, QK-norm, GEGLU, post norms",
    rope_type=ROPE_TYPE_NEOX,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
)
