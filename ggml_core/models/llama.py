"""The LLaMA-family forward graph: llama (GQA, NORMAL rope, optional Mixtral experts) and qwen2 (Q/K/V biases, NEOX).

Per layer, as llama.cpp builds it::

    h    = rms_norm(x) * attn_norm
    q, k, v = h·Wq (+bq), h·Wk (+bk), h·Wv (+bv);  q, k = rope(q), rope(k)
    K[cells], V[cells] = k, v                                   (SET_ROWS into the cache)
    a    = softmax(q·Kᵀ / sqrt(d) + mask) · V                    (SOFT_MAX ext, or FLASH_ATTN_EXT)
    x    = x + a·Wo
    x    = x + ffn(rms_norm(x) * ffn_norm)                       (SwiGLU, or a mixture of SwiGLU experts)

then ``logits = (rms_norm(x) * output_norm)·Wout``. Inputs of one batch (token ids, positions, the mask, the cache
rows to write) are graph inputs, so the graph depends only on (n_tokens, n_kv, which outputs) and is reused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ggml_core import ops
from ggml_core._context import Context
from ggml_core._errors import OpError
from ggml_core._graph import Graph
from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.models.hparams import HParams
from ggml_core.models.kvcache import KVCache
from ggml_core.models.weights import ModelWeights

__all__ = ["BuiltGraph", "build_llama_graph", "graph_size_for", "kq_mask"]


@dataclass
class BuiltGraph:
    """A graph for one batch shape and its inputs."""

    graph: Graph
    ctx: Context
    logits: Tensor
    n_tokens: int
    n_kv: int
    #: True: logits of every token; False: of the last one
    all_logits: bool
    inputs: dict[str, Tensor] = field(default_factory=dict)
    #: per-run state owned by the executor (allocation, scheduler bookkeeping)
    state: dict[str, object] = field(default_factory=dict)


def graph_size_for(hp: HParams) -> int:
    """A node budget for the model's graph."""
    per_layer = 64 + (24 + 2 * hp.n_expert_used if hp.is_moe else 0)
    return max(2048, hp.n_layer * per_layer + 128)


def kq_mask(positions: np.ndarray, n_kv: int) -> np.ndarray:
    """The causal mask ``[n_tokens, n_kv]``: 0 where cell j (holding position j) is visible to the token, -inf else."""
    cells = np.arange(n_kv)
    return np.where(cells[None, :] <= positions[:, None], 0.0, -np.inf).astype(np.float32)


def _input(ctx: Context, name: str, type: str, *ne: int) -> Tensor:
    return ctx.new_tensor(type, ne, name).set_input()


def build_llama_graph(
    hp: HParams,
    w: ModelWeights,
    kv: KVCache,
    n_tokens: int,
    n_kv: int,
    *,
    all_logits: bool,
    flash_attn: bool = False,
) -> BuiltGraph:
    """The graph of one batch of ``n_tokens`` attending over the first ``n_kv`` cache cells.

    Every intermediate lives in a fresh context of its own (``with ctx:``), never in the weights' or the cache's.
    """
    with Context(f"llama batch {n_tokens}x{n_kv}") as ctx:
        return _build(ctx, hp, w, kv, n_tokens, n_kv, all_logits=all_logits, flash_attn=flash_attn)


def _build(
    ctx: Context,
    hp: HParams,
    w: ModelWeights,
    kv: KVCache,
    n_tokens: int,
    n_kv: int,
    *,
    all_logits: bool,
    flash_attn: bool,
) -> BuiltGraph:
    graph = Graph(graph_size_for(hp))
    tokens = _input(ctx, "inp_tokens", "i32", n_tokens)
    pos = _input(ctx, "inp_pos", "i32", n_tokens)
    mask = _input(ctx, "kq_mask", "f16" if flash_attn else "f32", n_kv, n_tokens)
    k_idxs = _input(ctx, "k_idxs", "i64", n_tokens)
    v_idxs = _input(ctx, "v_idxs", "i64", n_tokens * hp.n_embd_v_gqa) if kv.v_trans else k_idxs
    inputs = {"tokens": tokens, "pos": pos, "mask": mask, "k_idxs": k_idxs, "v_idxs": v_idxs}
    x = ops.get_rows(w["token_embd.weight"], tokens).set_name("inp_embd")
    scale = 1.0 / math.sqrt(hp.head_dim_k)
    for il in range(hp.n_layer):
        b = f"blk.{il}."
        last = il == hp.n_layer - 1
        ff = w.get(b + "rope_freqs")
        h = ops.mul(ops.rms_norm(x, hp.rms_eps), w[b + "attn_norm.weight"]).set_name(f"attn_norm-{il}")
        q = ops.mul_mat(w[b + "attn_q.weight"], h)
        k = ops.mul_mat(w[b + "attn_k.weight"], h)
        v = ops.mul_mat(w[b + "attn_v.weight"], h)
        if hp.qkv_bias:
            q = ops.add(q, w[b + "attn_q.bias"])
            k = ops.add(k, w[b + "attn_k.bias"])
            v = ops.add(v, w[b + "attn_v.bias"])
        q = _rope(hp, ops.reshape_3d(q, hp.head_dim_k, hp.n_head, n_tokens), pos, ff).set_name(f"Qcur-{il}")
        k = _rope(hp, ops.reshape_3d(k, hp.head_dim_k, hp.n_head_kv, n_tokens), pos, ff).set_name(f"Kcur-{il}")
        v.set_name(f"Vcur-{il}")
        # the writes must come before the reads of the cache: expand them into the graph first
        graph.build_forward_expand(kv.write_k(il, ops.reshape_2d(k, hp.n_embd_k_gqa, n_tokens), k_idxs))
        graph.build_forward_expand(kv.write_v(il, v, v_idxs))
        attn = _attention(hp, kv, il, q, n_kv, n_tokens, mask, scale, flash_attn)
        attn = ops.mul_mat(w[b + "attn_output.weight"], attn).set_name(f"attn_out-{il}")
        x = ops.add(attn, x).set_name(f"ffn_inp-{il}")
        if last and not all_logits and n_tokens > 1:
            # only the last token's logits are wanted: skip the rest of the rows from here on
            x = ops.view_2d(x, hp.n_embd, 1, x.nb[1], (n_tokens - 1) * x.nb[1])
        h = ops.mul(ops.rms_norm(x, hp.rms_eps), w[b + "ffn_norm.weight"]).set_name(f"ffn_norm-{il}")
        ffn = _moe_ffn(hp, w, b, h) if hp.is_moe else _ffn(w, b, h)
        x = ops.add(ffn, x).set_name(f"l_out-{il}")
    h = ops.mul(ops.rms_norm(x, hp.rms_eps), w["output_norm.weight"]).set_name("result_norm")
    logits = ops.mul_mat(w["output.weight"], h).set_name("result_output").set_output()
    graph.build_forward_expand(logits)
    return BuiltGraph(graph, ctx, logits, n_tokens, n_kv, all_logits, inputs)


def _rope(hp: HParams, t: Tensor, pos: Tensor, freq_factors: Tensor | None) -> Tensor:
    return ops.rope_ext(
        t,
        pos,
        freq_factors,
        hp.n_rot,
        hp.rope_type,
        hp.n_ctx_train,
        hp.rope_freq_base,
        hp.rope_freq_scale,
        0.0,
        1.0,
        32.0,
        1.0,
    )


def _attention(
    hp: HParams, kv: KVCache, il: int, q: Tensor, n_kv: int, n_tokens: int, mask: Tensor, scale: float, flash: bool
) -> Tensor:
    """Multi-head attention of q ``[d, n_head, n_tokens]`` over the cache; result ``[n_head·d_v, n_tokens]``."""
    q = ops.permute(q, 0, 2, 1, 3)  # [d, n_tokens, n_head]
    k = kv.k_view(il, n_kv)  # [d, n_kv, n_head_kv]
    v = kv.v_view(il, n_kv)
    if flash:
        out = ops.flash_attn_ext(q, k, v, mask, scale, 0.0, 0.0)  # [d_v, n_head, n_tokens]
        return ops.reshape_2d(out, hp.head_dim_v * hp.n_head, n_tokens)
    kq = ops.mul_mat(k, q).set_name(f"kq-{il}")  # [n_kv, n_tokens, n_head]; GQA by broadcasting over heads
    kq = ops.soft_max_ext(kq, mask, scale, 0.0).set_name(f"kq_soft_max-{il}")
    kqv = ops.mul_mat(v, kq)  # [d_v, n_tokens, n_head]
    merged = ops.permute(kqv, 0, 2, 1, 3)  # [d_v, n_head, n_tokens]
    return ops.cont_2d(merged, hp.head_dim_v * hp.n_head, n_tokens).set_name(f"kqv_out-{il}")


def _ffn(w: ModelWeights, b: str, h: Tensor) -> Tensor:
    gate = ops.mul_mat(w[b + "ffn_gate.weight"], h)
    up = ops.mul_mat(w[b + "ffn_up.weight"], h)
    return ops.mul_mat(w[b + "ffn_down.weight"], ops.swiglu(gate, up)).set_name("ffn_out")


def _moe_ffn(hp: HParams, w: ModelWeights, b: str, h: Tensor) -> Tensor:
    """Mixtral: softmax router, top-k experts, weights renormalised over the chosen k, SwiGLU experts (MUL_MAT_ID)."""
    n_tokens, k, n_embd = h.ne[1], hp.n_expert_used, hp.n_embd
    top_k = getattr(ops, "argsort_top_k", None) or getattr(ops, "top_k", None)
    sum_rows = getattr(ops, "sum_rows", None)
    if top_k is None or sum_rows is None:
        raise OpError("MUL_MAT_ID", "mixture-of-experts models need the TOP_K (or ARGSORT) and SUM_ROWS op builders")
    logits = ops.mul_mat(w[b + "ffn_gate_inp.weight"], h)  # [n_expert, n_tokens]
    probs = ops.soft_max(logits)
    selected = top_k(probs, k)  # [k, n_tokens] i32
    if selected.type != GGMLType.I32:
        selected = ops.cast(selected, GGMLType.I32)
    weights = ops.get_rows(ops.reshape_3d(probs, 1, hp.n_expert, n_tokens), selected)  # [1, k, n_tokens]
    weights = ops.reshape_2d(weights, k, n_tokens)
    weights = ops.div(weights, sum_rows(weights))
    weights = ops.reshape_3d(weights, 1, k, n_tokens)
    x = ops.reshape_3d(h, n_embd, 1, n_tokens)
    up = ops.mul_mat_id(w[b + "ffn_up_exps.weight"], x, selected)  # [n_ff, k, n_tokens]
    gate = ops.mul_mat_id(w[b + "ffn_gate_exps.weight"], x, selected)
    experts = ops.mul_mat_id(w[b + "ffn_down_exps.weight"], ops.swiglu(gate, up), selected)  # [n_embd, k, n_tokens]
    experts = ops.mul(experts, weights)
    out = None
    for i in range(k):
        view = ops.view_2d(experts, n_embd, n_tokens, experts.nb[2], i * experts.nb[1])
        out = view if out is None else ops.add(out, view)
    assert out is not None
    return out if k > 1 else ops.cont(out)
