"""GRAPH_COMPUTE on the server: parse the message within limits, rebuild every node, bind memory, check the device.

The message is ``u32 device, u32 n_nodes, u64 node_ids[], u32 n_tensors, rpc_tensor[]`` and must have exactly that
size. Ids are the client's; 0 means "none", duplicates are refused. Nodes are taken in the order sent and each
may only use nodes sent before it (so no cycle can be formed). A node is rebuilt through the core op builders
(:mod:`._rebuild`); a tensor that is not a node (a weight, an input, or a result of an earlier graph) is taken as
memory: its bytes must lie in a buffer of this connection. Nodes whose cost their op parameters set are bounded
(:mod:`._work`). Views — nodes or not — must lie inside their source
and sit at their source's address plus their offset. Before anything runs, every node to compute, and each of its
operands, must have memory the device can use, and the device must support the node.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

import numpy as np

from ggml_core import Buffer, Context, Device, GGMLError, GGMLOp, Graph, Tensor, TensorFlag
from ggml_rpc.protocol import RPC_TENSOR_SIZE, RpcTensor
from ggml_rpc.server._limits import ServerLimits
from ggml_rpc.server._rebuild import rebuild_node
from ggml_rpc.server._validate import BufferTable, Refused, Remote, check_layout
from ggml_rpc.server._work import check_work

__all__ = ["GraphMessage", "build_graph", "parse_graph"]

_HEAD: Final = struct.Struct("<II")
_U32: Final = struct.Struct("<I")
_COMPUTE: Final = int(TensorFlag.COMPUTE)


class GraphMessage:
    """A parsed GRAPH_COMPUTE payload; each ``rpc_tensor`` is decoded when first looked up (by id)."""

    def __init__(self, device: int, node_ids: list[int], payload: bytes | bytearray, offsets: dict[int, int]) -> None:
        self.device = device
        self.node_ids = node_ids
        self._payload = payload
        self._offsets = offsets
        self._decoded: dict[int, RpcTensor] = {}

    def get(self, tid: int) -> RpcTensor | None:
        """The tensor with id ``tid``, or None when the message has none."""
        rt = self._decoded.get(tid)
        if rt is None:
            at = self._offsets.get(tid)
            if at is None:
                return None
            rt = self._decoded[tid] = RpcTensor.unpack_from(self._payload, at)
        return rt


def parse_graph(payload: bytes | bytearray, max_nodes: int, max_tensors: int) -> GraphMessage:
    """Split the payload, checking counts against the limits and the exact size (tensors are decoded lazily)."""
    n = len(payload)
    if n < 12:
        raise Refused(f"GRAPH_COMPUTE: payload of {n} bytes is shorter than its 12-byte header")
    device, n_nodes = _HEAD.unpack_from(payload, 0)
    if n_nodes > max_nodes:
        raise Refused(f"GRAPH_COMPUTE: {n_nodes} nodes, this server accepts at most {max_nodes}")
    pos = 8 + 8 * n_nodes
    if n < pos + 4:
        raise Refused(f"GRAPH_COMPUTE: payload of {n} bytes cannot hold {n_nodes} node ids")
    (n_tensors,) = _U32.unpack_from(payload, pos)
    if n_tensors > max_tensors:
        raise Refused(f"GRAPH_COMPUTE: {n_tensors} tensors, this server accepts at most {max_tensors}")
    want = pos + 4 + n_tensors * RPC_TENSOR_SIZE
    if n != want:
        raise Refused(f"GRAPH_COMPUTE: payload of {n} bytes, but {n_nodes} nodes and {n_tensors} tensors need {want}")
    node_ids = list(struct.unpack_from(f"<{n_nodes}Q", payload, 8))
    first = pos + 4
    words = RPC_TENSOR_SIZE // 8
    ids = np.frombuffer(payload, dtype="<u8", count=n_tensors * words, offset=first)[::words].tolist()
    offsets: dict[int, int] = {}
    for i, tid in enumerate(ids):  # each record starts with its id
        if tid == 0:
            raise Refused(f"GRAPH_COMPUTE: tensor #{i} has id 0, which means 'no tensor'")
        if tid in offsets:
            raise Refused(f"GRAPH_COMPUTE: tensor id {tid:#x} is sent twice")
        offsets[tid] = first + i * RPC_TENSOR_SIZE
    return GraphMessage(device, node_ids, payload, offsets)


class _Builder:
    """Turns the message's tensors into bound ggml-core tensors, memoised by id."""

    def __init__(self, msg: GraphMessage, buffers: BufferTable, limits: ServerLimits) -> None:
        self.msg = msg
        self.buffers = buffers
        self.limits = limits
        self.ctx = Context("rpc-graph")
        self.memo: dict[int, Tensor] = {}
        #: where each non-view tensor's memory is: (buffer record, offset)
        self.where: dict[int, tuple[Remote, int]] = {}
        self.node_pos: dict[int, int] = {}

    def rt(self, tid: int, user: str) -> RpcTensor:
        rt = self.msg.get(tid)
        if rt is None:
            raise Refused(f"GRAPH_COMPUTE: {user} refers to tensor id {tid:#x}, which is not in the message")
        return rt

    # ---- tensors that are memory, not computed here ----------------------------------------------------------

    def operand(self, tid: int, pos: int, user: str) -> Tensor:
        """A tensor used by the node at position ``pos``: a node sent earlier, or memory."""
        got = self.memo.get(tid)
        if got is not None:
            return got
        at = self.node_pos.get(tid)
        if at is not None and at >= pos:
            raise Refused(f"GRAPH_COMPUTE: {user} uses node #{at} before it is computed")
        return self.memory(tid, pos, user)

    def memory(self, tid: int, pos: int, user: str) -> Tensor:
        rt = self.rt(tid, user)
        t = check_layout(rt, "GRAPH_COMPUTE tensor")
        if rt.view_src:
            base_rt = self.rt(rt.view_src, f"tensor {rt.name_str!r}")
            if base_rt.view_src:
                raise Refused(f"GRAPH_COMPUTE: view {rt.name_str!r} has a view as its source (ggml never sends one)")
            base = self.operand(rt.view_src, pos, f"view {rt.name_str!r}")
            try:
                view = self.ctx.new_view(base, rt.ne, rt.nb, rt.view_offs, name=rt.name_str)
            except (GGMLError, ValueError) as exc:
                raise Refused(f"GRAPH_COMPUTE: view {rt.name_str!r}: {exc}") from exc
            self.check_view_address(rt, view)
            out = view
        else:
            _, rec, off, _ = self.buffers.locate(rt, "GRAPH_COMPUTE tensor", need=False)
            out = Tensor(self.ctx, t, rt.ne, nb=rt.nb, name=rt.name_str)
            if rec is not None:
                self.bind(out, rec, off)
        out.flags = rt.flags
        self.memo[tid] = out
        return out

    def bind(self, t: Tensor, rec: Remote, off: int) -> None:
        t.buffer = rec.buffer
        t.data_offset = off
        self.where[t.id] = (rec, off)
        rec.buffer.init_tensor(t)

    def check_view_address(self, rt: RpcTensor, view: Tensor) -> None:
        """A view sits at its source's address plus its offset, in its source's buffer (or nowhere)."""
        base = view.view_src
        assert base is not None
        loc = self.where.get(base.id)
        if loc is None:
            if rt.buffer or rt.data:
                raise Refused(f"GRAPH_COMPUTE: view {rt.name_str!r} has an address but its source has no memory")
            return
        rec, off = loc
        want = rec.base + off + view.view_offs
        if rt.buffer != rec.handle or rt.data != want:
            raise Refused(
                f"GRAPH_COMPUTE: view {rt.name_str!r} claims address {rt.data:#x}, but its source's memory puts "
                f"it at {want:#x}"
            )
        if view.buffer is None:
            Buffer.view_init(view)

    # ---- nodes ----------------------------------------------------------------------------------------------

    def node(self, tid: int, pos: int) -> Tensor:
        rt = self.rt(tid, f"node #{pos}")
        if rt.op >= len(GGMLOp):
            raise Refused(f"GRAPH_COMPUTE: node #{pos} {rt.name_str!r} has op id {rt.op}; ggml has {len(GGMLOp)}")
        if rt.op == GGMLOp.NONE:
            return self.memory(tid, pos, f"node #{pos}")
        check_layout(rt, "GRAPH_COMPUTE node")
        user = f"node #{pos} {rt.name_str!r}"
        srcs: list[Tensor | None] = []
        for i, sid in enumerate(rt.src):
            if sid == 0 or (sid == tid and i == 1 and rt.op == GGMLOp.CPY):  # ggml_cast refers to itself
                srcs.append(None)
            elif sid == tid:
                raise Refused(f"GRAPH_COMPUTE: {user} uses itself as src[{i}]")
            else:
                srcs.append(self.operand(sid, pos, user))
        if rt.view_src and rt.view_src not in self.memo:
            self.operand(rt.view_src, pos, user)
        t = rebuild_node(rt, srcs, self.ctx)
        t.name = rt.name_str
        check_work(t, self.limits)  # before anything is computed
        if t.view_src is not None:
            if not rt.view_src or self.memo.get(rt.view_src) is not t.view_src or rt.view_offs != t.view_offs:
                raise Refused(f"GRAPH_COMPUTE: {user} is a view of another tensor (or offset) than the sent one")
            self.check_view_address(rt, t)
        else:
            if rt.view_src:
                raise Refused(f"GRAPH_COMPUTE: {user} is sent as a view, but {GGMLOp(rt.op).name} makes a new tensor")
            _, rec, off, _ = self.buffers.locate(rt, "GRAPH_COMPUTE node", need=False)
            if rec is not None:
                self.bind(t, rec, off)
        t.flags = rt.flags
        self.memo[tid] = t
        return t


def build_graph(
    msg: GraphMessage,
    buffers: BufferTable,
    device: Device,
    usable: Callable[[Remote], bool],
    limits: ServerLimits | None = None,
) -> tuple[Graph, Context]:
    """The graph to compute on ``device`` (:class:`Refused` for anything the checks above do not allow).

    ``usable(rec)`` says whether the device may use memory of buffer ``rec``; ``limits`` bound the work of nodes
    whose cost their op parameters set (:mod:`._work`).
    """
    b = _Builder(msg, buffers, limits or ServerLimits())
    for pos, tid in enumerate(msg.node_ids):
        if tid == 0:
            raise Refused(f"GRAPH_COMPUTE: node #{pos} has id 0")
        if tid in b.node_pos:
            raise Refused(f"GRAPH_COMPUTE: node id {tid:#x} is listed twice")
        b.node_pos[tid] = pos
    graph = Graph(size=max(1, len(msg.node_ids)))
    for pos, tid in enumerate(msg.node_ids):
        if tid in b.memo:  # built earlier as the memory of a view: only nodes of op NONE can be
            t = b.memo[tid]
            if t.op != GGMLOp.NONE:
                raise Refused(f"GRAPH_COMPUTE: node #{pos} was used before it is computed")
        else:
            t = b.node(tid, pos)
        graph.add_node(t)
    for t in graph.nodes:
        if t.op == GGMLOp.NONE or t.is_view_op or not t.flags & _COMPUTE or t.is_empty:
            continue
        for x in (t, *t.src):
            if x is None or x.is_empty:
                continue
            if not x.is_allocated:
                raise Refused(f"GRAPH_COMPUTE: {x.describe()} (used by node {t.name!r}) has no memory on this server")
            base = x.view_src if x.view_src is not None else x
            rec = b.where.get(base.id)
            if rec is None or not usable(rec[0]):
                raise Refused(f"GRAPH_COMPUTE: {x.describe()} is in memory that {device.name} cannot use")
        try:
            ok = device.supports_op(t)
        except (GGMLError, ValueError, NotImplementedError) as exc:
            raise Refused(f"GRAPH_COMPUTE: {device.name} cannot check node {t.name!r}: {exc}") from exc
        if not ok:
            raise Refused(f"GRAPH_COMPUTE: {device.name} does not support node {t.describe()} ({t.op_desc})")
    return graph, b.ctx
