"""A byte-exact replay of what llama.cpp's own RPC client sent to a ggml-core server (no compiler needed).

``data/llama_cpp_client_session.bin.gz`` was recorded by ``interop/record_session.py``: the client harness (llama.cpp
0c1e570's ggml-rpc client through ggml's public API: ten LLaMA-style graphs, each computed twice, the second time
as GRAPH_RECOMPUTE) talking to a fresh ggml-core server serving the CPU. Handles and base addresses are
per-connection counters, so a fresh server answers the replayed frames exactly as it did then: every answer must
match the recorded one byte for byte, except the memory figures (this machine's, not the recording machine's),
computed values (compared as float32 with a tolerance, so that kernel improvements do not break the test) and
HELLO's capability bytes (the recorded server advertised none; this one advertises server-to-server copies)."""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from rpc_helpers import RawClient

from ggml_rpc.protocol import CAPS_MAGIC, FIXED_RESPONSE_SIZE, HELLO_CAPS, RPC_TENSOR_SIZE, Caps, Cmd
from ggml_rpc.server import RPCServer

SESSION = Path(__file__).parent / "data" / "llama_cpp_client_session.bin.gz"


def _connections() -> list[tuple[bytes, bytes]]:
    blob = gzip.decompress(SESSION.read_bytes())
    (n,) = struct.unpack_from("<I", blob)
    pos, out = 4, []
    for _ in range(n):
        (a,) = struct.unpack_from("<Q", blob, pos)
        c2s = blob[pos + 8 : pos + 8 + a]
        pos += 8 + a
        (b,) = struct.unpack_from("<Q", blob, pos)
        s2c = blob[pos + 8 : pos + 8 + b]
        pos += 8 + b
        out.append((c2s, s2c))
    return out


def _frames(stream: bytes) -> Iterator[tuple[int, bytes]]:
    pos = 0
    while pos < len(stream):
        cmd, size = struct.unpack_from("<BQ", stream, pos)
        yield cmd, stream[pos + 9 : pos + 9 + size]
        pos += 9 + size


def _answer_size(cmd: int, payload: bytes) -> int | None:
    if cmd == Cmd.GET_TENSOR:
        return int(struct.unpack_from("<Q", payload, RPC_TENSOR_SIZE + 8)[0])
    return FIXED_RESPONSE_SIZE.get(Cmd(cmd))


def test_replay_of_llama_cpp_client_frames(server: RPCServer) -> None:
    connections = _connections()
    assert len(connections) == 3
    seen: dict[str, int] = {}
    for c2s, s2c in connections:
        c = RawClient(server.address, hello=False)
        recorded = memoryview(s2c)
        with c:
            for cmd, payload in _frames(c2s):
                name = Cmd(cmd).name
                seen[name] = seen.get(name, 0) + 1
                c.frame(cmd, payload)
                size = _answer_size(cmd, payload)
                if size is None:
                    continue
                got = c.answer(size)
                want_size = struct.unpack_from("<Q", recorded)[0]
                want, recorded = bytes(recorded[8 : 8 + want_size]), recorded[8 + want_size :]
                assert len(got) == want_size, name
                if cmd == Cmd.GET_DEVICE_MEMORY:
                    free, total = struct.unpack("<QQ", got)
                    # both figures are this machine's (the recording's were the recording machine's)
                    assert 0 < free <= total
                elif cmd == Cmd.HELLO:
                    assert got[:4] == want[:4] and want[4:] == bytes(24)  # version and mark as recorded
                    assert HELLO_CAPS.unpack(got[4:]) == (CAPS_MAGIC, Caps.PEER_COPY, 0)
                elif cmd == Cmd.GET_TENSOR:
                    np.testing.assert_allclose(np.frombuffer(got, "<f4"), np.frombuffer(want, "<f4"), 1e-5, 1e-6)
                else:
                    assert got == want, f"{name}: answered {got.hex()}, recorded {want.hex()}"
            assert not recorded, "the recorded session has answers the replay did not ask for"
    assert seen["GRAPH_COMPUTE"] == 10 and seen["GRAPH_RECOMPUTE"] == 10 and seen["SET_TENSOR"] > 20
    assert server.stats["refused"] == 0 and server.stats["graphs computed"] == 20
