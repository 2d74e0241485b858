"""Splits (pass 5 of ggml's ``ggml_backend_sched_split_graph``) and the graph the allocator plans.

A new split starts where the backend changes, where a weight of the current node lives on a backend the split
cannot read (so offloaded weight memory can be reused), and where the split already has
:data:`MAX_SPLIT_INPUTS` inputs and would need another; with ``cut_at_copies`` (the meta device's scheduler) also
before a node reading a result of another backend, so that the split's earlier nodes need not wait for it. An
operand on another backend whose memory the split's backend cannot use gets ``n_copies`` same-layout copies named
``"<backend>#<tensor>#<c>"``; the node reads copy ``cur_copy`` (its operand is rewired for as long as the
scheduler holds the graph — see :class:`SplitResult`).

The allocator then plans one graph: per split, each input's source (held by a dependency view so it is not freed
before the copy) and its copy, then the split's nodes; with pipeline copies all copies are leafs, allocated first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from ggml_core._errors import GraphError
from ggml_core._graph import Graph
from ggml_core._tensor import Tensor, TensorFlag
from ggml_core.backend.interfaces import BufferUsage
from ggml_core.ops._enum import VIEW_OPS, GGMLOp

if TYPE_CHECKING:
    from ggml_core.sched._placement import Placer

__all__ = ["MAX_SPLIT_INPUTS", "Split", "SplitResult", "split_graph"]

_INPUT: Final = int(TensorFlag.INPUT)  # plain ints: IntFlag arithmetic is slow in hot loops

#: a split takes at most this many inputs before a new one starts (``GGML_SCHED_MAX_SPLIT_INPUTS``)
MAX_SPLIT_INPUTS: Final = 30

_IO: Final = TensorFlag.INPUT | TensorFlag.OUTPUT


@dataclass
class Split:
    """Nodes ``[i_start, i_end)`` of the graph, run on one backend after copying ``inputs`` to it."""

    backend_id: int
    i_start: int
    i_end: int = 0
    inputs: list[Tensor] = field(default_factory=list)
    #: the split's nodes as a graph of their own (after the backend's graph_optimize)
    graph: Graph | None = None


@dataclass
class SplitResult:
    """One ``split_graph`` outcome: placement, splits, copies and the graph for the allocator.

    Kept and reused while the graph, its pre-allocated tensors and the user's assignments stay the same.
    """

    graph: Graph
    key: tuple[object, ...]
    ids: dict[int, int]
    causes: dict[int, str]
    splits: list[Split]
    #: (tensor id, backend id) → the n_copies copies of that tensor for that backend
    copies: dict[tuple[int, int], list[Tensor]]
    #: (node, operand index, original operand, copy read instead)
    rewires: list[tuple[Tensor, int, Tensor, Tensor]]
    graph_inputs: list[Tensor]
    alloc_graph: Graph
    node_ids: list[int]
    leaf_ids: list[int]
    cur_copy: int
    applied: bool = True

    def apply(self) -> None:
        """Point rewired operands at their copies."""
        if not self.applied:
            for node, j, _orig, cpy in self.rewires:
                node.src[j] = cpy
            self.applied = True

    def undo(self) -> None:
        """Give rewired nodes their original operands back."""
        if self.applied:
            for node, j, orig, _cpy in reversed(self.rewires):
                node.src[j] = orig
            self.applied = False

    def copy_of(self, t: Tensor, backend_id: int, c: int) -> Tensor:
        """Copy ``c`` of ``t`` for ``backend_id``."""
        return self.copies[(t.id, backend_id)][c]


def _dup_layout(src: Tensor, name: str) -> Tensor:
    """``ggml_dup_tensor_layout``: same type, shape and strides, no memory, no op."""
    return Tensor(None, src.type, src.ne, nb=src.nb, name=name)


def split_graph(
    placer: Placer, graph: Graph, key: tuple[object, ...], n_copies: int, cur_copy: int, *, cut_at_copies: bool = False
) -> SplitResult:
    """Cut ``graph`` (already placed by ``placer``) into splits, create the input copies, build the allocator graph.

    ``cut_at_copies``: also start a new split before a node that reads a result computed on another backend (not
    copied into the split yet), so that the nodes before it run without waiting for that backend.
    """
    ids = placer.ids
    backends = placer.backends
    nodes = graph.nodes
    copies: dict[tuple[int, int], list[Tensor]] = {}
    rewires: list[tuple[Tensor, int, Tensor, Tensor]] = []
    graph_inputs: list[Tensor] = []
    splits: list[Split] = []

    first = next((t for t in nodes if t.op not in VIEW_OPS), None)
    cur = ids.get(first.id, -1) if first is not None else len(backends) - 1
    split = Split(cur, 0)
    for i, node in enumerate(nodes):
        if node.op in VIEW_OPS:
            continue
        nb = ids.get(node.id, -1)
        if nb == -1:  # pragma: no cover - placement raises first
            raise GraphError(f"scheduler: node {node.describe()} has no backend after placement")
        need_new = False
        if nb == cur and split.inputs:
            for s in node.src:
                if s is None:
                    continue
                sb = ids.get(s.id, -1)
                buf = s.buffer
                # a weight the split cannot read: a new split lets the copied weight's memory be reused
                weight_elsewhere = buf is not None and buf.usage == BufferUsage.WEIGHTS and sb != cur
                if weight_elsewhere and not placer.buffer_supported(s, cur):
                    need_new = True
                    break
                full = len(split.inputs) >= MAX_SPLIT_INPUTS
                if full and sb != cur and (s.id, cur) not in copies and not placer.buffer_supported(s, cur):
                    need_new = True
                    break
        if cut_at_copies and nb == cur and not need_new and i > split.i_start:
            need_new = any(
                s is not None
                and s.op != GGMLOp.NONE
                and ids.get(s.id, -1) != cur
                and (s.id, cur) not in copies
                and not placer.buffer_supported(s, cur)
                for s in node.src
            )
        if nb != cur or need_new:
            split.i_end = i
            splits.append(split)
            split = Split(nb, i)
            cur = nb
        for j, s in enumerate(node.src):
            if s is None:
                continue
            sb = ids.get(s.id, -1)
            if sb == -1:  # pragma: no cover - placement fills every operand
                raise GraphError(f"scheduler: operand {s.describe()} of {node.describe()} has no backend")
            if n_copies > 1 and int(s.flags) & _INPUT and (s.id, sb) not in copies:
                # pipeline copies of a user input, on its own backend: the original is the current copy
                lst = []
                for c in range(n_copies):
                    tc = s if c == cur_copy else _dup_layout(s, f"{backends[sb].name}#{s.name}#{c}")
                    tc.flags |= _IO  # allocated first, never overwritten
                    lst.append(tc)
                copies[(s.id, sb)] = lst
                graph_inputs.append(s)
            if sb != cur and not placer.buffer_supported(s, cur):
                key_c = (s.id, cur)
                if key_c not in copies:
                    lst = []
                    for c in range(n_copies):
                        tc = _dup_layout(s, f"{backends[cur].name}#{s.name}#{c}")
                        if n_copies > 1:
                            tc.flags |= _IO
                        lst.append(tc)
                    copies[key_c] = lst
                    split.inputs.append(s)
                cpy = copies[key_c][cur_copy]
                rewires.append((node, j, s, cpy))
                node.src[j] = cpy
    split.i_end = len(nodes)
    splits.append(split)

    # the graph the allocator plans: inputs of each split first (source held by a dependency, then the copy)
    a_nodes: list[Tensor] = []
    node_ids: list[int] = []
    for sp in splits:
        sp.graph = graph.view(sp.i_start, sp.i_end)
        backends[sp.backend_id].graph_optimize(sp.graph)
        for inp in sp.inputs:
            dep = Tensor(None, inp.type, inp.ne, nb=inp.nb, view_src=inp, name=f"{inp.name} (dep)")
            dep.src[0] = inp
            a_nodes.append(dep)
            node_ids.append(ids[inp.id])
            a_nodes.append(copies[(inp.id, sp.backend_id)][cur_copy])
            node_ids.append(sp.backend_id)
        for t in sp.graph.nodes:
            a_nodes.append(t)
            node_ids.append(ids[t.id])
    a_leafs: list[Tensor] = []
    leaf_ids: list[int] = []
    if n_copies > 1:
        for inp in graph_inputs:
            b = ids[inp.id]
            for tc in copies[(inp.id, b)]:
                a_leafs.append(tc)
                leaf_ids.append(b)
        for sp in splits:
            for inp in sp.inputs:
                for tc in copies[(inp.id, sp.backend_id)]:
                    a_leafs.append(tc)
                    leaf_ids.append(sp.backend_id)
    for leaf in graph.leafs:
        a_leafs.append(leaf)
        leaf_ids.append(ids[leaf.id])
    agraph = Graph(max(len(a_nodes), len(a_leafs), 1))
    agraph.nodes = a_nodes
    agraph.leafs = a_leafs
    return SplitResult(
        graph=graph,
        key=key,
        ids=ids,
        causes=placer.causes,
        splits=splits,
        copies=copies,
        rewires=rewires,
        graph_inputs=graph_inputs,
        alloc_graph=agraph,
        node_ids=node_ids,
        leaf_ids=leaf_ids,
        cur_copy=cur_copy,
    )
