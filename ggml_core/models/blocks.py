"""The blocks families are built from, as llama.cpp's ``llm_graph_context::build_*`` helpers.

- :func:`rms_norm`: ``rms_norm(x) * w`` (Gemma's ``(1 + w)``: llama.cpp's converter stores ``1 + w``, so it is this)
- :func:`qkv`: the q/k/v projections with optional biases, per-head QK-norm and rope (NORMAL or NEOX, the layer's
  base, ``rope_freqs`` frequency factors)
- :func:`attention`: the cache writes and GQA attention over the layer's cache group (full, or sliding window),
  with attention-logit softcapping; SOFT_MAX ext or FLASH_ATTN_EXT
- :func:`glu_ffn`: gate/up/down with SwiGLU or GEGLU; :func:`moe_ffn`: softmax-routed SwiGLU experts (Mixtral)
- :func:`attn_weights`, :func:`ffn_weights`, :func:`moe_weights`: the tensors these blocks read, with their shapes
"""

from __future__ import annotations

import math
import re
from typing import Final

from ggml_core import ops
from ggml_core._errors import OpError
from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams

__all__ = [
    "ATTENTION_NODE",
    "LayerWeight",
    "attention",
    "attn_weights",
    "ffn_weights",
    "glu_ffn",
    "moe_ffn",
    "moe_weights",
    "qkv",
    "rms_norm",
    "rope",
]

#: (name inside ``blk.{il}.``, ggml ne, True for an f32 vector)
LayerWeight = tuple[str, tuple[int, ...], bool]


def rms_norm(g: GraphBuilder, x: Tensor, w: Tensor) -> Tensor:
    """``rms_norm(x) * w`` over ne[0] (per head for a 3-D ``[head_dim, n_head, n_tokens]``)."""
    return ops.mul(ops.rms_norm(x, g.hp.rms_eps), w)


def rope(g: GraphBuilder, il: int, t: Tensor) -> Tensor:
    """Rope of ``t`` ``[head_dim, n_heads, n_tokens]`` at the batch's positions with layer ``il``'s base."""
    hp = g.hp
    return ops.rope_ext(
        t,
        g.inputs["pos"],
        g.layer_opt(il, "rope_freqs"),
        hp.n_rot,
        hp.rope_type,
        hp.n_ctx_orig or hp.n_ctx_train,
        hp.rope_base(il),
        hp.rope_freq_scale,
        hp.rope_ext_factor,
        1.0,
        hp.yarn_beta_fast,
        hp.yarn_beta_slow,
    )


def qkv(g: GraphBuilder, il: int, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q ``[d, n_head, T]``, k ``[d, n_head_kv, T]`` (normed per head if the family does, roped) and v
    ``[n_embd_v_gqa, T]``."""
    hp, n = g.hp, g.n_tokens
    q = ops.mul_mat(g.layer(il, "attn_q.weight"), h)
    k = ops.mul_mat(g.layer(il, "attn_k.weight"), h)
    v = ops.mul_mat(g.layer(il, "attn_v.weight"), h)
    if hp.qkv_bias:
        q = ops.add(q, g.layer(il, "attn_q.bias"))
        k = ops.add(k, g.layer(il, "attn_k.bias"))
        v = ops.add(v, g.layer(il, "attn_v.bias"))
    q = ops.reshape_3d(q, hp.head_dim_k, hp.n_head, n)
    k = ops.reshape_3d(k, hp.head_dim_k, hp.n_head_kv, n)
    if hp.qk_norm:
        q = rms_norm(g, q, g.layer(il, "attn_q_norm.weight"))
        k = rms_norm(g, k, g.layer(il, "attn_k_norm.weight"))
    q = rope(g, il, q).set_name(f"Qcur-{il}")
    k = rope(g, il, k).set_name(f"Kcur-{il}")
    return q, k, v.set_name(f"Vcur-{il}")


#: names of the attention nodes (KQ, softcapping, softmax, KQV and its merge, flash attention) of any layer
ATTENTION_NODE: Final = re.compile(r"(kq|kq_softcap_in|kq_softcap_tanh|kq_softcap|kq_soft_max|kqv|kqv_out|fattn)-\d+")


def attention(g: GraphBuilder, il: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Write k, v into layer ``il``'s cache, attend q over it; ``[n_head·d_v, n_tokens]`` (before the output
    projection). The softmax scale is ``1/sqrt(head_dim)``, or 1 where the family scales q itself."""
    hp, kv, n = g.hp, g.kv, g.n_tokens
    # the writes must come before the reads of the cache: expand them into the graph first
    g.graph.build_forward_expand(kv.write_k(il, ops.reshape_2d(k, hp.n_embd_k_gqa, n), g.group_input(il, "k_idxs")))
    g.graph.build_forward_expand(kv.write_v(il, v, g.group_input(il, "v_idxs")))
    n_kv = kv.n_kv(kv.group(il), g.n_kv)
    mask = g.group_input(il, "mask")
    scale = 1.0 if hp.q_scale else 1.0 / math.sqrt(hp.head_dim_k)
    qp = ops.permute(q, 0, 2, 1, 3)  # [d, n_tokens, n_head]
    kc = kv.k_view(il, n_kv)  # [d, n_kv, n_head_kv]
    vc = kv.v_view(il, n_kv)
    # the nodes named kq*/kqv*/fattn* are the attention proper: --no-kv-offload pins them to the host
    # (ATTENTION_NODE), where the cache is
    if g.flash_attn:
        out = ops.flash_attn_ext(qp, kc, vc, mask, scale, 0.0, hp.attn_softcap).set_name(f"fattn-{il}")
        return ops.reshape_2d(out, hp.head_dim_v * hp.n_head, n)  # [d_v, n_head, n_tokens] as rows
    kq = ops.mul_mat(kc, qp).set_name(f"kq-{il}")  # [n_kv, n_tokens, n_head]; GQA by broadcasting over heads
    if hp.attn_softcap:
        kq = ops.scale(kq, 1.0 / hp.attn_softcap).set_name(f"kq_softcap_in-{il}")
        kq = ops.tanh(kq).set_name(f"kq_softcap_tanh-{il}")
        kq = ops.scale(kq, hp.attn_softcap).set_name(f"kq_softcap-{il}")
    kq = ops.soft_max_ext(kq, mask, scale, 0.0).set_name(f"kq_soft_max-{il}")
    kqv = ops.mul_mat(vc, kq).set_name(f"kqv-{il}")  # [d_v, n_tokens, n_head]
    merged = ops.permute(kqv, 0, 2, 1, 3)  # [d_v, n_head, n_tokens]
    return ops.cont_2d(merged, hp.head_dim_v * hp.n_head, n).set_name(f"kqv_out-{il}")


def glu_ffn(g: GraphBuilder, il: int, h: Tensor) -> Tensor:
    """``down · act(gate·h) ⊙ (up·h)``: SwiGLU (``ffn_act`` "silu") or GEGLU ("gelu")."""
    gate = ops.mul_mat(g.layer(il, "ffn_gate.weight"), h)
    up = ops.mul_mat(g.layer(il, "ffn_up.weight"), h)
    act = ops.geglu_split(gate, up) if g.hp.ffn_act == "gelu" else ops.swiglu(gate, up)
    return ops.mul_mat(g.layer(il, "ffn_down.weight"), act).set_name(f"ffn_out-{il}")


def moe_ffn(g: GraphBuilder, il: int, h: Tensor) -> Tensor:
    """Mixtral: softmax router, top-k experts, weights renormalised over the chosen k, SwiGLU experts (MUL_MAT_ID)."""
    hp = g.hp
    n_tokens, k, n_embd = h.ne[1], hp.n_expert_used, hp.n_embd
    top_k = getattr(ops, "argsort_top_k", None) or getattr(ops, "top_k", None)
    sum_rows = getattr(ops, "sum_rows", None)
    if top_k is None or sum_rows is None:
        raise OpError("MUL_MAT_ID", "mixture-of-experts models need the TOP_K (or ARGSORT) and SUM_ROWS op builders")
    logits = ops.mul_mat(g.layer(il, "ffn_gate_inp.weight"), h)  # [n_expert, n_tokens]
    probs = ops.soft_max(logits)
    selected = top_k(probs, k)  # [k, n_tokens] i32
    if selected.type != GGMLType.I32:
        selected = ops.cast(selected, GGMLType.I32)
    weights = ops.get_rows(ops.reshape_3d(probs, 1, hp.n_expert, n_tokens), selected)  # [1, k, n_tokens]
    weights = ops.reshape_2d(weights, k, n_tokens)
    weights = ops.div(weights, sum_rows(weights))
    weights = ops.reshape_3d(weights, 1, k, n_tokens)
    x = ops.reshape_3d(h, n_embd, 1, n_tokens)
    up = ops.mul_mat_id(g.layer(il, "ffn_up_exps.weight"), x, selected)  # [n_ff, k, n_tokens]
    gate = ops.mul_mat_id(g.layer(il, "ffn_gate_exps.weight"), x, selected)
    experts = ops.mul_mat_id(g.layer(il, "ffn_down_exps.weight"), ops.swiglu(gate, up), selected)
    experts = ops.mul(experts, weights)  # [n_embd, k, n_tokens]
    out = None
    for i in range(k):
        view = ops.view_2d(experts, n_embd, n_tokens, experts.nb[2], i * experts.nb[1])
        out = view if out is None else ops.add(out, view)
    assert out is not None
    return out if k > 1 else ops.cont(out)


# ------------------------------------------------------------------------------------------------ weight lists


def attn_weights(hp: HParams) -> list[LayerWeight]:
    """The attention norm, projections, optional biases and QK-norms."""
    e, q_out, v_out = hp.n_embd, hp.n_head * hp.head_dim_k, hp.n_head * hp.head_dim_v
    out: list[LayerWeight] = [
        ("attn_norm.weight", (e,), True),
        ("attn_q.weight", (e, q_out), False),
        ("attn_k.weight", (e, hp.n_embd_k_gqa), False),
        ("attn_v.weight", (e, hp.n_embd_v_gqa), False),
        ("attn_output.weight", (v_out, e), False),
    ]
    if hp.qkv_bias:
        out += [
            ("attn_q.bias", (q_out,), True),
            ("attn_k.bias", (hp.n_embd_k_gqa,), True),
            ("attn_v.bias", (hp.n_embd_v_gqa,), True),
        ]
    if hp.qk_norm:
        out += [("attn_q_norm.weight", (hp.head_dim_k,), True), ("attn_k_norm.weight", (hp.head_dim_k,), True)]
    return out


def ffn_weights(hp: HParams) -> list[LayerWeight]:
    """The FFN norm and the gate/up/down matrices."""
    e = hp.n_embd
    return [
        ("ffn_norm.weight", (e,), True),
        ("ffn_gate.weight", (e, hp.n_ff), False),
        ("ffn_up.weight", (e, hp.n_ff), False),
        ("ffn_down.weight", (hp.n_ff, e), False),
    ]


def moe_weights(hp: HParams) -> list[LayerWeight]:
    """The FFN norm, the router and the stacked experts."""
    e, x = hp.n_embd, hp.n_expert
    return [
        ("ffn_norm.weight", (e,), True),
        ("ffn_gate_inp.weight", (e, x), False),
        ("ffn_gate_exps.weight", (e, hp.n_ff, x), False),
        ("ffn_up_exps.weight", (e, hp.n_ff, x), False),
        ("ffn_down_exps.weight", (hp.n_ff, e, x), False),
    ]
