"""The client plugin against the ggml-core server on loopback: devices, memory, bounds-checked tensor I/O, graphs
(computed remotely = computed on the local CPU, bit for bit), GRAPH_RECOMPUTE, the hash cache, version negotiation,
timeouts, and a clear error when the server goes away mid-graph."""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from rpc_helpers import run_layer

from ggml_core import (
    Backend,
    BufferUsage,
    Context,
    Device,
    DeviceType,
    GGMLType,
    OutOfBoundsError,
    Tensor,
    TensorError,
    alloc_ctx_tensors,
    build_graph,
    ops,
)
from ggml_core.backend.registry import Registry, reset_registry
from ggml_rpc import RPCDevice, RPCError, RPCNoCPUError, RPCReg, RPCVersionError, _fnv
from ggml_rpc.client import Connection
from ggml_rpc.protocol import HASH_THRESHOLD, Cmd
from ggml_rpc.server import RPCServer
from ggml_rpc.server._session import Session

RNG = np.random.default_rng(0)


def test_device_properties(rpc_dev: RPCDevice, cpu: Device, server: RPCServer) -> None:
    assert rpc_dev.name.startswith("RPC") and rpc_dev.type == DeviceType.GPU
    assert rpc_dev.reg is not None and rpc_dev.reg.name == f"RPC[{server.address}]"
    free, total = rpc_dev.memory()
    assert 0 < free <= total == cpu.memory()[1]
    props = rpc_dev.props()
    assert props.extra["endpoint"] == server.address and props.extra["server"] == "ggml-core"
    assert props.extra["remote_device"]["name"] == "CPU" and "CPU" in rpc_dev.description
    buft = rpc_dev.buffer_type()
    assert buft.alignment == cpu.buffer_type().alignment
    assert rpc_dev.supports_buft(buft) and not rpc_dev.supports_buft(cpu.buffer_type())


def test_tensor_io_is_bounds_checked_before_anything_is_sent(rpc_dev: RPCDevice, server: RPCServer) -> None:
    ctx = Context()
    t = ctx.new_tensor("f32", (16, 8))
    u = ctx.new_tensor("f16", (5, 3))
    buf = alloc_ctx_tensors(ctx, rpc_dev.buffer_type())
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    t.set_data(x)
    np.testing.assert_array_equal(t.to_numpy().reshape(x.shape), x)
    t.set_bytes(np.arange(4, dtype=np.float32), offset=12)  # a partial write at an offset
    x.reshape(-1)[3:7] = np.arange(4)
    np.testing.assert_array_equal(t.to_numpy().reshape(x.shape), x)
    assert t.get_bytes(8, 8) == x.reshape(-1)[2:4].tobytes()
    before = sum(server.stats.values())
    with pytest.raises(OutOfBoundsError):
        t.set_bytes(bytes(8), offset=t.nbytes - 4)
    with pytest.raises(OutOfBoundsError):
        t.get_bytes(t.nbytes, 4)
    assert sum(server.stats.values()) == before  # refused locally, nothing sent
    buf.memset_tensor(u, 0x3C)
    assert u.get_bytes() == b"\x3c" * u.nbytes
    buf.clear(0)
    assert t.get_bytes() == bytes(t.nbytes) and u.get_bytes() == bytes(u.nbytes)
    raw = bytes(range(256)) + bytes(range(100))
    buf.write(100, raw)  # buffer-relative access goes as a byte tensor
    assert buf.read(100, len(raw)) == raw
    buf.free()
    rpc_dev.conn.sync()
    assert server.stats["FREE_BUFFER"] == 1


def test_copy_between_buffers_of_one_server(rpc_dev: RPCDevice, server: RPCServer) -> None:
    ctx = Context()
    a, b = ctx.new_tensor("f32", (32,)), ctx.new_tensor("f32", (32,))
    alloc_ctx_tensors([a], rpc_dev.buffer_type())
    buf_b = alloc_ctx_tensors([b], rpc_dev.buffer_type())
    a.set_data(np.arange(32, dtype=np.float32))
    assert buf_b.cpy_tensor(a, b)
    np.testing.assert_array_equal(b.to_numpy().reshape(-1), np.arange(32, dtype=np.float32))
    assert server.stats["COPY_TENSOR"] == 1


@pytest.mark.parametrize("wtype", ["f32", "f16", "q8_0", "q4_0"])
def test_graphs_compute_remotely_as_on_the_local_cpu(
    rpc_dev: RPCDevice, cpu: Device, server: RPCServer, wtype: str
) -> None:
    want = run_layer(cpu, wtype, [1, 2, 3])
    got = run_layer(rpc_dev, wtype, [1, 2, 3])
    for w, x in zip(want, got, strict=True):
        np.testing.assert_array_equal(x, w)  # the server runs the same CPU kernels: identical bits
    # the graph went once; the two later computes of the unchanged graph were GRAPH_RECOMPUTE
    assert server.stats["GRAPH_COMPUTE"] == 1 and server.stats["GRAPH_RECOMPUTE"] == 2


def _two_scales(rpc_dev: RPCDevice) -> tuple[Tensor, Tensor, Tensor, Backend]:
    """``a`` (8 floats) and the nodes ``2a`` and ``3a``, allocated on the remote device, with its backend."""
    ctx = Context()
    a = ctx.new_tensor("f32", (8,))
    b, c = ops.scale(a, 2.0), ops.scale(a, 3.0)
    be = rpc_dev.init_backend()
    alloc_ctx_tensors(ctx, be)
    return a, b, c, be


def test_a_changed_graph_is_sent_again(rpc_dev: RPCDevice, server: RPCServer) -> None:
    a, b, c, be = _two_scales(rpc_dev)
    a.set_data(np.ones(8, np.float32))
    for out, want in ((b, 2.0), (c, 3.0), (b, 2.0), (b, 2.0)):
        be.graph_compute(build_graph(out))
        np.testing.assert_array_equal(out.to_numpy().reshape(-1), np.full(8, want, np.float32))
    assert server.stats["GRAPH_COMPUTE"] == 3 and server.stats["GRAPH_RECOMPUTE"] == 1


def test_graphs_sent_in_turn_are_decoded_once(rpc_dev: RPCDevice, server: RPCServer) -> None:
    a, b, c, be = _two_scales(rpc_dev)
    graphs = [(build_graph(b), b, 2.0), (build_graph(c), c, 3.0)]
    for k in range(3):
        a.set_data(np.full(8, k, np.float32))
        for g, out, f in graphs:
            be.graph_compute(g)
            np.testing.assert_array_equal(out.to_numpy().reshape(-1), np.full(8, f * k, np.float32))
    # each GRAPH_COMPUTE differs from the device's last graph, but the server decodes each graph once
    assert server.stats["GRAPH_COMPUTE"] == 6 and server.stats["graphs decoded"] == 2


def test_supports_op_is_asked_of_a_ggml_core_server(rpc_dev: RPCDevice, cpu: Device, server: RPCServer) -> None:
    ctx = Context()
    f32, i32 = ctx.new_tensor("f32", (8, 4)), ctx.new_tensor("i32", (8, 4))
    cases = [ops.add(f32, f32), ops.rms_norm(f32, 1e-6), ops.soft_max(f32), ops.argsort(f32), ops.mul(i32, i32)]
    for node in cases:
        assert rpc_dev.supports_op(node) == cpu.supports_op(node)
    asked = server.stats["EXT_SUPPORTS_OP"]
    assert asked == len(cases)
    for node in cases:
        rpc_dev.supports_op(node)
    assert server.stats["EXT_SUPPORTS_OP"] == asked  # answers are cached per op signature


def test_supports_op_of_a_server_that_cannot_be_asked_is_the_cpu_device(
    rpc_dev: RPCDevice, cpu: Device, server: RPCServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A llama.cpp server (no ggml-core mark) is sent what the registry's CPU device runs, and is never asked."""
    monkeypatch.setattr(rpc_dev.conn, "ggml_core", False)
    ctx = Context()
    f32, i32 = ctx.new_tensor("f32", (8, 4)), ctx.new_tensor("i32", (8, 4))
    cases = [ops.add(f32, f32), ops.rms_norm(f32, 1e-6), ops.soft_max(f32), ops.argsort(f32), ops.mul(i32, i32)]
    answers = [rpc_dev.supports_op(node) for node in cases]
    assert answers == [cpu.supports_op(node) for node in cases]
    assert True in answers and False in answers  # both answers occur: the CPU's, not a constant
    assert server.stats["EXT_SUPPORTS_OP"] == 0


def test_supports_op_without_a_cpu_device_says_to_install_ggml_cpu(
    rpc_dev: RPCDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No CPU device in the registry: one line naming the server, the missing device and the fix, not a guess."""
    monkeypatch.setattr(rpc_dev.conn, "ggml_core", False)
    reset_registry(Registry(entry_points=lambda: [], environ={}))  # a registry without the CPU plugin
    try:
        ctx = Context()
        f32 = ctx.new_tensor("f32", (8, 4))
        with pytest.raises(RPCNoCPUError) as exc:
            rpc_dev.supports_op(ops.add(f32, f32))
    finally:
        reset_registry()
    msg = str(exc.value)
    assert "\n" not in msg and rpc_dev.conn.endpoint in msg and "install ggml-cpu" in msg, msg
    assert exc.value.endpoint == rpc_dev.conn.endpoint and isinstance(exc.value, LookupError)


@pytest.mark.skipif(not _fnv.fast(), reason="the hash cache needs numba for a fast FNV-1a (pip install numba)")
def test_weights_over_10_mib_use_the_hash_cache(
    make_server: Callable[..., RPCServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = make_server(cache_dir=tmp_path / "cache")
    data = np.random.default_rng(1).standard_normal(HASH_THRESHOLD // 4 + 1000).astype(np.float32)
    for round_ in range(2):
        dev = RPCReg(server.address).devices[0]
        ctx = Context()
        w = ctx.new_tensor("f32", (data.size,))
        buf = alloc_ctx_tensors(ctx, dev.buffer_type())
        buf.set_usage(BufferUsage.WEIGHTS)
        w.set_data(data)
        np.testing.assert_array_equal(w.to_numpy().reshape(-1), data)
        buf.free()
        from ggml_rpc import disconnect_all

        disconnect_all()  # the next round is a new client
        if round_ == 0:
            assert server.stats["SET_TENSOR_HASH"] == 1 and server.stats["cache hits"] == 0
            assert len(list((tmp_path / "cache").iterdir())) == 1
    assert server.stats["SET_TENSOR_HASH"] == 2 and server.stats["cache hits"] == 1
    assert server.stats["SET_TENSOR"] == 1  # the second upload sent no data


# ------------------------------------------------------------------------------------------------ failures


def _fake_server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    lst = socket.create_server(("127.0.0.1", 0))
    lst.settimeout(10)
    done = threading.Event()

    def serve() -> None:
        try:
            conn, _ = lst.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            with contextlib.suppress(OSError):
                answer(conn)
            done.wait(10)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    yield f"127.0.0.1:{lst.getsockname()[1]}"
    done.set()
    lst.close()
    th.join(10)


@pytest.fixture()
def fake_server() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    gens: list[Iterator[str]] = []

    def make(answer: Callable[[socket.socket], None]) -> str:
        gen = _fake_server(answer)
        gens.append(gen)
        return next(gen)

    yield make
    for gen in gens:
        next(gen, None)


def _hello_answer(version: tuple[int, int, int]) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        conn.recv(33)
        conn.sendall(struct.pack("<Q", 28) + bytes([*version, 0]) + bytes(24))

    return answer


def test_a_newer_or_older_major_version_is_a_clear_error(fake_server: Callable[..., str]) -> None:
    for version in [(6, 0, 0), (8, 0, 0), (7, 1, 0)]:
        ep = fake_server(_hello_answer(version))
        shown = re.escape(".".join(map(str, version)))
        with pytest.raises(RPCVersionError, match=rf"speaks RPC protocol {shown}, this client"):
            Connection(ep)


def test_a_server_closing_on_hello_is_an_old_protocol(fake_server: Callable[..., str]) -> None:
    def close_after_command(conn: socket.socket) -> None:  # reads the command byte, then closes (a pre-7 server)
        conn.recv(1)
        conn.shutdown(socket.SHUT_RDWR)

    ep = fake_server(close_after_command)
    with pytest.raises(RPCVersionError, match=r"older than 7\.x"):
        Connection(ep)


def test_a_silent_server_times_out(fake_server: Callable[..., str]) -> None:
    def answer(conn: socket.socket) -> None:
        _hello_answer((7, 0, 0))(conn)
        time.sleep(5)  # never answers DEVICE_COUNT

    ep = fake_server(answer)
    conn = Connection(ep, timeout=0.5)
    start = time.monotonic()
    with pytest.raises(RPCError, match=r"no complete answer within 0\.5 s .*unavailable.*during DEVICE_COUNT"):
        conn.request(Cmd.DEVICE_COUNT)
    assert time.monotonic() - start < 3
    with pytest.raises(RPCError, match="failed earlier"):
        conn.request(Cmd.DEVICE_COUNT)


def test_unreachable_server(monkeypatch: pytest.MonkeyPatch) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    with pytest.raises(RPCError, match="cannot connect"):
        Connection(f"127.0.0.1:{port}")


def test_server_going_away_mid_graph_is_an_error_not_a_hang(
    rpc_dev: RPCDevice, server: RPCServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = Context()
    a = ctx.new_tensor("f32", (64, 64))
    out = ops.mul_mat(a, a)
    be = rpc_dev.init_backend()
    alloc_ctx_tensors(ctx, be)
    a.set_data(np.ones((64, 64), np.float32))

    def crash(self: Session, size: int) -> None:
        self.sock.close()  # the process "dies" while it computes
        raise ConnectionResetError("server crashed")

    monkeypatch.setattr(Session, "_graph_compute", crash)
    start = time.monotonic()
    with pytest.raises(RPCError, match=r"closed the connection.*during DEVICE_COUNT \(unanswered before it: .*GRAPH"):
        be.graph_compute(build_graph(out))
    assert time.monotonic() - start < 10
    with pytest.raises(RPCError, match="failed earlier"):
        out.to_numpy()


def test_wire_limits_keep_big_tensors_local(rpc_dev: RPCDevice) -> None:
    from ggml_core import Tensor

    ctx = Context()
    big = Tensor(ctx, GGMLType.I8, (2**32, 1), name="big")
    assert not rpc_dev.supports_op(ops.scale(ops.cast(big, "f32"), 2.0).src[0])
    with pytest.raises(TensorError, match="32-bit"):
        from ggml_rpc.serialize import serialize_tensor

        serialize_tensor(big, None)
