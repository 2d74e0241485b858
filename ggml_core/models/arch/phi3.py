"""phi3 (``llm_build_phi3``): one fused q/k/v projection (``attn_qkv``, rows q | k | v) and one fused gate/up
projection (``ffn_up``, rows gate | up, SwiGLU on the halves), NEOX rope over ``rope.dimension_count`` (partial
rotary where it is under the head dim), q scaled by ``1/sqrt(head_dim)`` before the product. llama.cpp disables
Phi 3's sliding window (its converters fill it inconsistently); so does this."""

from __future__ import annotations

from dataclasses import replace

from ggml_core import ops
from ggml_core._tensor import Tensor
from ggml_core.models import blocks
from ggml_core.models.arch._base import Architecture
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams
from ggml_core.ops import ROPE_TYPE_NEOX

__all__ = ["ARCH"]


def layer_weights(hp: HParams, il: int) -> list[blocks.LayerWeight]:
    """Norms, the fused q/k/v and gate/up matrices, the output and down projections."""
    e, q = hp.n_embd, hp.n_head * hp.head_dim_k
    return [
        ("attn_norm.weight", (e,), True),
        ("attn_qkv.weight", (e, q + hp.n_embd_k_gqa + hp.n_embd_v_gqa), False),
        ("attn_output.weight", (hp.n_head * hp.head_dim_v, e), False),
        ("ffn_norm.weight", (e,), True),
        ("ffn_up.weight", (e, 2 * hp.n_ff), False),
        ("ffn_down.weight", (hp.n_ff, e), False),
    ]


def build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    """Pre-norm attention over the views of the fused projection, then the fused SwiGLU FFN."""
    hp, n = g.hp, g.n_tokens
    h = blocks.rms_norm(g, x, g.layer(il, "attn_norm.weight")).set_name(f"attn_norm-{il}")
    qkv = ops.mul_mat(g.layer(il, "attn_qkv.weight"), h)  # [q | k | v, n_tokens]
    es, d = qkv.type.type_size, hp.head_dim_k
    q_w, k_w = hp.n_head * d, hp.n_embd_k_gqa
    q = ops.view_3d(qkv, d, hp.n_head, n, d * es, qkv.nb[1], 0)
    k = ops.view_3d(qkv, d, hp.n_head_kv, n, d * es, qkv.nb[1], q_w * es)
    v = ops.cont(ops.view_2d(qkv, hp.n_embd_v_gqa, n, qkv.nb[1], (q_w + k_w) * es)).set_name(f"Vcur-{il}")
    q = ops.scale(blocks.rope(g, il, q), 1.0 / hp.head_dim_k**0.5).set_name(f"Qcur-{il}")
    k = blocks.rope(g, il, k).set_name(f"Kcur-{il}")
    attn = ops.mul_mat(g.layer(il, "attn_output.weight"), blocks.attention(g, il, q, k, v))
    x = g.last_only(il, ops.add(attn, x).set_name(f"ffn_inp-{il}"))
    h = blocks.rms_norm(g, x, g.layer(il, "ffn_norm.weight")).set_name(f"ffn_norm-{il}")
    ffn = ops.mul_mat(g.layer(il, "ffn_down.weight"), ops.swiglu(ops.mul_mat(g.layer(il, "ffn_up.weight"), h)))
    return ops.add(x, ffn).set_name(f"l_out-{il}")


def _read(f: GGUFFile, hp: HParams) -> HParams:
    return replace(hp, q_scale=1.0 / hp.head_dim_k**0.5, n_swa=0, swa_layers=())


ARCH = Architecture(
    name="phi3",
    description="Phi 3: fused q/k/v and gate/up projections, NEOX (partial) rope",
    rope_type=ROPE_TYPE_NEOX,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
)
