"""LLaMA-shaped decoder layers as a ggml-core graph, and the same maths in numpy (the independent reference).

One layer: RMS_NORM → MUL (norm weight) → MUL_MAT q/k/v → RESHAPE → ROPE (q, k) → PERMUTE → MUL_MAT (KQ) →
SOFT_MAX ext (causal mask, scale) → PERMUTE/CONT (v) → MUL_MAT (KQV) → PERMUTE → CONT → MUL_MAT (wo) → ADD (residual) →
RMS_NORM → MUL → MUL_MAT gate/up → GLU (SwiGLU) → MUL_MAT down → ADD (residual). Used by the scheduler and allocator
tests and by ``benchmarks/bench_sched.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ggml_core import Backend, BufferType, BufferUsage, Context, Graph, Tensor, ops
from ggml_core.alloc import alloc_ctx_tensors

if TYPE_CHECKING:
    from ggml_core.sched import Scheduler

__all__ = ["LlamaGraph", "build_llama", "reference"]

EPS = 1e-5
FREQ_BASE = 10000.0
N_CTX_ORIG = 512
WEIGHT_NAMES = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down")


@dataclass
class LlamaGraph:
    """The graph, its inputs and weights, and the shape it was built with."""

    graph: Graph
    out: Tensor
    x: Tensor
    pos: Tensor
    mask: Tensor
    #: per layer: name → tensor
    weights: list[dict[str, Tensor]]
    n_embd: int
    n_head: int
    n_ff: int
    n_tokens: int
    ctx: Context = field(repr=False)
    #: with a KV cache: the cells written (i64 input) and the per-layer K and V caches
    kv_idx: Tensor | None = None
    caches: list[Tensor] = field(default_factory=list)

    def weight_tensors(self) -> list[Tensor]:
        """Every weight, layer by layer."""
        return [t for layer in self.weights for t in layer.values()]


def build_llama(
    n_layers: int = 1,
    n_embd: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    n_tokens: int = 8,
    graph_size: int = 4096,
    kv_cache: bool = False,
    shared: LlamaGraph | None = None,
) -> LlamaGraph:
    """Describe the graph (no memory yet): weights ``blk.<l>.<name>``, inputs ``inp_embd``, ``inp_pos``, ``kq_mask``.

    With ``kv_cache``, K and V rows are written into per-layer caches ``cache_k_l<l>``/``cache_v_l<l>`` (SET_ROWS at
    the i64 input ``kv_idx``) and attention reads views of the caches, as llama.cpp does; allocate the caches with
    :func:`alloc_caches`. The cache holds exactly this batch, so the maths is unchanged. ``shared``: use that graph's
    weights and caches (a graph rebuilt for the next batch, as llama.cpp does).
    """
    ctx = Context("llama")
    hd = n_embd // n_head
    x = ctx.new_tensor("f32", [n_embd, n_tokens], "inp_embd").set_input()
    pos = ctx.new_tensor("i32", [n_tokens], "inp_pos").set_input()
    mask = ctx.new_tensor("f32", [n_tokens, n_tokens], "kq_mask").set_input()
    kv_idx = ctx.new_tensor("i64", [n_tokens], "kv_idx").set_input() if kv_cache else None
    caches: list[Tensor] = []
    graph = Graph(graph_size)
    layers: list[dict[str, Tensor]] = []
    cur = x
    for il in range(n_layers):
        w = (
            shared.weights[il]
            if shared is not None
            else {
                "attn_norm": ctx.new_tensor("f32", [n_embd], f"blk.{il}.attn_norm"),
                "wq": ctx.new_tensor("f32", [n_embd, n_embd], f"blk.{il}.attn_q"),
                "wk": ctx.new_tensor("f32", [n_embd, n_embd], f"blk.{il}.attn_k"),
                "wv": ctx.new_tensor("f32", [n_embd, n_embd], f"blk.{il}.attn_v"),
                "wo": ctx.new_tensor("f32", [n_embd, n_embd], f"blk.{il}.attn_output"),
                "ffn_norm": ctx.new_tensor("f32", [n_embd], f"blk.{il}.ffn_norm"),
                "w_gate": ctx.new_tensor("f32", [n_embd, n_ff], f"blk.{il}.ffn_gate"),
                "w_up": ctx.new_tensor("f32", [n_embd, n_ff], f"blk.{il}.ffn_up"),
                "w_down": ctx.new_tensor("f32", [n_ff, n_embd], f"blk.{il}.ffn_down"),
            }
        )
        layers.append(w)
        inp = cur
        h = ops.mul(ops.rms_norm(inp, EPS).set_name(f"attn_norm-{il}"), w["attn_norm"]).set_name(f"attn_normed-{il}")
        q = ops.reshape_3d(ops.mul_mat(w["wq"], h).set_name(f"q-{il}"), hd, n_head, n_tokens)
        k = ops.reshape_3d(ops.mul_mat(w["wk"], h).set_name(f"k-{il}"), hd, n_head, n_tokens)
        v = ops.reshape_3d(ops.mul_mat(w["wv"], h).set_name(f"v-{il}"), hd, n_head, n_tokens)
        q = ops.rope_ext(q, pos, None, hd, 0, N_CTX_ORIG, FREQ_BASE, 1.0, 0.0, 1.0, 32.0, 1.0).set_name(f"q_rope-{il}")
        k = ops.rope_ext(k, pos, None, hd, 0, N_CTX_ORIG, FREQ_BASE, 1.0, 0.0, 1.0, 32.0, 1.0).set_name(f"k_rope-{il}")
        if kv_idx is not None:
            given = shared.caches[2 * il : 2 * il + 2] if shared is not None else None
            k, v = _through_cache(ctx, graph, k, v, kv_idx, caches, il, given)
        q = ops.permute(q, 0, 2, 1, 3)  # [hd, T, H]
        k = ops.permute(k, 0, 2, 1, 3)
        kq = ops.mul_mat(k, q).set_name(f"kq-{il}")  # [T(k), T(q), H]
        kq = ops.soft_max_ext(kq, mask, 1.0 / float(np.sqrt(hd)), 0.0).set_name(f"kq_soft_max-{il}")
        vt = ops.cont(ops.permute(v, 1, 2, 0, 3)).set_name(f"v_cont-{il}")  # [T, hd, H]
        kqv = ops.mul_mat(vt, kq).set_name(f"kqv-{il}")  # [hd, T, H]
        attn = ops.cont_2d(ops.permute(kqv, 0, 2, 1, 3), n_embd, n_tokens).set_name(f"kqv_merged-{il}")
        attn = ops.mul_mat(w["wo"], attn).set_name(f"attn_out-{il}")
        x1 = ops.add(attn, inp).set_name(f"ffn_inp-{il}")
        f = ops.mul(ops.rms_norm(x1, EPS).set_name(f"ffn_norm-{il}"), w["ffn_norm"]).set_name(f"ffn_normed-{il}")
        gate = ops.mul_mat(w["w_gate"], f).set_name(f"ffn_gate-{il}")
        up = ops.mul_mat(w["w_up"], f).set_name(f"ffn_up-{il}")
        act = ops.swiglu(gate, up).set_name(f"ffn_swiglu-{il}")
        down = ops.mul_mat(w["w_down"], act).set_name(f"ffn_down-{il}")
        cur = ops.add(down, x1).set_name(f"l_out-{il}")
    cur.set_output()
    graph.build_forward_expand(cur)
    return LlamaGraph(graph, cur, x, pos, mask, layers, n_embd, n_head, n_ff, n_tokens, ctx, kv_idx, caches)


def _through_cache(
    ctx: Context,
    graph: Graph,
    k: Tensor,
    v: Tensor,
    idx: Tensor,
    caches: list[Tensor],
    il: int,
    given: list[Tensor] | None,
) -> tuple[Tensor, Tensor]:
    """Write K and V ([hd, H, T]) into this layer's caches, return views of the T cells written."""
    hd, n_head, n_tokens = k.ne[0], k.ne[1], k.ne[2]
    n_embd = hd * n_head
    out = []
    for i, (name, cur) in enumerate((("k", k), ("v", v))):
        cache = given[i] if given else ctx.new_tensor("f32", [n_embd, n_tokens], f"cache_{name}_l{il}")
        caches.append(cache)
        graph.build_forward_expand(ops.set_rows(cache, ops.reshape_2d(cur, n_embd, n_tokens), idx))
        out.append(ops.view_3d(cache, hd, n_head, n_tokens, hd * 4, n_embd * 4, 0).set_name(f"{name}_cache_view-{il}"))
    return out[0], out[1]


def alloc_caches(lg: LlamaGraph, where: Backend | BufferType) -> None:
    """Give the KV caches memory (a plain buffer: not weights, not compute)."""
    if lg.caches:
        alloc_ctx_tensors(lg.caches, where)


def alloc_weights(lg: LlamaGraph, where: Backend | BufferType | Callable[[int, str], Backend | BufferType]) -> None:
    """Put the weights in WEIGHTS buffers: all on one backend, or ``where(layer, name)`` per weight."""
    groups: dict[int, tuple[Backend | BufferType, list[Tensor]]] = {}
    for il, layer in enumerate(lg.weights):
        for name, t in layer.items():
            target = where(il, name) if callable(where) and not isinstance(where, (Backend, BufferType)) else where
            groups.setdefault(id(target), (target, []))[1].append(t)  # type: ignore[arg-type]
    for target, tensors in groups.values():
        alloc_ctx_tensors(tensors, target).set_usage(BufferUsage.WEIGHTS)


def random_values(lg: LlamaGraph, seed: int = 0) -> dict[str, np.ndarray]:
    """Reproducible weights and inputs (numpy shape), keyed by tensor name."""
    rng = np.random.default_rng(seed)
    vals: dict[str, np.ndarray] = {}
    for t in lg.weight_tensors():
        shape = (t.ne[1], t.ne[0]) if t.ne[1] > 1 else (t.ne[0],)
        scale = 1.0 if len(shape) == 1 else 1.0 / np.sqrt(t.ne[0])
        base = 1.0 if len(shape) == 1 else 0.0
        vals[t.name] = (base + scale * rng.standard_normal(shape)).astype(np.float32)
    vals.update(input_values(lg, rng))
    return vals


def input_values(lg: LlamaGraph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs: embeddings, positions 0..T-1, the cache cells written (shuffled), a causal mask over those cells."""
    t = lg.n_tokens
    # token i goes to cache cell cells[i]; a query may see the cells of tokens at or before its position
    cells = rng.permutation(t) if lg.kv_idx is not None else np.arange(t)
    token_of_cell = np.argsort(cells)
    mask = np.where(token_of_cell[None, :] <= np.arange(t)[:, None], 0.0, -np.inf).astype(np.float32)
    return {
        "inp_embd": rng.standard_normal((t, lg.n_embd)).astype(np.float32),
        "inp_pos": np.arange(t, dtype=np.int32),
        "kq_mask": mask,
        "kv_idx": cells.astype(np.int64),
    }


def set_weights(lg: LlamaGraph, vals: dict[str, np.ndarray]) -> None:
    """Upload the weights."""
    for t in lg.weight_tensors():
        t.set_data(vals[t.name])


def random_weights(
    lg: LlamaGraph, where: Backend | BufferType | Callable[[int, str], Backend | BufferType], seed: int = 0
) -> dict[str, np.ndarray]:
    """Allocate the weights (:func:`alloc_weights`) and upload :func:`random_values` of ``seed``; returns the
    values (the inputs' included)."""
    alloc_weights(lg, where)
    vals = random_values(lg, seed)
    set_weights(lg, vals)
    return vals


def set_inputs(lg: LlamaGraph, vals: dict[str, np.ndarray]) -> None:
    """Upload the inputs (after the graph is allocated)."""
    lg.x.set_data(vals["inp_embd"])
    lg.pos.set_data(vals["inp_pos"])
    lg.mask.set_data(vals["kq_mask"])
    if lg.kv_idx is not None:
        lg.kv_idx.set_data(vals["kv_idx"])


# ================================================================================================ numpy reference


def compute(sched: Scheduler, lg: LlamaGraph, vals: dict[str, np.ndarray]) -> np.ndarray:
    """Allocate the graph with ``sched``, upload the inputs, compute it; the output ([tokens, n_embd])."""
    sched.alloc_graph(lg.graph)
    set_inputs(lg, vals)
    sched.graph_compute(lg.graph)
    return lg.out.to_numpy()[0, 0]


def _rms(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + EPS)


def _rope(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """NORMAL rope on x [T, H, hd]: pairs (2i, 2i+1) rotate by pos * base^(-2i/hd)."""
    hd = x.shape[-1]
    theta = pos[:, None].astype(np.float64) * FREQ_BASE ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x, dtype=np.float64)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def reference(lg: LlamaGraph, vals: dict[str, np.ndarray]) -> np.ndarray:
    """The layers in float64 numpy, from the definitions; returns [T, n_embd]."""
    x = vals["inp_embd"].astype(np.float64)
    pos = vals["inp_pos"]
    mask = np.triu(np.full((lg.n_tokens, lg.n_tokens), -np.inf), k=1)  # causal, by token (from the definition)
    t, h = lg.n_tokens, lg.n_head
    hd = lg.n_embd // h
    for layer in lg.weights:
        w = {k: vals[v.name].astype(np.float64) for k, v in layer.items()}
        a = _rms(x) * w["attn_norm"]
        q = _rope((a @ w["wq"].T).reshape(t, h, hd), pos)
        k = _rope((a @ w["wk"].T).reshape(t, h, hd), pos)
        v = (a @ w["wv"].T).reshape(t, h, hd)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask[None]
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        p = scores / scores.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", p, v).reshape(t, lg.n_embd)
        x1 = o @ w["wo"].T + x
        f = _rms(x1) * w["ffn_norm"]
        g, u = f @ w["w_gate"].T, f @ w["w_up"].T
        x = (g / (1.0 + np.exp(-g)) * u) @ w["w_down"].T + x1
    return x
