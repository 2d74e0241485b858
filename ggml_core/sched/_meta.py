"""The meta device: tensor parallelism over several devices of any plugins (ggml's ``GGML_BACKEND_DEVICE_TYPE_META``).

:class:`MetaDevice` wraps N backends. :meth:`MetaDevice.split_graph` takes a graph whose weights are not allocated
yet and a function giving each weight its split state (:class:`SplitState`), follows the states through the graph
and builds one graph holding a per-device copy of every split node (each on its own shard), the all-reduces that
partial sums need (:func:`all_reduce`), and the mirrored nodes once. The result, a :class:`TensorParallelGraph`,
allocates each weight's shards on their devices and runs on a :class:`Scheduler` over the same backends, every
shard node assigned to its device: the scheduler copies inputs and reduced sums between devices, with events
where the devices have them.

Rules (``t`` split on ``axis``, sizes per device): MUL_MAT of a weight split by output rows (axis 1) and a mirrored
operand is split on axis 0; of two operands split on axis 0 alike, partial; of two split on the same batch axis
(attention heads, KV heads broadcast over their query-head group), split there. Element-wise ops, GLU, ROPE (heads
axis), SOFT_MAX (heads, no ALiBi, no sinks), RMS_NORM/NORM (not along axis 0), SCALE, UNARY and CONT keep the
state; a mirrored operand of full extent on the split axis is sliced by a view. RESHAPE, CONT to a new shape,
PERMUTE and TRANSPOSE move the axis. Any node reading a partial tensor (other than to add it to another
partial of the same MUL_MAT pair) gets the all-reduce first. Anything else reading a split tensor raises
:class:`SplitError` naming the node, its op and its operands' states.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ggml_core import ops
from ggml_core._context import Context
from ggml_core._graph import Graph
from ggml_core._tensor import Tensor, TensorFlag
from ggml_core.alloc import alloc_ctx_tensors
from ggml_core.backend.interfaces import Backend, Buffer, BufferUsage, Device, DeviceType
from ggml_core.backend.registry import get_registry
from ggml_core.ops import GGMLOp
from ggml_core.sched._allreduce import all_reduce
from ggml_core.sched._scheduler import Scheduler
from ggml_core.sched._split_state import SplitError, SplitKind, SplitState

__all__ = ["MetaDevice", "StateOf", "TensorParallelGraph"]

#: a weight's split state (None: mirrored), ggml's ``get_split_state``
StateOf = Callable[[Tensor], "SplitState | None"]

_ELEMENTWISE = {GGMLOp.ADD: (0, 1), GGMLOp.SUB: (0, 1), GGMLOp.MUL: (0, 1), GGMLOp.DIV: (0, 1), GGMLOp.GLU: (0, 1)}
_VIEW_RULES = {GGMLOp.RESHAPE, GGMLOp.PERMUTE, GGMLOp.TRANSPOSE, GGMLOp.VIEW, GGMLOp.SET_ROWS}
_SAME_STATE = {GGMLOp.SCALE, GGMLOp.UNARY, GGMLOp.RMS_NORM, GGMLOp.NORM, GGMLOp.ROPE, GGMLOp.SOFT_MAX, GGMLOp.CONT}


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
        return _Splitter(self, graph, state_of, reuse).run()


@dataclass
class TensorParallelGraph:
    """One graph holding every device's part, its scheduler, and the map from the original tensors."""

    meta: MetaDevice
    graph: Graph
    scheduler: Scheduler
    #: original tensor id → its split state
    states: dict[int, SplitState]
    #: original split tensor id → one tensor per device
    shards: dict[int, list[Tensor]]
    #: original mirrored tensor id → the tensor standing for it in :attr:`graph`
    mirrored: dict[int, Tensor]
    #: weights: split ones (their shards) and mirrored ones (those without memory allocated on the first device)
    split_weights: list[Tensor]
    mirrored_weights: list[Tensor]
    #: split leafs the graph writes rows into (KV caches): allocated apart from the weights
    caches: list[Tensor]
    n_all_reduces: int
    buffers: list[Buffer] = field(default_factory=list)
    #: the buffers of :attr:`caches`' shards (a part of :attr:`buffers`): cleared to forget a sequence
    cache_buffers: list[Buffer] = field(default_factory=list)
    _contexts: list[Context] = field(default_factory=list, repr=False)

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
        for ctx, be in zip(self._contexts, self.meta.backends, strict=True):
            leafs = [p for p in ctx if p.op == GGMLOp.NONE and p.view_src is None and p.buffer is None]
            weights = [p for p in leafs if id(p) not in caches]
            if weights:
                self._alloc(weights, be, BufferUsage.WEIGHTS)
            kv = [p for p in leafs if id(p) in caches]
            if kv:
                buf = self._alloc(kv, be, BufferUsage.ANY)
                buf.clear(0)
                self.cache_buffers.append(buf)
        pending = [t for t in self.mirrored_weights if t.buffer is None]
        if pending:
            self._alloc(pending, self.meta.backends[0], BufferUsage.WEIGHTS)

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
            offset, chunk, rows, stride = _region(t, st.axis, start, size)
            shard = self.shards[t.id][d]
            assert shard.buffer is not None, "alloc_weights() first"
            shard.buffer.set_tensor_2d(shard, data[offset:], 0, chunk, rows, chunk, stride)

    def alloc(self) -> None:
        """Place, split and bind the graph on the scheduler (set inputs after this, before :meth:`compute`)."""
        self.scheduler.alloc_graph(self.graph)

    def compute(self) -> bool:
        """Run the graph on every device; False when an eval callback cancelled."""
        return self.scheduler.graph_compute(self.graph)


def _region(t: Tensor, axis: int, start: int, size: int) -> tuple[int, int, int, int]:
    """(byte offset, bytes per row, rows, row stride) of indices ``start:start+size`` of ``axis`` of ``t``."""
    if axis == 0:
        blk = t.type.block_size
        if start % blk or size % blk:
            raise SplitError(
                t, f"a split of {t.type.name} rows must fall on its {blk}-element block boundaries (got {start}+{size})"
            )
        unit = t.type.type_size
        return start // blk * unit, size // blk * unit, t.ne[1] * t.ne[2] * t.ne[3], t.nb[1]
    rows = math.prod(t.ne[axis + 1 :])
    return start * t.nb[axis], size * t.nb[axis], rows, t.ne[axis] * t.nb[axis]


class _Splitter:
    """One pass over a graph's nodes in order, building the per-device graph."""

    def __init__(
        self, meta: MetaDevice, graph: Graph, state_of: StateOf, reuse: TensorParallelGraph | None = None
    ) -> None:
        self.meta, self.graph, self.state_of, self.reuse = meta, graph, state_of, reuse
        self.n = len(meta.backends)
        self.ctx = Context("tensor-parallel")
        self.shard_ctx = [Context(f"tp-weights-{d.name}") for d in meta.devices]
        self.states: dict[int, SplitState] = {}
        self.shards: dict[int, list[Tensor]] = {}
        self.mirrored: dict[int, Tensor] = {}
        self.reduced: dict[int, Tensor] = {}
        self.assign: list[tuple[Tensor, int]] = []
        self.split_weights: list[Tensor] = []
        self.mirrored_weights: list[Tensor] = []
        self.n_all_reduces = 0
        self.written: set[int] = set()

    # ---- operands ---------------------------------------------------------------------------------------------

    def m(self, t: Tensor, reader: Tensor) -> Tensor:
        """``t`` as a mirrored operand of ``reader`` (partials reduced first)."""
        st = self.states[t.id]
        if st.kind is SplitKind.MIRRORED:
            return self.mirrored[t.id]
        if st.kind is SplitKind.PARTIAL:
            return self._reduce(t)
        raise SplitError(
            reader,
            f"op {reader.op.name} reads {t.name!r}, which is {st.describe()}; this op needs it whole "
            "(gathering split tensors is not supported)",
        )

    def _reduce(self, t: Tensor) -> Tensor:
        got = self.reduced.get(t.id)
        if got is None:
            index = {id(dev): i for i, dev in enumerate(self.meta.devices)}

            def place(node: Tensor, device: Device) -> None:
                self.assign.append((node, index[id(device)]))

            got = all_reduce(self.shards[t.id], self.meta.devices, place, use_hooks=self.meta.use_plugin_all_reduce)
            self.reduced[t.id] = got
            self.mirrored[t.id] = got
            self.n_all_reduces += 1
        return got

    def _set_split(self, t: Tensor, st: SplitState, parts: list[Tensor]) -> None:
        self.states[t.id] = st
        self.shards[t.id] = parts
        for d, p in enumerate(parts):
            self.assign.append((p, d))

    # ---- leafs -----------------------------------------------------------------------------------------------

    def leaf(self, t: Tensor) -> None:
        st = None if t.flags & TensorFlag.INPUT else self.state_of(t)
        if st is not None and not isinstance(st, SplitState):
            raise SplitError(t, f"the split-state function returned {st!r:.60}, not a SplitState or None")
        if st is None or st.kind is SplitKind.MIRRORED:
            self.states[t.id] = SplitState.mirrored()
            self.mirrored[t.id] = t
            if not t.flags & TensorFlag.INPUT and t.op == GGMLOp.NONE and t.view_src is None:
                self.mirrored_weights.append(t)  # alloc_weights() allocates those without memory yet
            return
        if st.kind is not SplitKind.SPLIT:
            raise SplitError(t, f"a weight can be mirrored or split, not {st.describe()}")
        if self.reuse is not None and t.id in self.reuse.shards:
            if self.reuse.states[t.id] != st:
                raise SplitError(
                    t, f"was {self.reuse.states[t.id].describe()} in the graph reused, now {st.describe()}"
                )
            self.split_weights.append(t)
            self._set_split(t, st, self.reuse.shards[t.id])
            return
        if t.buffer is not None:
            raise SplitError(t, "is already allocated; the meta device allocates the shards of split weights")
        if not t.is_contiguous or len(st.sizes) != self.n:
            raise SplitError(t, f"cannot take {st.describe()} over {self.n} devices (contiguous, one size per device)")
        if sum(st.sizes) != t.ne[st.axis] or min(st.sizes) <= 0:
            raise SplitError(t, f"{st.describe()} does not cover its {t.ne[st.axis]} indices of axis {st.axis}")
        parts = []
        for d, (start, size) in enumerate(zip(st.starts(), st.sizes, strict=True)):
            _region(t, st.axis, start, size)  # block boundaries
            ne = list(t.ne)
            ne[st.axis] = size
            parts.append(self.shard_ctx[d].new_tensor(t.type, ne, f"{t.name}@{self.meta.devices[d].name}"))
        self.split_weights.append(t)
        self._set_split(t, st, parts)

    # ---- nodes -----------------------------------------------------------------------------------------------

    def node(self, t: Tensor) -> None:
        srcs = [s for s in t.src if s is not None]
        if not any(self.states[s.id].kind is SplitKind.SPLIT for s in srcs):
            self._mirrored_node(t)
            return
        if t.view_src is not None and t.op not in _VIEW_RULES:
            raise SplitError(t, f"op {t.op.name} on split operands writes into another tensor; not supported")
        rule = {
            GGMLOp.MUL_MAT: self._mul_mat,
            GGMLOp.RESHAPE: self._reshape,
            GGMLOp.PERMUTE: self._permute,
            GGMLOp.TRANSPOSE: self._permute,
            GGMLOp.VIEW: self._view,
            GGMLOp.SET_ROWS: self._set_rows,
        }.get(t.op)
        if t.op == GGMLOp.CONT and t.src[0] is not None and t.ne != t.src[0].ne:
            rule = self._reshape
        if rule is None and (t.op in _ELEMENTWISE or t.op in _SAME_STATE):
            rule = self._same_state
        if rule is None:
            raise SplitError(t, f"op {t.op.name} has no tensor-parallel rule for operands {self._describe_srcs(t)}")
        rule(t)

    def _describe_srcs(self, t: Tensor) -> str:
        return ", ".join(f"{s.name!r}: {self.states[s.id].describe()}" for s in t.src if s is not None)

    def _mirrored_node(self, t: Tensor) -> None:
        new_srcs = [None if s is None else self.m(s, t) for s in t.src]
        view_src = self.mirrored[t.view_src.id] if t.view_src is not None else None
        self.states[t.id] = SplitState.mirrored()
        if all(n is s for n, s in zip(new_srcs, t.src, strict=True)) and view_src is t.view_src:
            self.mirrored[t.id] = t
            return
        self.mirrored[t.id] = self._clone(t, new_srcs, t.ne, view_src)

    def _clone(self, t: Tensor, srcs: Sequence[Tensor | None], ne: Sequence[int], view_src: Tensor | None) -> Tensor:
        if view_src is not None:
            c = Tensor(self.ctx, t.type, ne, nb=t.nb, view_src=view_src, view_offs=t.view_offs, name=t.name)
        else:
            c = Tensor(self.ctx, t.type, ne, name=t.name)
        c.op = t.op
        c.op_params = t.op_params.copy()
        c.flags = t.flags
        for i, s in enumerate(srcs):
            c.src[i] = s
        return c

    def _mul_mat(self, t: Tensor) -> None:
        a, b = t.src[0], t.src[1]
        assert a is not None and b is not None
        sa, sb = self.states[a.id], self.states[b.id]
        n = self.n
        if sa.kind is SplitKind.SPLIT and sa.axis == 1 and sb.kind is not SplitKind.SPLIT:
            mb = self.m(b, t)
            parts = [ops.mul_mat(self.shards[a.id][d], mb) for d in range(n)]
            st = SplitState.split(0, sa.sizes)
        elif sa.kind is SplitKind.SPLIT and sb.kind is SplitKind.SPLIT and sa.axis == sb.axis == 0:
            if sa.sizes != sb.sizes:
                raise SplitError(t, f"contracts operands split differently: {self._describe_srcs(t)}")
            parts = [ops.mul_mat(self.shards[a.id][d], self.shards[b.id][d]) for d in range(n)]
            st = SplitState.partial()
        elif sb.kind is SplitKind.SPLIT and sb.axis >= 2 and (sa.kind is SplitKind.SPLIT or a.ne[sb.axis] == 1):
            ax = sb.axis
            if sa.kind is SplitKind.SPLIT:
                group = b.ne[ax] // a.ne[ax]
                if sa.axis != ax or any(x * group != y for x, y in zip(sa.sizes, sb.sizes, strict=True)):
                    raise SplitError(t, f"batches operands split differently: {self._describe_srcs(t)}")
            pa = [self.shards[a.id][d] if sa.kind is SplitKind.SPLIT else self.m(a, t) for d in range(n)]
            parts = [ops.mul_mat(pa[d], self.shards[b.id][d]) for d in range(n)]
            st = SplitState.split(ax, sb.sizes)
        elif sa.kind is not SplitKind.SPLIT and sb.kind is SplitKind.SPLIT and sb.axis == 1:
            ma = self.m(a, t)
            parts = [ops.mul_mat(ma, self.shards[b.id][d]) for d in range(n)]
            st = SplitState.split(1, sb.sizes)
        else:
            raise SplitError(t, f"MUL_MAT has no tensor-parallel rule for operands {self._describe_srcs(t)}")
        for p in parts:
            p.set_name(t.name)
        self._set_split(t, st, parts)

    def _same_state(self, t: Tensor) -> None:
        aligned = _ELEMENTWISE.get(t.op, (0,))
        split_srcs = [t.src[i] for i in aligned if t.src[i] is not None and self._is_split(t.src[i])]
        if not split_srcs or any(s is not None and self._is_split(s) for i, s in enumerate(t.src) if i not in aligned):
            raise SplitError(t, f"op {t.op.name} reads split auxiliary operands: {self._describe_srcs(t)}")
        first = split_srcs[0]
        assert first is not None
        st = self.states[first.id]
        ax = st.axis
        self._check_same_state(t, ax)
        if t.ne[ax] != sum(st.sizes):
            raise SplitError(t, f"op {t.op.name} changes the extent of split axis {ax}: {self._describe_srcs(t)}")
        parts = []
        for d, (start, size) in enumerate(zip(st.starts(), st.sizes, strict=True)):
            srcs: list[Tensor | None] = []
            for i, s in enumerate(t.src):
                if s is None:
                    srcs.append(None)
                elif i not in aligned:
                    srcs.append(self.m(s, t))
                elif self._is_split(s):
                    if self.states[s.id] != st:
                        raise SplitError(t, f"combines operands split differently: {self._describe_srcs(t)}")
                    srcs.append(self.shards[s.id][d])
                elif s.ne[ax] == 1:
                    srcs.append(self.m(s, t))
                elif s.ne[ax] == t.ne[ax]:
                    srcs.append(_slice(self.m(s, t), ax, start, size))
                else:
                    raise SplitError(t, f"operand {s.name!r} does not line up with split axis {ax}")
            ne = list(t.ne)
            ne[ax] = size
            parts.append(self._clone(t, srcs, ne, None))
        self._set_split(t, st, parts)

    def _check_same_state(self, t: Tensor, ax: int) -> None:
        op = t.op
        if op in (GGMLOp.RMS_NORM, GGMLOp.NORM) and ax == 0:
            raise SplitError(t, f"{op.name} normalises whole rows, which are split (axis 0)")
        if op == GGMLOp.GLU and t.src[1] is None and ax == 0:
            raise SplitError(t, "a fused GLU's rows hold both halves; split along axis 0 it would mix them")
        if op == GGMLOp.ROPE and ax not in (1, 3):
            raise SplitError(t, f"ROPE rotates within rows per head and position; split axis {ax} is not the heads'")
        if op == GGMLOp.SOFT_MAX:
            mask, sinks = t.src[1], t.src[2]
            if ax < 2 or t.op_param_f32(1) != 0.0 or sinks is not None:
                raise SplitError(t, "SOFT_MAX splits over heads (axis 2 or 3) only, without ALiBi and sinks")
            if mask is not None and mask.ne[ax] != 1:
                raise SplitError(t, f"SOFT_MAX's mask varies along the split axis {ax}")

    def _is_split(self, s: Tensor | None) -> bool:
        return s is not None and self.states[s.id].kind is SplitKind.SPLIT

    def _reshape(self, t: Tensor) -> None:
        src = t.src[0]
        assert src is not None
        st = self.states[src.id]
        inner = math.prod(src.ne[: st.axis])
        outer = math.prod(src.ne[st.axis + 1 :])
        for b in range(4):
            inner_out = math.prod(t.ne[:b])
            if math.prod(t.ne[b + 1 :]) != outer or t.ne[b] <= 1:
                continue
            if all(s * inner % inner_out == 0 for s in st.sizes):
                sizes = [s * inner // inner_out for s in st.sizes]
                break
        else:
            raise SplitError(
                t,
                f"{t.op.name} to {list(t.ne)} cuts through {st.describe()} of {src.name!r} (shape {list(src.ne)}): "
                "a device's share does not fall on whole rows of the new shape (e.g. heads)",
            )
        parts = []
        for d, size in enumerate(sizes):
            ne = list(t.ne)
            ne[b] = size
            sh = self.shards[src.id][d]
            parts.append(ops.reshape_4d(sh, *ne) if t.op == GGMLOp.RESHAPE else ops.cont_4d(sh, *ne))
        for p in parts:
            p.set_name(t.name)
        self._set_split(t, SplitState.split(b, sizes), parts)

    def _permute(self, t: Tensor) -> None:
        src = t.src[0]
        assert src is not None
        st = self.states[src.id]
        axes = (1, 0, 2, 3) if t.op == GGMLOp.TRANSPOSE else tuple(t.op_param_i32(i) for i in range(4))
        parts = [ops.transpose(s) if t.op == GGMLOp.TRANSPOSE else ops.permute(s, *axes) for s in self.shards[src.id]]
        for p in parts:
            p.set_name(t.name)
        self._set_split(t, SplitState.split(axes[st.axis], st.sizes), parts)

    def _set_rows(self, t: Tensor) -> None:
        """Rows written into a cache split along axis 0 (KV heads): each device writes its part of each row."""
        rows, idx, dest = t.src[0], t.src[1], t.src[2]
        assert rows is not None and idx is not None and dest is not None
        sr, sd = self.states[rows.id], self.states[dest.id]
        if not (sr.kind is sd.kind is SplitKind.SPLIT and sr.axis == sd.axis == 0 and sr.sizes == sd.sizes):
            raise SplitError(t, f"SET_ROWS needs rows and destination split alike on axis 0: {self._describe_srcs(t)}")
        mi = self.m(idx, t)
        parts = [ops.set_rows(self.shards[dest.id][d], self.shards[rows.id][d], mi) for d in range(self.n)]
        for p in parts:
            p.set_name(t.name)
        self._set_split(t, sd, parts)

    def _view(self, t: Tensor) -> None:
        """A view of a contiguous tensor split on axis 0 (a KV cache's cells): the view axis that walks whole rows
        in steps of a unit that divides every device's share (a head) becomes the split axis."""
        src = t.src[0]
        assert src is not None
        st = self.states[src.id]
        row = src.nb[1]
        esize = src.type.type_size // src.type.block_size
        b = next((i for i in range(4) if t.ne[i] * t.nb[i] == row and t.ne[i] > 1), None)
        ok = (
            st.axis == 0
            and src.is_contiguous
            and src.type.block_size == 1
            and b is not None
            and t.view_offs % row == 0
            # every other axis stays inside one unit or walks whole rows (cells), in either order: a cache's
            # [head_dim, cells, heads] view as well as [head_dim, heads, cells]
            and all(
                t.ne[i] == 1 or t.nb[i] % row == 0 or (i < b and t.nb[i] * t.ne[i] <= t.nb[b])
                for i in range(4)
                if i != b
            )
            and all(s * esize % t.nb[b] == 0 for s in st.sizes)
        )
        if not ok or b is None:
            raise SplitError(
                t, f"VIEW (ne {list(t.ne)}, nb {list(t.nb)}) cuts through {st.describe()} of {src.name!r} unevenly"
            )
        sizes = [s * esize // t.nb[b] for s in st.sizes]
        parts = []
        for d, size in enumerate(sizes):
            sh = self.shards[src.id][d]
            ne = list(t.ne)
            ne[b] = size
            nb = [t.nb[i] // row * sh.nb[1] if i != b and t.nb[i] % row == 0 else t.nb[i] for i in range(4)]
            off = t.view_offs // row * sh.nb[1]
            parts.append(ops.view_4d(sh, ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], off).set_name(t.name))
        self._set_split(t, SplitState.split(b, sizes), parts)

    # ---- the whole graph -------------------------------------------------------------------------------------

    def run(self) -> TensorParallelGraph:
        for leaf in self.graph.leafs:
            self.leaf(leaf)
        self.written = {n.src[2].id for n in self.graph.nodes if n.op == GGMLOp.SET_ROWS and n.src[2] is not None}
        for node in self.graph.nodes:
            for s in node.src:
                if s is not None and s.id not in self.states:  # a leaf reached only through a node
                    self.leaf(s)
            self.node(node)
        read = {s.id for node in self.graph.nodes for s in node.src if s is not None}
        roots = [t for t in self.graph.nodes if t.id not in read or t.flags & TensorFlag.OUTPUT]
        size = (self.n + 2) * (len(self.graph.nodes) + len(self.graph.leafs)) + 64
        out = Graph(max(size, self.graph.size))
        # roots in the original order, each device's part of a split root (a cache write) in device order: a write
        # stays before every reader the original graph ordered after it (readers of a cache are not its children)
        for r in roots:
            st = self.states[r.id]
            if st.kind is SplitKind.SPLIT:
                if r.flags & TensorFlag.OUTPUT:
                    raise SplitError(r, f"is an output but {st.describe()} (gathering is not supported)")
                for p in self.shards[r.id]:
                    out.build_forward_expand(p)
            else:
                res = self.m(r, r)
                if r.flags & TensorFlag.OUTPUT:
                    res.set_output()
                out.build_forward_expand(res)
        sched = Scheduler(self.meta.scheduler_backends(), graph_size=out.size)
        for t, d in self.assign:
            sched.set_tensor_backend(t, self.meta.backends[d])
        return TensorParallelGraph(
            self.meta,
            out,
            sched,
            self.states,
            self.shards,
            self.mirrored,
            self.split_weights,
            self.mirrored_weights,
            [t for t in self.split_weights if t.id in self.written],
            self.n_all_reduces,
            _contexts=self.shard_ctx,
        )


def _slice(t: Tensor, axis: int, start: int, size: int) -> Tensor:
    """A view of indices ``start:start+size`` of ``axis`` of ``t``."""
    if axis == 0 and t.type.block_size != 1:
        raise SplitError(t, f"cannot slice {t.type.name} within rows")
    ne = list(t.ne)
    ne[axis] = size
    return ops.view_4d(t, ne[0], ne[1], ne[2], ne[3], t.nb[1], t.nb[2], t.nb[3], start * t.nb[axis])
