"""Server-to-server copies: between two ggml-core servers a split's activations go from host to host. The client
sends two small unanswered commands per copy and none of the copied bytes (counted on its connections); a server
that takes no peer copies (llama.cpp's, or ``peer_copy=False``) keeps the relayed path."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from rpc_helpers import TOKENS, RawClient, raw_tensor, rel, split_logits

from ggml_core import Context, alloc_ctx_tensors
from ggml_core.models import scheduler_available
from ggml_core.models.default_model import write_default_model
from ggml_rpc import RPCDevice, RPCError, RPCReg
from ggml_rpc.client import Connection
from ggml_rpc.protocol import HELLO_CAPS, PEER_RECV, Caps, Cmd
from ggml_rpc.server import RPCServer


def _traffic(*conns: Connection) -> int:
    return sum(c.bytes_sent + c.bytes_received for c in conns)


def _device(server: RPCServer) -> RPCDevice:
    dev = RPCReg(server.address).devices[0]
    assert isinstance(dev, RPCDevice)
    return dev


def _copy(a: RPCDevice, b: RPCDevice, n: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Copy ``n`` floats from a tensor on ``a`` to one on ``b`` with ``b``'s backend: (sent, read back, bytes the
    client moved for the copy itself)."""
    ctx_a, ctx_b = Context(), Context()
    src, dst = ctx_a.new_tensor("f32", (n,)), ctx_b.new_tensor("f32", (n,))
    alloc_ctx_tensors(ctx_a, a.buffer_type())
    alloc_ctx_tensors(ctx_b, b.buffer_type())
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    src.set_data(x)
    dst.set_data(np.zeros(n, np.float32))
    a.conn.sync()
    b.conn.peer_ticket()  # (the key is asked once per connection; not part of a copy)
    before = _traffic(a.conn, b.conn)
    assert b.init_backend().cpy_tensor_async(a.init_backend(), src, dst)
    moved = _traffic(a.conn, b.conn) - before
    return x, dst.to_numpy().reshape(-1), moved


def test_ggml_core_servers_advertise_peer_copies_in_hello(make_server: Callable[..., RPCServer]) -> None:
    on, off = make_server(), make_server(peer_copy=False)
    assert Connection(on.address).caps == Caps.PEER_COPY
    assert Connection(off.address).caps == Caps.NONE
    with RawClient(on.address, hello=False) as raw:  # an RDMA client's caps are answered with zeros (stay on TCP)
        raw.frame(Cmd.HELLO, b"\x01" * 24)
        assert raw.answer(28)[4:] == bytes(24)
    with RawClient(on.address, hello=False) as raw:
        raw.frame(Cmd.HELLO, bytes(24))
        magic, flags, _ = HELLO_CAPS.unpack(raw.answer(28)[4:])
        assert magic == b"gcx1" and flags == Caps.PEER_COPY


def test_a_peer_copy_moves_no_activation_bytes_through_the_client(make_server: Callable[..., RPCServer]) -> None:
    s1, s2 = make_server(), make_server()
    a, b = _device(s1), _device(s2)
    n = 1 << 18  # 1 MiB
    x, got, moved = _copy(a, b, n)
    np.testing.assert_array_equal(got, x)
    assert moved < 2048, moved  # two commands of a few hundred bytes; the megabyte went from server to server
    assert a.conn.counts["EXT_PEER_SEND"] == 1 and b.conn.counts["EXT_PEER_RECV"] == 1
    assert a.conn.counts["GET_TENSOR"] == 0
    assert s1.stats["peer bytes sent"] == 1 and s2.stats["peer bytes received"] == 1


def test_a_server_without_peer_copies_gets_the_relayed_copy(make_server: Callable[..., RPCServer]) -> None:
    s1, s2 = make_server(), make_server(peer_copy=False)
    a, b = _device(s1), _device(s2)
    n = 4096  # 16 KiB: within what one relayed copy may leave unread
    ctx_a, ctx_b = Context(), Context()
    src, dst = ctx_a.new_tensor("f32", (n,)), ctx_b.new_tensor("f32", (n,))
    alloc_ctx_tensors(ctx_a, a.buffer_type())
    alloc_ctx_tensors(ctx_b, b.buffer_type())
    x = np.arange(n, dtype=np.float32)
    src.set_data(x)
    before = _traffic(a.conn, b.conn)
    assert b.init_backend().cpy_tensor_async(a.init_backend(), src, dst)
    np.testing.assert_array_equal(dst.to_numpy().reshape(-1), x)
    assert _traffic(a.conn, b.conn) - before > 2 * 4 * n  # in from one server, out to the other
    assert a.conn.counts["GET_TENSOR"] == 1 and a.conn.counts["EXT_PEER_SEND"] == 0


def test_relayed_copies_queued_back_to_back_are_read_in_one_round_trip(make_server: Callable[..., RPCServer]) -> None:
    """Two relayed copies from one server to another: both reads are sent before either answer is read, and the
    answers (in order) come back in one round trip when the destination is next used."""
    s1, s2 = make_server(peer_copy=False), make_server(peer_copy=False)
    a, b = _device(s1), _device(s2)
    n = 4096
    ctx_a, ctx_b = Context(), Context()
    srcs = [ctx_a.new_tensor("f32", (n,)) for _ in range(2)]
    dsts = [ctx_b.new_tensor("f32", (n,)) for _ in range(2)]
    alloc_ctx_tensors(ctx_a, a.buffer_type())
    alloc_ctx_tensors(ctx_b, b.buffer_type())
    xs = [np.arange(n, dtype=np.float32) + 1000 * i for i in range(2)]
    for src, x in zip(srcs, xs, strict=True):
        src.set_data(x)
    a.conn.sync()
    trips, gets = a.conn.round_trips, a.conn.counts["GET_TENSOR"]
    backend_a, backend_b = a.init_backend(), b.init_backend()
    for src, dst in zip(srcs, dsts, strict=True):
        assert backend_b.cpy_tensor_async(backend_a, src, dst)
    got = [dst.to_numpy().reshape(-1) for dst in dsts]
    assert a.conn.counts["GET_TENSOR"] - gets == 2 and a.conn.round_trips - trips == 1
    for y, x in zip(got, xs, strict=True):
        np.testing.assert_array_equal(y, x)


def test_a_recv_whose_data_never_comes_closes_the_connection_naming_the_ticket(
    make_server: Callable[..., RPCServer], caplog: pytest.LogCaptureFixture
) -> None:
    from ggml_rpc.server import ServerLimits

    srv = make_server(limits=ServerLimits(frame_timeout=5.0, hello_timeout=5.0, peer_timeout=0.3))
    with RawClient(srv.address) as raw:
        raw.frame(Cmd.EXT_PEER_INFO)
        assert len(raw.answer(16 + len(srv.address))) == 16 + len(srv.address)
        handle, _ = raw.alloc(64)
        t = raw_tensor(buffer=handle, ne=(16, 1, 1, 1), data=raw.base(handle))
        start = time.monotonic()
        raw.frame(Cmd.EXT_PEER_RECV, PEER_RECV.pack(t, 0, 64, 7))
        assert raw.closed_by_server()
        assert time.monotonic() - start < 3
    assert "ticket 7" in caplog.text


def test_a_recv_waiting_for_data_ends_when_its_client_leaves(
    make_server: Callable[..., RPCServer], caplog: pytest.LogCaptureFixture
) -> None:
    """(the default wait is 300 s: a client that leaves must not hold its connection slot that long)"""
    srv = make_server()
    raw = RawClient(srv.address)
    raw.frame(Cmd.EXT_PEER_INFO)
    raw.answer(16 + len(srv.address))
    handle, _ = raw.alloc(64)
    raw.frame(
        Cmd.EXT_PEER_RECV, PEER_RECV.pack(raw_tensor(buffer=handle, ne=(16, 1, 1, 1), data=raw.base(handle)), 0, 64, 1)
    )
    time.sleep(0.3)
    raw.close()
    deadline = time.monotonic() + 3
    while srv.active_sessions and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.active_sessions == 0
    assert "went away while ticket 1 was awaited" in caplog.text


def test_a_peer_put_with_an_unknown_key_is_refused(make_server: Callable[..., RPCServer]) -> None:
    srv = make_server()
    with RawClient(srv.address) as raw:
        raw.frame(Cmd.EXT_PEER_PUT, bytes(16) + bytes(8) + b"data")
        assert raw.closed_by_server()
    assert srv.stats["refused"] == 1


def test_a_peer_send_to_an_address_that_is_no_server_fails_the_source_connection(
    make_server: Callable[..., RPCServer],
) -> None:
    s1, s2 = make_server(), make_server()
    a, b = _device(s1), _device(s2)
    with socket.socket() as dead:  # a port nothing listens on
        dead.bind(("127.0.0.1", 0))
        port = dead.getsockname()[1]
    b.conn._peer = (bytes(16), f"127.0.0.1:{port}".encode())
    ctx_a, ctx_b = Context(), Context()
    src, dst = ctx_a.new_tensor("f32", (16,)), ctx_b.new_tensor("f32", (16,))
    alloc_ctx_tensors(ctx_a, a.buffer_type())
    alloc_ctx_tensors(ctx_b, b.buffer_type())
    assert b.init_backend().cpy_tensor_async(a.init_backend(), src, dst)
    with pytest.raises(RPCError, match=rf"RPC server {a.conn.endpoint}: the server closed the connection"):
        a.conn.sync()
    assert s1.stats["refused"] == 1  # the source server refused the send it could not make


@pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")
def test_layers_over_two_servers_copy_host_to_host_and_give_the_local_logits(
    tmp_path: Path, make_server: Callable[..., RPCServer], rpc_registry: Callable[..., list[str]]
) -> None:
    """A layer split over two ggml-core servers: each decoded token's boundary activation (the residual, one
    tensor) goes from the first server to the second (EXT_PEER_SEND/RECV); the client reads only the logits — one
    round trip per token, to the second server — and the logits are the local run's."""
    from ggml_core import get_registry
    from ggml_core.models import Model, ModelParams, PlacementRequest

    path = write_default_model(tmp_path / "default.gguf")
    _, local_steps, _ = split_logits(path, ["CPU"], None)
    s1, s2 = make_server(), make_server()
    names = rpc_registry(s1, s2)
    conns = [dev.conn for dev in (get_registry().get_device(n) for n in names) if isinstance(dev, RPCDevice)]
    params = ModelParams(
        placement=PlacementRequest(devices=names, tensor_split=[1, 1]), kv_type="f32", n_ctx=64, progress=False
    )
    with Model.load(path, params) as m:
        first = m.decode([TOKENS[0]])
        before = [(c.round_trips, c.counts.copy(), c.bytes_received) for c in conns]
        steps = np.concatenate([first, *(m.decode([t]) for t in TOKENS[1:])])
    assert rel(steps, local_steps) < 1e-5
    n = len(TOKENS) - 1
    (trips0, counts0, got0), (trips1, counts1, _) = (
        (c.round_trips - t, c.counts - k, c.bytes_received - r) for c, (t, k, r) in zip(conns, before, strict=True)
    )
    assert trips0 == 0 and counts0["GET_TENSOR"] == 0 and got0 == 0, counts0  # nothing comes back from the first
    assert counts0["EXT_PEER_SEND"] == n and counts1["EXT_PEER_RECV"] == n
    assert counts1["GET_TENSOR"] == n and trips1 == n, counts1
    assert s2.stats["peer bytes received"] >= n + 1
