"""Placement: which backend runs each node (passes 1–4 of ggml's ``ggml_backend_sched_split_graph``).

1. **Location**: a tensor already in memory stays with the first backend that can use that memory and run its op;
   graph inputs go to the CPU (the last backend); an op with a weight operand follows the weight — unless the weight
   is in host memory and a higher-priority backend wants to offload the op (``offload_op``, large batches).
   ROPE and FLASH_ATTN_EXT do not follow weights (their small frequency/sink tensors say nothing).
2. **Expansion**: four sweeps carry assignments to unassigned neighbours the backend supports — accelerators
   down and up (the CPU stops the carry), then any backend down and up.
3. **Fill / upgrade**: an unassigned node goes to the supporting backend that can read most of its operands; an
   assigned node moves to a higher-priority backend with the same buffer type when that one supports it (not a
   node the user assigned: ggml upgrades those too, here the user's choice always stands).
4. **Operands**: views follow their source, other unassigned operands their consumer; whatever is left goes to the
   first backend that supports it.

View ops (VIEW, RESHAPE, PERMUTE, TRANSPOSE) are skipped by passes 2, 3 and 5. User assignments
(``set_tensor_backend``) are never overwritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from ggml_core._errors import UnsupportedOpError
from ggml_core._tensor import Tensor, TensorFlag
from ggml_core.backend.interfaces import Backend, Buffer, BufferType, BufferUsage, buffer_of
from ggml_core.ops._enum import VIEW_OPS, GGMLOp

if TYPE_CHECKING:
    from ggml_core._graph import Graph

__all__ = ["PlacementError", "Placer"]

_INPUT: Final = int(TensorFlag.INPUT)  # plain ints: IntFlag arithmetic is slow in hot loops

_NO_WEIGHT_OPS = frozenset({GGMLOp.ROPE, GGMLOp.FLASH_ATTN_EXT})


class PlacementError(UnsupportedOpError):
    """A node cannot be placed: no backend supports it, or it sits in memory no suitable backend can use."""

    def __init__(self, node: Tensor, devices: Sequence[str], message: str) -> None:
        Exception.__init__(self, message)
        self.node, self.devices = node, tuple(devices)


class Placer:
    """Runs the placement passes for one scheduler; caches ``supports_op`` answers for one graph.

    :param backends: in priority order, the CPU last
    :param bufts: the buffer type each backend allocates compute memory from
    :param external: the memory a tensor already has that placement must respect (None: the scheduler's own)
    """

    def __init__(
        self,
        backends: Sequence[Backend],
        bufts: Sequence[BufferType],
        op_offload: bool,
        external: Callable[[Tensor], Buffer | None],
    ) -> None:
        self.backends = list(backends)
        self.bufts = list(bufts)
        self.op_offload = op_offload
        self.ext_buffer = external
        self._sup: dict[tuple[int, int], bool] = {}
        self._sup_buft: dict[tuple[int, int], bool] = {}
        self.ids: dict[int, int] = {}
        self.causes: dict[int, str] = {}

    # ------------------------------------------------------------------------------------------- queries

    def supports(self, b: int, t: Tensor) -> bool:
        """``supports_op`` of backend ``b`` (cached)."""
        key = (b, t.id)
        r = self._sup.get(key)
        if r is None:
            try:
                r = bool(self.backends[b].supports_op(t))
            except Exception:  # noqa: BLE001 - a plugin's predicate must not take the scheduler down: unknown means no
                r = False
            self._sup[key] = r
        return r

    def supports_buft(self, b: int, buft: BufferType) -> bool:
        """``supports_buft`` of backend ``b`` (cached)."""
        key = (b, id(buft))
        r = self._sup_buft.get(key)
        if r is None:
            r = self._sup_buft[key] = bool(self.backends[b].supports_buft(buft))
        return r

    def get(self, t: Tensor | None) -> int:
        """The backend assigned to ``t`` (-1 for none)."""
        return -1 if t is None else self.ids.get(t.id, -1)

    def _from_buffer(self, buf: Buffer, op: Tensor) -> int:
        # a leaf (a weight, a cache) or a view computes nothing: only whether the memory is usable counts (ggml also
        # asks supports_op, which turns a device declining NONE into an abort for every weight it holds)
        computes = op.op != GGMLOp.NONE and op.op not in VIEW_OPS
        for b in range(len(self.backends)):
            if self.supports_buft(b, buf.buffer_type) and (not computes or self.supports(b, op)):
                return b
        return -1

    def buffer_supported(self, t: Tensor, b: int) -> bool:
        """Can backend ``b`` read ``t`` where it is (or where it will be allocated)?"""
        buf = self.ext_buffer(t)
        if buf is not None:
            return self.supports_buft(b, buf.buffer_type)
        tb = self.ids.get(t.id, -1)
        if tb == -1 and t.view_src is not None:
            tb = self.ids.get(t.view_src.id, -1)
        return tb != -1 and self.supports_buft(b, self.bufts[tb])

    def names(self) -> list[str]:
        """Backend names, in priority order."""
        return [be.name for be in self.backends]

    # ------------------------------------------------------------------------------------------- pass 1

    def _from_cur(self, t: Tensor) -> tuple[int, str]:
        buf = self.ext_buffer(t)
        if buf is not None:
            b = self._from_buffer(buf, t)
            if b != -1:
                return b, "1.dst" if t.view_src is None else "1.vsrc"
            raise PlacementError(
                t,
                self.names(),
                f"node {t.describe()} (op {t.op_desc}) is already in a {buf.name} buffer, and none of the "
                f"scheduler's devices ({', '.join(self.names())}) can both use that memory and run the op; add the "
                "device that owns the buffer to the scheduler or move the tensor",
            )
        if int(t.flags) & _INPUT:
            return len(self.backends) - 1, "1.inp"
        if t.op in _NO_WEIGHT_OPS:
            return -1, ""
        last = len(self.backends) - 1
        for i, src in enumerate(t.src):
            buf = None if src is None else buffer_of(src)
            if buf is None or buf.usage != BufferUsage.WEIGHTS:
                continue
            sb = self._from_buffer(buf, t)
            if self.op_offload and sb == last and buf.is_host:
                for b in range(sb):
                    if self.supports(b, t) and self.backends[b].offload_op(t):
                        return b, "1.off"
            return sb, f"1.wgt{i}" if sb != -1 else ""
        return -1, ""

    # ------------------------------------------------------------------------------------------- passes

    def place(self, graph: Graph, overrides: dict[int, int]) -> None:
        """Assign a backend to every node and operand of ``graph`` (results in :attr:`ids`, :attr:`causes`)."""
        self._sup.clear()
        self._sup_buft.clear()
        ids = self.ids = dict(overrides)
        causes = self.causes = dict.fromkeys(overrides, "usr")
        nodes = graph.nodes
        n_b = len(self.backends)
        last = n_b - 1

        # pass 1: pre-allocated tensors, inputs, weights
        for t in (*graph.leafs, *nodes):
            if ids.get(t.id, -1) == -1:
                b, cause = self._from_cur(t)
                if b != -1:
                    ids[t.id] = b
                    causes[t.id] = cause

        # pass 2: expand accelerators (down, up), then any backend (down, up)
        compute = [t for t in nodes if t.op not in VIEW_OPS]
        for order, skip_cpu in ((compute, True), (compute[::-1], True), (compute, False), (compute[::-1], False)):
            cur = -1
            for t in order:
                b = ids.get(t.id, -1)
                if b != -1:
                    cur = -1 if (skip_cpu and b == last) else b
                elif cur != -1 and self.supports(cur, t):
                    ids[t.id] = cur
                    causes[t.id] = "2.sup"

        # pass 3: unassigned nodes to the backend that reads most operands; upgrades within the same buffer type
        for t in compute:
            b = ids.get(t.id, -1)
            if b == -1:
                best = -1
                for cand in range(n_b):
                    if not self.supports(cand, t):
                        continue
                    n = 0
                    for s in t.src:
                        if s is None:
                            continue
                        if (self.get(s) != -1 or self.get(s.view_src) != -1) and self.buffer_supported(s, cand):
                            n += 1
                    if n > best:
                        best = n
                        ids[t.id] = cand
                        causes[t.id] = "3.best"
            elif t.id not in overrides:  # ggml upgrades user assignments too; here the user's choice stands
                for cand in range(b):
                    if (
                        self.bufts[cand] is self.bufts[b]
                        and self.supports(cand, t)
                        and all(s is None or self.buffer_supported(s, cand) for s in t.src)
                    ):
                        ids[t.id] = cand
                        causes[t.id] = "3.upg"
                        break

        # pass 4: views follow their source, operands their consumer; leftovers to the first supporting backend
        for t in nodes:
            if t.view_src is not None and ids.get(t.id, -1) == -1:
                vb = ids.get(t.view_src.id, -1)
                if vb != -1:
                    ids[t.id] = vb
                    causes[t.id] = "4.vsrc"
            cur = ids.get(t.id, -1)
            for s in t.src:
                if s is None or ids.get(s.id, -1) != -1:
                    continue
                sb = ids.get(s.view_src.id, -1) if s.view_src is not None else cur
                if sb != -1:
                    ids[s.id] = sb
                    causes[s.id] = "4.vsrc" if s.view_src is not None else "4.cur"
            if cur == -1:
                for cand in range(n_b):
                    if self.supports(cand, t):
                        ids[t.id] = cur = cand
                        causes[t.id] = "4.sup"
                        break
            if cur == -1:
                raise PlacementError(
                    t,
                    self.names(),
                    f"node {t.describe()}: op {t.op_desc} is supported by none of the scheduler's devices "
                    f"({', '.join(self.names())}); add a device that supports it (the CPU plugin supports most ops)",
                )
            # ggml asserts here when an operand is still unplaced; give it its consumer's backend instead
            for s in t.src:
                if s is not None and ids.get(s.id, -1) == -1:
                    ids[s.id] = cur
                    causes[s.id] = "4.cur"
        for t in graph.leafs:
            if ids.get(t.id, -1) == -1:
                ids[t.id] = last  # a leaf nothing reads: host memory
                causes[t.id] = "4.none"
