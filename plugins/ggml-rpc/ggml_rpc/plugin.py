"""The RPC client plugin: checks → buffers → backend → device → registration.

Each endpoint of ``GGML_RPC_SERVERS=host:port,host:port`` (or :func:`add_server`, or ``ggml-core run --rpc``)
becomes a registry ``RPC[host:port]`` whose devices are the server's devices, named ``RPC0``, ``RPC1``, ... in
the order they are found (as ggml). A remote device has one buffer type (the server's alignment and maximum
size); tensor reads and writes are bounds-checked here before they are sent; graphs go as GRAPH_COMPUTE, or as
GRAPH_RECOMPUTE when the graph is byte-for-byte the one sent last time; large weights try the server's hash cache
first (SET_TENSOR_HASH).

``supports_op``: ggml's client answers "yes" to everything. Here a ggml-core server (it marks its HELLO answer) is
asked (GGML-core extension command, answers cached per op signature); for any other server (llama.cpp's) the
answer is the op set of the registry's CPU device, which llama.cpp's CPU backend covers, so nodes the local CPU
could not run either are never sent; without a CPU device that answer raises :class:`RPCNoCPUError` (install
ggml-cpu).
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Callable
from typing import Any, Final

from ggml_core import (
    API_VERSION,
    AllocationError,
    Backend,
    BackendReg,
    Buffer,
    BufferType,
    BufferUsage,
    Device,
    DeviceCaps,
    DeviceNotFoundError,
    DeviceProps,
    DeviceType,
    GGMLOp,
    Graph,
    Tensor,
    TensorError,
    hookimpl,
    safe_text,
)
from ggml_core.backend.registry import get_registry
from ggml_rpc import _fnv
from ggml_rpc.client import MAX_DUE_BYTES, Connection, connection, endpoint_key
from ggml_rpc.protocol import (
    EXT_DEVICE_INFO_MAX,
    HASH_THRESHOLD,
    PEER_RECV,
    PEER_SEND_HEADER,
    RPC_TENSOR,
    SET_TENSOR_HEADER,
    U32_MAX,
    U64_MAX,
    Caps,
    Cmd,
    RPCConfigError,
    RPCError,
    RPCNoCPUError,
)
from ggml_rpc.serialize import GraphPayloads, fits_wire, serialize_tensor

__all__ = [
    "RPCBackend",
    "RPCBuffer",
    "RPCBufferType",
    "RPCDevice",
    "RPCReg",
    "add_server",
    "configured_endpoints",
]

_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_U32_U64: Final = struct.Struct("<IQ")
_U64_U8: Final = struct.Struct("<QB")
#: ops whose op_params hold a function pointer: never sent anywhere
_CUSTOM_OPS: Final = frozenset({GGMLOp.MAP_CUSTOM1, GGMLOp.MAP_CUSTOM2, GGMLOp.MAP_CUSTOM3, GGMLOp.CUSTOM})
#: ops whose remote allocation may be larger than their bytes (ggml's ``ggml_op_alloc_size_may_expand``)
_MAY_EXPAND: Final = frozenset(
    {GGMLOp.FLASH_ATTN_EXT, GGMLOp.MUL_MAT, GGMLOp.MUL_MAT_ID, GGMLOp.CUMSUM, GGMLOp.ARGSORT, GGMLOp.TOP_K}
)
_NO_LIMIT: Final = 2**63 - 1
#: characters kept of a device name (and of its type) a server reports; of its description
_NAME_LIMIT: Final = 64
_DESCRIPTION_LIMIT: Final = 160
#: the most devices one server may report
_MAX_DEVICES: Final = 64


# ================================================================================================ checks


def _local_cpu(endpoint: str) -> Device:
    """The registry's CPU device, whose op set is the one assumed for ``endpoint``, a server that cannot be asked.

    Looked up when first needed, not while the registry enumerates this plugin's devices (the listing is not
    reentrant); only the CPU's registry is enumerated for it.
    """
    registry = get_registry()
    with registry.enumerating_only(["CPU"]):
        try:
            return registry.get_device("CPU")
        except DeviceNotFoundError as exc:
            raise RPCNoCPUError(endpoint, exc.known) from None


def configured_endpoints() -> list[str]:
    """Endpoints from ``GGML_RPC_SERVERS`` then :func:`add_server`, without duplicates, in order."""
    out: list[str] = []
    for text in [*os.environ.get("GGML_RPC_SERVERS", "").split(","), *_added]:
        ep = text.strip()
        if ep:
            key = endpoint_key(ep)
            if key not in out:
                out.append(key)
    return out


# ================================================================================================ buffers


class RPCBuffer(Buffer):
    """A buffer allocated by the server (``remote_ptr``), addressed from its remote ``base`` address."""

    def __init__(self, buffer_type: RPCBufferType, size: int, remote_ptr: int, base: int) -> None:
        super().__init__(buffer_type, size)
        self.conn = buffer_type.device.conn
        self.remote_ptr = remote_ptr
        self.base = base
        #: (connection, handle, base) — what :mod:`ggml_rpc.serialize` needs to address tensors in this buffer
        self.rpc_remote = (self.conn, remote_ptr, base)

    def _raw(self, offset: int, size: int) -> bytes:
        """A byte tensor (I8, ``ne=[size]``) at ``offset`` for buffer-relative reads and writes."""
        return RPC_TENSOR.pack(
            0, 24, self.remote_ptr, size, 1, 1, 1, 1, size, size, size, 0, *([0] * 16), 0, *([0] * 10),
            0, 0, self.base + offset, b"", 0,
        )  # fmt: skip

    def _chunks(self, offset: int, size: int) -> list[tuple[int, int]]:
        step = U32_MAX & ~0xFFFF  # an I8 tensor's ne[0] is 32-bit on the wire
        return [(o, min(step, offset + size - o)) for o in range(offset, offset + size, step)]

    # ---- raw byte access (buffer offsets) -------------------------------------------------------------------

    def _write(self, offset: int, data: memoryview) -> None:
        for o, n in self._chunks(offset, data.nbytes):
            part = data[o - offset : o - offset + n]
            self.conn.send(Cmd.SET_TENSOR, [self._raw(o, n), SET_TENSOR_HEADER.pack(0, 0), part])

    def _read(self, offset: int, out: memoryview) -> None:
        for o, n in self._chunks(offset, out.nbytes):
            part = out[o - offset :][:n]
            self.conn.request_into(Cmd.GET_TENSOR, [self._raw(o, n), _U64.pack(0), _U64.pack(n)], part)

    def _fill(self, offset: int, size: int, value: int) -> None:
        for o, n in self._chunks(offset, size):
            self.conn.send(Cmd.MEMSET_TENSOR, [self._raw(o, n), _U64.pack(0), _U64.pack(n), bytes([value])])

    # ---- tensor access: the real tensor goes on the wire, as ggml's client sends it ------------------------

    def _hash_first(self, n: int) -> bool:
        """Whether a weight write of ``n`` bytes asks the server's cache first (SET_TENSOR_HASH, one round trip).

        llama.cpp's servers: over 10 MiB, as llama.cpp's client. A ggml-core server says in HELLO whether it has a
        cache and the smallest tensor it keeps: over that size when it has one, never when it has none.
        """
        if self.usage != BufferUsage.WEIGHTS or not _fnv.fast():
            return False
        conn = self.conn
        if not conn.advertised:  # llama.cpp's server
            return n > HASH_THRESHOLD
        return bool(conn.caps & Caps.TENSOR_CACHE) and n > conn.cache_min

    def set_tensor(self, t: Tensor, data: memoryview, offset: int = 0) -> None:
        """SET_TENSOR, after SET_TENSOR_HASH for weights the server's cache may hold (:meth:`_hash_first`)."""
        mv = memoryview(data).cast("B")
        self._tensor_span(t, offset, mv.nbytes)
        if not mv.nbytes:
            return
        rt = serialize_tensor(t, self.conn)
        cache_flag = 0
        if self._hash_first(mv.nbytes):
            digest = _fnv.fnv1a64(mv)
            hit = self.conn.request(Cmd.SET_TENSOR_HASH, [rt, _U64.pack(offset), _U64.pack(digest)])
            if hit[0]:
                self.conn.weights_cached += mv.nbytes
                return
            cache_flag = 1
        start = self.base + (t.data_offset or 0) + offset
        self.conn.send(Cmd.SET_TENSOR, [rt, SET_TENSOR_HEADER.pack(cache_flag, offset), mv], (start, start + mv.nbytes))

    def get_tensor(self, t: Tensor, out: memoryview, offset: int = 0) -> None:
        """GET_TENSOR straight into ``out``."""
        mv = memoryview(out).cast("B")
        self._tensor_span(t, offset, mv.nbytes)
        if mv.nbytes:
            rt = serialize_tensor(t, self.conn)
            self.conn.request_into(Cmd.GET_TENSOR, [rt, _U64.pack(offset), _U64.pack(mv.nbytes)], mv)

    def memset_tensor(self, t: Tensor, value: int, offset: int = 0, size: int | None = None) -> None:
        """MEMSET_TENSOR."""
        if size is None:
            size = t.nbytes - offset
        if not 0 <= value <= 255:
            raise ValueError(f"memset value must be a byte, got {value}")
        self._tensor_span(t, offset, size)
        if size:
            rt = serialize_tensor(t, self.conn)
            self.conn.send(Cmd.MEMSET_TENSOR, [rt, _U64.pack(offset), _U64.pack(size), bytes([value])])

    def cpy_tensor(self, src: Tensor, dst: Tensor) -> bool:
        """COPY_TENSOR when both tensors live on this connection's server; False otherwise (a staged copy)."""
        if src.buffer is None or src.data_offset is None:
            raise TensorError(src, "source is not allocated")
        if src.nbytes != dst.nbytes:
            raise TensorError(dst, f"copy needs equal sizes: source has {src.nbytes} bytes, destination {dst.nbytes}")
        self._tensor_span(dst, 0, dst.nbytes)
        src.buffer._tensor_span(src, 0, src.nbytes)
        if not isinstance(src.buffer, RPCBuffer) or src.buffer.conn is not self.conn:
            return False
        if not dst.nbytes:
            return True
        rsp = self.conn.request(Cmd.COPY_TENSOR, [serialize_tensor(src, self.conn), serialize_tensor(dst, self.conn)])
        return bool(rsp[0])

    def clear(self, value: int = 0) -> None:
        """BUFFER_CLEAR."""
        self._span("clear", 0, self.size)
        self.conn.send(Cmd.BUFFER_CLEAR, [_U64_U8.pack(self.remote_ptr, value & 0xFF)])

    def init_tensor(self, tensor: Tensor) -> None:
        """INIT_TENSOR for quantized tensors whose rows a server may pad (as ggml's client)."""
        if tensor.type.is_quantized and tensor.ne[0] % 512 and tensor.view_src is None and fits_wire(tensor):
            self.conn.send(Cmd.INIT_TENSOR, [serialize_tensor(tensor, self.conn)])

    def _free(self) -> None:
        if self.conn.failed is None and not self.conn.closed:
            self.conn.send(Cmd.FREE_BUFFER, [_U64.pack(self.remote_ptr)])
        self.conn.forget_graphs()  # the server drops its stored graphs when a buffer goes


class RPCBufferType(BufferType):
    """``RPC<n>[host:port]``: memory of one remote device."""

    device: RPCDevice

    def __init__(self, device: RPCDevice, alignment: int, max_size: int) -> None:
        super().__init__(f"{device.name}[{device.conn.endpoint}]", device, alignment=alignment, max_size=max_size)
        self._alloc_sizes: dict[tuple[Any, ...], int] = {}

    def alloc_size(self, tensor: Tensor) -> int:
        """GET_ALLOC_SIZE where a server may pad (quantized rows, ops that may expand), else the tensor's bytes."""
        n = tensor.nbytes
        padded_type = tensor.type.is_quantized and tensor.ne[0] % 512 and tensor.view_src is None
        if not (padded_type or tensor.op in _MAY_EXPAND) or not fits_wire(tensor):
            return n
        key = (int(tensor.type), int(tensor.op), tensor.op_params.tobytes(), tensor.ne, tensor.nb)
        got = self._alloc_sizes.get(key)
        if got is None:
            dev = self.device
            srcs = [serialize_tensor(s if s is not None and fits_wire(s) else None, dev.conn) for s in tensor.src]
            me = serialize_tensor(tensor, dev.conn)
            rsp = dev.conn.request(Cmd.GET_ALLOC_SIZE, [_U32.pack(dev.index), me, *srcs])
            got = _U64.unpack(rsp)[0]
            if got > max(n, self.max_size):
                raise dev.conn.protocol_error(
                    Cmd.GET_ALLOC_SIZE,
                    f"answered GET_ALLOC_SIZE with {got} bytes for a tensor of {n} bytes, more than the largest "
                    f"buffer it allows ({self.max_size} bytes): a malformed answer",
                )
            self._alloc_sizes[key] = got
        return max(got, n)

    def _alloc(self, size: int) -> Buffer:
        dev = self.device
        rsp = dev.conn.request(Cmd.ALLOC_BUFFER, [_U32_U64.pack(dev.index, size)])
        ptr, remote_size = struct.unpack("<QQ", rsp)
        if ptr == 0:
            free, _ = dev.memory()
            raise AllocationError(dev.name, size, free, f"the server at {dev.conn.endpoint} could not allocate it")
        if remote_size < size:
            raise AllocationError(dev.name, size, None, f"the server answered a buffer of only {remote_size} bytes")
        base = _U64.unpack(dev.conn.request(Cmd.BUFFER_GET_BASE, [_U64.pack(ptr)]))[0]
        if base > U64_MAX - max(size, remote_size):
            raise dev.conn.protocol_error(
                Cmd.BUFFER_GET_BASE,
                f"answered BUFFER_GET_BASE with the address {base:#x} for a buffer of "
                f"{remote_size} bytes, which would pass the end of the 64-bit address space: a malformed answer",
            )
        return RPCBuffer(self, size, ptr, base)


# ================================================================================================ backend


class RPCBackend(Backend):
    """A stream on a remote device: graphs are sent and run in order; :meth:`synchronize` waits for them."""

    device: RPCDevice

    def __init__(self, device: RPCDevice) -> None:
        super().__init__(device)
        #: the payloads of the graphs computed lately (serialised again only when they changed)
        self.payloads = GraphPayloads()

    def graph_compute_async(self, graph: Graph) -> None:
        """GRAPH_COMPUTE, or GRAPH_RECOMPUTE when this device's last graph was byte-for-byte the same."""
        if not graph.nodes:
            return
        dev = self.device
        conn = dev.conn
        payload = self.payloads.payload(dev.index, graph, conn)
        with conn.lock:
            if conn.last_graph.get(dev.index) == payload:
                conn.send(Cmd.GRAPH_RECOMPUTE, [_U32.pack(dev.index)])
                return
            conn.last_graph[dev.index] = payload
            conn.send(Cmd.GRAPH_COMPUTE, [payload])

    def synchronize(self) -> None:
        """Nothing to wait for here: what a graph computed can only be observed through this connection, and the
        server answers a later command (the read of an output, a copy, any answered request) only after every
        graph sent before it. So the scheduler's wait before reading a split's output costs no round trip of its
        own; a server that fails or stops is reported by that next answer, within its deadline.

        Tensor writes are not waited for either: the data left this process when they returned, and every later
        command on the connection runs after them on the server.
        """

    def cpy_tensor_async(self, src_backend: Backend, src: Tensor, dst: Tensor) -> bool:
        """A copy from a tensor of another server into one of this device (a split's input).

        Between two ggml-core servers that take peer copies, the source server sends the bytes to this one itself:
        EXT_PEER_SEND to it, EXT_PEER_RECV here, neither answered (no round trip, no byte through this process).
        Otherwise the GET_TENSOR goes at once, and its answer is read — together with those of the copies queued
        after it, in one round trip — when either connection next sends anything, and then written here with
        SET_TENSOR. False (the scheduler's blocking copy) for any other pair, and for such relayed copies over
        :data:`~ggml_rpc.client.MAX_DUE_BYTES`."""
        sbuf, dbuf = src.buffer, dst.buffer
        n = src.nbytes
        if (
            not isinstance(sbuf, RPCBuffer)
            or not isinstance(dbuf, RPCBuffer)
            or sbuf.conn is dbuf.conn
            or dbuf.conn is not self.device.conn
            or n <= 0
            or n != dst.nbytes
            or src.data_offset is None
            or dst.data_offset is None
        ):
            return False
        sbuf._tensor_span(src, 0, n)
        dbuf._tensor_span(dst, 0, n)
        start = dbuf.base + dst.data_offset
        if sbuf.conn.caps & dbuf.conn.caps & Caps.PEER_COPY:
            key, address, ticket = dbuf.conn.peer_ticket()
            head = PEER_SEND_HEADER.pack(serialize_tensor(src, sbuf.conn), 0, n, ticket, key)
            ack = memoryview(bytearray(1))
            sbuf.conn.request_later(Cmd.EXT_PEER_SEND, [head, address], ack, _no_op, None)
            recv = PEER_RECV.pack(serialize_tensor(dst, dbuf.conn), 0, n, ticket)
            dbuf.conn.peer_source(sbuf.conn)
            dbuf.conn.send(Cmd.EXT_PEER_RECV, [recv], (start, start + n))
            return True
        if n > MAX_DUE_BYTES:
            return False
        staged = memoryview(bytearray(n))
        request = [serialize_tensor(src, sbuf.conn), _U64.pack(0), _U64.pack(n)]
        write = lambda: dbuf.set_tensor(dst, staged)  # noqa: E731
        sbuf.conn.request_later(Cmd.GET_TENSOR, request, staged, write, dbuf.conn, (start, start + n))
        return True

    def graph_compute(self, graph: Graph) -> None:
        """Compute ``graph`` and wait until the server has (one round trip): an explicit compute returns when the
        work is done, and reports a failed graph itself."""
        super().graph_compute(graph)
        self.device.conn.sync(graphs_only=True)


def _no_op() -> None:
    pass


# ================================================================================================ device


def _device_info(raw: bytes) -> dict[str, Any]:
    """A ggml-core server's device info (JSON), reduced to its text fields made safe to print.

    Names and descriptions are the peer's data: control characters are escaped and lengths bounded here, when they
    are received, so no listing, log or error message can carry a terminal escape or a megabyte line from a server.
    """
    try:
        loaded = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    limits = {"name": _NAME_LIMIT, "description": _DESCRIPTION_LIMIT, "type": _NAME_LIMIT}
    return {k: safe_text(v, n) for k, n in limits.items() if isinstance(v := loaded.get(k), str)}


class RPCDevice(Device):
    """Device ``index`` of the server at ``conn.endpoint``."""

    type = DeviceType.GPU
    caps = DeviceCaps(asynchronous=True, host_buffer=False, buffer_from_host_ptr=False, events=False)

    def __init__(self, conn: Connection, index: int, name: str) -> None:
        self.conn = conn
        self.index = index
        self.info: dict[str, Any] = {}
        if conn.ggml_core:
            raw = conn.request_variable(
                Cmd.EXT_DEVICE_INFO, [_U32.pack(index)], EXT_DEVICE_INFO_MAX, timeout=conn.connect_timeout
            )
            self.info = _device_info(raw)
        if self.info:
            remote = f"{self.info.get('name', '?')}: {self.info.get('description', '')}"
            desc = f"{remote} (ggml-core server {conn.endpoint})"
        else:
            desc = f"device {index} of the RPC server {conn.endpoint}"
        super().__init__(name, desc, device_id=f"{conn.endpoint}/{index}")
        alignment = _U64.unpack(conn.request(Cmd.GET_ALIGNMENT, [_U32.pack(index)]))[0]
        max_size = _U64.unpack(conn.request(Cmd.GET_MAX_SIZE, [_U32.pack(index)]))[0]
        if alignment <= 0 or alignment & (alignment - 1) or alignment > 1 << 20:
            raise conn.protocol_error(
                Cmd.GET_ALIGNMENT,
                f"answered GET_ALIGNMENT with {alignment} for device {index}; expected a power of two up to 1 MiB",
            )
        self._buft = RPCBufferType(self, alignment, min(max_size, _NO_LIMIT) or _NO_LIMIT)
        self._supports: dict[tuple[Any, ...], bool] = {}
        #: the local CPU device, asked in place of a server that cannot be asked (found on first use)
        self._cpu: Device | None = None
        self._lock = threading.Lock()

    def memory(self) -> tuple[int, int]:
        """GET_DEVICE_MEMORY: (free, total) bytes on the server."""
        free, total = struct.unpack("<QQ", self.conn.request(Cmd.GET_DEVICE_MEMORY, [_U32.pack(self.index)]))
        return free, total

    def props(self) -> DeviceProps:
        """The usual properties, with the endpoint and protocol version (and the remote device, if known)."""
        p = super().props()
        p.extra.update(
            {
                "endpoint": self.conn.endpoint,
                "remote_index": self.index,
                "protocol": ".".join(map(str, self.conn.version)),
                "server": "ggml-core" if self.conn.ggml_core else "ggml (llama.cpp)",
            }
        )
        if self.info:
            p.extra["remote_device"] = self.info
        return p

    def buffer_type(self) -> BufferType:
        """The remote device's memory."""
        return self._buft

    def init_backend(self, params: str | None = None) -> Backend:
        """A stream on the remote device (``params`` are not used)."""
        return RPCBackend(self)

    def supports_buft(self, buft: BufferType) -> bool:
        """Only this device's own remote memory."""
        return buft is self._buft

    def supports_op(self, op: Tensor) -> bool:
        """Asked of a ggml-core server (cached); the local CPU plugin's answer for other servers."""
        if op.op in _CUSTOM_OPS or not fits_wire(op) or any(s is not None and not fits_wire(s) for s in op.src):
            return False
        if not self.conn.ggml_core:
            if self._cpu is None:
                self._cpu = _local_cpu(self.conn.endpoint)
            return bool(self._cpu.supports_op(op))
        key = (
            int(op.op), op.op_params.tobytes(), int(op.type), op.ne, op.nb, op.view_src is not None,
            *((int(s.type), s.ne, s.nb, s.view_src is not None) if s is not None else None for s in op.src),
        )  # fmt: skip
        with self._lock:
            got = self._supports.get(key)
        if got is None:
            srcs = [serialize_tensor(s, None) for s in op.src]
            rsp = self.conn.request(Cmd.EXT_SUPPORTS_OP, [_U32.pack(self.index), serialize_tensor(op, None), *srcs])
            got = bool(rsp[0])
            with self._lock:
                self._supports[key] = got
        return got


# ================================================================================================ registration


#: device names already given out, per (endpoint, index): ``RPC0``, ``RPC1``, ... in discovery order (as ggml)
_names: dict[tuple[str, int], str] = {}
_added: list[str] = []
_names_lock = threading.Lock()


def _device_name(endpoint: str, index: int) -> str:
    with _names_lock:
        return _names.setdefault((endpoint, index), f"RPC{len(_names)}")


class RPCReg(BackendReg):
    """``RPC[host:port]``: the devices of one server, found when first asked for (one connection, shared)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint_key(endpoint)
        super().__init__(f"RPC[{self.endpoint}]", description=f"ggml RPC server at {self.endpoint}", priority=-1)
        #: why the server's devices could not be found (it also gives :attr:`unavailable_reason`), or None: an
        #: :class:`RPCError`, or an :class:`RPCConfigError` for an unusable token or CA file
        self.error: RPCError | RPCConfigError | None = None

    def enumerate_devices(self) -> list[Device]:
        """Connect (HELLO), ask DEVICE_COUNT, make one device per remote device.

        A server that cannot be reached, or answers something malformed, leaves this registry without devices:
        :attr:`error` holds the :class:`RPCError` (for callers that asked for this server, see :func:`add_server`)
        and :attr:`unavailable_reason` its message.
        """
        try:
            conn = connection(self.endpoint)
            (count,) = _U32.unpack(conn.request(Cmd.DEVICE_COUNT, timeout=conn.connect_timeout))  # part of connecting
            if count > _MAX_DEVICES:
                raise conn.protocol_error(
                    Cmd.DEVICE_COUNT, f"answered DEVICE_COUNT with {count} devices; at most {_MAX_DEVICES} are accepted"
                )
            return [RPCDevice(conn, i, _device_name(self.endpoint, i)) for i in range(count)]
        except (RPCError, RPCConfigError) as exc:
            self.error = exc
            self.unavailable_reason = str(exc)
            return []

    def add_server(self, endpoint: str) -> None:
        """ggml's ``ggml_backend_rpc_add_server`` proc address (see :func:`add_server`)."""
        add_server(endpoint)

    def features(self) -> dict[str, str]:
        """The protocol spoken and the hash used for the tensor cache."""
        return {"RPC protocol": "7.0.0", "hash cache": "FNV-1a 64 (numba)" if _fnv.fast() else "off (no numba)"}


class _ServerPlugin:
    """A plugin object that registers one endpoint into a registry that is already loaded."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    @hookimpl
    def ggml_api_version(self) -> int:
        return API_VERSION

    @hookimpl
    def ggml_register_backends(self, register: Callable[[BackendReg], None]) -> None:
        register(RPCReg(self.endpoint))


def add_server(endpoint: str, registry: Any | None = None) -> str:
    """Use the server at ``endpoint`` (``host:port`` or ``tls://host:port``); returns its registry name
    ``RPC[host:port]``.

    Registries loaded later pick it up, and connect when its devices are first asked for. ``registry`` (an already
    loaded :class:`ggml_core.backend.registry.Registry`) gets it now: the server is asked for its devices at once,
    and one that cannot be reached (nothing listening, refused, timed out, a failed handshake or token) raises
    :class:`RPCError` naming the endpoint and what failed.
    """
    key = endpoint_key(endpoint)
    if key not in _added:
        _added.append(key)
    if registry is None:
        return f"RPC[{key}]"
    if not any(r.name == f"RPC[{key}]" for r in registry.regs):
        registry.register_plugin(_ServerPlugin(key), f"rpc[{key}]", distribution="ggml-rpc")
    reg = registry.get_reg(f"RPC[{key}]")
    found = reg.devices  # (connects: sets the registry's error when the server cannot be used)
    error = getattr(reg, "error", None)
    if not found and isinstance(error, RPCError | RPCConfigError):
        raise error
    return f"RPC[{key}]"


@hookimpl
def ggml_api_version() -> int:
    """This plugin speaks the current plugin API."""
    return API_VERSION


@hookimpl
def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
    """One registry per configured endpoint; with none, an empty ``RPC`` registry that says how to add one."""
    endpoints = configured_endpoints()
    for endpoint in endpoints:
        register(RPCReg(endpoint))
    if not endpoints:
        reg = BackendReg("RPC", [], description="ggml RPC client (no servers configured)", priority=-1)
        reg.unavailable_reason = "no RPC servers: set GGML_RPC_SERVERS=host:port,... or use ggml-core run --rpc"
        register(reg)


@hookimpl
def ggml_register_commands(register: Callable[..., None]) -> None:
    """``ggml-core rpc-server`` (its module imports the server only when the command runs)."""
    from ggml_rpc import cli

    register("rpc-server", cli.add_parser, cli.run)
