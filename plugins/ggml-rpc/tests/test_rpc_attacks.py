"""Slow, greedy and amplifying clients, each against an objective bound: a bystander's latency, the
bytes granted, the server's resident memory, the time until the attacker is cut off.

Every test configures small deadlines and budgets of its own (never the real 60 s), runs on 127.0.0.1 only, and
bounds every loop in count and time. The bounds are generous (the machine running them may be loaded); each is far
from what the attack achieved before: a bystander blocked for 50 s, 71 GiB granted on a 24 GiB machine, 566 MB of
pooling scratch, slots held forever, a client waiting 45 s on a trickled HELLO.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from attack_helpers import Attacker, Vector, latencies, rss_bytes, trickle
from rpc_helpers import RawClient, raw_tensor, server_alive

import ggml_core as g
from ggml_core import AllocationError, Context, Device, GGMLOp, alloc_ctx_tensors, build_graph, ops
from ggml_core.ops import PoolOp
from ggml_rpc import Connection, RPCDevice, RPCError, RPCReg, _fnv
from ggml_rpc.protocol import Cmd
from ggml_rpc.server import RPCServer, ServerLimits

FAST = ServerLimits(frame_timeout=1.0, hello_timeout=1.0, min_rate=float(8 << 20), max_clients=8)
#: a bystander's round trip while an attacker works: generous for a loaded machine, far below the attacks' stalls
BYSTANDER_S = 0.5
MiB = 1 << 20


def _log_has(caplog: pytest.LogCaptureFixture, *words: str, wait: float = 5.0) -> bool:
    end = time.monotonic() + wait
    while time.monotonic() < end:
        if any(all(w in r.getMessage() for w in words) for r in caplog.records):
            return True
        time.sleep(0.02)
    return False


def _closed_within(c: RawClient, limit: float) -> float:
    """Seconds until the server closes ``c`` (AssertionError after ``limit``)."""
    start = time.monotonic()
    c.sock.settimeout(limit)
    try:
        while c.sock.recv(1 << 16):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"the server kept the attacker's connection for more than {limit} s") from None
    return time.monotonic() - start


# ------------------------------------------------------------------------------------------------ stalls


def test_a_trickled_set_tensor_stalls_only_itself(make_server: Callable[..., RPCServer]) -> None:
    server = make_server(limits=ServerLimits(frame_timeout=3.0, hello_timeout=3.0, min_rate=float(8 << 20)))
    bystander = Vector(server.address)
    attacker = RawClient(server.address)
    handle, _ = attacker.alloc(4096)
    t = raw_tensor(buffer=handle, data=attacker.base(handle), ne=(1024, 1, 1, 1))
    head = struct.pack("<BQ", Cmd.SET_TENSOR, 296 + 9 + 4096) + t + struct.pack("<BQ", 0, 0)
    attacker.sock.sendall(head)
    trickler = Attacker(lambda stop: trickle(attacker.sock, bytes(4096), 0.05, stop, 5.0))
    try:
        took = latencies(bystander.check, 10, 0.05)  # while the attacker's frame is open
        assert max(took) < BYSTANDER_S, took
        start = time.monotonic()  # before: a new client's ALLOC_BUFFER timed out after 30 s
        with RawClient(server.address) as newcomer:
            assert newcomer.alloc(4096)[0]
        assert time.monotonic() - start < BYSTANDER_S
        # the whole frame is due within frame_timeout + size / min_rate = 3.0005 s, not 60 s per recv()
        assert _closed_within(attacker, 8.0) < 6.0
    finally:
        trickler.stop()
        attacker.close()
    assert server.stats["timed out"] >= 1
    bystander.check()
    bystander.close()


def test_a_huge_declared_size_does_not_extend_the_header_deadline(make_server: Callable[..., RPCServer]) -> None:
    """SET_TENSOR declaring 1 TiB while trickling its 305-byte header: due at 1 s + 305 B at min_rate, not 1 TiB's."""
    server = make_server(limits=FAST)
    attacker = RawClient(server.address)
    attacker.sock.sendall(struct.pack("<BQ", Cmd.SET_TENSOR, 1 << 40))
    trickler = Attacker(lambda stop: trickle(attacker.sock, bytes(305), 0.05, stop, 5.0))
    try:
        assert _closed_within(attacker, 4.0) < 3.0
    finally:
        trickler.stop()
        attacker.close()


def test_idle_clients_are_closed_after_the_idle_timeout(
    make_server: Callable[..., RPCServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ggml_rpc.server")
    server = make_server(limits=ServerLimits(idle_timeout=0.5, frame_timeout=1.0, hello_timeout=1.0))
    with RawClient(server.address) as c:
        assert c.device_count() == 1
        assert 0.3 < _closed_within(c, 4.0) < 3.0
    assert _log_has(caplog, "idle timeout")


def test_an_unread_answer_stalls_only_itself(make_server: Callable[..., RPCServer]) -> None:
    size = 32 * MiB
    server = make_server(limits=ServerLimits(frame_timeout=3.0, hello_timeout=3.0, min_rate=float(size)))
    bystander = Vector(server.address)
    attacker = RawClient(server.address)
    attacker.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    handle, _ = attacker.alloc(size)
    t = raw_tensor(buffer=handle, data=attacker.base(handle), ne=(size // 4, 1, 1, 1))
    attacker.frame(Cmd.GET_TENSOR, t + struct.pack("<QQ", 0, size))  # and never read the answer
    try:
        time.sleep(0.2)
        took = latencies(bystander.check, 10, 0.05)
        assert max(took) < BYSTANDER_S, took
        end = time.monotonic() + 10  # the answer is due within 3 s + size / min_rate = 4 s
        while server.stats["timed out"] < 1 and time.monotonic() < end:
            time.sleep(0.05)
        assert server.stats["timed out"] >= 1, "the server kept sending to a client that never reads"
    finally:
        attacker.close()
    bystander.check()
    bystander.close()


@pytest.fixture()
def opencl() -> Device:
    try:
        return g.get_device("OpenCL0")
    except g.DeviceNotFoundError as exc:
        pytest.skip(f"no OpenCL device (PoCL) here: {exc}")


def test_a_stalled_set_tensor_on_opencl_holds_no_lock_and_no_payload(
    make_server: Callable[..., RPCServer], opencl: Device
) -> None:
    """Before: 1 GiB declared + 10 bytes sent → RSS +1 GiB and another client's ALLOC waited ~60 s."""
    declared = 64 * MiB
    limits = ServerLimits(frame_timeout=1.0, hello_timeout=1.0, min_rate=float(declared))  # due within 2 s
    server = make_server([opencl], limits=limits)
    attacker = RawClient(server.address)
    handle, _ = attacker.alloc(declared)
    assert handle
    t = raw_tensor(buffer=handle, data=attacker.base(handle), ne=(declared // 4, 1, 1, 1))
    other = RawClient(server.address)
    before = rss_bytes()
    attacker.sock.sendall(struct.pack("<BQ", Cmd.SET_TENSOR, 296 + 9 + declared) + t + bytes(9) + bytes(10))
    try:
        time.sleep(0.2)
        grown = rss_bytes() - before
        start = time.monotonic()
        assert other.alloc(4096)[0]  # same device, while the attacker's frame is open
        assert time.monotonic() - start < BYSTANDER_S
        assert grown < 32 * MiB, f"RSS grew {grown >> 20} MiB for 10 bytes sent (staging: {limits.staging_chunk})"
        assert _closed_within(attacker, 5.0) < 4.0
    finally:
        attacker.close()
        other.close()


# ------------------------------------------------------------------------------------------------ memory


def test_grants_are_counted_against_the_server_budget(make_server: Callable[..., RPCServer]) -> None:
    """Before: 4 x 17.8 GiB granted on a 24 GiB machine (free memory was checked per call, pages were lazy)."""
    budget = 64 * MiB
    server = make_server(limits=ServerLimits(max_memory=budget, frame_timeout=5.0, hello_timeout=5.0))
    c1, c2 = RawClient(server.address), RawClient(server.address)
    before = rss_bytes()
    h1, _ = c1.alloc(48 * MiB)
    assert h1
    assert c1.alloc(48 * MiB) == (0, 0)  # over the budget: ggml's answer for a failed allocation
    assert c2.alloc(48 * MiB) == (0, 0)  # another connection shares the same budget
    h2, _ = c2.alloc(16 * MiB)
    assert h2 and c2.alloc(4096) == (0, 0)  # exactly full
    assert server.memory[0].used == budget
    c2.frame(Cmd.GET_DEVICE_MEMORY, struct.pack("<I", 0))
    free, _ = struct.unpack("<QQ", c2.answer(16))
    assert free == 0  # what the client may still get, not the machine's lazily free pages
    for c, h in ((c1, h1), (c2, h2)):
        c.frame(Cmd.BUFFER_CLEAR, struct.pack("<QB", h, 1))  # commits every granted page
    assert c1.device_count() and c2.device_count()
    grown = rss_bytes() - before
    assert grown < budget + 32 * MiB, f"RSS grew {grown >> 20} MiB with a {budget >> 20} MiB budget"
    c1.close()  # its grant returns to the pool
    end = time.monotonic() + 5
    while server.memory[0].used > 16 * MiB and time.monotonic() < end:
        time.sleep(0.02)
    assert c2.alloc(48 * MiB)[0]
    c2.close()


def test_default_budget_keeps_a_reserve(make_server: Callable[..., RPCServer], cpu: Device) -> None:
    server = make_server(limits=ServerLimits())
    total = cpu.memory()[1]
    assert 0 < server.memory[0].total <= total - max(1 << 30, total // 8)


def test_our_client_reports_an_over_budget_allocation(make_server: Callable[..., RPCServer]) -> None:
    server = make_server(limits=ServerLimits(max_memory=8 * MiB, frame_timeout=5.0, hello_timeout=5.0))
    dev = RPCReg(server.address).devices[0]
    assert isinstance(dev, RPCDevice)
    with pytest.raises(AllocationError, match=dev.name):
        dev.buffer_type().alloc_buffer(16 * MiB)
    buf = dev.buffer_type().alloc_buffer(4 * MiB)  # the connection still works
    buf.free()


def test_graph_decoding_memory_is_bounded(
    make_server: Callable[..., RPCServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ggml_rpc.server")
    server = make_server(limits=ServerLimits(graph_memory=1 * MiB, frame_timeout=5.0, hello_timeout=5.0))
    s = Vector(server.address)
    a = raw_tensor(id=1, buffer=s.handle, data=s.base, ne=(16, 1, 1, 1))
    b = raw_tensor(id=2, buffer=s.handle, data=s.base + 256, ne=(16, 1, 1, 1))
    out = raw_tensor(id=3, buffer=s.handle, data=s.base + 512, ne=(16, 1, 1, 1), op=int(GGMLOp.ADD), src=(1, 2),
                     flags=16)  # fmt: skip
    s.c.graph([3], [a, b, out])  # small: decoded, computed and stored within the pool
    assert s.c.device_count() == 1
    assert 0 < server.graph_memory.used <= 1 * MiB
    filler = [raw_tensor(id=100 + i, ne=(1, 1, 1, 1)) for i in range(600)]  # 178 KB that may decode to ~2 MB
    s.c.graph([3], [a, b, out, *filler])
    assert s.c.closed_by_server()
    assert _log_has(caplog, "graph memory")
    end = time.monotonic() + 5
    while server.graph_memory.used and time.monotonic() < end:
        time.sleep(0.02)
    assert server.graph_memory.used == 0  # the closed connection's stored graph was returned
    assert server_alive(server.address)


# ------------------------------------------------------------------------------------------------ work


@pytest.fixture()
def remote(make_server: Callable[..., RPCServer]) -> Iterator[tuple[RPCServer, RPCDevice]]:
    server = make_server(limits=ServerLimits(frame_timeout=5.0, hello_timeout=5.0, max_node_work=1 << 24))
    dev = RPCReg(server.address).devices[0]
    assert isinstance(dev, RPCDevice)
    yield server, dev


def _compute_remote(dev: RPCDevice, make: Callable[[Context], tuple[list[g.Tensor], g.Tensor]],
                    values: list[np.ndarray]) -> np.ndarray:  # fmt: skip
    ctx = Context()
    ins, out = make(ctx)
    be = dev.init_backend()
    buf = alloc_ctx_tensors(ctx, be)
    try:
        for t, v in zip(ins, values, strict=True):
            t.set_data(v)
        be.graph_compute(build_graph(out))
        return out.to_numpy()
    finally:
        with contextlib.suppress(Exception):
            buf.free()


def test_pooling_windows_are_bounded_and_cheap(
    remote: tuple[RPCServer, RPCDevice], caplog: pytest.LogCaptureFixture
) -> None:
    """Before: POOL_1D k=8193 over one element raised RSS by 566 MB; k=46341 (2-d) would have needed ~19 GB."""
    caplog.set_level(logging.INFO, logger="ggml_rpc.server")
    server, dev = remote
    one = [np.array([[2.5]], np.float32)]

    def pool_1d(ctx: Context) -> tuple[list[g.Tensor], g.Tensor]:
        x = ctx.new_tensor("f32", (1, 1))
        return [x], ops.pool_1d(x, PoolOp.MAX, 8193, 1, 4096)

    before = rss_bytes()
    assert _compute_remote(dev, pool_1d, one).reshape(-1).tolist() == [2.5]
    assert rss_bytes() - before < 32 * MiB

    def pool_2d(ctx: Context) -> tuple[list[g.Tensor], g.Tensor]:
        x = ctx.new_tensor("f32", (1, 1))
        return [x], ops.pool_2d(x, PoolOp.AVG, 46341, 46341, 1, 1, 23170, 23170)

    with pytest.raises(RPCError, match="closed the connection"):
        _compute_remote(dev, pool_2d, one)
    assert _log_has(caplog, "POOL_2D", "window of 2147488281 taps", "max_window")
    assert rss_bytes() - before < 32 * MiB
    assert server.stats["internal errors"] == 0 and server_alive(server.address)


def test_convolution_work_is_bounded(remote: tuple[RPCServer, RPCDevice], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ggml_rpc.server")
    server, dev = remote  # max_node_work = 2^24 here

    def conv(ctx: Context) -> tuple[list[g.Tensor], g.Tensor]:
        k = ctx.new_tensor("f32", (16, 16, 64, 1))  # KW, KH, IC, OC: 16384 multiply-adds per output
        x = ctx.new_tensor("f32", (64, 64, 64, 1))
        return [k, x], ops.conv_2d_direct(k, x, 1, 1, 0, 0, 1, 1)  # 49·49 outputs: 3.9e7 > 2^24

    with pytest.raises(RPCError):
        _compute_remote(dev, conv, [np.zeros((1, 64, 16, 16), np.float32), np.zeros((1, 64, 64, 64), np.float32)])
    assert _log_has(caplog, "CONV_2D", "max_node_work")
    assert server.stats["internal errors"] == 0


# ------------------------------------------------------------------------------------------------ slots


def test_hello_tricklers_cannot_lock_out_new_clients(make_server: Callable[..., RPCServer]) -> None:
    """Before: four clients trickling HELLO held every slot; a fifth waited in the backlog indefinitely."""
    server = make_server(limits=ServerLimits(max_clients=4, hello_timeout=1.0, frame_timeout=1.0))
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(4)]
    hello = struct.pack("<BQ", Cmd.HELLO, 24) + bytes(24)
    tricklers = [Attacker(lambda stop, s=s: trickle(s, hello, 0.2, stop, 5.0)) for s in socks]
    try:
        end = time.monotonic() + 5
        while server.active_sessions < 4 and time.monotonic() < end:
            time.sleep(0.02)
        start = time.monotonic()
        with pytest.raises(RPCError, match="busy"):
            Connection(server.address, connect_timeout=5.0)  # refused at once, not queued
        assert time.monotonic() - start < 1.0
        end = time.monotonic() + 4  # the tricklers' whole HELLO is due within 1 s
        conn = None
        while conn is None and time.monotonic() < end:
            with contextlib.suppress(RPCError):
                conn = Connection(server.address, connect_timeout=2.0)
            time.sleep(0.05)
        assert conn is not None, "no slot came free after the HELLO deadline"
        assert conn.request(Cmd.DEVICE_COUNT)
        conn.close()
    finally:
        for t in tricklers:
            t.stop()
        for s in socks:
            s.close()
    assert server.stats["connections refused (busy)"] >= 1


# ------------------------------------------------------------------------------------------------ client side


@contextlib.contextmanager
def _trickling_server(prefix: bytes, answer: bytes) -> Iterator[str]:
    """A fake server that answers ``prefix`` at once, then trickles ``answer`` a byte every 0.2 s (for ≤ 8 s)."""
    lst = socket.create_server(("127.0.0.1", 0))
    lst.settimeout(5)
    stop = threading.Event()

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = lst.accept()
            with conn:
                conn.recv(33)  # HELLO
                conn.sendall(prefix)
                if prefix:
                    conn.recv(9)  # the next request
                trickle(conn, answer, 0.2, stop, 8.0)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        yield f"127.0.0.1:{lst.getsockname()[1]}"
    finally:
        stop.set()
        lst.close()
        th.join(10)


HELLO_ANSWER = struct.pack("<Q", 28) + bytes([7, 0, 0, 0]) + bytes(24)


def test_client_gives_up_on_a_trickled_hello() -> None:
    """Before: a trickled HELLO answer kept ``ggml-core devices`` waiting > 45 s despite the 10 s timeout."""
    with _trickling_server(b"", HELLO_ANSWER) as ep:
        start = time.monotonic()
        with pytest.raises(RPCError, match="unavailable"):
            Connection(ep, connect_timeout=1.0)
        assert time.monotonic() - start < 2.5


def test_client_gives_up_on_a_trickled_answer() -> None:
    with _trickling_server(HELLO_ANSWER, struct.pack("<Q", 4) + bytes(4)) as ep:
        conn = Connection(ep, timeout=1.0, connect_timeout=5.0)
        start = time.monotonic()
        with pytest.raises(RPCError, match=r"unavailable.*DEVICE_COUNT"):
            conn.request(Cmd.DEVICE_COUNT)
        assert time.monotonic() - start < 2.5


# ------------------------------------------------------------------------------------------------ cache, layout


def test_cache_quota_evicts_least_recently_used(
    make_server: Callable[..., RPCServer], tmp_path: os.PathLike[str]
) -> None:
    """Before: no quota (200 cached SET_TENSORs → 200 files)."""
    quota = 3 * MiB + 1024
    limits = ServerLimits(cache_max_bytes=quota, cache_min_bytes=256 << 10, frame_timeout=5.0, hello_timeout=5.0)
    server = make_server(limits=limits, cache_dir=tmp_path)
    c = RawClient(server.address)
    handle, _ = c.alloc(MiB)
    base = c.base(handle)
    t = raw_tensor(buffer=handle, data=base, ne=(MiB // 4, 1, 1, 1))
    blobs = [np.random.default_rng(i).bytes(MiB) for i in range(5)]
    for blob in blobs:
        c.set_tensor(t, blob, cache_flag=1)
    c.set_tensor(raw_tensor(buffer=handle, data=base, ne=(1024, 1, 1, 1)), bytes(4096), cache_flag=1)  # too small
    assert c.device_count()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(f"{_fnv.fnv1a64(b):016x}" for b in blobs[2:]), files  # the 3 most recent
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= quota

    def hit(blob: bytes) -> bool:
        c.frame(Cmd.SET_TENSOR_HASH, t + struct.pack("<QQ", 0, _fnv.fnv1a64(blob)))
        return c.answer(1) == b"\1"

    assert hit(blobs[2]) and not hit(blobs[0])  # blob 2 is now the most recently used
    c.set_tensor(t, np.random.default_rng(9).bytes(MiB), cache_flag=1)
    assert c.device_count()
    assert hit(blobs[2]) and not hit(blobs[3])  # blob 3 was the least recently used
    c.close()


def test_overlapping_strides_are_refused(server: RPCServer, caplog: pytest.LogCaptureFixture) -> None:
    """ne=[2,2,2], nb=[4,4,100]: elements (1,0,0) and (0,1,0) share bytes although 8 elements span 112 bytes."""
    caplog.set_level(logging.INFO, logger="ggml_rpc.server")
    with RawClient(server.address) as c:
        handle, _ = c.alloc(4096)
        t = raw_tensor(buffer=handle, data=c.base(handle), ne=(2, 2, 2, 1), nb=(4, 4, 100, 200))
        c.frame(Cmd.GET_TENSOR, t + struct.pack("<QQ", 0, 16))
        assert c.closed_by_server()
    assert _log_has(caplog, "make elements overlap")


@pytest.mark.parametrize(
    ("op", "a_ne", "b_ne", "params"),
    [
        (GGMLOp.MUL_MAT, (16, 1, 0, 1), (16, 1, 2, 1), ()),
        (GGMLOp.OUT_PROD, (4, 16, 0, 1), (4, 16, 2, 1), ()),
        (GGMLOp.SOFT_MAX, (16, 2, 2, 1), (16, 2, 0, 1), (0x3F800000,)),  # mask with a zero dim; scale 1.0
    ],
    ids=["MUL_MAT", "OUT_PROD", "SOFT_MAX"],
)
def test_zero_sized_operands_are_refused_not_internal_errors(
    server: RPCServer,
    caplog: pytest.LogCaptureFixture,
    op: GGMLOp,
    a_ne: tuple[int, int, int, int],
    b_ne: tuple[int, int, int, int],
    params: tuple[int, ...],
) -> None:
    caplog.set_level(logging.INFO, logger="ggml_rpc.server")
    with RawClient(server.address) as c:
        handle, _ = c.alloc(4096)
        base = c.base(handle)
        a = raw_tensor(id=1, buffer=handle if min(a_ne) else 0, data=base if min(a_ne) else 0, ne=a_ne)
        b = raw_tensor(id=2, buffer=handle if min(b_ne) else 0, data=base + 1024 if min(b_ne) else 0, ne=b_ne)
        out = raw_tensor(id=3, buffer=handle, data=base + 2048, ne=(1, 1, 2, 1), op=int(op), src=(1, 2),
                         op_params=params, flags=16)  # fmt: skip
        c.graph([3], [a, b, out])
        assert c.closed_by_server()
    assert _log_has(caplog, "closing connection", op.name)
    assert server.stats["internal errors"] == 0


def test_decoding_a_graph_costs_no_more_than_its_counted_share(cpu: Device) -> None:
    """The graph pool counts each message at size + GRAPH_TENSOR_COST per tensor; decoding really takes less."""
    import tracemalloc

    from ggml_rpc.server._graph import build_graph as decode
    from ggml_rpc.server._graph import parse_graph
    from ggml_rpc.server._validate import BufferTable

    buf = cpu.buffer_type().alloc_buffer(4096)
    table = BufferTable(4, 1 << 20)
    rec = table.add(buf, 0)
    tensors = [raw_tensor(id=1, buffer=rec.handle, data=rec.base, ne=(4, 1, 1, 1), name=b"x" * 63)]
    nodes = []
    for i in range(3000):  # a chain of ADDs, every tensor distinct and decoded: the worst case per byte
        tid = 2 + 2 * i
        tensors.append(raw_tensor(id=tid, buffer=rec.handle, data=rec.base + 64, ne=(4, 1, 1, 1), name=b"l" * 63))
        tensors.append(
            raw_tensor(
                id=tid + 1,
                buffer=rec.handle,
                data=rec.base + 128,
                ne=(4, 1, 1, 1),
                op=int(GGMLOp.ADD),
                src=(tid - 1 if i else 1, tid),
                flags=16,
                name=b"n" * 63,
            )
        )
        nodes.append(tid + 1)
    payload = struct.pack("<II", 0, len(nodes)) + struct.pack(f"<{len(nodes)}Q", *nodes)
    payload += struct.pack("<I", len(tensors)) + b"".join(tensors)
    tracemalloc.start()
    try:
        wire = bytearray(payload)
        graph, _ctx = decode(parse_graph(wire, 1 << 16, 1 << 16), table, cpu, lambda r: True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(graph.nodes) == 3000
    assert peak <= ServerLimits.graph_cost(len(payload)), (peak, ServerLimits.graph_cost(len(payload)))
    buf.free()


def test_kernel_scratch_comes_out_of_the_budget(
    make_server: Callable[..., RPCServer], caplog: pytest.LogCaptureFixture
) -> None:
    """UPSCALE [65536, 1] → [1, 65536] (256 KiB in and out) would need 16 GiB of intermediates on the CPU, and
    FLASH_ATTN_EXT with head size 1 over 65536 queries and positions 48 GiB of scores, MUL_MAT_ID with 4096 experts
    per token over rows of 65536 2 GiB of gathered rows: all are refused against the budget (or an explicit per-node
    cap), while ordinary nodes compute."""
    caplog.set_level(logging.INFO, logger="ggml_rpc.server")
    server = make_server(limits=ServerLimits(max_memory=256 * MiB, frame_timeout=5.0, hello_timeout=5.0))
    dev = RPCReg(server.address).devices[0]
    assert isinstance(dev, RPCDevice)

    def upscale(w: int, h: int, ow: int, oh: int) -> Callable[[Context], tuple[list[g.Tensor], g.Tensor]]:
        def make(ctx: Context) -> tuple[list[g.Tensor], g.Tensor]:
            x = ctx.new_tensor("f32", (w, h))
            return [x], ops.upscale_ext(x, ow, oh, 1, 1)

        return make

    def attention(ctx: Context) -> tuple[list[g.Tensor], g.Tensor]:
        q = ctx.new_tensor("f32", (1, 65536, 1, 1))
        k, v = ctx.new_tensor("f16", (1, 65536, 1, 1)), ctx.new_tensor("f16", (1, 65536, 1, 1))
        return [q, k, v], ops.flash_attn_ext(q, k, v, None, 1.0, 0.0, 0.0)

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    got = _compute_remote(dev, upscale(4, 2, 8, 4), [x])[0, 0]  # an ordinary 2x nearest upscale is computed
    np.testing.assert_array_equal(got, np.repeat(np.repeat(x, 2, 0), 2, 1))
    before = rss_bytes()
    with pytest.raises(RPCError):
        _compute_remote(dev, upscale(65536, 1, 1, 65536), [np.zeros((1, 65536), np.float32)])
    assert _log_has(caplog, "needs about", "scratch", "--max-memory")
    zeros = [np.zeros((1, 1, 65536, 1), np.float32), *[np.zeros((1, 1, 65536, 1), np.float16)] * 2]
    caplog.clear()
    with pytest.raises(RPCError):
        dev2 = RPCReg(server.address).devices[0]
        assert isinstance(dev2, RPCDevice)
        _compute_remote(dev2, attention, zeros)
    assert _log_has(caplog, "needs about 51539607552 bytes of scratch")

    def experts(ctx: Context) -> tuple[list[g.Tensor], g.Tensor]:
        as_, b = ctx.new_tensor("f32", (65536, 1, 1)), ctx.new_tensor("f32", (65536, 1, 1))
        ids = ctx.new_tensor("i32", (4096, 1))  # 16 KiB of ids: 4096 "experts used" of the one token
        return [as_, b, ids], ops.mul_mat_id(as_, b, ids)

    caplog.clear()
    with pytest.raises(RPCError):
        dev3 = RPCReg(server.address).devices[0]
        assert isinstance(dev3, RPCDevice)
        ins = [np.zeros((1, 1, 65536), np.float32), np.zeros((1, 1, 65536), np.float32), np.zeros((1, 4096), np.int32)]
        _compute_remote(dev3, experts, ins)
    assert _log_has(caplog, f"needs about {8 * 4096 * 65536} bytes of scratch")
    assert rss_bytes() - before < 32 * MiB
    end = time.monotonic() + 5  # both connections were closed: buffers and scratch all returned to the budget
    while server.memory[0].used and time.monotonic() < end:
        time.sleep(0.02)
    assert server.memory[0].used == 0
    assert server.stats["internal errors"] == 0


def test_an_explicit_scratch_cap(make_server: Callable[..., RPCServer], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ggml_rpc.server")
    server = make_server(limits=ServerLimits(max_node_scratch=1 * MiB, frame_timeout=5.0, hello_timeout=5.0))
    dev = RPCReg(server.address).devices[0]
    assert isinstance(dev, RPCDevice)

    def upscale(ctx: Context) -> tuple[list[g.Tensor], g.Tensor]:
        x = ctx.new_tensor("f32", (512, 1))
        return [x], ops.upscale_ext(x, 1, 512, 1, 1)  # 1 MiB of intermediates and more

    with pytest.raises(RPCError):
        _compute_remote(dev, upscale, [np.zeros((1, 512), np.float32)])
    assert _log_has(caplog, "UPSCALE", "max_node_scratch")


def test_discovery_is_bounded_by_the_connect_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ggml-core devices``: HELLO answered at once, DEVICE_COUNT trickled: reported within the connect timeout
    (1 s here), not GGML_RPC_TIMEOUT (60 s here)."""
    monkeypatch.setenv("GGML_RPC_CONNECT_TIMEOUT", "1")
    with _trickling_server(HELLO_ANSWER, struct.pack("<Q", 4) + bytes(4)) as ep:
        start = time.monotonic()
        reg = RPCReg(ep)
        assert not reg.devices  # the server is left out, with the reason
        assert time.monotonic() - start < 2.5
        with pytest.raises(RPCError, match=r"within 1 s \(GGML_RPC_CONNECT_TIMEOUT\).*unavailable.*DEVICE_COUNT"):
            raise reg.error


def test_the_overlap_rule_accepts_every_layout_ggml_makes() -> None:
    from ggml_core import GGMLType
    from ggml_rpc.server._validate import overlaps

    f32, q8 = GGMLType.F32, GGMLType.Q8_0
    assert overlaps(f32, (2, 2, 2, 1), (4, 4, 100, 200))  # rows closer than a row's bytes
    assert overlaps(f32, (4, 4, 1, 1), (4, 8, 64, 64))  # rows shorter than their elements
    assert overlaps(f32, (4, 1, 1, 1), (2, 16, 16, 16))  # elements closer than their size
    assert not overlaps(f32, (4, 3, 1, 1), (4, 16, 48, 48))  # contiguous
    assert not overlaps(f32, (3, 4, 1, 1), (16, 4, 48, 48))  # transposed
    assert not overlaps(f32, (4, 2, 3, 1), (4, 48, 16, 96))  # permuted (dims 1 and 2 swapped)
    assert not overlaps(f32, (2, 2, 1, 1), (4, 32, 999, 7))  # a view of part of a bigger tensor; ne=1 dims free
    assert not overlaps(q8, (64, 2, 1, 1), (34, 68, 136, 136))  # blocks
    assert not overlaps(f32, (0, 4, 4, 4), (4, 4, 4, 4))  # empty
