"""The graph allocator (ggml's ``ggml_gallocr``): plans a graph's intermediate tensors into one buffer per buffer type.

:mod:`ggml_core.alloc._liveness` makes the plan (where each tensor goes, with in-place reuse and frees at last use);
:meth:`GraphAllocator.reserve` makes it and sizes the buffers; :meth:`GraphAllocator.alloc_graph` binds a graph's
tensors to those addresses without planning again while the graph has the same structure and no tensor outgrew its
reserved size (the worst case is reserved once; smaller batches reuse it).

Tensors this allocator bound earlier (an earlier graph, or the same graph last time) count as unallocated: their
memory belongs to the allocator, and re-running a graph re-binds them. Tensors in any other buffer are left alone.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ggml_core._errors import AllocationError, GraphError
from ggml_core._tensor import Tensor, TensorBuffer, TensorFlag
from ggml_core.alloc._dyn import DynAllocator
from ggml_core.alloc._liveness import Plan, TensorAlloc, buffer_ids, plan_graph, shapes, structure
from ggml_core.backend.interfaces import Buffer, BufferType, BufferUsage, buffer_of
from ggml_core.ops._enum import GGMLOp

if TYPE_CHECKING:
    from ggml_core._graph import Graph

__all__ = ["GraphAllocator"]

_INPUT: Final = int(TensorFlag.INPUT)
#: how many graphs keep their plan and bindings for instant reuse
_GRAPH_CACHE: Final = 8


@dataclass
class _Bound:
    """A plan applied to one graph object: the bindings to check on every later ``alloc_graph``."""

    plan: Plan
    owned: list[tuple[Tensor, int, int, int]]  # tensor, buffer id, chunk, offset
    views: list[Tensor]
    external: list[Tensor]


class GraphAllocator:
    """Plans and binds the intermediate tensors of graphs into compute buffers, one per buffer type.

    :param bufts: one buffer type, or one per "buffer id" (the scheduler passes one per backend); a buffer type
        given several times shares one allocator and one buffer, as in ggml
    """

    def __init__(self, bufts: BufferType | Sequence[BufferType]) -> None:
        self.bufts: list[BufferType] = [bufts] if isinstance(bufts, BufferType) else list(bufts)
        if not self.bufts:
            raise ValueError("GraphAllocator needs at least one buffer type")
        self._allocs: list[DynAllocator] = []
        self._first: list[int] = []  # for each buffer id, the first buffer id sharing its buffer type
        for i, buft in enumerate(self.bufts):
            j = next(k for k in range(i + 1) if self.bufts[k] is buft)
            self._first.append(j)
            self._allocs.append(self._allocs[j] if j < i else DynAllocator(buft.alignment, buft.max_size))
        self._buffers: list[list[Buffer] | None] = [None] * len(self.bufts)
        self._own: weakref.WeakSet[Buffer] = weakref.WeakSet()
        self._plan: Plan | None = None
        self._bound: OrderedDict[int, _Bound] = OrderedDict()
        #: how many times a graph was planned (reserve / automatic re-reserve); reuse does not count
        self.n_plans = 0
        #: how many compute buffers were allocated on devices
        self.n_buffer_allocs = 0

    def __repr__(self) -> str:
        sizes = ", ".join(f"{b.name}={self.get_buffer_size(i)}" for i, b in enumerate(self.bufts))
        return f"GraphAllocator({sizes})"

    @property
    def n_buffers(self) -> int:
        """Number of buffer ids."""
        return len(self.bufts)

    @property
    def n_inplace(self) -> int:
        """How many nodes of the last plan took their operand's memory."""
        return self._plan.n_inplace if self._plan else 0

    # ------------------------------------------------------------------------------------------- ownership

    def owns(self, t: Tensor) -> bool:
        """True when ``t`` (or its view source) is bound to memory of this allocator."""
        buf = t.view_src.buffer if t.view_src is not None else t.buffer
        return buf is not None and buf in self._own

    def owns_buffer(self, buf: Buffer) -> bool:
        """True for a compute buffer this allocator allocated (including ones it has since replaced)."""
        return buf in self._own

    def external_buffer(self, t: Tensor) -> Buffer | None:
        """The memory ``t`` (or its view source) already has and that must be respected, else None.

        That is every buffer but this allocator's own compute buffers, and but another allocator's compute buffer
        holding a node or a graph input (scratch of a graph another allocator ran: this graph recomputes the node,
        and its inputs are set after allocation anyway). Other tensors in compute memory (results a user keeps
        feeding back) are respected.
        """
        base = t.view_src if t.view_src is not None else t
        buf = buffer_of(base)
        if buf is None or buf in self._own:
            return None
        if buf.usage == BufferUsage.COMPUTE and (base.op != GGMLOp.NONE or int(base.flags) & _INPUT):
            return None
        return buf

    def _external(self, t: Tensor) -> bool:
        # memory somebody else bound (weights, a KV cache, a user's buffer): never planned, never touched
        return t.buffer is not None and self.external_buffer(t) is not None

    # ------------------------------------------------------------------------------------------- planning

    def _plan_graph(self, graph: Graph, node_ids: Sequence[int] | None, leaf_ids: Sequence[int] | None) -> Plan:
        plan = plan_graph(graph, self.bufts, self._allocs, self._external, node_ids, leaf_ids)
        self.n_plans += 1
        return plan

    def _fits(self, plan: Plan, graph: Graph) -> bool:
        """ggml's reuse rule (same counts, no tensor larger than reserved) plus the same structure."""
        if len(graph.nodes) != len(plan.nodes) or len(graph.leafs) != len(plan.leafs):
            return False
        if structure(graph, self._external) != plan.structure:
            return False
        if plan.shapes and shapes(graph) == plan.shapes:
            return True  # the very tensors' shapes that were planned
        checked: set[int] = set()  # a tensor read by several nodes is checked once

        def ok(t: Tensor, ta: TensorAlloc) -> bool:
            if t.id in checked:
                return True
            checked.add(t.id)
            return self._size_ok(t, ta)

        for i, node in enumerate(graph.nodes):
            if not ok(node, plan.nodes[i]):
                return False
            srcs = [s for s in node.src if s is not None]
            for s, ta in zip(srcs, plan.srcs[i], strict=True):
                if not ok(s, ta):
                    return False
        return all(ok(t, ta) for t, ta in zip(graph.leafs, plan.leafs, strict=True))

    def _size_ok(self, t: Tensor, ta: TensorAlloc) -> bool:
        if t.view_src is not None or self._external(t):
            return True
        return ta.buffer_id >= 0 and self.bufts[ta.buffer_id].alloc_size(t) <= ta.size_max

    # ------------------------------------------------------------------------------------------- buffers

    def _ensure_buffers(self, plan: Plan) -> None:
        for i, buft in enumerate(self.bufts):
            j = self._first[i]
            if j < i:
                self._buffers[i] = self._buffers[j]
                continue
            chunks = self._allocs[i].chunks
            need = plan.chunk_sizes[i]
            cur = self._buffers[i]
            realloc = cur is None or len(need) > len(cur) or any(n > cur[c].size for c, n in enumerate(need))
            if not realloc:
                continue
            # never shrink a chunk: plans made earlier for other graphs stay valid
            sizes = [max(n, cur[c].size if cur is not None and c < len(cur) else 0) for c, n in enumerate(need)]
            if cur is not None:
                for b in cur:
                    b.free()
            self._buffers[i] = None
            new: list[Buffer] = []
            for c, size in enumerate(sizes):
                peak = chunks[c].peak_tensor if c < len(chunks) else None
                new.append(self._alloc_chunk(buft, size, c, len(sizes), peak))
            self._buffers[i] = new
        for i in range(len(self.bufts)):
            if self._first[i] < i:
                self._buffers[i] = self._buffers[self._first[i]]

    def _alloc_chunk(self, buft: BufferType, size: int, c: int, n: int, peak: Tensor | None) -> Buffer:
        dev = buft.device.name if buft.device is not None else buft.name
        where = f"compute buffer {buft.name}" + (f" (chunk {c + 1} of {n})" if n > 1 else "")
        culprit = f"the peak is reached at node {peak.describe()} (op {peak.op_desc})" if peak is not None else ""
        if size > buft.max_size:
            what = "one tensor is larger than" if peak is not None and buft.alloc_size(peak) > buft.max_size else ""
            raise AllocationError(
                dev,
                size,
                reason=f"{where}: {what or 'over'} the buffer type's maximum of {buft.max_size} bytes; {culprit}",
            )
        try:
            buf = buft.alloc_buffer(size)
        except AllocationError as exc:
            raise AllocationError(dev, size, exc.free, f"{where}: {culprit}: {exc}") from exc
        except (MemoryError, RuntimeError, OSError, ValueError) as exc:
            raise AllocationError(dev, size, reason=f"{where}: {culprit}: {type(exc).__name__}: {exc}") from exc
        if buf is None:
            raise AllocationError(dev, size, reason=f"{where}: the buffer type returned no buffer; {culprit}")
        buf.set_usage(BufferUsage.COMPUTE)
        self._own.add(buf)
        self.n_buffer_allocs += 1
        return buf

    # ------------------------------------------------------------------------------------------- public API

    def reserve(
        self,
        graph: Graph,
        node_buffer_ids: Sequence[int] | None = None,
        leaf_buffer_ids: Sequence[int] | None = None,
    ) -> None:
        """Plan ``graph`` (``ggml_gallocr_reserve_n``) and grow the compute buffers to fit; binds nothing.

        ``node_buffer_ids[i]`` / ``leaf_buffer_ids[i]`` say which buffer id each node / leaf lives in (default 0).
        Raises :class:`~ggml_core.AllocationError` naming the device and the node at the peak when a buffer cannot
        be allocated.
        """
        ids = buffer_ids(node_buffer_ids, leaf_buffer_ids, graph)
        bound = self._bound.get(graph.uid)
        if bound is not None and bound.plan.ids == ids and self._buffers_fit(bound.plan):
            self._plan = bound.plan  # this very graph was planned with these buffer ids already
            return
        plan = self._plan_graph(graph, node_buffer_ids, leaf_buffer_ids)
        self._plan = None
        self._ensure_buffers(plan)
        self._plan = plan
        self._bound.pop(graph.uid, None)

    def reserve_size(
        self,
        graph: Graph,
        node_buffer_ids: Sequence[int] | None = None,
        leaf_buffer_ids: Sequence[int] | None = None,
    ) -> list[int]:
        """A dry run of :meth:`reserve`: the bytes each buffer id would need (shared buffer types counted once)."""
        plan = self._plan_graph(graph, node_buffer_ids, leaf_buffer_ids)
        return [sum(plan.chunk_sizes[i]) if self._first[i] == i else 0 for i in range(len(self.bufts))]

    def alloc_graph(self, graph: Graph) -> bool:
        """Bind every intermediate tensor of ``graph`` to its planned address (``ggml_gallocr_alloc_graph``).

        Uses the plan of this graph, or the current plan when ``graph`` has the same structure and no tensor needs
        more bytes than reserved. Otherwise one buffer type re-plans automatically; several return False (the
        caller must :meth:`reserve`), as in ggml.
        """
        bound = self._bound.get(graph.uid)
        if bound is not None and self._buffers_fit(bound.plan) and self._apply(bound, graph):
            self._bound.move_to_end(graph.uid)
            return True
        plan = self._plan
        if plan is None or not self._buffers_fit(plan) or not self._fits(plan, graph):
            if len(self.bufts) > 1:
                return False
            self.reserve(graph)
            plan = self._plan
            assert plan is not None
        bound = self._bind_list(plan, graph)
        if not self._apply(bound, graph):
            if len(self.bufts) > 1:
                return False
            self._bound.pop(graph.uid, None)
            self._plan = None
            self.reserve(graph)
            assert self._plan is not None
            bound = self._bind_list(self._plan, graph)
            if not self._apply(bound, graph):  # pragma: no cover - a fresh plan always applies
                raise GraphError("graph allocator: a fresh plan could not be applied")
        self._bound[graph.uid] = bound
        while len(self._bound) > _GRAPH_CACHE:
            self._bound.popitem(last=False)
        return True

    def _buffers_fit(self, plan: Plan) -> bool:
        for i in range(len(self.bufts)):
            if self._first[i] < i:
                continue
            need = plan.chunk_sizes[i]
            cur = self._buffers[i]
            if cur is None or len(need) > len(cur) or any(n > cur[c].size for c, n in enumerate(need)):
                return False
        return True

    def _bind_list(self, plan: Plan, graph: Graph) -> _Bound:
        owned: list[tuple[Tensor, int, int, int]] = []
        views: list[Tensor] = []
        external: list[Tensor] = []
        seen: set[int] = set()

        def add(t: Tensor, ta: TensorAlloc) -> None:
            if t.id in seen:
                return
            seen.add(t.id)
            if t.view_src is not None:
                views.append(t)
            elif ta.buffer_id < 0:
                external.append(t)
            else:
                owned.append((t, ta.buffer_id, ta.chunk, ta.offset))

        for leaf, ta in zip(graph.leafs, plan.leafs, strict=True):
            add(leaf, ta)
        for i, node in enumerate(graph.nodes):
            srcs = [s for s in node.src if s is not None]
            for s, ta in zip(srcs, plan.srcs[i], strict=True):
                add(s, ta)
            add(node, plan.nodes[i])
        return _Bound(plan, owned, views, external)

    def _apply(self, bound: _Bound, graph: Graph) -> bool:
        """Bind the tensors; False when a tensor planned as pre-allocated has lost its memory."""
        for t in bound.external:
            if t.buffer is None:
                return False
        buffers = self._buffers
        ext = self._external
        for t, bid, chunk, offset in bound.owned:
            vb = buffers[bid]
            assert vb is not None
            buf = vb[chunk]
            cur = t.buffer
            if cur is buf and t.data_offset == offset:
                continue
            if cur is not None and ext(t):
                continue  # bound elsewhere since planning: leave it (its planned memory stays unused)
            keep = _carried_input(t, cur)
            t.buffer = None
            t.data_offset = None
            buf.alloc_tensor(t, offset)
            if keep is not None:
                buf.set_tensor(t, memoryview(keep))
        for v in bound.views:
            base = v.view_src
            assert base is not None
            if base.buffer is None:
                if v.buffer is None:
                    continue  # a view of a tensor nobody allocated: ggml leaves it too
                return False
            if v.buffer is not base.buffer or v.data_offset != (base.data_offset or 0) + v.view_offs:
                Buffer.view_init(v)
        return True

    def get_buffer_size(self, buffer_id: int = 0) -> int:
        """Bytes of the compute buffer of ``buffer_id`` (0 when it shares an earlier id's buffer, as ggml)."""
        if not 0 <= buffer_id < len(self.bufts):
            raise IndexError(f"buffer id {buffer_id} outside 0..{len(self.bufts) - 1}")
        if self._first[buffer_id] < buffer_id:
            return 0
        bufs = self._buffers[buffer_id]
        return sum(b.size for b in bufs) if bufs else 0

    def buffer_sizes(self) -> dict[str, int]:
        """Peak compute memory per buffer type name (each buffer type once)."""
        return {self.bufts[i].name: self.get_buffer_size(i) for i in range(len(self.bufts)) if self._first[i] == i}

    def planned_sizes(self) -> dict[str, int]:
        """Bytes the current plan needs per buffer type name (0 without a plan)."""
        plan = self._plan
        return {
            self.bufts[i].name: (sum(plan.chunk_sizes[i]) if plan else 0)
            for i in range(len(self.bufts))
            if self._first[i] == i
        }

    def buffers(self, buffer_id: int = 0) -> list[Buffer]:
        """The chunk buffers of ``buffer_id`` (empty before the first reserve)."""
        return list(self._buffers[buffer_id] or ())

    def free(self) -> None:
        """Free every compute buffer and forget the plans."""
        for i in range(len(self.bufts)):
            if self._first[i] == i and self._buffers[i] is not None:
                for b in self._buffers[i] or ():
                    b.free()
            self._buffers[i] = None
        self._plan = None
        self._bound.clear()


def _carried_input(t: Tensor, cur: TensorBuffer | None) -> bytearray | None:
    """The bytes of a graph input that leaves another allocator's compute buffer for this one, else None.

    A graph allocated by one allocator (a :class:`GraphAllocator`, another scheduler) and then computed by a
    scheduler moves into the scheduler's compute memory. Its nodes are recomputed there, but what the user wrote
    into its inputs before that compute would be lost: silently, as zeros or stale values. The input's bytes go
    with it instead (ggml never moves an allocated tensor; here the memory is reclaimed, the data is not).
    """
    if cur is None or cur.freed or t.op != GGMLOp.NONE or not int(t.flags) & _INPUT or t.data_offset is None:
        return None
    data = bytearray(t.nbytes)
    if data:
        cur.get_tensor(t, memoryview(data))
    return data
