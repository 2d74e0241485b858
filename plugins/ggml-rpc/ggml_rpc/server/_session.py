"""One client connection on the server: HELLO first, then one command at a time, each checked before it acts.

Sizes are checked before anything is allocated: fixed-size commands must have their exact size, SET_TENSOR's
data must fit the tensor it names (its header is read and checked first), GRAPH_COMPUTE is bounded by the node
and tensor limits. Any violation raises :class:`Refused`; the session then logs one line and closes this
connection only. The buffers a connection allocated are freed (and their bytes returned to the server's budget)
when it ends.

Time: the whole HELLO must arrive within ``hello_timeout``; every later message, once its first byte came, within
``frame_timeout`` plus its size at ``min_rate`` (however slowly it trickles); answers are sent under the same rule.
No device lock is ever held across network I/O: data for host memory is received into and sent from the
connection's own buffer (no other connection can name it); data for other devices goes through a staging chunk
of ``staging_chunk`` bytes, each chunk copied under the device lock. A slow client slows only itself.

Server-to-server copies (:mod:`._peer`): EXT_PEER_SEND sends a tensor's bytes to another ggml-core server over a
connection the serving Session opens (once per peer address, as a client of that server); EXT_PEER_PUT, on a connection
from such a peer, leaves them in the mailbox of the connection its key names; EXT_PEER_RECV takes them from this
connection's mailbox (waiting at most the message deadline) and writes them into a tensor.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import ssl
import struct
import time
from collections import OrderedDict
from typing import Final

from ggml_core import AllocationError, Backend, Context, Device, GGMLError, Graph, Tensor
from ggml_rpc.protocol import (
    FIXED_REQUEST_SIZE,
    PEER_RECV,
    RPC_TENSOR_SIZE,
    SET_TENSOR_HEADER,
    Cmd,
    RpcTensor,
    recv_exact,
    recv_into_exact,
    send_all,
)
from ggml_rpc.server._graph import build_graph, parse_graph
from ggml_rpc.server._greeting import greet
from ggml_rpc.server._peer import PeerPort, parse_peer_send
from ggml_rpc.server._rebuild import rebuild_node
from ggml_rpc.server._state import ServerState
from ggml_rpc.server._validate import BufferTable, Refused, Remote, check_layout, extent
from ggml_rpc.server._work import graph_scratch

__all__ = ["Session"]

log = logging.getLogger("ggml_rpc.server")

_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_2U64: Final = struct.Struct("<QQ")
_SET_HEAD: Final = RPC_TENSOR_SIZE + SET_TENSOR_HEADER.size
#: decoded graphs kept per device and connection (a tensor-parallel step of a 4-layer model sends about 20)
DECODED_GRAPHS: Final = 64


class Session:
    """Serves one connection of ``server`` on ``sock`` until the client leaves or a message is refused."""

    def __init__(self, server: ServerState, sock: socket.socket, peer: str) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self.limits = server.limits
        self.devices: list[Device] = server.devices
        self.buffers = BufferTable(self.limits.max_buffers, self.limits.max_bytes or 2**63)
        self.backends: list[Backend | None] = [None] * len(self.devices)
        #: the last graph computed per device, with the context keeping its tensors, its share of the server's
        #: graph memory and its kernels' scratch (GRAPH_RECOMPUTE)
        self.stored: dict[int, tuple[Graph, Context, int, int]] = {}
        #: per device, the graphs decoded lately by their GRAPH_COMPUTE payload, least recently used first: a
        #: payload seen before runs its decoded graph again (a client alternating between several graphs, as a
        #: tensor-parallel step does, pays the decoding once per graph)
        self.decoded: dict[int, OrderedDict[bytes, tuple[Graph, Context, int, int]]] = {}
        self.commands = 0
        #: when the message being read began and must be complete (monotonic seconds)
        self._begun = self._deadline = 0.0
        self._staging: bytearray | None = None
        #: this connection's side of server-to-server copies
        self.peer_port = PeerPort(
            server.peers, server.token, server.tls is not None, self.limits.frame_timeout, self.limits.hello_timeout
        )

    # ----------------------------------------------------------------------------------------------- loop

    def run(self) -> None:
        """Serve until the end; never raises."""
        try:
            self.sock = greet(
                self.sock, self.server.token, self.server.tls, self.limits.hello_timeout, self.server.hello_caps
            )
            while self._one():
                self.commands += 1
        except Refused as exc:
            self.server.count("refused")
            log.warning("closing connection from %s: %s", self.peer, exc)
        except (EOFError, ConnectionError) as exc:
            log.info("connection from %s closed: %s", self.peer, exc)
        except TimeoutError:
            self.server.count("timed out")
            log.warning(
                "closing connection from %s: a message was not complete in time (%g s plus its size at %d B/s; "
                "HELLO within %g s)",
                self.peer,
                self.limits.frame_timeout,
                self.limits.min_rate,
                self.limits.hello_timeout,
            )
        except OSError as exc:
            log.info("connection from %s failed: %s", self.peer, exc)
        except Exception:
            self.server.count("internal errors")
            log.exception("closing connection from %s after an internal error", self.peer)
        finally:
            self.close()

    def close(self) -> None:
        """Free this connection's buffers (returning their bytes to the budget) and close its socket."""
        self.peer_port.close()
        self._forget_graphs()
        for rec in self.buffers:
            with contextlib.suppress(Exception):
                self._release(self.buffers.remove(rec.handle))
        for be in self.backends:
            if be is not None:
                with contextlib.suppress(Exception):
                    be.free()
        with contextlib.suppress(OSError):
            self.sock.close()

    def _release(self, rec: Remote) -> None:
        """Free a buffer this connection no longer holds and return its bytes to the device's budget."""
        try:
            with self._lock(rec):
                rec.buffer.free()
        finally:
            self.server.memory[rec.device].give(rec.size)

    def _forget_graphs(self, device: int | None = None) -> None:
        """Drop the stored and decoded graphs (of one device, or all) and return their graph memory."""
        for index in [device] if device is not None else list(self.decoded):
            self.stored.pop(index, None)
            for entry in self.decoded.pop(index, {}).values():
                self.server.graph_memory.give(entry[2])

    def _evict_graph(self) -> bool:
        """Drop the least recently used decoded graph of any device that is not its device's last one (kept for
        GRAPH_RECOMPUTE); False when there is none."""
        for index, graphs in self.decoded.items():
            for key, entry in graphs.items():
                if self.stored.get(index) is not entry:
                    del graphs[key]
                    self.server.graph_memory.give(entry[2])
                    return True
        return False

    def _read(self, n: int) -> bytearray:
        """The next ``n`` bytes of the current message, by its deadline."""
        return recv_exact(self.sock, n, self._deadline)

    def _respond(self, payload: bytes | bytearray | memoryview = b"") -> None:
        """Send an answer; the whole answer must leave by its deadline (size at ``min_rate`` plus the base)."""
        mv = memoryview(payload).cast("B")
        deadline = self.limits.deadline(mv.nbytes)
        if mv.nbytes <= 1 << 16:
            send_all(self.sock, _U64.pack(mv.nbytes) + bytes(mv), deadline)
        else:
            send_all(self.sock, _U64.pack(mv.nbytes), deadline)
            send_all(self.sock, mv, deadline)

    def _one(self) -> bool:
        """Serve one command; False when the client closed the connection between commands."""
        idle = self.limits.idle_timeout
        if idle is not None:
            self.sock.settimeout(idle)
        while True:  # without an idle limit the socket keeps the last message's timeout: no syscall per command
            try:
                first = self.sock.recv(1)
                break
            except TimeoutError:
                if idle is not None:
                    raise Refused(f"silent for more than {idle:g} s (idle timeout)") from None
                self.sock.settimeout(None)  # silent for longer than that timeout: wait as long as it takes
        if not first:
            return False
        self._begun = begun = time.monotonic()
        self._deadline = self.limits.deadline(8, begun)
        (size,) = _U64.unpack(self._read(8))
        # the whole message; a declared size is checked (bounded) by each command before its payload is read
        self._deadline = self.limits.deadline(min(size, 2**62), begun)
        try:
            cmd = Cmd(first[0])
        except ValueError:
            raise Refused(f"unknown command {first[0]}") from None
        if cmd == Cmd.HELLO:
            raise Refused("HELLO may only be the first command")
        self.server.count(cmd.name)
        fixed = FIXED_REQUEST_SIZE.get(cmd)
        if fixed is not None:
            if size != fixed:
                raise Refused(f"{cmd.name} with a payload of {size} bytes; protocol 7 has {fixed}")
            handler = _FIXED.get(cmd)
            if handler is None:
                raise Refused(f"command {cmd.name} is not accepted")
            handler(self, self._read(size))
        elif cmd == Cmd.SET_TENSOR:
            self._set_tensor(size)
        elif cmd == Cmd.GRAPH_COMPUTE:
            self._graph_compute(size)
        elif cmd == Cmd.EXT_PEER_SEND:
            self._peer_send(size)
        elif cmd == Cmd.EXT_PEER_PUT:
            self._peer_put(size)
        else:
            raise Refused(f"command {cmd.name} ({int(cmd)}) is not accepted")
        return True

    # ----------------------------------------------------------------------------------------------- helpers

    def _device(self, index: int, what: str) -> Device:
        if index >= len(self.devices):
            raise Refused(f"{what}: device {index} does not exist (this server has {len(self.devices)})")
        return self.devices[index]

    def _backend(self, index: int) -> Backend:
        be = self.backends[index]
        if be is None:
            be = self.devices[index].init_backend()
            if self.server.n_threads:
                be.set_n_threads(self.server.n_threads)
            self.backends[index] = be
        return be

    def _tensor(self, rt: RpcTensor, what: str) -> tuple[Tensor, Remote, int]:
        """A bound stand-alone tensor for ``rt`` (memory checked), its buffer record and its extent."""
        t, rec, off, n = self.buffers.locate(rt, what)
        assert rec is not None
        ctx = Context("rpc")
        x = Tensor(ctx, t, rt.ne, nb=rt.nb, name=rt.name_str)
        x.buffer, x.data_offset = rec.buffer, off
        return x, rec, n

    def _bytes_of(self, rt: RpcTensor, offset: int, n: int, what: str) -> tuple[Remote, int]:
        """The buffer record of ``rt`` and where its ``n`` bytes from ``offset`` start in it (checked)."""
        t, rec, limit = self._tensor(rt, what)
        self._range(what, rt, offset, n, limit)
        assert t.data_offset is not None
        return rec, t.data_offset + offset

    def _range(self, what: str, rt: RpcTensor, offset: int, size: int, limit: int) -> None:
        if offset > limit or size > limit - offset:
            raise Refused(f"{what} {rt.name_str!r}: {size} bytes at offset {offset} leave its {limit} bytes")

    def _lock(self, rec: Remote) -> contextlib.AbstractContextManager[object]:
        return self.server.device_lock(rec.device)

    def _fill_lock(self, rec: Remote) -> contextlib.AbstractContextManager[object]:
        """For filling a buffer: none for host memory (only this connection can name it), else the device lock."""
        return contextlib.nullcontext() if rec.buffer.host_array() is not None else self._lock(rec)

    # ----------------------------------------------------------------------------------------------- commands

    def _device_count(self, _: bytearray) -> None:
        self._respond(_U32.pack(len(self.devices)))

    def _alloc_buffer(self, p: bytearray) -> None:
        index, size = struct.unpack("<IQ", p)
        dev = self._device(index, "ALLOC_BUFFER")
        buft = dev.buffer_type()
        budget = self.server.memory[index]
        why = self.buffers.room_for(size)
        if why is None and size > buft.max_size:
            why = f"over {dev.name}'s largest buffer ({buft.max_size} bytes)"
        if why is None and size > dev.memory()[0]:
            why = f"more than {dev.name}'s free memory"
        if why is None and not budget.take(size):
            why = f"over the server's budget for {dev.name} ({budget.free} of {budget.total} bytes left; --max-memory)"
        if why is None:
            try:
                with self.server.device_lock(index):
                    buf = buft.alloc_buffer(size)
            except (AllocationError, MemoryError, ValueError) as exc:
                budget.give(size)
                why = str(exc)
        if why is not None:
            log.info("%s: ALLOC_BUFFER on %s refused: %s", self.peer, dev.name, why)
            self._respond(_2U64.pack(0, 0))  # ggml's answer for a failed allocation
            return
        if buf.size != size:  # a device may round up: the budget counts what was really given
            if buf.size > size and not budget.take(buf.size - size):
                buf.free()
                budget.give(size)
                self._respond(_2U64.pack(0, 0))
                return
            if buf.size < size:
                budget.give(size - buf.size)
        rec = self.buffers.add(buf, index)
        self._respond(_2U64.pack(rec.handle, buf.size))

    def _get_alignment(self, p: bytearray) -> None:
        dev = self._device(_U32.unpack(p)[0], "GET_ALIGNMENT")
        self._respond(_U64.pack(dev.buffer_type().alignment))

    def _room(self, index: int) -> int:
        """Bytes this connection could still be granted on a device (its own limit and the server's budget)."""
        return max(0, min(self.server.memory[index].free, self.buffers.max_bytes - self.buffers.bytes))

    def _get_max_size(self, p: bytearray) -> None:
        index = _U32.unpack(p)[0]
        dev = self._device(index, "GET_MAX_SIZE")
        self._respond(_U64.pack(min(dev.buffer_type().max_size, self.buffers.max_bytes)))

    def _get_device_memory(self, p: bytearray) -> None:
        index = _U32.unpack(p)[0]
        dev = self._device(index, "GET_DEVICE_MEMORY")
        free, total = dev.memory()
        self._respond(_2U64.pack(max(0, min(free, self._room(index))), max(0, total)))

    def _buffer_get_base(self, p: bytearray) -> None:
        rec = self.buffers.get(_U64.unpack(p)[0], "BUFFER_GET_BASE")
        self._respond(_U64.pack(rec.base))

    def _free_buffer(self, p: bytearray) -> None:
        rec = self.buffers.remove(_U64.unpack(p)[0])
        self._forget_graphs()  # stored graphs may use it (as ggml)
        self._release(rec)

    def _buffer_clear(self, p: bytearray) -> None:
        handle, value = struct.unpack("<QB", p)
        rec = self.buffers.get(handle, "BUFFER_CLEAR")
        with self._fill_lock(rec):  # (committing a large fresh buffer takes a while: others' graphs need not wait)
            rec.buffer.clear(value)

    def _staging_chunk(self) -> memoryview:
        if self._staging is None:
            self._staging = bytearray(self.limits.staging_chunk)
        return memoryview(self._staging)

    def _set_tensor(self, size: int) -> None:
        if size < _SET_HEAD:
            raise Refused(f"SET_TENSOR with a payload of {size} bytes, shorter than its {_SET_HEAD}-byte header")
        self._deadline = self.limits.deadline(_SET_HEAD, self._begun)  # the declared size is not checked yet
        head = self._read(_SET_HEAD)
        rt = RpcTensor.unpack_from(head)
        cache_flag, offset = SET_TENSOR_HEADER.unpack_from(head, RPC_TENSOR_SIZE)
        n = size - _SET_HEAD
        t, rec, limit = self._tensor(rt, "SET_TENSOR")
        self._range("SET_TENSOR", rt, offset, n, limit)  # checked before a byte of data is read
        self._deadline = self.limits.deadline(size, self._begun)
        start = t.data_offset + offset if t.data_offset is not None else 0
        cache = self.server.cache
        writer = cache.writer(n) if cache is not None and cache_flag else None
        try:
            host = rec.buffer.host_array()
            if host is not None and host.flags.writeable:
                # straight into this connection's own memory: no other connection can name it, so no lock
                view = memoryview(host[start : start + n].data)
                recv_into_exact(self.sock, view, self._deadline)
                if writer is not None:
                    writer.update(view)
            else:  # through the staging chunk; only each copy to the device holds its lock
                stage = self._staging_chunk()
                for at in range(0, n, stage.nbytes):
                    chunk = stage[: min(stage.nbytes, n - at)]
                    recv_into_exact(self.sock, chunk, self._deadline)
                    with self._lock(rec):
                        rec.buffer.write(start + at, chunk)
                    if writer is not None:
                        writer.update(chunk)
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        if writer is not None:
            writer.finish()

    def _set_tensor_hash(self, p: bytearray) -> None:
        rt = RpcTensor.unpack_from(p)
        offset, digest = _2U64.unpack_from(p, RPC_TENSOR_SIZE)
        t, rec, limit = self._tensor(rt, "SET_TENSOR_HASH")
        cache = self.server.cache
        path = cache.lookup(digest) if cache is not None else None
        if cache is None or path is None:
            self._respond(b"\0")
            return
        assert t.data_offset is not None
        start = t.data_offset

        def write(at: int, chunk: memoryview) -> None:
            with self._lock(rec):
                rec.buffer.write(start + offset + at, chunk)

        ok = cache.load(path, digest, limit - offset if offset <= limit else -1, write, self._staging_chunk())
        if ok:
            self.server.count("cache hits")
            log.info("%s: %r served from the cache (%s)", self.peer, rt.name_str, path.name)
        else:
            log.info("%s: cached %s not used for tensor %r; answered 'not cached'", self.peer, path, rt.name_str)
        self._respond(b"\1" if ok else b"\0")

    def _get_tensor(self, p: bytearray) -> None:
        rt = RpcTensor.unpack_from(p)
        offset, n = _2U64.unpack_from(p, RPC_TENSOR_SIZE)
        rec, start = self._bytes_of(rt, offset, n, "GET_TENSOR")
        host = rec.buffer.host_array()
        if host is not None:  # sent from this connection's own memory, without a lock
            self._respond(host[start : start + n].data)
            return
        deadline = self.limits.deadline(n)
        send_all(self.sock, _U64.pack(n), deadline)
        stage = self._staging_chunk()
        for at in range(0, n, stage.nbytes):  # copied out under the lock, sent without it
            k = min(stage.nbytes, n - at)
            with self._lock(rec):
                data = rec.buffer.read(start + at, k)
            send_all(self.sock, data, deadline)

    def _memset_tensor(self, p: bytearray) -> None:
        rt = RpcTensor.unpack_from(p)
        offset, n, value = struct.unpack_from("<QQB", p, RPC_TENSOR_SIZE)
        t, rec, limit = self._tensor(rt, "MEMSET_TENSOR")
        self._range("MEMSET_TENSOR", rt, offset, n, limit)
        if n:
            with self._fill_lock(rec):
                rec.buffer.memset_tensor(t, value, offset, n)

    def _copy_tensor(self, p: bytearray) -> None:
        src_rt = RpcTensor.unpack_from(p)
        dst_rt = RpcTensor.unpack_from(p, RPC_TENSOR_SIZE)
        src, src_rec, n_src = self._tensor(src_rt, "COPY_TENSOR source")
        dst, dst_rec, n_dst = self._tensor(dst_rt, "COPY_TENSOR destination")
        if n_src != n_dst:
            raise Refused(f"COPY_TENSOR: source has {n_src} bytes, destination {n_dst}")
        low, high = sorted((src_rec.device, dst_rec.device))  # in index order: no deadlock between connections
        with self.server.device_lock(low), self.server.device_lock(high):
            try:
                ok = dst_rec.buffer.cpy_tensor(src, dst)
            except GGMLError as exc:
                raise Refused(f"COPY_TENSOR: {exc}") from exc
        self._respond(b"\1" if ok else b"\0")

    def _init_tensor(self, p: bytearray) -> None:
        rt = RpcTensor.unpack_from(p)
        if rt.buffer == 0:
            check_layout(rt, "INIT_TENSOR")
            return  # ggml logs and carries on
        t, rec, _ = self._tensor(rt, "INIT_TENSOR")
        with self._lock(rec):
            rec.buffer.init_tensor(t)

    def _get_alloc_size(self, p: bytearray) -> None:
        index = _U32.unpack_from(p)[0]
        dev = self._device(index, "GET_ALLOC_SIZE")
        rt = RpcTensor.unpack_from(p, 4)
        t_type = check_layout(rt, "GET_ALLOC_SIZE")
        ctx = Context("rpc")
        t = Tensor(ctx, t_type, rt.ne, nb=rt.nb, name=rt.name_str)
        for i in range(10):
            s = RpcTensor.unpack_from(p, 4 + (1 + i) * RPC_TENSOR_SIZE)
            if s.id:
                t.src[i] = Tensor(ctx, check_layout(s, "GET_ALLOC_SIZE source"), s.ne, nb=s.nb, name=s.name_str)
        buft = dev.buffer_type()
        if rt.buffer:
            buft = self.buffers.get(rt.buffer, "GET_ALLOC_SIZE").buffer.buffer_type
        try:
            size = max(buft.alloc_size(t), extent(t_type, rt.ne, rt.nb))
        except (GGMLError, ValueError) as exc:
            raise Refused(f"GET_ALLOC_SIZE {rt.name_str!r}: {exc}") from exc
        self._respond(_U64.pack(size))

    def _graph_compute(self, size: int) -> None:
        if size > self.limits.max_graph_bytes:
            raise Refused(f"GRAPH_COMPUTE of {size} bytes; this server accepts at most {self.limits.max_graph_bytes}")
        if size < 4:
            raise Refused(f"GRAPH_COMPUTE: payload of {size} bytes is shorter than its 12-byte header")
        device = _U32.unpack(self._read(4))[0]
        self._device(device, "GRAPH_COMPUTE")
        cost = self.limits.graph_cost(size)
        pool = self.server.graph_memory
        while not pool.take(cost):  # this connection's older graphs make room first, then other connections'
            if self._evict_graph():
                continue
            if self.decoded.get(device):
                self._forget_graphs(device)
                continue
            if not pool.take(cost, wait_until=self._deadline):  # wait for other connections' graphs, not forever
                raise Refused(
                    f"GRAPH_COMPUTE of {size} bytes needs up to {cost} bytes of server memory to decode; the "
                    f"server's graph memory ({pool.total} bytes) stayed in use by other connections"
                )
            break
        graphs = self.decoded.setdefault(device, OrderedDict())
        try:
            payload = bytearray(size)
            payload[:4] = _U32.pack(device)
            recv_into_exact(self.sock, memoryview(payload)[4:], self._deadline)
            key = bytes(payload)
            entry = graphs.get(key)
            if entry is not None:
                pool.give(cost)
                graphs.move_to_end(key)
                self.stored[device] = entry
                self._compute(device, entry[0], entry[3])
                return
            msg = parse_graph(payload, self.limits.max_nodes, self.limits.max_tensors)
            dev = self.devices[device]

            def usable(rec: Remote) -> bool:
                return rec.device == msg.device or dev.supports_buft(rec.buffer.buffer_type)

            graph, ctx = build_graph(msg, self.buffers, dev, usable, self.limits)
            self.server.count("graphs decoded")
            scratch = graph_scratch(graph.nodes)
            self._compute(msg.device, graph, scratch)
        except BaseException:
            pool.give(cost)
            raise
        graphs[key] = self.stored[device] = (graph, ctx, cost, scratch)
        while len(graphs) > DECODED_GRAPHS:
            pool.give(graphs.popitem(last=False)[1][2])

    def _graph_recompute(self, p: bytearray) -> None:
        index = _U32.unpack(p)[0]
        self._device(index, "GRAPH_RECOMPUTE")
        stored = self.stored.get(index)
        if stored is None:
            raise Refused(f"GRAPH_RECOMPUTE: no graph stored for device {index}")
        self._compute(index, stored[0], stored[3])

    def _compute(self, index: int, graph: Graph, scratch: int) -> None:
        """Compute with ``scratch`` bytes (the kernels' temporaries) taken from the device's budget meanwhile."""
        be = self._backend(index)
        budget = self.server.memory[index]
        if not budget.take(scratch):
            raise Refused(
                f"GRAPH_COMPUTE on {self.devices[index].name}: its largest node needs about {scratch} bytes of "
                f"scratch memory; the server's budget has {budget.free} of {budget.total} bytes left (--max-memory)"
            )
        try:
            with self.server.device_lock(index):
                try:
                    be.graph_compute(graph)
                except (GGMLError, ValueError, ArithmeticError, IndexError, NotImplementedError) as exc:
                    raise Refused(f"computing the graph on {self.devices[index].name} failed: {exc}") from exc
        finally:
            budget.give(scratch)
        self.server.count("graphs computed")

    def _device_info(self, p: bytearray) -> None:
        dev = self._device(_U32.unpack(p)[0], "EXT_DEVICE_INFO")
        info = {"name": dev.name, "description": dev.description, "type": dev.type.name}
        self._respond(json.dumps(info).encode("utf-8")[:65536])

    def _supports_op(self, p: bytearray) -> None:
        dev = self._device(_U32.unpack_from(p)[0], "EXT_SUPPORTS_OP")
        rt = RpcTensor.unpack_from(p, 4)
        ctx = Context("rpc-supports")
        try:
            srcs: list[Tensor | None] = []
            for i in range(10):
                s = RpcTensor.unpack_from(p, 4 + (1 + i) * RPC_TENSOR_SIZE)
                if not s.id or (s.id == rt.id and i == 1):
                    srcs.append(None)
                    continue
                x = Tensor(ctx, check_layout(s, "EXT_SUPPORTS_OP source"), s.ne, nb=s.nb, name=s.name_str)
                srcs.append(x)
            check_layout(rt, "EXT_SUPPORTS_OP")
            ok = bool(dev.supports_op(rebuild_node(rt, srcs, ctx))) if rt.op else True
        except (Refused, GGMLError, ValueError, NotImplementedError) as exc:
            log.debug("%s: EXT_SUPPORTS_OP answered no: %s", self.peer, exc)
            ok = False
        self._respond(b"\1" if ok else b"\0")

    # ----------------------------------------------------------------------------------------------- peer copies

    def _hung_up(self) -> bool:
        """True when the client has closed the connection (or it broke); read nothing."""
        if isinstance(self.sock, ssl.SSLSocket):
            return False  # (no peeking under TLS: such a wait ends at its deadline)
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
            return bool(readable) and self.sock.recv(1, socket.MSG_PEEK) == b""  # (readable: recv does not wait)
        except (BlockingIOError, InterruptedError):
            return False
        except (OSError, ValueError):
            return True

    def _peers_on(self, what: str) -> None:
        if not self.server.peers.enabled:
            raise Refused(f"{what}: this server does not take part in server-to-server copies (--no-peer-copy)")

    def _peer_info(self, _: bytearray) -> None:
        self._peers_on("EXT_PEER_INFO")
        self._respond(self.peer_port.info())

    def _peer_send(self, size: int) -> None:
        self._peers_on("EXT_PEER_SEND")
        raw, offset, n, ticket, key, address = parse_peer_send(size, self._read)
        rec, start = self._bytes_of(RpcTensor.unpack_from(raw), offset, n, "EXT_PEER_SEND")
        host = rec.buffer.host_array()
        if host is not None:  # sent from this connection's own memory, without a lock
            data: bytes | memoryview = memoryview(host[start : start + n].data).cast("B")
        else:
            with self._lock(rec):
                data = rec.buffer.read(start, n)
        self._respond(b"\1")  # before sending: it says this server got this far, whatever becomes of the peer
        self.peer_port.send(address, key, ticket, data)
        self.server.count("peer bytes sent")

    def _peer_put(self, size: int) -> None:
        self._peers_on("EXT_PEER_PUT")
        self.peer_port.put(size, self._read)
        self.server.count("peer bytes received")

    def _peer_recv(self, p: bytearray) -> None:
        raw, offset, n, ticket = PEER_RECV.unpack(p)
        rt = RpcTensor.unpack_from(raw)
        rec, start = self._bytes_of(rt, offset, n, "EXT_PEER_RECV")
        deadline = time.monotonic() + self.limits.peer_timeout + n / self.limits.min_rate
        data = self.peer_port.take(ticket, n, deadline, repr(rt.name_str), self._hung_up)
        with self._fill_lock(rec):
            rec.buffer.write(start, memoryview(data))


_FIXED: Final = {
    Cmd.ALLOC_BUFFER: Session._alloc_buffer,
    Cmd.GET_ALIGNMENT: Session._get_alignment,
    Cmd.GET_MAX_SIZE: Session._get_max_size,
    Cmd.BUFFER_GET_BASE: Session._buffer_get_base,
    Cmd.FREE_BUFFER: Session._free_buffer,
    Cmd.BUFFER_CLEAR: Session._buffer_clear,
    Cmd.SET_TENSOR_HASH: Session._set_tensor_hash,
    Cmd.GET_TENSOR: Session._get_tensor,
    Cmd.COPY_TENSOR: Session._copy_tensor,
    Cmd.GET_DEVICE_MEMORY: Session._get_device_memory,
    Cmd.INIT_TENSOR: Session._init_tensor,
    Cmd.GET_ALLOC_SIZE: Session._get_alloc_size,
    Cmd.DEVICE_COUNT: Session._device_count,
    Cmd.GRAPH_RECOMPUTE: Session._graph_recompute,
    Cmd.MEMSET_TENSOR: Session._memset_tensor,
    Cmd.EXT_DEVICE_INFO: Session._device_info,
    Cmd.EXT_SUPPORTS_OP: Session._supports_op,
    Cmd.EXT_PEER_INFO: Session._peer_info,
    Cmd.EXT_PEER_RECV: Session._peer_recv,
}
