"""Liveness planning for the graph allocator: where each tensor of a graph goes (ggml's ``ggml_gallocr`` walk).

Planning walks the graph once, as ggml does:

1. leafs that nothing allocated yet get memory first, then every ``INPUT`` tensor (so nothing computed earlier can
   overwrite them);
2. each node's children and views are counted;
3. nodes are visited in order: a node takes memory (in place of its parent for the ops ggml allows, when the parent
   has this node as its only consumer, the same layout and is not an output), then each parent whose last consumer
   this was is freed — views keep their source alive, ``OUTPUT`` tensors are never freed.

The result, a :class:`Plan`, is a ``(buffer, chunk, offset, bytes)`` per node, per operand and per leaf, plus the
chunk sizes each buffer type needs and the graph's structure (what another graph must share to reuse the plan).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ggml_core._errors import GraphError
from ggml_core._tensor import Tensor, TensorFlag
from ggml_core.alloc._dyn import DynAllocator, pad
from ggml_core.ops._enum import GGMLOp

if TYPE_CHECKING:
    from ggml_core._graph import Graph
    from ggml_core.backend.interfaces import BufferType

__all__ = [
    "INPLACE_OPS",
    "NO_ALLOC",
    "Plan",
    "TensorAlloc",
    "buffer_ids",
    "can_inplace",
    "plan_graph",
    "same_layout",
    "shapes",
    "structure",
]

_INPUT: Final = int(TensorFlag.INPUT)  # plain ints: IntFlag arithmetic is slow in hot loops
_OUTPUT: Final = int(TensorFlag.OUTPUT)
_IO: Final = _INPUT | _OUTPUT

#: ops whose result may take its operand's memory (``ggml_op_can_inplace``); their kernels must allow dst == src
INPLACE_OPS: Final = frozenset(
    {
        GGMLOp.FILL,
        GGMLOp.SCALE,
        GGMLOp.DIAG_MASK_ZERO,
        GGMLOp.DIAG_MASK_INF,
        GGMLOp.ADD,
        GGMLOp.ADD_ID,
        GGMLOp.ADD1,
        GGMLOp.SUB,
        GGMLOp.MUL,
        GGMLOp.DIV,
        GGMLOp.SQR,
        GGMLOp.SQRT,
        GGMLOp.LOG,
        GGMLOp.UNARY,
        GGMLOp.ROPE,
        GGMLOp.ROPE_BACK,
        GGMLOp.SILU_BACK,
        GGMLOp.RMS_NORM,
        GGMLOp.RMS_NORM_BACK,
        GGMLOp.SOFT_MAX,
        GGMLOp.SOFT_MAX_BACK,
    }
)


def can_inplace(op: GGMLOp) -> bool:
    """``ggml_op_can_inplace``: may this op's result share its operand's memory?"""
    return op in INPLACE_OPS


def same_layout(a: Tensor, b: Tensor) -> bool:
    """``ggml_are_same_layout``: same type, shape and strides."""
    return a.type == b.type and a.ne == b.ne and a.nb == b.nb


@dataclass(frozen=True)
class TensorAlloc:
    """Where the plan put one tensor; ``buffer_id == -1`` for views, pre-allocated and absent tensors."""

    buffer_id: int
    chunk: int
    offset: int
    #: the bytes reserved (``alloc_size`` at planning time); a later tensor at this place may not need more
    size_max: int


#: what views, pre-allocated and absent tensors get
NO_ALLOC: Final = TensorAlloc(-1, -1, -1, 0)


class _HashNode:
    """Planning state of one tensor."""

    __slots__ = ("allocated", "buffer_id", "chunk", "n_children", "n_views", "offset")

    def __init__(self) -> None:
        self.n_children = 0
        self.n_views = 0
        self.buffer_id = -1
        self.chunk = -1
        self.offset = -1
        self.allocated = False


@dataclass
class Plan:
    """One planning result, reusable for every graph of the same structure."""

    nodes: list[TensorAlloc]
    srcs: list[tuple[TensorAlloc, ...]]
    leafs: list[TensorAlloc]
    #: per allocator (in buffer-id order, shared allocators once): bytes each chunk needs
    chunk_sizes: list[list[int]]
    structure: tuple[object, ...]
    ids: tuple[tuple[int, ...], tuple[int, ...]]
    n_inplace: int
    #: type, ne, nb of every leaf and node: a graph of this structure with these shapes fits without size checks
    shapes: tuple[object, ...] = ()


def plan_graph(
    graph: Graph,
    bufts: Sequence[BufferType],
    allocs: Sequence[DynAllocator],
    external: Callable[[Tensor], bool],
    node_ids: Sequence[int] | None,
    leaf_ids: Sequence[int] | None,
) -> Plan:
    """Plan every tensor of ``graph`` the allocators must place (see the module docstring); resets ``allocs``.

    ``allocs[i]`` plans buffer id ``i`` (shared buffer types share one); ``external(t)`` is True for memory to
    respect; ``node_ids`` / ``leaf_ids`` give each node's / leaf's buffer id (default 0).
    """
    nodes, leafs = graph.nodes, graph.leafs
    for name, ids, n in (("node", node_ids, len(nodes)), ("leaf", leaf_ids, len(leafs))):
        if ids is not None and len(ids) < n:
            raise GraphError(f"graph allocator: {len(ids)} {name} buffer ids for {n} {name}s")
        if ids is not None and any(not 0 <= b < len(bufts) for b in ids[:n]):
            raise GraphError(f"graph allocator: a {name} buffer id is outside 0..{len(bufts) - 1}")
    for a in allocs:
        a.reset()
    hash_: dict[int, _HashNode] = {}
    n_inplace = 0

    def hn(t: Tensor) -> _HashNode:
        h = hash_.get(t.id)
        if h is None:
            h = hash_[t.id] = _HashNode()
        return h

    def allocate(t: Tensor, buffer_id: int) -> None:
        nonlocal n_inplace
        if t.view_src is not None:
            return
        if t.buffer is not None and external(t):
            return  # pre-allocated
        h = hn(t)
        if h.allocated:
            return
        h.allocated = True
        if t.op in INPLACE_OPS:
            for parent in t.src:
                if parent is None:
                    continue
                ph = hash_.get(parent.id)
                # only a parent this plan allocated itself (never a view: views are not "own" here, as in ggml)
                if ph is None or not ph.allocated or parent.view_src is not None:
                    continue
                if int(parent.flags) & _OUTPUT or not same_layout(t, parent):
                    continue
                if ph.n_children == 1 and ph.n_views == 0:
                    h.buffer_id, h.chunk, h.offset = ph.buffer_id, ph.chunk, ph.offset
                    ph.allocated = False  # the node owns the memory now
                    _free_extra(t, parent, h)
                    n_inplace += 1
                    return
        size = bufts[buffer_id].alloc_size(t)
        h.buffer_id = buffer_id
        h.chunk, h.offset = allocs[buffer_id].alloc(size, t)

    def _free_extra(node: Tensor, parent: Tensor, h: _HashNode) -> None:
        buft = bufts[h.buffer_id]
        alloc = allocs[h.buffer_id]
        parent_size = pad(buft.alloc_size(parent), alloc.alignment)
        node_size = pad(buft.alloc_size(node), alloc.alignment)
        if parent_size > node_size:
            alloc.free(h.chunk, h.offset + node_size, parent_size - node_size)

    def free(t: Tensor) -> None:
        if int(t.flags) & _OUTPUT:
            return
        h = hash_[t.id]
        allocs[h.buffer_id].free(h.chunk, h.offset, bufts[h.buffer_id].alloc_size(t))
        h.allocated = False

    def nid(i: int) -> int:
        return node_ids[i] if node_ids is not None else 0

    for i, leaf in enumerate(leafs):
        allocate(leaf, leaf_ids[i] if leaf_ids is not None else 0)
    for i, node in enumerate(nodes):
        # op NONE views are the scheduler's dependency markers: they hold their operand, not their source
        if node.view_src is not None and node.op != GGMLOp.NONE:
            hn(node.view_src).n_views += 1
        if int(node.flags) & _INPUT:
            allocate(node, nid(i))
        for src in node.src:
            if src is None:
                continue
            hn(src).n_children += 1
            if int(src.flags) & _INPUT:
                allocate(src, nid(i))
    for i, node in enumerate(nodes):
        bid = nid(i)
        srcs = [s for s in node.src if s is not None]
        for parent in srcs:
            allocate(parent, bid)
        allocate(node, bid)
        for parent in srcs:
            ph = hash_[parent.id]
            ph.n_children -= 1
            if ph.n_children == 0 and ph.n_views == 0:
                base = parent.view_src
                if base is not None:
                    vh = hn(base)
                    vh.n_views -= 1
                    if vh.n_views == 0 and vh.n_children == 0 and vh.allocated:
                        free(base)
                elif ph.allocated:
                    free(parent)

    def record(t: Tensor | None) -> TensorAlloc:
        if t is None or t.view_src is not None or external(t):
            return NO_ALLOC
        h = hash_[t.id]
        return TensorAlloc(h.buffer_id, h.chunk, h.offset, bufts[h.buffer_id].alloc_size(t))

    return Plan(
        nodes=[record(n) for n in nodes],
        srcs=[tuple(record(s) for s in n.src if s is not None) for n in nodes],
        leafs=[record(leaf) for leaf in leafs],
        chunk_sizes=[[c.max_size for c in a.chunks] for a in allocs],
        structure=structure(graph, external),
        ids=buffer_ids(node_ids, leaf_ids, graph),
        n_inplace=n_inplace,
        shapes=shapes(graph),
    )


def shapes(graph: Graph) -> tuple[object, ...]:
    """Type and layout of every leaf and node (operands outside the graph make it unusable: an empty tuple)."""
    inside = {t.id for t in graph.leafs}
    inside.update(t.id for t in graph.nodes)
    if any(s is not None and s.id not in inside for t in graph.nodes for s in t.src):
        return ()
    return tuple((t.type, t.ne, t.nb) for t in (*graph.leafs, *graph.nodes))


def structure(graph: Graph, external: Callable[[Tensor], bool]) -> tuple[object, ...]:
    """What a plan depends on besides sizes: ops, flags, operand positions, views and pre-allocated tensors."""
    pos: dict[int, int] = {}
    for i, t in enumerate(graph.leafs):
        pos[t.id] = -1 - i
    for i, t in enumerate(graph.nodes):
        pos[t.id] = i
    ext = external
    leafs = tuple((int(t.flags) & _IO, t.view_src is not None, ext(t)) for t in graph.leafs)
    nodes = tuple(
        (
            t.op,
            int(t.flags) & _IO,
            pos.get(t.view_src.id) if t.view_src is not None else ext(t),
            tuple(pos.get(s.id) if s is not None else None for s in t.src),
        )
        for t in graph.nodes
    )
    return (leafs, nodes)


def buffer_ids(
    node_ids: Sequence[int] | None, leaf_ids: Sequence[int] | None, graph: Graph
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return (
        tuple(node_ids[: len(graph.nodes)]) if node_ids is not None else (),
        tuple(leaf_ids[: len(graph.leafs)]) if leaf_ids is not None else (),
    )
