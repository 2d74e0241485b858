"""The forward graph of one batch: the frame every family shares, and the builder a family's layers are made with.

The frame, as llama.cpp's ``llm_build_*`` share it: GET_ROWS of the token embeddings (times the family's embedding
scale; normed by ``token_embd_norm`` where the family has its own frame norm), the family's layers one after the
other, then ``logits = (rms_norm(x) * output_norm)·Wout`` (the family's frame norm in place of the RMS norm where it
has one; the final softcapping where the family has it). The inputs of one batch (token ids, positions, per cache
group the mask and the cells to write) are graph inputs, so the graph depends only on (n_tokens, n_kv, which
outputs) and is reused from token to token; :meth:`BuiltGraph.write_inputs` writes them straight into the graph's
host memory (views made once per allocation), and :meth:`BuiltGraph.read_logits` copies the logits out once.
A family's layer (``build_layer`` in :mod:`ggml_core.models.arch`) is written with the
blocks of :mod:`ggml_core.models.blocks` over a :class:`GraphBuilder`; the frame takes the family as a
:class:`LayerFamily`, what it uses of an :class:`~ggml_core.models.arch.Architecture`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ggml_core import ops
from ggml_core._context import Context
from ggml_core._graph import Graph
from ggml_core._tensor import Tensor, TensorBuffer
from ggml_core.models.hparams import HParams
from ggml_core.models.kvcache import KVCache
from ggml_core.models.weights import ModelWeights

__all__ = ["BuiltGraph", "GraphBuilder", "LayerFamily", "build_graph", "graph_size_for", "rms_norm"]


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
    #: per tensor name: (buffer, byte offset, the buffer's host array, a flat writable view) of the last allocation
    _views: dict[str, tuple[TensorBuffer, int, np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def host_view(self, t: Tensor) -> np.ndarray | None:
        """A flat zero-copy view of ``t``'s memory when it is contiguous host memory, else None.

        Cached per tensor and re-checked on every call (same buffer, same offset, same host array, not freed), so
        a re-allocation of the graph (another graph ran in between, the scheduler re-split) makes a fresh view.
        """
        buf, off = t.buffer, t.data_offset
        got = self._views.get(t.name)
        if buf is None:
            return None
        if got is not None and got[0] is buf and got[1] == off and not buf.freed and buf.host_array() is got[2]:
            return got[3]
        if off is None or buf.freed or not t.is_contiguous or t.type.np_dtype is None:
            return None
        host = buf.host_array()
        if host is None:
            return None
        view = t.numpy_view().reshape(-1)
        if not view.flags.writeable:
            return None
        self._views[t.name] = (buf, off, host, view)
        return view

    def write_inputs(self, kv: KVCache, ids: np.ndarray, pos: np.ndarray, *, flash_attn: bool) -> None:
        """Write one batch's inputs (token ids, positions, per cache group the mask and the cells to write):
        in place where an input lives in host memory, through ``set_data`` elsewhere. Call after
        :meth:`KVCache.record` of ``pos``."""
        if len(pos) == 1 and self._write_one(kv, ids, pos):
            return
        self._write("tokens", ids)
        if "pos" in self.inputs:
            self._write("pos", pos)
        if "s_ids" in self.inputs:
            self._write("s_ids", _STATE_ROW)
        for group in kv.groups:
            sfx = "" if group == "full" else "_" + group
            mask = self.inputs["mask" + sfx]
            view = self.host_view(mask)
            if view is not None:
                kv.mask_into(view.reshape(self.n_tokens, -1), group, pos)
            else:
                m = kv.mask(group, pos, mask.ne[0])
                mask.set_data(m.astype(np.float16) if flash_attn else m)
            cells = kv.cells(group, pos)
            self._write("k_idxs" + sfx, cells)
            if kv.v_trans:
                v_idxs = self.inputs["v_idxs" + sfx]
                view = self.host_view(v_idxs)
                if view is not None:
                    kv.v_indices_into(view.reshape(self.n_tokens, -1), cells, group)
                else:
                    v_idxs.set_data(kv.v_indices(cells, group))

    def _write_one(self, kv: KVCache, ids: np.ndarray, pos: np.ndarray) -> bool:
        """:meth:`write_inputs` of a decode step's one token, element by element into host memory (no index
        arrays); False, nothing written, when an input is not in host memory or not one token's."""
        view: dict[str, np.ndarray] = {}
        for name, t in self.inputs.items():
            v = self.host_view(t)
            if v is None:
                return False
            view[name] = v
        if view["tokens"].size != 1 or view.get("pos", _STATE_ROW).size != 1:
            return False
        p = int(pos[0])
        view["tokens"][0] = ids[0]
        if "pos" in view:
            view["pos"][0] = p
        if "s_ids" in view:
            view["s_ids"][0] = 0
        for group in kv.groups:
            sfx = "" if group == "full" else "_" + group
            kv.mask_into(view["mask" + sfx].reshape(1, -1), group, pos)
            cell = p % kv.group_size(group)
            view["k_idxs" + sfx][0] = cell
            if kv.v_trans:
                kv.v_indices_into(view["v_idxs" + sfx].reshape(1, -1), np.array([cell]), group)
        return True

    def _write(self, name: str, values: np.ndarray) -> None:
        t = self.inputs[name]
        view = self.host_view(t)
        if view is not None and view.dtype == values.dtype and view.size == values.size:
            view[...] = values.reshape(-1)
        else:
            t.set_data(values)

    def read_logits(self, n_vocab: int) -> np.ndarray:
        """The logits as a new float32 array ``[rows, n_vocab]`` (one copy straight from host memory)."""
        view = self.host_view(self.logits)
        if view is not None and view.dtype == np.float32:
            return view.reshape(-1, n_vocab).copy()
        return self.logits.to_numpy().reshape(-1, n_vocab).astype(np.float32, copy=False)


def graph_size_for(hp: HParams) -> int:
    """A node budget for the model's graph."""
    per_layer = 80 + (24 + 2 * hp.n_expert_used if hp.is_moe else 0)
    return max(2048, hp.n_layer * per_layer + 128)


#: the state row a recurrent layer's one sequence reads (SSM_SCAN's ``ids``)
_STATE_ROW = np.zeros(1, dtype=np.int32)


def _input(ctx: Context, name: str, type: str, *ne: int) -> Tensor:
    return ctx.new_tensor(type, ne, name).set_input()


class GraphBuilder:
    """One batch's graph under construction: the weights, the cache, the inputs, and the graph the cache writes go
    into. Inputs: ``tokens``, ``pos``, and per cache group ``g`` (``full``; ``swa`` when the model has
    sliding-window layers) ``mask`` / ``k_idxs`` / ``v_idxs`` (suffixed ``_swa``); ``s_ids`` (the state row of the
    sequence) when the model has recurrent layers. Inputs no node reads are dropped when the graph is done."""

    def __init__(
        self,
        ctx: Context,
        hp: HParams,
        w: ModelWeights,
        kv: KVCache,
        n_tokens: int,
        n_kv: int,
        *,
        all_logits: bool,
        flash_attn: bool,
        graph_size: int,
    ) -> None:
        self.ctx, self.hp, self.w, self.kv = ctx, hp, w, kv
        self.n_tokens, self.n_kv, self.all_logits, self.flash_attn = n_tokens, n_kv, all_logits, flash_attn
        self.graph = Graph(graph_size)
        self.inputs: dict[str, Tensor] = {
            "tokens": _input(ctx, "inp_tokens", "i32", n_tokens),
            "pos": _input(ctx, "inp_pos", "i32", n_tokens),
        }
        for g in kv.groups:
            sfx = "" if g == "full" else "_" + g
            n = kv.n_kv(g, n_kv)
            self.inputs["mask" + sfx] = _input(ctx, "kq_mask" + sfx, "f16" if flash_attn else "f32", n, n_tokens)
            k_idxs = _input(ctx, "k_idxs" + sfx, "i64", n_tokens)
            self.inputs["k_idxs" + sfx] = k_idxs
            self.inputs["v_idxs" + sfx] = (
                _input(ctx, "v_idxs" + sfx, "i64", n_tokens * hp.n_embd_v_gqa) if kv.v_trans else k_idxs
            )
        if hp.has_recurrent:
            self.inputs["s_ids"] = _input(ctx, "inp_s_ids", "i32", 1)
        #: tensors a family hands from one layer to the next (RWKV-7: the first layer's values)
        self.carry: dict[str, Tensor] = {}

    def layer(self, il: int, name: str) -> Tensor:
        """Weight ``blk.{il}.{name}``."""
        return self.w[f"blk.{il}.{name}"]

    def layer_opt(self, il: int, name: str) -> Tensor | None:
        """Weight ``blk.{il}.{name}``, or None when the model has none."""
        return self.w.get(f"blk.{il}.{name}")

    def group_input(self, il: int, name: str) -> Tensor:
        """Input ``name`` (mask, k_idxs, v_idxs) of layer ``il``'s cache group."""
        g = self.kv.group(il)
        return self.inputs[name if g == "full" else f"{name}_{g}"]

    def last_only(self, il: int, t: Tensor) -> Tensor:
        """In the last layer, when only the last token's logits are wanted: its row of ``t`` (skip the others)."""
        if il != self.hp.n_layer - 1 or self.all_logits or self.n_tokens == 1:
            return t
        return ops.view_2d(t, t.ne[0], 1, t.nb[1], (self.n_tokens - 1) * t.nb[1])


def rms_norm(g: GraphBuilder, x: Tensor, w: Tensor) -> Tensor:
    """``rms_norm(x) * w`` over ne[0] (per head for a 3-D ``[head_dim, n_head, n_tokens]``)."""
    return ops.mul(ops.rms_norm(x, g.hp.rms_eps), w)


class LayerFamily(Protocol):
    """What the frame uses of a model family (:class:`~ggml_core.models.arch.Architecture` has it)."""

    @property
    def build_layer(self) -> Callable[[GraphBuilder, int, Tensor], Tensor]:
        """The graph of layer ``il``: residual stream in, residual stream out."""

    @property
    def frame_norm(self) -> Callable[[GraphBuilder, Tensor, str], Tensor] | None:
        """The frame's norm where it is not ``rms_norm(x)·output_norm``."""


def build_graph(
    arch: LayerFamily,
    hp: HParams,
    w: ModelWeights,
    kv: KVCache,
    n_tokens: int,
    n_kv: int,
    *,
    all_logits: bool,
    flash_attn: bool = False,
) -> BuiltGraph:
    """The graph of one batch of ``n_tokens`` attending over the first ``n_kv`` cells of the full layers.

    Every intermediate lives in a fresh context of its own (``with ctx:``), never in the weights' or the cache's.
    """
    with Context(f"{hp.arch} batch {n_tokens}x{n_kv}") as ctx:
        g = GraphBuilder(
            ctx, hp, w, kv, n_tokens, n_kv, all_logits=all_logits, flash_attn=flash_attn, graph_size=graph_size_for(hp)
        )
        x = ops.get_rows(w["token_embd.weight"], g.inputs["tokens"]).set_name("inp_embd")
        if hp.embd_scale != 1.0:
            x = ops.scale(x, hp.embd_scale)
        if arch.frame_norm is not None:
            x = arch.frame_norm(g, x, "token_embd_norm")
        for il in range(hp.n_layer):
            x = arch.build_layer(g, il, x)
        h = arch.frame_norm(g, x, "output_norm") if arch.frame_norm else rms_norm(g, x, w["output_norm.weight"])
        h.set_name("result_norm")
        logits = ops.mul_mat(w["output.weight"], h)
        if hp.final_softcap:
            logits = ops.scale(ops.tanh(ops.scale(logits, 1.0 / hp.final_softcap)), hp.final_softcap)
        if hp.logit_scale:  # Granite divides its logits
            logits = ops.scale(logits, 1.0 / hp.logit_scale)
        logits.set_name("result_output").set_output()
        g.graph.build_forward_expand(logits)
        used = {t.id for t in g.graph.leafs}
        inputs = {name: t for name, t in g.inputs.items() if t.id in used}  # e.g. no positions without rope
        return BuiltGraph(g.graph, ctx, logits, n_tokens, n_kv, all_logits, inputs)
