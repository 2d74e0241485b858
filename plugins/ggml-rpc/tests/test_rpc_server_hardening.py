"""The server refuses every malformed or hostile message with one log line, closes only that connection, and keeps
serving: the frames that crash or corrupt llama.cpp's server (issues 25288, 25289, 26825, 26912, PR 20908 in
ggml-org/llama.cpp) — a Q4_0 tensor with ne[0]=1, a data address outside its buffer, a payload size of 2^64-1, a
custom op's function pointer — and the other ways a message can lie."""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from rpc_helpers import RawClient, raw_tensor, server_alive

from ggml_core import GGMLOp
from ggml_rpc.protocol import Cmd
from ggml_rpc.server import RPCServer, ServerLimits

F32 = 0
ADD, MUL_MAT, PERMUTE, VIEW = int(GGMLOp.ADD), int(GGMLOp.MUL_MAT), int(GGMLOp.PERMUTE), int(GGMLOp.VIEW)
COMPUTE = 16
N = 16  # elements of the test vectors


@dataclass
class Session:
    """A raw connection with one 4 KiB buffer: vectors a, b at base, base+256; out at base+512."""

    c: RawClient
    handle: int
    base: int
    size: int

    def vec(self, id: int, at: int, **kw: object) -> bytes:
        kw.setdefault("ne", (N, 1, 1, 1))
        return raw_tensor(id=id, buffer=self.handle, data=self.base + at, **kw)  # type: ignore[arg-type]

    def add_graph(self, **node: object) -> tuple[list[int], list[bytes]]:
        kw = {"op": ADD, "src": (1, 2), "flags": COMPUTE, **node}
        return [3], [self.vec(1, 0, name=b"a"), self.vec(2, 256, name=b"b"), self.vec(3, 512, name=b"out", **kw)]


def _session(server: RPCServer) -> Session:
    c = RawClient(server.address)
    handle, size = c.alloc(4096)
    return Session(c, handle, c.base(handle), size)


def _closed(c: RawClient) -> bool:
    """The server closed the socket: EOF, or a reset when it closed with our bytes unread."""
    try:
        return c.sock.recv(64) == b""
    except ConnectionResetError:
        return True


def _refused(server: RPCServer, caplog: pytest.LogCaptureFixture, s: Session, expect: str) -> None:
    assert s.c.closed_by_server(), "the server kept the connection open"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(expect in r.getMessage() for r in caplog.records):
        time.sleep(0.02)
    msgs = [r.getMessage() for r in caplog.records if r.name == "ggml_rpc.server"]
    assert any("closing connection" in m and expect in m for m in msgs), msgs
    assert server_alive(server.address)


Attack = Callable[[Session], None]


def _q4_0_ne0_1(s: Session) -> None:
    t = s.vec(1, 0, type=2, ne=(1, 1, 1, 1), nb=(18, 18, 18, 18))
    s.c.set_tensor(t, bytes(18))


def _data_outside_buffer(s: Session) -> None:
    s.c.frame(Cmd.GET_TENSOR, s.vec(1, s.size - 8) + struct.pack("<QQ", 0, 8))


def _data_before_buffer(s: Session) -> None:
    s.c.frame(Cmd.GET_TENSOR, raw_tensor(buffer=s.handle, data=s.base - 64, ne=(N, 1, 1, 1)) + bytes(16))


def _payload_2_64(s: Session) -> None:
    s.c.frame(Cmd.SET_TENSOR, s.vec(1, 0) + struct.pack("<BQ", 0, 0), size=2**64 - 1)


def _graph_payload_2_64(s: Session) -> None:
    s.c.frame(Cmd.GRAPH_COMPUTE, b"", size=2**64 - 1)


def _get_offset_overflow(s: Session) -> None:
    s.c.frame(Cmd.GET_TENSOR, s.vec(1, 0) + struct.pack("<QQ", 2**64 - 1, 16))


def _write_past_tensor(s: Session) -> None:
    s.c.set_tensor(s.vec(1, 0), bytes(4 * N + 4))  # inside the buffer, but past the tensor


def _unknown_handle(s: Session) -> None:
    foreign = raw_tensor(buffer=s.handle ^ 0x10, data=s.base, ne=(N, 1, 1, 1))
    s.c.frame(Cmd.GET_TENSOR, foreign + struct.pack("<QQ", 0, 4))


def _custom_op(s: Session) -> None:
    nodes, ts = s.add_graph(op=int(GGMLOp.MAP_CUSTOM1), op_params=(0x41414141, 0x41414141))  # "function pointer"
    s.c.graph(nodes, ts)


def _shape_lie(s: Session) -> None:
    nodes, ts = s.add_graph(op=MUL_MAT, ne=(N, 1, 1, 1))  # mul_mat of two [16] vectors is [1]
    s.c.graph(nodes, ts)


def _bad_permute(s: Session) -> None:
    t = s.vec(3, 512, op=PERMUTE, src=(1,), op_params=(0, 0, 1, 2), view_src=1, flags=COMPUTE)
    s.c.graph([3], [s.vec(1, 0), t])


def _view_outside_source(s: Session) -> None:
    t = s.vec(3, 64 + 64, op=VIEW, src=(1,), op_params=(64, 0), view_src=1, view_offs=64, flags=COMPUTE)
    s.c.graph([3], [s.vec(1, 0), t])  # 16 floats from byte 64 of a 64-byte source


def _leaf_view_outside_source(s: Session) -> None:
    view = s.vec(4, 32, view_src=1, view_offs=32)
    nodes, ts = s.add_graph(src=(4, 2))
    s.c.graph(nodes, [*ts, view])


def _view_address_lie(s: Session) -> None:
    view = s.vec(4, 1024, ne=(4, 1, 1, 1), view_src=1, view_offs=0)  # claims another address than a's
    s.c.graph([3], [s.vec(1, 0), s.vec(2, 256, ne=(4, 1, 1, 1)), view, s.vec(3, 512, ne=(4, 1, 1, 1), op=ADD,
               src=(4, 2), flags=COMPUTE)])  # fmt: skip


def _node_order(s: Session) -> None:
    first = s.vec(3, 512, op=ADD, src=(1, 4), flags=COMPUTE)
    second = s.vec(4, 768, op=ADD, src=(1, 2), flags=COMPUTE)
    s.c.graph([3, 4], [s.vec(1, 0), s.vec(2, 256), first, second])


def _cycle(s: Session) -> None:
    a = s.vec(3, 512, op=ADD, src=(4, 4), flags=COMPUTE)
    b = s.vec(4, 768, op=ADD, src=(3, 3), flags=COMPUTE)
    s.c.graph([3, 4], [a, b])


def _self_reference(s: Session) -> None:
    s.c.graph([3], [s.vec(1, 0), s.vec(3, 512, op=ADD, src=(1, 3), flags=COMPUTE)])


def _duplicate_id(s: Session) -> None:
    nodes, ts = s.add_graph()
    s.c.graph(nodes, [*ts, ts[0]])


def _missing_src(s: Session) -> None:
    nodes, ts = s.add_graph(src=(1, 99))
    s.c.graph(nodes, ts)


def _node_without_memory(s: Session) -> None:
    out = raw_tensor(id=3, ne=(N, 1, 1, 1), op=ADD, src=(1, 2), flags=COMPUTE)
    s.c.graph([3], [s.vec(1, 0), s.vec(2, 256), out])


def _graph_size_lie(s: Session) -> None:
    _, ts = s.add_graph()
    payload = struct.pack("<III", 0, 1, 3) + struct.pack("<Q", 3)[:4]  # counts that do not match the bytes
    s.c.frame(Cmd.GRAPH_COMPUTE, payload + b"".join(ts))


def _type_id(tid: int) -> Attack:
    return lambda s: s.c.set_tensor(s.vec(1, 0, type=tid), bytes(4))


def _unpacked_blocks(s: Session) -> None:
    s.c.set_tensor(s.vec(1, 0, type=8, ne=(32, 1, 1, 1), nb=(17, 34, 34, 34)), bytes(4))


def _overlapping_strides(s: Session) -> None:
    leaf = s.vec(1, 0, ne=(2**31, 1, 1, 1), nb=(0, 0, 0, 0))  # 4 bytes posing as 2^31 floats
    s.c.graph([3], [leaf, raw_tensor(id=3, op=int(GGMLOp.SUM), src=(1,), flags=COMPUTE, buffer=s.handle,
                                     data=s.base + 512)])  # fmt: skip


def _flags(s: Session) -> None:
    nodes, ts = s.add_graph(flags=COMPUTE | 0x100)
    s.c.graph(nodes, ts)


def _second_hello(s: Session) -> None:
    s.c.frame(Cmd.HELLO, bytes(24))


def _recompute_nothing(s: Session) -> None:
    s.c.frame(Cmd.GRAPH_RECOMPUTE, struct.pack("<I", 0))


def _wrong_fixed_size(s: Session) -> None:
    s.c.frame(Cmd.ALLOC_BUFFER, bytes(11))


def _unknown_command(s: Session) -> None:
    s.c.frame(200, b"")


def _none_command(s: Session) -> None:
    s.c.frame(Cmd.NONE, b"")


def _double_free(s: Session) -> None:
    s.c.frame(Cmd.FREE_BUFFER, struct.pack("<Q", s.handle))
    s.c.frame(Cmd.FREE_BUFFER, struct.pack("<Q", s.handle))


def _bad_device(s: Session) -> None:
    s.c.frame(Cmd.GET_ALIGNMENT, struct.pack("<I", 7))


ATTACKS: list[tuple[str, Attack, str]] = [
    ("q4_0 ne[0]=1", _q4_0_ne0_1, "not a multiple of q4_0's block size 32"),
    ("data past the buffer end", _data_outside_buffer, "outside its buffer"),
    ("data before the buffer", _data_before_buffer, "outside its buffer"),
    ("SET_TENSOR of 2^64-1 bytes", _payload_2_64, "leave its 64 bytes"),
    ("GRAPH_COMPUTE of 2^64-1 bytes", _graph_payload_2_64, "this server accepts at most"),
    ("offset 2^64-1", _get_offset_overflow, "leave its 64 bytes"),
    ("write past the tensor", _write_past_tensor, "leave its 64 bytes"),
    ("unknown buffer handle", _unknown_handle, "does not belong to this connection"),
    ("custom op", _custom_op, "custom op MAP_CUSTOM1 refused"),
    ("shape that its operands do not give", _shape_lie, "but its operands give"),
    ("invalid permutation", _bad_permute, "axes must be a permutation"),
    ("view op outside its source", _view_outside_source, "VIEW builder rejects it"),
    ("leaf view outside its source", _leaf_view_outside_source, "which has only 64 bytes"),
    ("view at a false address", _view_address_lie, "claims address"),
    ("node used before computed", _node_order, "before it is computed"),
    ("cycle", _cycle, "before it is computed"),
    ("node is its own operand", _self_reference, "uses itself"),
    ("duplicate tensor id", _duplicate_id, "is sent twice"),
    ("operand not in the message", _missing_src, "not in the message"),
    ("node without memory", _node_without_memory, "has no memory on this server"),
    ("graph counts and size disagree", _graph_size_lie, "GRAPH_COMPUTE"),
    ("removed type id 4", _type_id(4), "type id 4 is not a ggml type"),
    ("type id 99", _type_id(99), "type id 99 is not a ggml type"),
    ("q8_0 blocks not packed", _unpacked_blocks, "blocks must be packed"),
    ("unknown flag bits", _flags, "unknown flag bits"),
    ("strides that make elements overlap", _overlapping_strides, "make elements overlap"),
    ("second HELLO", _second_hello, "HELLO may only be the first command"),
    ("GRAPH_RECOMPUTE with nothing stored", _recompute_nothing, "no graph stored"),
    ("fixed-size command of the wrong size", _wrong_fixed_size, "ALLOC_BUFFER with a payload of 11 bytes"),
    ("unknown command", _unknown_command, "unknown command 200"),
    ("the client-only NONE command", _none_command, "not accepted"),
    ("double free", _double_free, "does not belong to this connection"),
    ("device that does not exist", _bad_device, "device 7 does not exist"),
]


@pytest.mark.parametrize(("attack", "expect"), [(a, e) for _, a, e in ATTACKS], ids=[n for n, _, _ in ATTACKS])
def test_bad_message_closes_only_its_connection(
    server: RPCServer, caplog: pytest.LogCaptureFixture, attack: Attack, expect: str
) -> None:
    caplog.set_level(logging.INFO, logger="ggml_rpc.server")
    bystander = _session(server)  # another client's data must survive
    bystander.c.set_tensor(bystander.vec(1, 0), b"\x5a" * 64)
    s = _session(server)
    with s.c:
        attack(s)
        _refused(server, caplog, s, expect)
    assert bystander.c.get_tensor(bystander.vec(1, 0), 64) == b"\x5a" * 64
    bystander.c.close()


def test_a_valid_graph_still_computes(server: RPCServer) -> None:
    """The baseline the attacks start from really works (so they are refused for what they change)."""
    s = _session(server)
    with s.c:
        s.c.set_tensor(s.vec(1, 0), struct.pack(f"<{N}f", *range(N)))
        s.c.set_tensor(s.vec(2, 256), struct.pack(f"<{N}f", *[10.0] * N))
        s.c.graph(*s.add_graph())
        got = struct.unpack(f"<{N}f", s.c.get_tensor(s.vec(3, 512), 4 * N))
    assert got == tuple(float(i + 10) for i in range(N))


def test_first_command_must_be_hello(server: RPCServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ggml_rpc.server")
    for first in (struct.pack("<BQ", Cmd.DEVICE_COUNT, 0), struct.pack("<BQ", Cmd.HELLO, 4) + bytes(4)):
        with RawClient(server.address, hello=False) as c:
            c.sock.sendall(first)
            assert _closed(c)
    assert any("must be HELLO" in r.getMessage() for r in caplog.records)
    assert any("needs protocol 7.x" in r.getMessage() for r in caplog.records)
    assert server_alive(server.address)


def test_huge_allocation_is_answered_not_fatal(server: RPCServer) -> None:
    with RawClient(server.address) as c:
        assert c.alloc(2**63) == (0, 0)  # ggml's answer for "could not allocate"
        assert c.alloc(2**64 - 1) == (0, 0)
        assert c.device_count() == 1


def test_per_connection_limits(make_server: Callable[..., RPCServer]) -> None:
    server = make_server(limits=ServerLimits(max_buffers=2, max_bytes=10_000, frame_timeout=5.0))
    with RawClient(server.address) as c:
        assert c.alloc(4000)[0] and c.alloc(4000)[0]
        assert c.alloc(16) == (0, 0)  # a third buffer
    with RawClient(server.address) as c:  # a new connection starts from zero
        assert c.alloc(9000)[0]
        assert c.alloc(2000) == (0, 0)  # over 10,000 bytes


def test_stalled_messages_time_out(make_server: Callable[..., RPCServer], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ggml_rpc.server")
    server = make_server(limits=ServerLimits(frame_timeout=0.3, hello_timeout=0.3))
    with RawClient(server.address) as c:
        c.sock.sendall(struct.pack("<BQ", Cmd.SET_TENSOR, 400) + bytes(10))  # the rest never comes
        start = time.monotonic()
        assert _closed(c)
        assert time.monotonic() - start < 3
    with RawClient(server.address, hello=False) as c:  # connects and says nothing
        assert _closed(c)
    assert server_alive(server.address)
    deadline = time.monotonic() + 5
    while server.active_sessions and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.active_sessions == 0


def test_buffers_of_a_closed_connection_are_freed(server: RPCServer, cpu: object) -> None:
    with RawClient(server.address) as c:
        handle, _ = c.alloc(1 << 20)
    with RawClient(server.address) as c:  # the old handle means nothing to anyone now
        c.frame(Cmd.BUFFER_GET_BASE, struct.pack("<Q", handle))
        assert _closed(c)
