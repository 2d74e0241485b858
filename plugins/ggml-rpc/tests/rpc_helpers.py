"""Helpers of the RPC tests: a raw-socket client that speaks the wire format byte by byte, and tensor builders.

Everything runs on 127.0.0.1 with ephemeral ports, and every socket has a timeout.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence

from ggml_rpc.protocol import NULL_TENSOR, RPC_TENSOR, Cmd

__all__ = ["RawClient", "raw_tensor", "server_alive"]

TIMEOUT = 10.0


def raw_tensor(
    *,
    id: int = 1,
    type: int = 0,
    buffer: int = 0,
    ne: Sequence[int] = (1, 1, 1, 1),
    nb: Sequence[int] | None = None,
    op: int = 0,
    op_params: Sequence[int] = (),
    flags: int = 0,
    src: Sequence[int] = (),
    view_src: int = 0,
    view_offs: int = 0,
    data: int = 0,
    name: bytes = b"t",
    use_count: int = 0,
) -> bytes:
    """One ``rpc_tensor`` built field by field (contiguous f32 strides unless ``nb`` is given)."""
    if nb is None:
        nb = (4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2])
    params = [*op_params, *[0] * (16 - len(op_params))]
    srcs = [*src, *[0] * (10 - len(src))]
    return RPC_TENSOR.pack(
        id, type, buffer, *ne, *nb, op, *params, flags, *srcs, view_src, view_offs, data, name, use_count
    )


class RawClient:
    """A plain socket that sends frames as ggml's client lays them out (no checks of its own)."""

    def __init__(self, address: str, *, hello: bool = True, timeout: float = TIMEOUT) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        if hello:
            self.frame(Cmd.HELLO, bytes(24))
            self.hello = self.answer(28)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def frame(self, cmd: int, payload: bytes = b"", size: int | None = None) -> None:
        """Send ``cmd``, the payload size (or a lie about it) and the payload."""
        self.sock.sendall(struct.pack("<BQ", cmd, len(payload) if size is None else size) + payload)

    def answer(self, size: int) -> bytes:
        """Read one answer of ``size`` bytes (asserting the size header)."""
        head = self._exact(8)
        got = struct.unpack("<Q", head)[0]
        assert got == size, f"answer of {got} bytes, expected {size}"
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise EOFError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return out

    def closed_by_server(self) -> bool:
        """True when the server closed the connection (reads EOF or a reset within the timeout)."""
        try:
            self.sock.sendall(struct.pack("<BQ", Cmd.DEVICE_COUNT, 0))
            return self.sock.recv(64) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True

    # ---- typed commands ---------------------------------------------------------------------------------

    def device_count(self) -> int:
        self.frame(Cmd.DEVICE_COUNT)
        return struct.unpack("<I", self.answer(4))[0]

    def alloc(self, size: int, device: int = 0) -> tuple[int, int]:
        self.frame(Cmd.ALLOC_BUFFER, struct.pack("<IQ", device, size))
        return struct.unpack("<QQ", self.answer(16))

    def base(self, handle: int) -> int:
        self.frame(Cmd.BUFFER_GET_BASE, struct.pack("<Q", handle))
        return struct.unpack("<Q", self.answer(8))[0]

    def set_tensor(self, tensor: bytes, data: bytes, offset: int = 0, cache_flag: int = 0) -> None:
        self.frame(Cmd.SET_TENSOR, tensor + struct.pack("<BQ", cache_flag, offset) + data)

    def get_tensor(self, tensor: bytes, size: int, offset: int = 0) -> bytes:
        self.frame(Cmd.GET_TENSOR, tensor + struct.pack("<QQ", offset, size))
        return self.answer(size)

    def graph(self, nodes: Sequence[int], tensors: Sequence[bytes], device: int = 0) -> None:
        payload = struct.pack("<II", device, len(nodes)) + struct.pack(f"<{len(nodes)}Q", *nodes)
        payload += struct.pack("<I", len(tensors)) + b"".join(tensors)
        self.frame(Cmd.GRAPH_COMPUTE, payload)


def server_alive(address: str) -> bool:
    """A fresh client connects, says HELLO and gets a device count back."""
    with RawClient(address) as c:
        return c.device_count() >= 1


NULL = NULL_TENSOR
