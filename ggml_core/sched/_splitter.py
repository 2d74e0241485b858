"""How one graph is split over a meta device's devices: each node's rule by the split states of its operands.

Rules (``t`` split on ``axis``, sizes per device): MUL_MAT of a weight split by output rows (axis 1) and a mirrored
operand is split on axis 0; of two operands split on axis 0 alike, partial; of two split on the same batch axis
(attention heads, KV heads broadcast over their query-head group, or one mirrored KV head broadcast over every
head), split there. MUL_MAT_ID (experts) as MUL_MAT: experts split by output rows give results split on axis 0,
experts split by input columns with an input split alike give partial sums. Element-wise ops, GLU, ROPE (heads
axis), SOFT_MAX (heads, no ALiBi; attention sinks sliced by head), RMS_NORM/NORM/L2_NORM and SUM_ROWS (not along
axis 0), SCALE, SQR, UNARY
and CONT keep the state; so does ADD_ID on rows split on axis 0 (its bias sliced alike); a mirrored operand of full
extent on the split axis is sliced by a view. RESHAPE, CONT to a new shape, PERMUTE and TRANSPOSE move the axis;
a VIEW of rows split on axis 0 by units (heads) takes the same part of every unit (a query and its gate, one
after the other in each head's rows, are two such views).

Partial sums stay partial through linear steps: views, reshapes, permutes, CONT and SCALE of each part, ADD of two
partials, MUL by a mirrored tensor, and ADD or ADD_ID of a mirrored tensor (added to the first device's part only).
Any other node reading a partial tensor gets the all-reduce first (:func:`all_reduce`), once per tensor; a node
reading a partial tensor already reduced reads the sum (a view of the residual in a layer whose mixer is mirrored).
Anything else reading a split tensor raises :class:`SplitError` naming the node, its op and its operands' states.

Leafs the graph writes into are caches (cleared, apart from the weights): SET_ROWS destinations (KV caches) and CPY
destinations (recurrent states, mirrored: on the first device, beside the mixer that reads and writes them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ggml_core import ops
from ggml_core._context import Context
from ggml_core._graph import Graph
from ggml_core._tensor import Tensor, TensorFlag
from ggml_core.backend.interfaces import Device
from ggml_core.ops import GGMLOp
from ggml_core.sched._allreduce import all_reduce
from ggml_core.sched._split_recurrent import RULES, RecurrentRules, earlier_readers, written_leafs
from ggml_core.sched._split_state import SplitError, SplitKind, SplitState

__all__ = ["GraphSplitter", "SplitResult", "StateOf", "region"]

#: a weight's split state (None: mirrored), ggml's ``get_split_state``
StateOf = Callable[[Tensor], "SplitState | None"]

_ELEMENTWISE = {GGMLOp.ADD: (0, 1), GGMLOp.SUB: (0, 1), GGMLOp.MUL: (0, 1), GGMLOp.DIV: (0, 1), GGMLOp.GLU: (0, 1)}
_VIEW_RULES = {GGMLOp.RESHAPE, GGMLOp.PERMUTE, GGMLOp.TRANSPOSE, GGMLOp.VIEW, GGMLOp.SET_ROWS, GGMLOp.CPY}
_SAME_STATE = {
    GGMLOp.L2_NORM,
    GGMLOp.SUM_ROWS,
    GGMLOp.SCALE,
    GGMLOp.SQR,
    GGMLOp.UNARY,
    GGMLOp.RMS_NORM,
    GGMLOp.NORM,
    GGMLOp.ROPE,
    GGMLOp.SOFT_MAX,
    GGMLOp.CONT,
}
#: op → the operand indexed along its axis 0 by the split axis of the op's result (SOFT_MAX's sinks: one per head)
_PER_INDEX = {GGMLOp.SOFT_MAX: 2}
#: ops a partial sum passes through part by part (one source)
_PARTIAL_UNARY = {GGMLOp.VIEW, GGMLOp.RESHAPE, GGMLOp.PERMUTE, GGMLOp.TRANSPOSE, GGMLOp.CONT, GGMLOp.SCALE}


def region(t: Tensor, axis: int, start: int, size: int) -> tuple[int, int, int, int]:
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


def _slice(t: Tensor, axis: int, start: int, size: int) -> Tensor:
    """A view of indices ``start:start+size`` of ``axis`` of ``t``."""
    if axis == 0 and t.type.block_size != 1:
        raise SplitError(t, f"cannot slice {t.type.name} within rows")
    ne = list(t.ne)
    ne[axis] = size
    return ops.view_4d(t, ne[0], ne[1], ne[2], ne[3], t.nb[1], t.nb[2], t.nb[3], start * t.nb[axis])


@dataclass
class SplitResult:
    """What :class:`GraphSplitter` built: the graph, each node's device, and the map from the original tensors."""

    graph: Graph
    #: (node, index of its device)
    assign: list[tuple[Tensor, int]] = field(repr=False)
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
    #: mirrored leafs the graph writes rows into (a KV cache of one KV head over more devices): on the first device,
    #: allocated apart from the weights
    mirrored_caches: list[Tensor]
    n_all_reduces: int
    #: one per device: the contexts of the new shards
    contexts: list[Context] = field(repr=False)


class GraphSplitter(RecurrentRules):
    """One pass over a graph's nodes in order, building the per-device graph (the module's rules).

    ``reuse``: (states, shards) of an earlier split over the same weights, whose split leafs keep their shards.
    """

    def __init__(
        self,
        devices: Sequence[Device],
        graph: Graph,
        state_of: StateOf,
        reuse: tuple[dict[int, SplitState], dict[int, list[Tensor]]] | None = None,
        *,
        use_hooks: bool = True,
    ) -> None:
        self.devices, self.graph, self.state_of, self.reuse = list(devices), graph, state_of, reuse
        self.use_hooks = use_hooks
        self.n = len(self.devices)
        self.ctx = Context("tensor-parallel")
        self.shard_ctx = [Context(f"tp-weights-{d.name}") for d in self.devices]
        self.states: dict[int, SplitState] = {}
        self.shards: dict[int, list[Tensor]] = {}
        self.mirrored: dict[int, Tensor] = {}
        self.reduced: dict[int, Tensor] = {}
        self.assign: list[tuple[Tensor, int]] = []
        self.split_weights: list[Tensor] = []
        self.mirrored_weights: list[Tensor] = []
        self.n_all_reduces = 0
        self.written: set[int] = set()
        self.scans = {}

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
            index = {id(dev): i for i, dev in enumerate(self.devices)}

            def place(node: Tensor, device: Device) -> None:
                self.assign.append((node, index[id(device)]))

            got = all_reduce(self.shards[t.id], self.devices, place, use_hooks=self.use_hooks)
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
        if self.reuse is not None and t.id in self.reuse[1]:
            was = self.reuse[0][t.id]
            if was != st:
                raise SplitError(t, f"was {was.describe()} in the graph reused, now {st.describe()}")
            self.split_weights.append(t)
            self._set_split(t, st, self.reuse[1][t.id])
            return
        if t.buffer is not None:
            raise SplitError(t, "is already allocated; the meta device allocates the shards of split weights")
        if not t.is_contiguous or len(st.sizes) != self.n:
            raise SplitError(t, f"cannot take {st.describe()} over {self.n} devices (contiguous, one size per device)")
        if sum(st.sizes) != t.ne[st.axis] or min(st.sizes) <= 0:
            raise SplitError(t, f"{st.describe()} does not cover its {t.ne[st.axis]} indices of axis {st.axis}")
        parts = []
        for d, (start, size) in enumerate(zip(st.starts(), st.sizes, strict=True)):
            region(t, st.axis, start, size)  # block boundaries
            ne = list(t.ne)
            ne[st.axis] = size
            parts.append(self.shard_ctx[d].new_tensor(t.type, ne, f"{t.name}@{self.devices[d].name}"))
        self.split_weights.append(t)
        self._set_split(t, st, parts)

    # ---- nodes -----------------------------------------------------------------------------------------------

    def node(self, t: Tensor) -> None:
        kinds = {self.states[s.id].kind for s in t.src if s is not None}
        if SplitKind.SPLIT not in kinds:
            if SplitKind.PARTIAL not in kinds or not self._partial_node(t):
                self._mirrored_node(t)
            return
        if t.view_src is not None and t.op not in _VIEW_RULES:
            raise SplitError(t, f"op {t.op.name} on split operands writes into another tensor; not supported")
        rule = {
            GGMLOp.MUL_MAT: self._mul_mat,
            GGMLOp.MUL_MAT_ID: self._mul_mat_id,
            GGMLOp.ADD_ID: self._add_id,
            GGMLOp.RESHAPE: self._reshape,
            GGMLOp.PERMUTE: self._permute,
            GGMLOp.TRANSPOSE: self._permute,
            GGMLOp.VIEW: self._view,
            GGMLOp.SET_ROWS: self._set_rows,
        }.get(t.op)
        if t.op == GGMLOp.CONT and t.src[0] is not None and t.ne != t.src[0].ne:
            rule = self._reshape
        if t.op in RULES:
            rule = getattr(self, RULES[t.op])
        src = t.src[0]
        if (
            t.op == GGMLOp.VIEW
            and src is not None
            and (src.id in self.scans or self.states[src.id].axis != 0 or self.states[src.id].segments)
        ):
            rule = self.recurrent_view
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
            st = replace(sa, axis=0)
        elif sa.kind is SplitKind.SPLIT and sb.kind is SplitKind.SPLIT and sa.axis == sb.axis == 0:
            if sa.parts != sb.parts:
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

    def _mul_mat_id(self, t: Tensor) -> None:
        """Experts ``[K, M, n_expert]`` by output rows (axis 1) and a mirrored input: split on axis 0; by input
        columns (axis 0) with the input split alike: partial."""
        a, b, ids = t.src[0], t.src[1], t.src[2]
        assert a is not None and b is not None and ids is not None
        sa, sb = self.states[a.id], self.states[b.id]
        mi = self.m(ids, t)
        if sa.kind is SplitKind.SPLIT and sa.axis == 1 and sb.kind is not SplitKind.SPLIT:
            mb = self.m(b, t)
            parts = [ops.mul_mat_id(self.shards[a.id][d], mb, mi) for d in range(self.n)]
            st = SplitState.split(0, sa.sizes)
        elif sa.kind is sb.kind is SplitKind.SPLIT and sa.axis == sb.axis == 0 and sa.sizes == sb.sizes:
            parts = [ops.mul_mat_id(self.shards[a.id][d], self.shards[b.id][d], mi) for d in range(self.n)]
            st = SplitState.partial()
        else:
            raise SplitError(t, f"MUL_MAT_ID has no tensor-parallel rule for operands {self._describe_srcs(t)}")
        for p in parts:
            p.set_name(t.name)
        self._set_split(t, st, parts)

    def _add_id(self, t: Tensor) -> None:
        """Per-expert biases ``[M, n_expert]`` added to rows split on axis 0: the biases split (or sliced) alike."""
        a, b, ids = t.src[0], t.src[1], t.src[2]
        assert a is not None and b is not None and ids is not None
        sa, sb = self.states[a.id], self.states[b.id]
        if sa.kind is not SplitKind.SPLIT or sa.axis != 0 or (sb.kind is SplitKind.SPLIT and sb != sa):
            raise SplitError(t, f"ADD_ID has no tensor-parallel rule for operands {self._describe_srcs(t)}")
        mi = self.m(ids, t)
        parts = []
        for d, (start, size) in enumerate(zip(sa.starts(), sa.sizes, strict=True)):
            bias = self.shards[b.id][d] if sb.kind is SplitKind.SPLIT else _slice(self.m(b, t), 0, start, size)
            parts.append(ops.add_id(self.shards[a.id][d], bias, mi).set_name(t.name))
        self._set_split(t, sa, parts)

    def _per_index(self, t: Tensor, s: Tensor, st: SplitState, d: int) -> Tensor:
        """Device ``d``'s part of ``s``, indexed along its axis 0 by ``t``'s split axis (one sink per head)."""
        ss = self.states[s.id]
        if ss.kind is SplitKind.SPLIT:
            if ss.axis != 0 or ss.sizes != st.sizes:
                raise SplitError(t, f"operand {s.name!r} is split unlike the heads: {self._describe_srcs(t)}")
            return self.shards[s.id][d]
        full = self.m(s, t)
        if full.ne[0] != sum(st.sizes):
            raise SplitError(t, f"operand {s.name!r} has {full.ne[0]} entries, not one per index of the split axis")
        return _slice(full, 0, st.starts()[d], st.sizes[d])

    def _partial_node(self, t: Tensor) -> bool:
        """``t`` kept partial if it is linear in its partial operands (see the module); False: reduce first."""
        if t.flags & TensorFlag.OUTPUT:
            return False
        src = t.src
        if any(s is not None and s.id in self.reduced for s in src):  # read the sum made already: no second one
            return False
        partial = [s is not None and self.states[s.id].kind is SplitKind.PARTIAL for s in src]
        op = t.op
        a = src[0]
        if a is None:
            return False
        parts: list[Tensor]
        if op in _PARTIAL_UNARY and partial[0] and (op != GGMLOp.SCALE or t.op_param_f32(1) == 0.0):
            parts = [self._redo(t, p) for p in self.shards[a.id]]
        elif op in (GGMLOp.ADD, GGMLOp.MUL) and src[1] is not None:
            b = src[1]
            if partial[0] and partial[1] and op == GGMLOp.ADD and a.ne == b.ne == t.ne:
                parts = [ops.add(x, y) for x, y in zip(self.shards[a.id], self.shards[b.id], strict=True)]
            elif partial[0] != partial[1] and (a if partial[0] else b).ne == t.ne:
                mine, other = (a, self.m(b, t)) if partial[0] else (b, self.m(a, t))
                if op == GGMLOp.MUL:
                    pair = (lambda x: (x, other)) if partial[0] else (lambda x: (other, x))
                    parts = [ops.mul(*pair(x)) for x in self.shards[mine.id]]
                else:  # the mirrored term joins the first device's part only
                    first = self.shards[mine.id][0]
                    parts = [ops.add(first, other) if partial[0] else ops.add(other, first)]
                    parts += self.shards[mine.id][1:]
            else:
                return False
        elif op == GGMLOp.ADD_ID and partial[0] and not any(partial[1:]):
            bias, ids = src[1], src[2]
            assert bias is not None and ids is not None
            first = ops.add_id(self.shards[a.id][0], self.m(bias, t), self.m(ids, t))
            parts = [first, *self.shards[a.id][1:]]
        else:
            return False
        kept = {id(p) for s in src if s is not None and s.id in self.shards for p in self.shards[s.id]}
        for p in parts:
            if id(p) not in kept:
                p.set_name(t.name)
        self.states[t.id] = SplitState.partial()
        self.shards[t.id] = parts
        self.assign += [(p, d) for d, p in enumerate(parts)]
        return True

    def _redo(self, t: Tensor, part: Tensor) -> Tensor:
        """``t``'s one-source op (a view, reshape, permute, CONT, SCALE) applied to ``part``."""
        op = t.op
        if op == GGMLOp.VIEW:
            offset = int(t.op_params[0:2].view(np.uint64)[0])
            return ops.view_4d(part, *t.ne, t.nb[1], t.nb[2], t.nb[3], offset)
        if op == GGMLOp.RESHAPE:
            return ops.reshape_4d(part, *t.ne)
        if op == GGMLOp.PERMUTE:
            return ops.permute(part, *(t.op_param_i32(i) for i in range(4)))
        if op == GGMLOp.TRANSPOSE:
            return ops.transpose(part)
        if op == GGMLOp.CONT:
            return ops.cont_4d(part, *t.ne)
        return ops.scale(part, t.op_param_f32(0))

    def _same_state(self, t: Tensor) -> None:
        aligned = _ELEMENTWISE.get(t.op, (0,))
        per_index = _PER_INDEX.get(t.op)
        split_srcs = [t.src[i] for i in aligned if t.src[i] is not None and self._is_split(t.src[i])]
        if not split_srcs or any(self._is_split(s) for i, s in enumerate(t.src) if i not in aligned and i != per_index):
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
                elif i == per_index:
                    srcs.append(self._per_index(t, s, st, d))
                elif i not in aligned:
                    srcs.append(self.m(s, t))
                elif self._is_split(s):
                    if self.states[s.id] != st:
                        raise SplitError(t, f"combines operands split differently: {self._describe_srcs(t)}")
                    srcs.append(self.shards[s.id][d])
                elif s.ne[ax] == 1:
                    srcs.append(self.m(s, t))
                elif s.ne[ax] == t.ne[ax] and not st.segments:
                    srcs.append(_slice(self.m(s, t), ax, start, size))
                else:
                    raise SplitError(t, f"operand {s.name!r} does not line up with split axis {ax}")
            ne = list(t.ne)
            ne[ax] = size
            parts.append(self._clone(t, srcs, ne, None))
        self._set_split(t, st, parts)

    def _check_same_state(self, t: Tensor, ax: int) -> None:
        op = t.op
        if op in (GGMLOp.RMS_NORM, GGMLOp.NORM, GGMLOp.L2_NORM, GGMLOp.SUM_ROWS) and ax == 0:
            what = "sums" if op == GGMLOp.SUM_ROWS else "normalises"
            raise SplitError(t, f"{op.name} {what} whole rows, which are split (axis 0)")
        if op == GGMLOp.GLU and t.src[1] is None and ax == 0:
            raise SplitError(t, "a fused GLU's rows hold both halves; split along axis 0 it would mix them")
        if op == GGMLOp.ROPE and ax not in (1, 3):
            raise SplitError(t, f"ROPE rotates within rows per head and position; split axis {ax} is not the heads'")
        if op == GGMLOp.SOFT_MAX:
            mask, sinks = t.src[1], t.src[2]
            if ax < 2 or t.op_param_f32(1) != 0.0 or (sinks is not None and ax != 2):
                raise SplitError(t, "SOFT_MAX splits over heads (axis 2, or 3 without sinks) only, without ALiBi")
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
            new = st.scaled(b, inner, inner_out)  # every part of the axis (one, or a fused projection's) whole
            if new is not None:
                sizes = new.sizes
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
        self._set_split(t, new, parts)

    def _permute(self, t: Tensor) -> None:
        src = t.src[0]
        assert src is not None
        st = self.states[src.id]
        axes = (1, 0, 2, 3) if t.op == GGMLOp.TRANSPOSE else tuple(t.op_param_i32(i) for i in range(4))
        parts = [ops.transpose(s) if t.op == GGMLOp.TRANSPOSE else ops.permute(s, *axes) for s in self.shards[src.id]]
        for p in parts:
            p.set_name(t.name)
        self._set_split(t, replace(st, axis=axes[st.axis]), parts)

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
        bs, ts = src.type.block_size, src.type.type_size

        def extent(i: int) -> int:  # bytes one step of every index up to axis i spans (axis 0 counts blocks)
            return t.ne[0] // bs * t.nb[0] if i == 0 else t.ne[i] * t.nb[i]

        b = next((i for i in range(4) if extent(i) == row and t.ne[i] > 1), None)
        within = t.view_offs % row  # where in its unit the view starts (a gate after the query of each head)
        ok = (
            st.axis == 0
            and src.is_contiguous
            and b is not None
            and within < t.nb[b]
            # every other axis stays inside one unit or walks whole rows (cells), in either order: a cache's
            # [head_dim, cells, heads] view as well as [head_dim, heads, cells]
            and all(
                t.ne[i] == 1 or t.nb[i] % row == 0 or (i < b and within + extent(i) <= t.nb[b])
                for i in range(4)
                if i != b
            )
            # a quantized cache splits at block boundaries: each share whole blocks, whole units of the view
            and all(s % bs == 0 and s // bs * ts % t.nb[b] == 0 for s in st.sizes)
        )
        if not ok or b is None:
            raise SplitError(
                t, f"VIEW (ne {list(t.ne)}, nb {list(t.nb)}) cuts through {st.describe()} of {src.name!r} unevenly"
            )
        sizes = [s // bs * ts // t.nb[b] for s in st.sizes]
        parts = []
        for d, size in enumerate(sizes):
            sh = self.shards[src.id][d]
            ne = list(t.ne)
            ne[b] = size
            nb = [t.nb[i] // row * sh.nb[1] if i != b and t.nb[i] % row == 0 else t.nb[i] for i in range(4)]
            off = t.view_offs // row * sh.nb[1] + within
            parts.append(ops.view_4d(sh, ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], off).set_name(t.name))
        self._set_split(t, SplitState.split(b, sizes), parts)

    # ---- the whole graph -------------------------------------------------------------------------------------

    def run(self) -> SplitResult:
        for leaf in self.graph.leafs:
            self.leaf(leaf)
        self.written = written_leafs(self.graph.nodes)
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
        # stays before every reader the original graph ordered after it (readers of a cache are not its children);
        # the readers it ordered before a write come before it (a state read early in a layer, written at its end)
        readers = earlier_readers(self.graph.nodes, self.written)
        for r in roots:
            for reader in readers.get(r.id, ()):
                st = self.states[reader.id]
                parts = [self.mirrored[reader.id]] if st.kind is SplitKind.MIRRORED else self.shards[reader.id]
                for p in parts:
                    out.build_forward_expand(p)
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
        return SplitResult(
            out,
            self.assign,
            self.states,
            self.shards,
            self.mirrored,
            self.split_weights,
            self.mirrored_weights,
            [t for t in self.split_weights if t.id in self.written],
            [t for t in self.mirrored_weights if t.id in self.written],
            self.n_all_reduces,
            self.shard_ctx,
        )
