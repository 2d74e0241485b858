"""The meta device: tensor parallelism over several devices of any plugins (ggml's ``GGML_BACKEND_DEVICE_TYPE_META``).

:class:`MetaDevice` wraps N backends. :meth:`MetaDevice.split_graph` takes a graph whose weights are not allocated
yet and a function giving each weight its split state (:class:`SplitState`), follows the states through the graph
and builds one graph holding a per-device copy of every split node (each on its own shard), the all-reduces that
partial sums need (:func:`all_reduce`), and the mirrored nodes once. The result, a :class:`TensorParallelGraph`,
allocates each weight's shards on their devices and runs on a :class:`Scheduler` over the same backends, every
shard node assigned to its device: the scheduler copies inputs and reduced sums between devices, with events
where the devices have them.

How each op is split (its rules by its operands' states) is :mod:`ggml_core.sched._splitter`'s.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ggml_core._context import Context
from ggml_core._graph import Graph
from ggml_core._tensor import Tensor
from ggml_core.alloc import alloc_ctx_tensors
from ggml_core.backend.interfaces import Backend, Buffer, BufferUsage, Device, DeviceType
from ggml_core.backend.registry import get_registry
from ggml_core.ops import VIEW_OPS, GGMLOp
from ggml_core.sched._scheduler import Scheduler
from ggml_core.sched._split_state import SplitError, SplitKind, SplitState
from ggml_core.sched._splitter import GraphSplitter, SplitResult, StateOf, region

__all__ = ["MetaDevice", "StateOf", "TensorParallelGraph"]


class MetaDevice:
    """N backends of any plugins acting as one device for tensor parallelism (at most 16, as ggml's)."""

    def __init__(
        self, backends: Sequence[Backend], *, use_plugin_all_reduce: bool = True, host: Backend | None = None
    ) -> None:
        self.backends = list(backends)
        #: the CPU backend the scheduler runs what no wrapped device takes on, when no wrapped device is the CPU
        self.host = host
        if len(self.backends) < 2 or len(self.backends) > 16:
            raise ValueError(f"a meta device wraps 2 to 16 backends, got {len(self.backends)}")
        if len({id(b.device) for b in self.backends}) != len(self.backends):
            raise ValueError(f"a meta device needs distinct devices, got {[b.name for b in self.backends]}")
        self.devices: list[Device] = [b.device for b in self.backends]
        #: ask the plugin owning every device for its all-reduce (``ggml_build_all_reduce``) before the generic one
        self.use_plugin_all_reduce = use_plugin_all_reduce
        self.name = "Meta(" + ",".join(d.name for d in self.devices) + ")"

    def __repr__(self) -> str:
        return f"MetaDevice({self.name!r})"

    def scheduler_backends(self) -> list[Backend]:
        """The scheduler's backends: the wrapped ones, non-CPU first, the CPU last (a new CPU backend if none)."""
        cpu = [b for b in self.backends if b.device.type == DeviceType.CPU]
        others = [b for b in self.backends if b.device.type != DeviceType.CPU]
        if not cpu:
            cpu = [self.host if self.host is not None else get_registry().init_backend("CPU")]
        return others + cpu

    def split_graph(
        self, graph: Graph, state_of: StateOf, *, reuse: TensorParallelGraph | None = None
    ) -> TensorParallelGraph:
        """Turn ``graph`` into per-device graphs with their all-reduces (see the module's rules).

        ``reuse``: an earlier split of a graph over the same weights (another batch shape of one model): its split
        leafs (weights and caches) keep their shards, already allocated and written, instead of getting new ones.
        """
        if reuse is not None and reuse.meta is not self:
            raise ValueError(f"cannot reuse the shards of {reuse.meta.name} in {self.name}")
        prior = (reuse.states, reuse.shards) if reuse is not None else None
        got = GraphSplitter(self.devices, graph, state_of, prior, use_hooks=self.use_plugin_all_reduce).run()
        overlap_order(got.graph, got.assign)
        sched = Scheduler(self.scheduler_backends(), graph_size=got.graph.size)
        sched.cut_at_copies = True
        for t, d in got.assign:
            sched.set_tensor_backend(t, self.backends[d])
        return TensorParallelGraph(**vars(got), meta=self, scheduler=sched)


def _base(t: Tensor) -> Tensor:
    while t.view_src is not None:
        t = t.view_src
    return t


def overlap_order(graph: Graph, assign: Sequence[tuple[Tensor, int]]) -> None:
    """Reorder ``graph``'s nodes so that the devices compute side by side: between two all-reduces, the other devices'
    parts come before the first device's, which also runs the mirrored nodes (the reduction, the residual, the
    norms) that the others wait for. So the others start as soon as the mirrored result reaches them, while the
    first device computes its own part.

    A topological order (each node after its operands and views' sources) that takes the first device's part
    nodes (those that read nothing of another device) only when nothing else is ready, and otherwise the earliest
    node of the original order; nodes touching memory that some node writes into (a KV cache, through SET_ROWS)
    keep their original order among themselves.
    """
    nodes = graph.nodes
    dev = {id(t): d for t, d in assign}
    pos = {id(n): i for i, n in enumerate(nodes)}
    deps: list[set[int]] = [set() for _ in nodes]
    for i, n in enumerate(nodes):
        for s in (*n.src, n.view_src):
            j = pos.get(id(s)) if s is not None else None
            if j is not None and j != i:
                deps[i].add(j)
    written = {id(_base(n)) for n in nodes if n.view_src is not None and n.op not in VIEW_OPS}
    last: dict[int, int] = {}
    for i, n in enumerate(nodes):
        for b in {id(_base(t)) for t in (n, *n.src) if t is not None} & written:
            if b in last:
                deps[i].add(last[b])
            last[b] = i
    users: list[list[int]] = [[] for _ in nodes]
    for i, ds in enumerate(deps):
        for j in ds:
            users[j].append(i)

    def deferred(i: int) -> bool:
        n = nodes[i]
        return dev.get(id(n)) == 0 and all(dev.get(id(s), 0) == 0 for s in n.src if s is not None)

    waiting = [len(ds) for ds in deps]
    ready = [(deferred(i), i) for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[Tensor] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(nodes[i])
        for u in users[i]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (deferred(u), u))
    assert len(order) == len(nodes), "the per-device graph has a cycle"
    graph.nodes[:] = order


@dataclass
class TensorParallelGraph(SplitResult):
    """One graph holding every device's part, its scheduler, and the map from the original tensors."""

    meta: MetaDevice = field(kw_only=True)
    scheduler: Scheduler = field(kw_only=True)
    buffers: list[Buffer] = field(default_factory=list)
    #: the buffers of :attr:`caches`' and :attr:`mirrored_caches`' memory (a part of :attr:`buffers`): cleared to
    #: forget a sequence
    cache_buffers: list[Buffer] = field(default_factory=list)

    def state(self, t: Tensor) -> SplitState:
        """``t``'s split state."""
        return self.states[t.id]

    def shard(self, t: Tensor, d: int) -> Tensor:
        """Device ``d``'s part of the split tensor ``t``."""
        return self.shards[t.id][d]

    def tensor(self, t: Tensor) -> Tensor:
        """The tensor holding the mirrored (or reduced) value of ``t`` in :attr:`graph` (read outputs here)."""
        if t.id not in self.mirrored:
            raise SplitError(t, f"is {self.states[t.id].describe()}, not mirrored: read its shards with shard(t, d)")
        return self.mirrored[t.id]

    def describe(self) -> str:
        """Text: each device's bytes of shards, each split tensor's state, the number of all-reduces."""
        lines = [
            f"{self.meta.name}: {len(self.split_weights)} split tensors ({len(self.caches)} caches), "
            f"{len(self.mirrored_weights)} mirrored weights, {self.n_all_reduces} all-reduces per compute"
        ]
        for d, dev in enumerate(self.meta.devices):
            nbytes = sum(self.shards[t.id][d].nbytes for t in self.split_weights)
            lines.append(f"  {dev.name}: {nbytes} bytes of shards")
        lines += [f"  {t.name}: {self.states[t.id].describe()}" for t in self.split_weights]
        return "\n".join(lines)

    def alloc_weights(self) -> None:
        """Allocate every shard on its device and the mirrored weights on the first device (usage WEIGHTS); split
        caches (tensors the graph writes rows into) get buffers of their own, cleared, with usage ANY."""
        caches = {id(p) for t in self.caches for p in self.shards[t.id]}
        for ctx, be in zip(self.contexts, self.meta.backends, strict=True):
            leafs = [p for p in ctx if p.op == GGMLOp.NONE and p.view_src is None and p.buffer is None]
            weights = [p for p in leafs if id(p) not in caches]
            if weights:
                self._alloc(weights, be, BufferUsage.WEIGHTS)
            kv = [p for p in leafs if id(p) in caches]
            if kv:
                buf = self._alloc(kv, be, BufferUsage.ANY)
                buf.clear(0)
                self.cache_buffers.append(buf)
        kv_mirrored = {id(t) for t in self.mirrored_caches}
        pending = [t for t in self.mirrored_weights if t.buffer is None and id(t) not in kv_mirrored]
        if pending:
            self._alloc(pending, self.meta.backends[0], BufferUsage.WEIGHTS)
        kv = [t for t in self.mirrored_caches if t.buffer is None]
        if kv:
            buf = self._alloc(kv, self.meta.backends[0], BufferUsage.ANY)
            buf.clear(0)
            self.cache_buffers.append(buf)

    def _alloc(self, tensors: list[Tensor], backend: Backend, usage: BufferUsage) -> Buffer:
        buf = alloc_ctx_tensors(tensors, backend)
        buf.set_usage(usage)
        self.buffers.append(buf)
        return buf

    def set_weight(self, t: Tensor, values: Any) -> None:
        """Write a weight's full values (converted to its type, quantized if needed) into its shards."""
        if self.states[t.id].kind is SplitKind.MIRRORED:
            t.set_data(values)
            return
        staging = Context("tp-staging")
        full = staging.new_tensor(t.type, t.ne, t.name)
        alloc_ctx_tensors(staging, self.scheduler.backends[-1])
        full.set_data(values)
        self.set_weight_bytes(t, full.get_bytes())

    def set_weight_bytes(self, t: Tensor, raw: bytes | memoryview) -> None:
        """Write a split weight from the raw bytes of the whole tensor: each shard is one 2-D write."""
        data = memoryview(raw).cast("B")
        if data.nbytes != t.nbytes:
            raise SplitError(t, f"needs {t.nbytes} bytes of data, got {data.nbytes}")
        st = self.states[t.id]
        for d, (start, size) in enumerate(zip(st.starts(), st.sizes, strict=True)):
            offset, chunk, rows, stride = region(t, st.axis, start, size)
            shard = self.shards[t.id][d]
            assert shard.buffer is not None, "alloc_weights() first"
            shard.buffer.set_tensor_2d(shard, data[offset:], 0, chunk, rows, chunk, stride)

    def alloc(self) -> None:
        """Place, split and bind the graph on the scheduler (set inputs after this, before :meth:`compute`)."""
        self.scheduler.alloc_graph(self.graph)

    def compute(self) -> bool:
        """Run the graph on every device; False when an eval callback cancelled."""
        return self.scheduler.graph_compute(self.graph)
