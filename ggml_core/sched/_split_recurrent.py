"""Tensor-parallel rules of the recurrent mixers (Mamba-2, gated delta nets, short convolutions, RWKV-7's time mix,
split by heads, groups or channels) and of split axes made of parts (:attr:`SplitState.segments`: a fused
projection's ``z | x | B | C | dt`` rows), mixed into :class:`~ggml_core.sched._splitter.GraphSplitter`.

- VIEW of a tensor split on axis 0 in parts: a view of one part is split as that part (on the view's outermost
  axis inside the row, in its units: heads, groups), or mirrored where the first device holds that part alone; a
  view of several consecutive parts keeps them as parts; a VIEW that keeps a split axis ≥ 1 whole (a window's
  tail) is taken of each device's part.
- CONCAT of two operands split alike on another axis than the one joined; REPEAT along other axes than the split
  one; CPY of a split tensor into a tensor split with the same element count per device (a state written back).
- SSM_CONV of a window and a kernel split alike on their channels (axis 1): split on the result's channels.
- SSM_SCAN (states, x, dt, A by head, B and C by group), GATED_DELTA_NET (v, decay, beta, states by value head; q
  and k mirrored or split alike) and RWKV_WKV7 (every operand by head): each device runs its heads; the two views
  of the result, the outputs and the new states, are split by head.

Caches and states written by the graph (:func:`written_leafs`) and, per write, the nodes before it that read what it
overwrites (:func:`earlier_readers`), which the split graph keeps before the write.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ggml_core import ops
from ggml_core._tensor import Tensor
from ggml_core.ops import GGMLOp
from ggml_core.sched._split_state import SplitError, SplitKind, SplitState

__all__ = ["RULES", "RecurrentRules", "earlier_readers", "written_leafs"]


def written_leafs(nodes: Sequence[Tensor]) -> set[int]:
    """Ids of the tensors the nodes write into: SET_ROWS destinations (KV caches) and the tensors CPY copies into
    (recurrent states, through a view or whole)."""
    out = set()
    for n in nodes:
        dest = n.src[2] if n.op == GGMLOp.SET_ROWS else n.src[1] if n.op == GGMLOp.CPY else None
        while dest is not None and dest.view_src is not None:
            dest = dest.view_src
        if dest is not None:
            out.add(dest.id)
    return out


def _base(t: Tensor) -> Tensor:
    while t.view_src is not None:
        t = t.view_src
    return t


def earlier_readers(nodes: Sequence[Tensor], written: set[int]) -> dict[int, list[Tensor]]:
    """Per node writing into a cache or state (CPY, SET_ROWS): the nodes before it in ``nodes`` that compute from
    that tensor (through views: the first node past the views)."""
    out: dict[int, list[Tensor]] = {}
    seen: dict[int, list[Tensor]] = {}  # written tensor id → its readers so far
    for n in nodes:
        dest = n.src[2] if n.op == GGMLOp.SET_ROWS else n.src[1] if n.op == GGMLOp.CPY else None
        if dest is not None and _base(dest).id in written:
            out[n.id] = list(seen.get(_base(dest).id, ()))
        if n.view_src is None:
            for s in n.src:
                if s is not None and s is not dest and _base(s).id in written:
                    seen.setdefault(_base(s).id, []).append(n)
    return out


class RecurrentRules:
    """The rules of this module, over the splitter's states and shards."""

    n: int
    states: dict[int, SplitState]
    shards: dict[int, list[Tensor]]
    mirrored: dict[int, Tensor]
    assign: list[tuple[Tensor, int]]
    #: SSM_SCAN and GATED_DELTA_NET results: id → (per device: the outputs' element count, the heads)
    scans: dict[int, tuple[list[int], tuple[int, ...]]]

    def m(self, t: Tensor, reader: Tensor) -> Tensor:
        raise NotImplementedError

    def _set_split(self, t: Tensor, st: SplitState, parts: list[Tensor]) -> None:
        raise NotImplementedError

    def _describe_srcs(self, t: Tensor) -> str:
        raise NotImplementedError

    def _split_of(self, t: Tensor, s: Tensor | None) -> SplitState:
        st = self.states[s.id] if s is not None else None
        if st is None or st.kind is not SplitKind.SPLIT:
            raise SplitError(t, f"op {t.op.name} needs every operand split: {self._describe_srcs(t)}")
        return st

    def _named(self, t: Tensor, st: SplitState, parts: list[Tensor]) -> None:
        for p in parts:
            p.set_name(t.name)
        self._set_split(t, st, parts)

    def recurrent_view(self, t: Tensor) -> None:
        """VIEW of a scan's result, of a tensor split on axis 0 in parts, or keeping a split axis ≥ 1 whole."""
        src = t.src[0]
        assert src is not None
        if src.id in self.scans:
            self._scan_view(t, src)
        elif self.states[src.id].axis == 0:
            self._parts_view(t, src)
        else:
            self._whole_axis_view(t, src)

    def _parts_view(self, t: Tensor, src: Tensor) -> None:
        st = self.states[src.id]
        row, es = src.nb[1], src.type.type_size
        within, rest = divmod(t.view_offs % row, es)
        # the axes inside a row: packed from axis 0 up to b; the others walk whole rows
        b = 0
        while b < 3 and t.nb[b + 1] == t.ne[b] * t.nb[b] and t.nb[b + 1] < row:
            b += 1
        extent = math.prod(t.ne[: b + 1])
        bounds = [0]
        for seg in st.parts:
            bounds.append(bounds[-1] + sum(seg))
        ok = (
            src.is_contiguous
            and src.type.block_size == 1
            and not rest
            and t.nb[0] == es
            and within in bounds
            and within + extent in bounds
            and all(t.ne[i] == 1 or t.nb[i] % row == 0 for i in range(b + 1, 4))
        )
        first, last = (bounds.index(within), bounds.index(within + extent)) if ok else (0, 0)
        unit = math.prod(t.ne[:b])
        segs = st.parts[first:last]
        if not ok or (len(segs) > 1 and b) or any(x % unit for seg in segs for x in seg):
            raise SplitError(
                t,
                f"VIEW (ne {list(t.ne)}, nb {list(t.nb)}) does not take whole parts of {st.describe()} of {src.name!r}",
            )
        if len(segs) == 1 and not any(segs[0][1:]):  # a part the first device holds alone: mirrored, read from there
            sh = self.shards[src.id][0]
            nb = [t.nb[i] if i <= b else t.nb[i] // row * sh.nb[1] for i in range(4)]
            offset = t.view_offs // row * sh.nb[1] + sum(seg[0] for seg in st.parts[:first]) * es
            view = ops.view_4d(sh, t.ne[0], t.ne[1], t.ne[2], t.ne[3], nb[1], nb[2], nb[3], offset).set_name(t.name)
            self.states[t.id] = SplitState.mirrored()
            self.mirrored[t.id] = view
            self.assign.append((view, 0))
            return
        new = SplitState.segmented(b, [[x // unit for x in seg] for seg in segs])
        parts = []
        for d, sh in enumerate(self.shards[src.id]):
            off = sum(seg[d] for seg in st.parts[:first])
            ne = list(t.ne)
            ne[b] = new.sizes[d]
            nb = [t.nb[i] if i <= b else t.nb[i] // row * sh.nb[1] for i in range(4)]
            offset = t.view_offs // row * sh.nb[1] + off * es
            parts.append(ops.view_4d(sh, ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], offset))
        self._named(t, new, parts)

    def _whole_axis_view(self, t: Tensor, src: Tensor) -> None:
        st = self.states[src.id]
        ax = st.axis
        ok = (
            src.is_contiguous
            and t.ne[ax] == src.ne[ax]
            and t.nb[ax] == src.nb[ax]
            and t.view_offs < src.nb[ax]
            and all(t.ne[i] == 1 or t.nb[i] == src.nb[i] for i in range(ax + 1, 4))
            and all(t.nb[i] * t.ne[i] + t.view_offs <= src.nb[ax] for i in range(ax))
        )
        if not ok:
            raise SplitError(t, f"VIEW (ne {list(t.ne)}, nb {list(t.nb)}) cuts through {st.describe()} of {src.name!r}")
        parts = []
        for d, sh in enumerate(self.shards[src.id]):
            ne = list(t.ne)
            ne[ax] = st.sizes[d]
            nb = [t.nb[i] if i <= ax else sh.nb[i] for i in range(4)]  # the outer axes walk the part as the whole
            parts.append(ops.view_4d(sh, ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], t.view_offs))
        self._named(t, st, parts)

    def _scan_view(self, t: Tensor, src: Tensor) -> None:
        """The outputs ``[head_dim, n_head, n_t, n_s]`` (offset 0) or the new states (after the outputs, flat)."""
        outputs, heads = self.scans[src.id]
        es = src.type.type_size
        total = sum(outputs)
        parts = []
        if t.view_offs == 0 and t.nelements == total and t.nb[1] == t.ne[0] * es:
            for sh, h in zip(self.shards[src.id], heads, strict=True):
                nb1 = t.nb[1]
                parts.append(ops.view_4d(sh, t.ne[0], h, t.ne[2], t.ne[3], nb1, nb1 * h, nb1 * h * t.ne[2], 0))
            st = SplitState.split(1, heads)
        elif t.view_offs == total * es and t.ne[1:] == (1, 1, 1) and t.nelements == src.nelements - total:
            sizes = [sh.nelements - o for sh, o in zip(self.shards[src.id], outputs, strict=True)]
            parts = [ops.view_1d(sh, n, o * es) for sh, n, o in zip(self.shards[src.id], sizes, outputs, strict=True)]
            st = SplitState.split(0, sizes)
        else:
            raise SplitError(t, f"VIEW of SSM_SCAN result {src.name!r} is neither its outputs nor its states")
        self._named(t, st, parts)

    def concat(self, t: Tensor) -> None:
        a, b = t.src[0], t.src[1]
        sa, sb = self._split_of(t, a), self._split_of(t, b)
        dim = t.op_param_i32(0)
        if sa != sb or sa.axis == dim:
            raise SplitError(
                t, f"CONCAT along {dim} of operands not split alike on another axis: {self._describe_srcs(t)}"
            )
        assert a is not None and b is not None
        parts = [ops.concat(x, y, dim) for x, y in zip(self.shards[a.id], self.shards[b.id], strict=True)]
        self._named(t, sa, parts)

    def repeat(self, t: Tensor) -> None:
        """REPEAT along other axes than the split one (a key head repeated over its value heads)."""
        a = t.src[0]
        sa = self._split_of(t, a)
        assert a is not None
        if t.ne[sa.axis] != a.ne[sa.axis]:
            raise SplitError(t, f"REPEAT along its split axis {sa.axis}: {self._describe_srcs(t)}")
        parts = []
        for sh, size in zip(self.shards[a.id], sa.sizes, strict=True):
            ne = list(t.ne)
            ne[sa.axis] = size
            parts.append(ops.repeat_4d(sh, ne[0], ne[1], ne[2], ne[3]))
        self._named(t, sa, parts)

    def cpy(self, t: Tensor) -> None:
        a, b = t.src[0], t.src[1]
        sa, sb = self._split_of(t, a), self._split_of(t, b)
        assert a is not None and b is not None
        pa, pb = self.shards[a.id], self.shards[b.id]
        if any(x.nelements != y.nelements for x, y in zip(pa, pb, strict=True)):
            raise SplitError(t, f"CPY between tensors split into different counts: {self._describe_srcs(t)}")
        del sa
        self._named(t, sb, [ops.cpy(x, y) for x, y in zip(pa, pb, strict=True)])

    def ssm_conv(self, t: Tensor) -> None:
        sx, c = t.src[0], t.src[1]
        ss, sc = self._split_of(t, sx), self._split_of(t, c)
        if ss != sc or ss.axis != 1:
            raise SplitError(t, f"SSM_CONV needs window and kernel split alike by channel: {self._describe_srcs(t)}")
        assert sx is not None and c is not None
        parts = [ops.ssm_conv(x, k) for x, k in zip(self.shards[sx.id], self.shards[c.id], strict=True)]
        self._named(t, SplitState.segmented(0, ss.parts), parts)

    def ssm_scan(self, t: Tensor) -> None:
        s, x, dt, a, b, c, ids = t.src[:7]
        st = [self._split_of(t, u) for u in (s, x, dt, a, b, c)]
        heads = st[1].sizes
        group = x.ne[1] // b.ne[1] if x is not None and b is not None else 0
        ok = [u.axis for u in st] == [2, 1, 0, 1, 1, 1] and all(u.sizes == heads for u in st[:4])
        if not ok or st[4] != st[5] or any(g * group != h for g, h in zip(st[4].sizes, heads, strict=True)):
            raise SplitError(t, f"SSM_SCAN needs its operands split by head (B, C by group): {self._describe_srcs(t)}")
        assert ids is not None
        mi = self.m(ids, t)
        assert s is not None and x is not None and dt is not None and a is not None and b is not None and c is not None
        k = t.op_param_i32(0)
        sh = self.shards
        parts = [
            ops.ssm_scan(sh[s.id][d], sh[x.id][d], sh[dt.id][d], sh[a.id][d], sh[b.id][d], sh[c.id][d], mi, k)
            for d in range(self.n)
        ]
        outputs = [sh[x.id][d].nelements for d in range(self.n)]
        self.scans[t.id] = (outputs, heads)
        self._named(t, SplitState.split(0, [p.ne[0] for p in parts]), parts)

    def gated_delta_net(self, t: Tensor) -> None:
        """Value heads split (v, the decay, beta, the state by head); q and k mirrored, where every device's first
        value head reads key head 0 (head ``h`` reads key head ``h % H_k``), or split as the value heads."""
        q, k, v, g, beta, state = t.src[:6]
        assert q is not None and k is not None and v is not None and g is not None and beta is not None
        assert state is not None
        st = [self._split_of(t, u) for u in (v, g, beta, state)]
        heads = st[0].sizes
        sq, sk = self.states[q.id], self.states[k.id]
        qk_whole = sq.kind is sk.kind is SplitKind.MIRRORED and all(s % q.ne[1] == 0 for s in st[0].starts())
        qk_split = sq == sk == st[0]
        ok = [u.axis for u in st] == [1, 1, 1, 2] and all(u.sizes == heads for u in st)
        if not ok or not (qk_whole or qk_split):
            raise SplitError(t, f"GATED_DELTA_NET needs its value heads split alike: {self._describe_srcs(t)}")
        sh = self.shards
        qs = [self.m(q, t)] * self.n if qk_whole else sh[q.id]
        ks = [self.m(k, t)] * self.n if qk_whole else sh[k.id]
        n_keep = t.op_param_i32(0)
        parts = [
            ops.gated_delta_net(qs[d], ks[d], sh[v.id][d], sh[g.id][d], sh[beta.id][d], sh[state.id][d], n_keep)
            for d in range(self.n)
        ]
        self.scans[t.id] = ([sh[v.id][d].nelements for d in range(self.n)], heads)
        self._named(t, SplitState.split(0, [p.ne[0] for p in parts]), parts)

    def rwkv_wkv7(self, t: Tensor) -> None:
        """r, w, k, v, a, b split by head (axis 1) and the state alike: each device runs its heads."""
        srcs = t.src[:7]
        st = [self._split_of(t, u) for u in srcs]
        heads = st[0].sizes
        if [u.axis for u in st[:6]] != [1] * 6 or any(u != st[0] for u in st[:6]) or st[6].axis != 0:
            raise SplitError(t, f"RWKV_WKV7 needs its operands split by head: {self._describe_srcs(t)}")
        sh = [self.shards[u.id] for u in srcs if u is not None]
        parts = [
            ops.rwkv_wkv7(sh[0][d], sh[1][d], sh[2][d], sh[3][d], sh[4][d], sh[5][d], sh[6][d]) for d in range(self.n)
        ]
        self.scans[t.id] = ([sh[3][d].nelements for d in range(self.n)], heads)
        self._named(t, SplitState.split(0, [p.ne[0] for p in parts]), parts)


#: op → the name of its rule in :class:`RecurrentRules`
RULES = {
    GGMLOp.CONCAT: "concat",
    GGMLOp.CPY: "cpy",
    GGMLOp.REPEAT: "repeat",
    GGMLOp.SSM_CONV: "ssm_conv",
    GGMLOp.SSM_SCAN: "ssm_scan",
    GGMLOp.GATED_DELTA_NET: "gated_delta_net",
    GGMLOp.RWKV_WKV7: "rwkv_wkv7",
}
