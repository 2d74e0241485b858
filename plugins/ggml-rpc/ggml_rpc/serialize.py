"""Client side: ggml-core tensors and graphs as ``rpc_tensor`` bytes, laid out exactly as ggml's client does.

``id`` is the tensor's process-unique id; ``buffer``/``data`` are the remote handle and the absolute remote address
for tensors in a buffer of *this* connection, 0 otherwise (as ggml does for tensors of another server). ``ne`` and
``nb`` are 32-bit on the wire: a tensor that does not fit is refused with a :class:`TensorError`, never truncated.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Final

from ggml_core import Graph, Tensor, TensorError
from ggml_rpc.protocol import NULL_TENSOR, RPC_TENSOR, U32_MAX, name_bytes

if TYPE_CHECKING:
    from ggml_rpc.client import Connection

__all__ = ["GraphPayloads", "fits_wire", "serialize_graph", "serialize_tensor"]

_GRAPH_HEAD: Final = struct.Struct("<II")
_U32: Final = struct.Struct("<I")


def fits_wire(t: Tensor) -> bool:
    """True when every ``ne``/``nb`` of ``t`` fits the wire's 32-bit fields."""
    return max(t.ne) <= U32_MAX and max(t.nb) <= U32_MAX


def _remote(t: Tensor, conn: Connection | None) -> tuple[int, int]:
    """(buffer handle, absolute data address) of ``t`` on ``conn``'s server, or (0, 0)."""
    buf = t.buffer
    if buf is None or t.data_offset is None:
        return 0, 0
    remote = getattr(buf, "rpc_remote", None)
    if remote is None or conn is None or remote[0] is not conn:
        return 0, 0
    return remote[1], remote[2] + t.data_offset


def serialize_tensor(t: Tensor | None, conn: Connection | None, use_count: int = 0) -> bytes:
    """The 296 ``rpc_tensor`` bytes of ``t`` (all zeros for None)."""
    if t is None:
        return NULL_TENSOR
    if not fits_wire(t):
        raise TensorError(
            t,
            f"ne={list(t.ne)}, nb={list(t.nb)} do not fit the 32-bit ne/nb fields of ggml's RPC protocol "
            "(at most 4294967295); keep this tensor on a local device",
        )
    handle, data = _remote(t, conn)
    src = [s.id if s is not None else 0 for s in t.src]
    return RPC_TENSOR.pack(
        t.id,
        int(t.type),
        handle,
        *t.ne,
        *t.nb,
        int(t.op),
        *t.op_params.tolist(),
        int(t.flags) & 0x7FFFFFFF,
        *src,
        t.view_src.id if t.view_src is not None else 0,
        t.view_offs if t.view_src is not None else 0,
        data,
        name_bytes(t.name),
        use_count,
    )


def _closure(graph: Graph) -> list[Tensor]:
    """Every tensor the nodes reach through src and view_src, each after what it refers to (ggml's order)."""
    out: list[Tensor] = []
    seen: set[int] = set()
    for root in graph.nodes:
        if root.id in seen:
            continue
        seen.add(root.id)
        stack: list[tuple[Tensor, int]] = [(root, 0)]
        while stack:
            t, i = stack.pop()
            # children: src[0..9] then view_src
            while i <= len(t.src):
                child = t.src[i] if i < len(t.src) else t.view_src
                i += 1
                if child is not None and child.id not in seen:
                    seen.add(child.id)
                    stack.append((t, i))
                    stack.append((child, 0))
                    break
            else:
                out.append(t)
    return out


def serialize_graph(device: int, graph: Graph, conn: Connection) -> bytes:
    """GRAPH_COMPUTE's payload: ``u32 device, u32 n_nodes, u64 node_ids[], u32 n_tensors, rpc_tensor[]``."""
    return _payload(device, graph, _closure(graph), conn)


def _payload(device: int, graph: Graph, tensors: list[Tensor], conn: Connection) -> bytes:
    uses = graph.use_counts
    ids = [n.id for n in graph.nodes]
    body = b"".join(serialize_tensor(t, conn, uses.get(t.id, 0)) for t in tensors)
    head = _GRAPH_HEAD.pack(device, len(ids))
    return b"".join([head, struct.pack(f"<{len(ids)}Q", *ids), _U32.pack(len(tensors)), body])


def _signature(graph: Graph, tensors: list[Tensor]) -> list[Any]:
    """What a payload depends on that may change while the graph stays the same object (as the CPU plugin's plans
    check): its nodes, each tensor's memory and operands (a scheduler rewires operands and rebinds memory)."""
    sig: list[Any] = list(graph.nodes)
    sig += [(t.buffer, t.data_offset, t.view_src, *t.src) for t in tensors]
    return sig


class GraphPayloads:
    """The GRAPH_COMPUTE payloads of the graphs one device computed lately, by graph: a graph sent again unchanged
    (a scheduler runs the same splits every step) costs a check of its tensors instead of their serialisation."""

    #: graphs remembered (a tensor-parallel step of a 4-layer model has about 20 per device)
    LIMIT: Final = 64

    def __init__(self) -> None:
        self._items: OrderedDict[int, tuple[list[Tensor], list[Any], bytes]] = OrderedDict()

    def payload(self, device: int, graph: Graph, conn: Connection) -> bytes:
        """``serialize_graph(device, graph, conn)``, from the cache while nothing it depends on changed."""
        got = self._items.get(graph.uid)
        if got is not None and _signature(graph, got[0]) == got[1]:
            self._items.move_to_end(graph.uid)
            return got[2]
        tensors = _closure(graph)
        payload = _payload(device, graph, tensors, conn)
        self._items[graph.uid] = (tensors, _signature(graph, tensors), payload)
        if len(self._items) > self.LIMIT:
            self._items.popitem(last=False)
        return payload
