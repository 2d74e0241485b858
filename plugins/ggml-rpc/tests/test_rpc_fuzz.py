"""Fuzzing the server (hypothesis, bounded in examples and time): random byte streams and mutated valid frames of
every command. After each example the connection must end without a hang; after all of them the server still
serves a valid client, nothing was written outside any buffer (guard regions around every buffer are intact), no
answer ever contained guard bytes (nothing was read outside a buffer), and another client's data is untouched."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rpc_helpers import RawClient, raw_tensor, server_alive

from ggml_core import Buffer, BufferType, Context, Device, GGMLOp, GGMLType, Tensor
from ggml_cpu.plugin import CPUBuffer
from ggml_rpc.protocol import Cmd, RpcTensor
from ggml_rpc.server import REBUILDERS, RPCServer, ServerLimits

GUARD = 4096
#: a 32-byte pattern that fills every guard region; seeing it in an answer means a read left its buffer
PATTERN = bytes(np.random.default_rng(99).integers(1, 256, 32, dtype=np.uint8))
SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


class GuardedBufferType(BufferType):
    """Host memory with a guard region before and after every buffer (kept after the buffer is freed)."""

    def __init__(self, device: Device) -> None:
        super().__init__("CPU_guarded", device, alignment=64, is_host=True)
        self.blocks: list[np.ndarray] = []

    def _alloc(self, size: int) -> Buffer:
        block = np.frombuffer(PATTERN * ((size + 2 * GUARD) // 32 + 1), dtype=np.uint8)[: size + 2 * GUARD].copy()
        block[GUARD : GUARD + size] = 0
        self.blocks.append(block)
        return CPUBuffer(self, block[GUARD : GUARD + size])

    def guards_intact(self) -> bool:
        for b in self.blocks:
            size = b.size - 2 * GUARD
            want = np.frombuffer(PATTERN * ((size + 2 * GUARD) // 32 + 1), dtype=np.uint8)[: size + 2 * GUARD]
            if not (
                np.array_equal(b[:GUARD], want[:GUARD]) and np.array_equal(b[GUARD + size :], want[GUARD + size :])
            ):
                return False
        return True


class GuardedCPU(Device):
    """The CPU device with guarded buffers (the CPU's kernels and backend)."""

    def __init__(self, cpu: Device) -> None:
        super().__init__("CPU", "CPU with guarded buffers")
        self.cpu = cpu
        self.type = cpu.type
        self.buft = GuardedBufferType(self)

    def memory(self) -> tuple[int, int]:
        return 1 << 30, 1 << 30

    def buffer_type(self) -> BufferType:
        return self.buft

    def init_backend(self, params: str | None = None):  # type: ignore[no-untyped-def]
        return self.cpu.init_backend(params)

    def supports_op(self, op):  # type: ignore[no-untyped-def]
        return self.cpu.supports_op(op)

    def supports_buft(self, buft: BufferType) -> bool:
        return buft is self.buft


@pytest.fixture(scope="module")
def fuzzed(cpu: Device) -> Iterator[tuple[RPCServer, GuardedCPU, RawClient, int, int]]:
    """A server on a guarded CPU, and a bystander client whose buffer holds a known pattern."""
    dev = GuardedCPU(cpu)
    limits = ServerLimits(frame_timeout=2.0, hello_timeout=2.0, max_bytes=1 << 24, max_clients=4)
    srv = RPCServer([dev], "127.0.0.1", 0, limits=limits).start()
    bystander = RawClient(srv.address)
    handle, _ = bystander.alloc(4096)
    base = bystander.base(handle)
    bystander.set_tensor(raw_tensor(buffer=handle, data=base, ne=(1024, 1, 1, 1)), b"\x77" * 4096)
    yield srv, dev, bystander, handle, base
    bystander.close()
    srv.shutdown()


def _drain(sock: socket.socket) -> bytes:
    """Read until the server closes (after our half-close); a timeout here is a hang."""
    with contextlib.suppress(OSError):  # the server may have closed already
        sock.shutdown(socket.SHUT_WR)
    out = b""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk
    raise AssertionError("the server neither answered nor closed within 10 s")


def _templates(handle: int, base: int) -> list[tuple[int, bytes]]:
    """Valid frames of every command over one 4 KiB buffer (the fuzzer mutates them)."""
    a = raw_tensor(id=1, buffer=handle, data=base, ne=(16, 1, 1, 1), name=b"a")
    b = raw_tensor(id=2, buffer=handle, data=base + 256, ne=(16, 1, 1, 1), name=b"b")
    out = raw_tensor(id=3, buffer=handle, data=base + 512, ne=(16, 1, 1, 1), op=2, src=(1, 2), flags=16, name=b"c")
    q = raw_tensor(id=4, type=8, buffer=handle, data=base + 1024, ne=(32, 2, 1, 1), nb=(34, 34, 68, 68))
    mm = raw_tensor(id=5, buffer=handle, data=base + 2048, ne=(2, 1, 1, 1), op=int(GGMLOp.MUL_MAT), src=(4, 6),
                    flags=16)  # fmt: skip
    x = raw_tensor(id=6, buffer=handle, data=base + 3072, ne=(32, 1, 1, 1))
    graph = struct.pack("<II", 0, 2) + struct.pack("<2Q", 3, 5) + struct.pack("<I", 6) + a + b + out + q + x + mm
    nulls = bytes(296 * 9)
    return [
        (Cmd.SET_TENSOR, a + struct.pack("<BQ", 0, 0) + bytes(range(64))),
        (Cmd.SET_TENSOR, q + struct.pack("<BQ", 0, 0) + bytes(68)),
        (Cmd.GET_TENSOR, a + struct.pack("<QQ", 0, 64)),
        (Cmd.MEMSET_TENSOR, b + struct.pack("<QQB", 4, 8, 1)),
        (Cmd.COPY_TENSOR, a + b),
        (Cmd.GRAPH_COMPUTE, graph),
        (Cmd.GRAPH_RECOMPUTE, struct.pack("<I", 0)),
        (Cmd.SET_TENSOR_HASH, a + struct.pack("<QQ", 0, 1234)),
        (Cmd.INIT_TENSOR, q),
        (Cmd.GET_ALLOC_SIZE, struct.pack("<I", 0) + mm + q + x + bytes(296 * 8)),
        (Cmd.EXT_SUPPORTS_OP, struct.pack("<I", 0) + out + a + b + nulls[: 296 * 8]),
        (Cmd.BUFFER_CLEAR, struct.pack("<QB", handle, 3)),
        (Cmd.BUFFER_GET_BASE, struct.pack("<Q", handle)),
        (Cmd.ALLOC_BUFFER, struct.pack("<IQ", 0, 512)),
        (Cmd.GET_DEVICE_MEMORY, struct.pack("<I", 0)),
        (Cmd.FREE_BUFFER, struct.pack("<Q", handle)),
    ]


INTERESTING = [0, 1, 2, 3, 31, 32, 33, 255, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1]

mutation = st.tuples(
    st.integers(0, 4000),  # where (taken modulo the payload size)
    st.one_of(st.sampled_from(INTERESTING), st.integers(0, 2**64 - 1)),
    st.sampled_from([1, 4, 8]),  # width of the value written
)


def _mostly_none(other: st.SearchStrategy[int]) -> st.SearchStrategy[int | None]:
    """None (keep the template's value) three times in four, else a value of ``other``."""
    return st.tuples(st.integers(0, 3), other).map(lambda p: None if p[0] else p[1])


frame = st.tuples(
    st.integers(0, 15),  # which template
    st.lists(mutation, max_size=3),
    _mostly_none(st.one_of(st.sampled_from([Cmd.GET_TENSOR, Cmd.GRAPH_COMPUTE, 18, 19, 0xC2]), st.integers(0, 255))),
    _mostly_none(st.one_of(st.integers(-8, 8), st.sampled_from([2**64 - 1, 2**63, 2**32]))),
)


def _mutate(payload: bytes, muts: list[tuple[int, int, int]]) -> bytes:
    if not payload:
        return payload
    out = bytearray(payload)
    for where, value, width in muts:
        pos = where % len(out)
        raw = (value & (2 ** (8 * width) - 1)).to_bytes(width, "little")
        out[pos : pos + width] = raw[: len(out) - pos]
    return bytes(out)


def _check(srv: RPCServer, dev: GuardedCPU, bystander: RawClient, handle: int, base: int, answers: bytes) -> None:
    assert srv.stats["internal errors"] == 0, "a message raised an unexpected exception in the server (see its log)"
    assert PATTERN not in answers, "an answer contained guard bytes: a read left its buffer"
    assert dev.buft.guards_intact(), "a guard region was overwritten: a write left its buffer"


@SETTINGS
@given(frames=st.lists(frame, min_size=1, max_size=5))
def test_mutated_frames(fuzzed: tuple[RPCServer, GuardedCPU, RawClient, int, int], frames: list) -> None:
    srv, dev, bystander, bhandle, bbase = fuzzed
    with RawClient(srv.address, timeout=10) as c:
        handle, _ = c.alloc(4096)
        base = c.base(handle)
        templates = _templates(handle, base)
        wire = b""
        for which, muts, cmd, size_delta in frames:
            tcmd, payload = templates[which]
            payload = _mutate(payload, muts)
            size = len(payload)
            if size_delta is not None:
                size = size_delta if size_delta >= 2**32 else max(0, size + size_delta)
            wire += struct.pack("<BQ", tcmd if cmd is None else cmd, size) + payload
        with contextlib.suppress(OSError):  # refused before everything was sent
            c.sock.sendall(wire)
        answers = _drain(c.sock)
    _check(srv, dev, bystander, bhandle, bbase, answers)


@SETTINGS
@given(stream=st.binary(min_size=1, max_size=3000))
def test_random_bytes_after_hello(fuzzed: tuple[RPCServer, GuardedCPU, RawClient, int, int], stream: bytes) -> None:
    srv, dev, bystander, bhandle, bbase = fuzzed
    with RawClient(srv.address, timeout=10) as c:
        with contextlib.suppress(OSError):
            c.sock.sendall(stream)
        answers = _drain(c.sock)
    _check(srv, dev, bystander, bhandle, bbase, answers)


# ------------------------------------------------------------------------------------------------ structured graphs

LEAF_TYPES = [GGMLType.F32, GGMLType.F32, GGMLType.F16, GGMLType.I32, GGMLType.Q8_0, GGMLType.Q4_0]
OPS = [*sorted(REBUILDERS, key=int), GGMLOp.SSM_CONV, GGMLOp.CUSTOM]

leaf = st.tuples(
    st.sampled_from(LEAF_TYPES), st.integers(1, 8), st.integers(1, 4), st.integers(1, 3), st.integers(1, 2)
)
node = st.tuples(
    st.sampled_from(OPS),
    st.lists(st.integers(0, 7), min_size=3, max_size=3),  # operands: indexes into the tensors so far (7: none)
    st.lists(st.one_of(st.integers(-1, 8), st.sampled_from([0x3F800000, 0x3F000000, 32, 64])), min_size=6, max_size=6),
    st.booleans(),  # as a view of src[0] (in place) where the op allows it
    st.integers(0, 9),  # 0: a random shape instead of the builder's
)


def _graph_message(
    handle: int, base: int, size: int, leaves: list, nodes: list
) -> tuple[list[int], list[bytes], int | None, int]:
    """Leaves and nodes made with the core builders (so most are valid), some with a wrong shape on purpose."""
    ctx = Context("fuzz")
    made: list[Tensor] = []
    addr: dict[int, int] = {}
    off = 0
    wire: list[bytes] = []

    def place(t: Tensor) -> int | None:
        nonlocal off
        if off + t.nbytes > size:
            return None
        at = off
        off = (off + t.nbytes + 63) // 64 * 64
        return at

    for ty, n0, n1, n2, n3 in leaves:
        ne0 = n0 * ty.block_size if ty.block_size > 1 else n0
        t = ctx.new_tensor(ty, (ne0, n1, n2, n3))
        at = place(t)
        if at is None:
            break
        addr[t.id] = base + at
        made.append(t)
        wire.append(raw_tensor(id=t.id, type=int(ty), buffer=handle, data=base + at, ne=t.ne, nb=t.nb, flags=1))
    node_ids: list[int] = []
    for op, picks, params, inplace, shape_lie in nodes:
        srcs = [made[i] if i < len(made) else None for i in picks] + [None] * 7
        rt = RpcTensor(
            id=0, type=0, buffer=0, ne=(4, 2, 1, 1), nb=(4, 16, 32, 32), op=int(op),
            op_params=(*params, *[0] * 10), flags=16, src=(0,) * 10, view_src=1 if inplace else 0, view_offs=0,
            data=0, name=b"n",
        )  # fmt: skip
        try:
            with np.errstate(all="ignore"):  # (hostile ARANGE bounds overflow, as on the server)
                t = REBUILDERS[op](rt, srcs, ctx) if op in REBUILDERS else None
        except Exception:  # noqa: BLE001 - a rejected combination: send it anyway, with a made-up shape
            t = None
        if t is None and shape_lie != 1:
            continue  # mostly leave out what the builders reject, so that many graphs are valid
        if t is None:
            t = ctx.new_tensor(GGMLType.F32, (4, 2))
            t.op = op
            t.src[: len(srcs)] = srcs[:10]
        ne = t.ne if shape_lie else (t.ne[0] + 1, *t.ne[1:])
        if max(*ne, *t.nb) > 2**32 - 1:
            continue  # (an empty tensor with huge strides fits no buffer check but not the 32-bit wire fields either)
        if t.view_src is not None and t.view_src.id in addr:
            data = addr[t.view_src.id] + t.view_offs
            view = (t.view_src.id, t.view_offs)
        else:
            at = place(t)
            if at is None:
                break
            data, view = base + at, (0, 0)
            addr[t.id] = data
        src_ids = [s.id if s is not None else 0 for s in t.src]
        params_out = [int(x) for x in t.op_params]
        wire.append(
            raw_tensor(id=t.id, type=int(t.type), buffer=handle, data=data, ne=ne, nb=t.nb, op=int(t.op),
                       op_params=params_out, flags=16, src=src_ids, view_src=view[0], view_offs=view[1])
        )  # fmt: skip
        made.append(t)
        node_ids.append(t.id)
    last = made[-1] if made else None
    return node_ids, wire, (addr.get(last.id) if last is not None else None), (last.nbytes if last is not None else 0)


@SETTINGS
@given(leaves=st.lists(leaf, min_size=1, max_size=4), nodes=st.lists(node, min_size=1, max_size=5))
def test_structured_graphs(
    fuzzed: tuple[RPCServer, GuardedCPU, RawClient, int, int],
    leaves: list,
    nodes: list,
) -> None:
    srv, dev, bystander, bhandle, bbase = fuzzed
    with RawClient(srv.address, timeout=10) as c:
        handle, _ = c.alloc(1 << 16)
        base = c.base(handle)
        node_ids, wire, last_at, last_size = _graph_message(handle, base, 1 << 16, leaves, nodes)
        with contextlib.suppress(OSError):
            c.graph(node_ids, wire)
            if last_at is not None and last_size:
                c.frame(Cmd.GET_TENSOR, raw_tensor(type=24, buffer=handle, data=last_at, ne=(last_size, 1, 1, 1),
                        nb=(1, last_size, last_size, last_size)) + struct.pack("<QQ", 0, last_size))  # fmt: skip
        answers = _drain(c.sock)
    _check(srv, dev, bystander, bhandle, bbase, answers)
    assert srv.stats["internal errors"] == 0  # every refusal is a checked one, never an unexpected exception


def test_after_fuzzing_the_server_still_serves(fuzzed: tuple[RPCServer, GuardedCPU, RawClient, int, int]) -> None:
    """Runs after the fuzz tests of this module: a valid client works, the bystander's bytes are intact."""
    srv, dev, bystander, handle, base = fuzzed
    assert server_alive(srv.address)
    assert bystander.get_tensor(raw_tensor(buffer=handle, data=base, ne=(1024, 1, 1, 1)), 4096) == b"\x77" * 4096
    assert dev.buft.guards_intact()
    deadline = time.monotonic() + 10
    while srv.active_sessions > 1 and time.monotonic() < deadline:  # only the bystander is left
        time.sleep(0.05)
    assert srv.active_sessions == 1
    assert srv.n_connections > 100  # the fuzz examples really reached the server
    print("commands received while fuzzing:", dict(srv.stats))
    # the mutations leave many frames valid: graphs were computed and data moved, not only refused
    assert srv.stats["GRAPH_COMPUTE"] > 5 and srv.stats["SET_TENSOR"] > 5 and srv.stats["GET_TENSOR"] > 5
    assert srv.stats["graphs computed"] >= 40


_dim = st.sampled_from([0, 1, 2, 3, 4, 16])
_shape = st.tuples(_dim, _dim, _dim, st.sampled_from([0, 1, 2]))
_param = st.sampled_from([-1, 0, 1, 2, 3, 7, 0x3F800000, 0x7FC00000, 2**31 - 1])


@SETTINGS
@given(
    op=st.integers(0, len(GGMLOp) - 1),
    shapes=st.lists(_shape, min_size=1, max_size=3),
    node_ne=_shape,
    params=st.lists(_param, max_size=8),
)
def test_random_nodes_over_every_op_id(
    fuzzed: tuple[RPCServer, GuardedCPU, RawClient, int, int],
    op: int,
    shapes: list[tuple[int, int, int, int]],
    node_ne: tuple[int, int, int, int],
    params: list[int],
) -> None:
    """Any op id with operands of any (also zero-sized) shape and any params: computed or refused, never an internal
    error (this found ZeroDivisionErrors in the MUL_MAT, OUT_PROD and SOFT_MAX builders)."""
    srv, dev, bystander, bhandle, bbase = fuzzed
    with RawClient(srv.address, timeout=10) as c:
        handle, _ = c.alloc(4096)
        base = c.base(handle)
        leaves = []
        for i, ne in enumerate(shapes):
            full = min(ne) > 0 and 4 * ne[0] * ne[1] * ne[2] * ne[3] <= 1024
            leaves.append(
                raw_tensor(id=1 + i, buffer=handle if full else 0, data=base + 1024 * i if full else 0, ne=ne)
            )
        fits = min(node_ne) > 0 and 4 * node_ne[0] * node_ne[1] * node_ne[2] * node_ne[3] <= 1024
        node = raw_tensor(
            id=9, buffer=handle if fits else 0, data=base + 3072 if fits else 0, ne=node_ne, op=op,
            src=tuple(range(1, len(shapes) + 1)), op_params=params, flags=16,
        )  # fmt: skip
        payload = struct.pack("<II", 0, 1) + struct.pack("<Q", 9) + struct.pack("<I", len(leaves) + 1)
        with contextlib.suppress(OSError):
            c.sock.sendall(struct.pack("<BQ", Cmd.GRAPH_COMPUTE, len(payload) + 296 * (len(leaves) + 1)))
            c.sock.sendall(payload + b"".join(leaves) + node)
            c.sock.sendall(struct.pack("<BQ", Cmd.DEVICE_COUNT, 0))
        answers = _drain(c.sock)
    _check(srv, dev, bystander, bhandle, bbase, answers)
