"""The blocks families are built from, as llama.cpp's ``llm_graph_context::build_*`` helpers.

- :func:`rms_norm`: ``rms_norm(x) * w`` (Gemma's ``(1 + w)``: llama.cpp's converter stores ``1 + w``, so it is this;
  defined with the frame in :mod:`ggml_core.models.graph`, which norms the output with it)
- :func:`qkv`: the q/k/v projections with optional biases, per-head QK-norm and rope (NORMAL or NEOX, the layer's
  base, ``rope_freqs`` frequency factors)
- :func:`attention`: the cache writes and GQA attention over the layer's cache group (full, or sliding window),
  with attention-logit softcapping and attention sinks; SOFT_MAX ext or FLASH_ATTN_EXT
- :func:`attn_out`: the output projection (with its bias where the family has one)
- :func:`glu_ffn`: gate/up/down with SwiGLU or GEGLU; :func:`moe_ffn`: the experts as llama.cpp's
  ``build_moe_ffn`` (softmax, sigmoid or gpt-oss's softmax-after-top-k routing, optional renormalisation and
  scale, router and expert biases, SwiGLU or SWIGLU_OAI), with :func:`shared_expert` where the family has one
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
from ggml_core.models.graph import GraphBuilder, rms_norm
from ggml_core.models.hparams import HParams
from ggml_core.models.weights import LayerWeight

__all__ = [
    "ATTENTION_NODE",
    "LayerWeight",
    "attention",
    "attn_out",
    "attn_weights",
    "ffn_weights",
    "glu_ffn",
    "moe_ffn",
    "moe_weights",
    "qkv",
    "rms_norm",
    "rope",
    "shared_expert",
]


def rope(g: GraphBuilder, il: int, t: Tensor) -> Tensor:
    """Rope of ``t`` ``[head_dim, n_heads, n_tokens]`` at the batch's positions with layer ``il``'s base and
    frequency scale."""
    hp = g.hp
    return ops.rope_ext(
        t,
        g.inputs["pos"],
        g.layer_opt(il, "rope_freqs"),
        hp.n_rot,
        hp.rope_type,
        hp.n_ctx_orig or hp.n_ctx_train,
        hp.rope_base(il),
        hp.rope_scale(il),
        hp.rope_ext_factor,
        hp.rope_attn_factor,
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
    projection). The softmax scale is ``1/sqrt(head_dim)``, 1 where the family scales q itself, or the family's
    ``attn_scale``."""
    hp, kv, n = g.hp, g.kv, g.n_tokens
    # the writes must come before the reads of the cache: expand them into the graph first
    g.graph.build_forward_expand(kv.write_k(il, ops.reshape_2d(k, hp.n_embd_k_gqa, n), g.group_input(il, "k_idxs")))
    g.graph.build_forward_expand(kv.write_v(il, v, g.group_input(il, "v_idxs")))
    n_kv = kv.n_kv(kv.group(il), g.n_kv)
    mask = g.group_input(il, "mask")
    scale = hp.attn_scale or (1.0 if hp.q_scale else 1.0 / math.sqrt(hp.head_dim_k))  # Granite sets its own
    qp = ops.permute(q, 0, 2, 1, 3)  # [d, n_tokens, n_head]
    kc = kv.k_view(il, n_kv)  # [d, n_kv, n_head_kv]
    vc = kv.v_view(il, n_kv)
    sinks = g.layer(il, "attn_sinks.weight") if hp.attn_sinks else None
    # the nodes named kq*/kqv*/fattn* are the attention proper: --no-kv-offload pins them to the host
    # (ATTENTION_NODE), where the cache is
    if g.flash_attn:
        out = ops.flash_attn_ext(qp, kc, vc, mask, scale, 0.0, hp.attn_softcap).set_name(f"fattn-{il}")
        out = ops.flash_attn_ext_add_sinks(out, sinks)  # the same node, its src[4] set
        return ops.reshape_2d(out, hp.head_dim_v * hp.n_head, n)  # [d_v, n_head, n_tokens] as rows
    kq = ops.mul_mat(kc, qp).set_name(f"kq-{il}")  # [n_kv, n_tokens, n_head]; GQA by broadcasting over heads
    if hp.attn_softcap:
        kq = ops.scale(kq, 1.0 / hp.attn_softcap).set_name(f"kq_softcap_in-{il}")
        kq = ops.tanh(kq).set_name(f"kq_softcap_tanh-{il}")
        kq = ops.scale(kq, hp.attn_softcap).set_name(f"kq_softcap-{il}")
    kq = ops.soft_max_add_sinks(ops.soft_max_ext(kq, mask, scale, 0.0), sinks).set_name(f"kq_soft_max-{il}")
    kqv = ops.mul_mat(vc, kq).set_name(f"kqv-{il}")  # [d_v, n_tokens, n_head]
    merged = ops.permute(kqv, 0, 2, 1, 3)  # [d_v, n_head, n_tokens]
    return ops.cont_2d(merged, hp.head_dim_v * hp.n_head, n).set_name(f"kqv_out-{il}")


def attn_out(g: GraphBuilder, il: int, attn: Tensor) -> Tensor:
    """The output projection ``Wo·attn`` (``+ bo`` where the family has the bias)."""
    out = ops.mul_mat(g.layer(il, "attn_output.weight"), attn)
    if g.hp.attn_out_bias:
        out = ops.add(out, g.layer(il, "attn_output.bias"))
    return out.set_name(f"attn_out-{il}")


def glu_ffn(g: GraphBuilder, il: int, h: Tensor) -> Tensor:
    """``down · act(gate·h) ⊙ (up·h)``: SwiGLU (``ffn_act`` "silu") or GEGLU ("gelu")."""
    gate = ops.mul_mat(g.layer(il, "ffn_gate.weight"), h)
    up = ops.mul_mat(g.layer(il, "ffn_up.weight"), h)
    act = ops.geglu_split(gate, up) if g.hp.ffn_act == "gelu" else ops.swiglu(gate, up)
    return ops.mul_mat(g.layer(il, "ffn_down.weight"), act).set_name(f"ffn_out-{il}")


#: SWIGLU_OAI's constants in llama.cpp's ``build_moe_ffn`` (gpt-oss)
OAI_ALPHA, OAI_LIMIT = 1.702, 7.0
#: llama.cpp clamps the sum of the chosen weights to the smallest normal f16 before dividing by it
MIN_WEIGHTS_SUM = 6.103515625e-5


def _expert_weights(g: GraphBuilder, il: int, h: Tensor) -> tuple[Tensor, Tensor]:
    """The router: the chosen experts ``[k, n_tokens]`` (i32) and their weights ``[1, k, n_tokens]``, per
    ``moe_gating`` / ``moe_norm_w`` / ``moe_w_scale`` as llama.cpp's ``build_moe_ffn``."""
    hp = g.hp
    n_tokens, k = h.ne[1], hp.n_expert_used
    top_k = getattr(ops, "argsort_top_k", None) or getattr(ops, "top_k", None)
    sum_rows = getattr(ops, "sum_rows", None)
    if top_k is None or sum_rows is None:
        raise OpError("MUL_MAT_ID", "mixture-of-experts models need the TOP_K (or ARGSORT) and SUM_ROWS op builders")
    logits = ops.mul_mat(g.layer(il, "ffn_gate_inp.weight"), h)  # [n_expert, n_tokens]
    if hp.moe_biases:
        logits = ops.add(logits, g.layer(il, "ffn_gate_inp.bias"))
    if hp.moe_gating == "softmax":
        probs = ops.soft_max(logits)
    elif hp.moe_gating == "sigmoid":
        probs = ops.sigmoid(logits)
    else:  # "softmax_weight": the softmax comes after the choice, over the chosen
        probs = logits
    # DeepSeek V3's selection bias: it steers the choice, the weights stay the unbiased probabilities
    chooser = ops.add(probs, g.layer(il, "exp_probs_b.bias")) if hp.moe_probs_bias else probs
    selected = top_k(chooser, k)  # [k, n_tokens] i32
    if selected.type != GGMLType.I32:
        selected = ops.cast(selected, GGMLType.I32)
    weights = ops.get_rows(ops.reshape_3d(probs, 1, hp.n_expert, n_tokens), selected)  # [1, k, n_tokens]
    if hp.moe_gating == "softmax_weight":
        weights = ops.reshape_3d(ops.soft_max(ops.reshape_2d(weights, k, n_tokens)), 1, k, n_tokens)
    if hp.moe_norm_w:
        flat = ops.reshape_2d(weights, k, n_tokens)
        total = ops.clamp(sum_rows(flat), MIN_WEIGHTS_SUM, math.inf)
        weights = ops.reshape_3d(ops.div(flat, total), 1, k, n_tokens)
    if hp.moe_w_scale not in (0.0, 1.0):
        weights = ops.scale(weights, hp.moe_w_scale)
    return selected, weights


def _expert_matmul(g: GraphBuilder, il: int, name: str, x: Tensor, selected: Tensor) -> Tensor:
    """``MUL_MAT_ID`` of ``ffn_{name}_exps`` (``+ ADD_ID`` of its per-expert bias where the family has them)."""
    out = ops.mul_mat_id(g.layer(il, f"ffn_{name}_exps.weight"), x, selected)
    if g.hp.moe_biases:
        out = ops.add_id(out, g.layer(il, f"ffn_{name}_exps.bias"), selected)
    return out


def moe_ffn(g: GraphBuilder, il: int, h: Tensor) -> Tensor:
    """llama.cpp's ``build_moe_ffn``: the router (:func:`_expert_weights`), the k chosen experts' gate/up/down
    products (MUL_MAT_ID, per-expert biases by ADD_ID), SwiGLU or SWIGLU_OAI, the weighted sum of the k outputs;
    plus the shared expert where the family has one (:func:`shared_expert`)."""
    hp = g.hp
    n_tokens, k, n_embd = h.ne[1], hp.n_expert_used, hp.n_embd
    selected, weights = _expert_weights(g, il, h)
    g.graph.build_forward_expand(weights)
    x = ops.reshape_3d(h, n_embd, 1, n_tokens)
    up = _expert_matmul(g, il, "up", x, selected)  # [n_ff, k, n_tokens]
    gate = _expert_matmul(g, il, "gate", x, selected)
    act = ops.swiglu_oai(gate, up, OAI_ALPHA, OAI_LIMIT) if hp.moe_act == "swiglu_oai" else ops.swiglu(gate, up)
    experts = _expert_matmul(g, il, "down", act, selected)
    experts = ops.mul(experts, weights)  # [n_embd, k, n_tokens]
    out = None
    for i in range(k):
        view = ops.view_2d(experts, n_embd, n_tokens, experts.nb[2], i * experts.nb[1])
        out = view if out is None else ops.add(out, view)
    assert out is not None
    out = out if k > 1 else ops.cont(out)
    if hp.n_ff_shexp:
        out = ops.add(out, shared_expert(g, il, h))
    return out.set_name(f"ffn_moe_out-{il}")


def shared_expert(g: GraphBuilder, il: int, h: Tensor) -> Tensor:
    """The expert every token goes through (``ffn_{gate,up,down}_shexp``, SwiGLU), scaled by
    ``sigmoid(ffn_gate_inp_shexp · h)`` where the family gates it. Like llama.cpp the sigmoid is ``silu(x) / x``."""
    gate = ops.mul_mat(g.layer(il, "ffn_gate_shexp.weight"), h)
    up = ops.mul_mat(g.layer(il, "ffn_up_shexp.weight"), h)
    out = ops.mul_mat(g.layer(il, "ffn_down_shexp.weight"), ops.swiglu(gate, up))
    if g.hp.shexp_gate:
        logit = ops.mul_mat(g.layer(il, "ffn_gate_inp_shexp.weight"), h)  # [1, n_tokens]
        out = ops.mul(out, ops.div(ops.silu(logit), logit))
    return out.set_name(f"ffn_shexp-{il}")


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
    if hp.attn_out_bias:
        out.append(("attn_output.bias", (e,), True))
    if hp.attn_sinks:
        out.append(("attn_sinks.weight", (hp.n_head,), True))
    return out


def ffn_weights(hp: HParams) -> list[LayerWeight]:
    """The FFN norm and the gate/up/down matrices (``n_ff_dense`` wide in a MoE model's dense layers)."""
    e, f = hp.n_embd, hp.n_ff_dense or hp.n_ff
    return [
        ("ffn_norm.weight", (e,), True),
        ("ffn_gate.weight", (e, f), False),
        ("ffn_up.weight", (e, f), False),
        ("ffn_down.weight", (f, e), False),
    ]


def moe_weights(hp: HParams, norm: str = "ffn_norm.weight") -> list[LayerWeight]:
    """The FFN norm (``norm``), the router and the stacked experts, their biases and the shared expert where the
    family has them."""
    e, x, f = hp.n_embd, hp.n_expert, hp.n_ff
    out: list[LayerWeight] = [
        (norm, (e,), True),
        ("ffn_gate_inp.weight", (e, x), False),
        ("ffn_gate_exps.weight", (e, f, x), False),
        ("ffn_up_exps.weight", (e, f, x), False),
        ("ffn_down_exps.weight", (f, e, x), False),
    ]
    if hp.moe_probs_bias:
        out.append(("exp_probs_b.bias", (x,), True))
    if hp.moe_biases:
        out += [
            ("ffn_gate_inp.bias", (x,), True),
            ("ffn_gate_exps.bias", (f, x), True),
            ("ffn_up_exps.bias", (f, x), True),
            ("ffn_down_exps.bias", (e, x), True),
        ]
    if hp.n_ff_shexp:
        s = hp.n_ff_shexp
        out += [
            ("ffn_gate_shexp.weight", (e, s), False),
            ("ffn_up_shexp.weight", (e, s), False),
            ("ffn_down_shexp.weight", (s, e), False),
        ]
        if hp.shexp_gate:
            out.append(("ffn_gate_inp_shexp.weight", (e,), False))
    return out
