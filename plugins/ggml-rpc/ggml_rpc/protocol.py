"""ggml's RPC protocol 7.0.0 on the wire: commands, message layouts, the 296-byte ``rpc_tensor``, framing, limits.

Written from the measured wire format (``shared/reference/ggml-rpc-v7.md``) and checked against llama.cpp's own
``ggml-rpc-server`` (commit 0c1e570). Everything is little-endian and packed::

    request : | cmd u8 | payload_size u64 | payload |
    response: | payload_size u64 | payload |        (only for commands that have one)

The first command of a connection is HELLO. There are no error frames: a server that dislikes a message closes
the connection. A ggml-core server marks its HELLO answer with :data:`GGML_CORE_MARK` in the padding byte, which
llama.cpp's client ignores; only then does a ggml-core client use the extension commands (device info,
``supports_op``, server-to-server copies), which llama.cpp's server would refuse. To a client whose HELLO carried
all-zero capability bytes (plain TCP, as every client without RDMA sends), a ggml-core server answers capability
bytes of its own (:data:`HELLO_CAPS`: :data:`CAPS_MAGIC`, :class:`Caps` flags, the tensor cache's minimum size);
llama.cpp's clients look at the answer's bytes only when their own were not zero (RDMA), so they never see them.
"""

from __future__ import annotations

import enum
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ggml_core import MAX_DIMS, MAX_NAME, MAX_OP_PARAMS, MAX_SRC, GGMLError, GGMLOp

__all__ = [
    "CAPS_MAGIC",
    "EXT_DEVICE_INFO_MAX",
    "FIXED_REQUEST_SIZE",
    "FIXED_RESPONSE_SIZE",
    "GGML_CORE_MARK",
    "GGML_CORE_TLS_REQUIRED",
    "GGML_CORE_TOKEN_REQUIRED",
    "GGML_OP_COUNT",
    "HASH_THRESHOLD",
    "HELLO_CAPS",
    "HELLO_CAPS_SIZE",
    "PEER_ADDRESS_MAX",
    "PEER_KEY_SIZE",
    "PEER_RECV",
    "PEER_SEND_HEADER",
    "PROTO_VERSION",
    "RPC_TENSOR",
    "RPC_TENSOR_SIZE",
    "SET_TENSOR_HEADER",
    "TOKEN_MAX",
    "U32_MAX",
    "U64_MAX",
    "Auth",
    "Caps",
    "Cmd",
    "RPCAuthError",
    "RPCConfigError",
    "RPCError",
    "RPCNoCPUError",
    "RPCVersionError",
    "RpcTensor",
    "frame_bytes",
    "recv_exact",
    "recv_into_exact",
    "send_all",
    "send_frame",
]

#: the protocol version spoken here (``RPC_PROTO_{MAJOR,MINOR,PATCH}_VERSION``)
PROTO_VERSION: Final = (7, 0, 0)
#: protocol 7.0.0 pins ggml's op enum at 101 entries: op ids travel as numbers
GGML_OP_COUNT: Final = 101
if len(GGMLOp) != GGML_OP_COUNT:  # ggml's static_assert: a changed op enum needs a new protocol version
    raise ImportError(
        f"ggml_core.GGMLOp has {len(GGMLOp)} entries but RPC protocol 7.0.0 pins {GGML_OP_COUNT}; "
        "the op numbering no longer matches ggml's"
    )

#: bytes of ``conn_caps`` in HELLO (all zero: plain TCP)
HELLO_CAPS_SIZE: Final = 24
#: a ggml-core server's HELLO answer capabilities: magic, :class:`Caps` flags, the smallest tensor its cache keeps
HELLO_CAPS: Final = struct.Struct("<4sIQ8x")
assert HELLO_CAPS.size == 24
#: the first bytes of a ggml-core server's answer capabilities
CAPS_MAGIC: Final = b"gcx1"
#: bytes of the key that lets a peer server deliver data to one connection (EXT_PEER_INFO)
PEER_KEY_SIZE: Final = 16
#: the most bytes of a peer address (``host:port`` or ``tls://host:port``)
PEER_ADDRESS_MAX: Final = 300
#: the HELLO answer's padding byte from a ggml-core server (llama.cpp's servers send 0)
GGML_CORE_MARK: Final = 0xC7
#: the HELLO answer's padding byte from a ggml-core server that requires a token and got HELLO without one (it
#: closes the connection after this answer)
GGML_CORE_TOKEN_REQUIRED: Final = 0xCA
#: the HELLO answer's padding byte from a ggml-core server that serves TLS only, to a plain client (it closes the
#: connection after this answer)
GGML_CORE_TLS_REQUIRED: Final = 0xCB
#: the most bytes a token may have
TOKEN_MAX: Final = 4096
#: the most bytes a device-info answer may have
EXT_DEVICE_INFO_MAX: Final = 1 << 16
#: llama.cpp's client tries SET_TENSOR_HASH first for weights larger than this
HASH_THRESHOLD: Final = 10 * 1024 * 1024
#: the largest value of the wire's 32-bit ``ne``/``nb`` fields
U32_MAX: Final = 2**32 - 1
#: the largest value of a 64-bit field (addresses, sizes)
U64_MAX: Final = 2**64 - 1


class Cmd(enum.IntEnum):
    """``enum rpc_cmd`` (HELLO must stay 14), plus the ggml-core extensions (sent only to marked servers)."""

    ALLOC_BUFFER = 0
    GET_ALIGNMENT = 1
    GET_MAX_SIZE = 2
    BUFFER_GET_BASE = 3
    FREE_BUFFER = 4
    BUFFER_CLEAR = 5
    SET_TENSOR = 6
    SET_TENSOR_HASH = 7
    GET_TENSOR = 8
    COPY_TENSOR = 9
    GRAPH_COMPUTE = 10
    GET_DEVICE_MEMORY = 11
    INIT_TENSOR = 12
    GET_ALLOC_SIZE = 13
    HELLO = 14
    DEVICE_COUNT = 15
    GRAPH_RECOMPUTE = 16
    MEMSET_TENSOR = 17
    NONE = 18  #: the client's internal sync marker; never sent
    COUNT = 19  #: every id from here on is unknown to llama.cpp's server
    EXT_DEVICE_INFO = 0xC0  #: ggml-core: ``u32 device`` → UTF-8 JSON (name, description, type)
    EXT_SUPPORTS_OP = 0xC1  #: ggml-core: ``u32 device, rpc_tensor op, rpc_tensor srcs[10]`` → ``u8``
    EXT_AUTH = 0xC2  #: ggml-core, before HELLO and only with a token configured: ``token`` → ``u8`` (:class:`Auth`)
    #: ggml-core: empty → ``u8 key[16], address`` (UTF-8): how a peer server reaches this connection
    EXT_PEER_INFO = 0xC3
    #: ggml-core, to the source server: ``rpc_tensor src, u64 offset, u64 size, u64 ticket, u8 key[16], address``
    #: → ``u8 1``, then the server sends those bytes of ``src`` to the peer at ``address`` (EXT_PEER_PUT); the client
    #: reads the answer whenever convenient (it tells which server failed when a copy never arrives)
    EXT_PEER_SEND = 0xC4
    #: ggml-core, between servers: ``u8 key[16], u64 ticket, data`` → none; held for the connection of ``key``
    EXT_PEER_PUT = 0xC5
    #: ggml-core, to the destination server: ``rpc_tensor dst, u64 offset, u64 size, u64 ticket`` → none; waits for
    #: the ticket's data from the peer and writes it into ``dst``
    EXT_PEER_RECV = 0xC6


class Caps(enum.IntFlag):
    """What a ggml-core server offers (its HELLO answer's capability flags)."""

    NONE = 0
    PEER_COPY = 1  #: EXT_PEER_INFO/SEND/PUT/RECV: copies between two such servers go from host to host
    TENSOR_CACHE = 2  #: a tensor cache (``--cache-dir``): SET_TENSOR_HASH can hit for tensors over its minimum


class Auth(enum.IntEnum):
    """EXT_AUTH's answer."""

    REFUSED = 0  #: wrong token (the server closes the connection)
    ACCEPTED = 1  #: go on with HELLO
    NOT_REQUIRED = 2  #: this server was started without a token (it closes the connection: nothing was secured)
    TLS_REQUIRED = 3  #: this server serves TLS only, and the token came in the clear (it closes the connection)


# ================================================================================================ rpc_tensor

#: ``struct rpc_tensor`` (296 bytes, packed): id, type, buffer, ne[4] u32, nb[4] u32, op, op_params[16], flags,
#: src[10], view_src, view_offs, data, name[64], use_count
RPC_TENSOR: Final = struct.Struct("<QIQ4I4II16ii10QQQQ64si")
RPC_TENSOR_SIZE: Final = RPC_TENSOR.size
assert RPC_TENSOR_SIZE == 296
assert len(RPC_TENSOR.unpack(bytes(RPC_TENSOR_SIZE))) == 44 and MAX_OP_PARAMS == 64 and MAX_SRC == 10 and MAX_DIMS == 4


@dataclass(frozen=True, slots=True)
class RpcTensor:
    """One ``rpc_tensor`` as plain Python values (see the field table in the module documentation)."""

    id: int
    type: int
    buffer: int
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    op: int
    op_params: tuple[int, ...]
    flags: int
    src: tuple[int, ...]
    view_src: int
    view_offs: int
    data: int
    name: bytes
    use_count: int = 0

    @classmethod
    def unpack_from(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> RpcTensor:
        """Decode the 296 bytes at ``offset``."""
        v = RPC_TENSOR.unpack_from(buf, offset)
        return cls(
            id=v[0],
            type=v[1],
            buffer=v[2],
            ne=(v[3], v[4], v[5], v[6]),
            nb=(v[7], v[8], v[9], v[10]),
            op=v[11],
            op_params=v[12:28],
            flags=v[28],
            src=v[29:39],
            view_src=v[39],
            view_offs=v[40],
            data=v[41],
            name=v[42],
            use_count=v[43],
        )

    def pack(self) -> bytes:
        """The 296 wire bytes (raises ``struct.error`` for a value outside its field)."""
        return RPC_TENSOR.pack(
            self.id,
            self.type,
            self.buffer,
            *self.ne,
            *self.nb,
            self.op,
            *self.op_params,
            self.flags,
            *self.src,
            self.view_src,
            self.view_offs,
            self.data,
            self.name,
            self.use_count,
        )

    @property
    def name_str(self) -> str:
        """The name up to its first NUL, decoded leniently."""
        return self.name.split(b"\0", 1)[0].decode("utf-8", errors="replace")


#: the null tensor (``serialize_tensor(nullptr)``): all zero bytes
NULL_TENSOR: Final = bytes(RPC_TENSOR_SIZE)

#: SET_TENSOR's header after the rpc_tensor: ``u8 cache_flag, u64 offset``
SET_TENSOR_HEADER: Final = struct.Struct("<BQ")
#: EXT_PEER_SEND's fixed part: ``rpc_tensor src, u64 offset, u64 size, u64 ticket, u8 key[16]`` (the address follows)
PEER_SEND_HEADER: Final = struct.Struct(f"<{RPC_TENSOR_SIZE}sQQQ{PEER_KEY_SIZE}s")
#: EXT_PEER_RECV: ``rpc_tensor dst, u64 offset, u64 size, u64 ticket``
PEER_RECV: Final = struct.Struct(f"<{RPC_TENSOR_SIZE}sQQQ")


# ================================================================================================ message sizes

#: payload sizes of the commands whose request has a fixed size (the server refuses any other size)
FIXED_REQUEST_SIZE: Final[dict[Cmd, int]] = {
    Cmd.ALLOC_BUFFER: 12,
    Cmd.GET_ALIGNMENT: 4,
    Cmd.GET_MAX_SIZE: 4,
    Cmd.BUFFER_GET_BASE: 8,
    Cmd.FREE_BUFFER: 8,
    Cmd.BUFFER_CLEAR: 9,
    Cmd.SET_TENSOR_HASH: RPC_TENSOR_SIZE + 16,
    Cmd.GET_TENSOR: RPC_TENSOR_SIZE + 16,
    Cmd.COPY_TENSOR: 2 * RPC_TENSOR_SIZE,
    Cmd.GET_DEVICE_MEMORY: 4,
    Cmd.INIT_TENSOR: RPC_TENSOR_SIZE,
    Cmd.GET_ALLOC_SIZE: 4 + (1 + MAX_SRC) * RPC_TENSOR_SIZE,
    Cmd.HELLO: HELLO_CAPS_SIZE,
    Cmd.DEVICE_COUNT: 0,
    Cmd.GRAPH_RECOMPUTE: 4,
    Cmd.MEMSET_TENSOR: RPC_TENSOR_SIZE + 17,
    Cmd.EXT_DEVICE_INFO: 4,
    Cmd.EXT_SUPPORTS_OP: 4 + (1 + MAX_SRC) * RPC_TENSOR_SIZE,
    Cmd.EXT_PEER_INFO: 0,
    Cmd.EXT_PEER_RECV: RPC_TENSOR_SIZE + 24,
}

#: payload sizes of fixed-size responses (GET_TENSOR answers exactly the bytes asked for; EXT_DEVICE_INFO varies)
FIXED_RESPONSE_SIZE: Final[dict[Cmd, int]] = {
    Cmd.ALLOC_BUFFER: 16,
    Cmd.GET_ALIGNMENT: 8,
    Cmd.GET_MAX_SIZE: 8,
    Cmd.BUFFER_GET_BASE: 8,
    Cmd.SET_TENSOR_HASH: 1,
    Cmd.COPY_TENSOR: 1,
    Cmd.GET_DEVICE_MEMORY: 16,
    Cmd.GET_ALLOC_SIZE: 8,
    Cmd.HELLO: 4 + HELLO_CAPS_SIZE,
    Cmd.DEVICE_COUNT: 4,
    Cmd.EXT_SUPPORTS_OP: 1,
    Cmd.EXT_PEER_SEND: 1,
    Cmd.EXT_AUTH: 1,
}

#: the frame header of a request: command byte and payload size
_REQUEST_HEADER: Final = struct.Struct("<BQ")


# ================================================================================================ errors


class RPCError(GGMLError, ConnectionError):
    """A remote RPC server cannot be reached, went away, timed out or answered something malformed.

    :param endpoint: ``host:port``
    :param message: what happened (and, where known, during which command)
    """

    def __init__(self, endpoint: str, message: str) -> None:
        super().__init__(f"RPC server {endpoint}: {message}")
        self.endpoint = endpoint


class RPCVersionError(RPCError):
    """The server speaks another major protocol version (or a newer minor one) than 7.0."""


class RPCAuthError(RPCError):
    """The server and the client disagree on security: a wrong or missing token, TLS on one side only, an untrusted
    certificate."""


class RPCNoCPUError(GGMLError, LookupError):
    """A server that cannot be asked which ops it runs (llama.cpp's) is sent the ops the local CPU device runs, and
    there is no CPU device.

    :param endpoint: ``host:port`` of that server
    :param known: the devices there are
    """

    def __init__(self, endpoint: str, known: Sequence[str]) -> None:
        super().__init__(
            f"RPC server {endpoint}: its ops are chosen by the local CPU device, and there is none "
            f"(available: {', '.join(known) if known else 'none'}); install ggml-cpu (pip install ggml-cpu), "
            "or add cpu to GGML_BACKENDS"
        )
        self.endpoint, self.known = endpoint, tuple(known)


class RPCConfigError(GGMLError, ValueError):
    """A token file, certificate or key cannot be used (missing, unreadable, empty, too long, not PEM).

    :param path: the file
    :param message: what is wrong with it and what to do
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


# ================================================================================================ framing


def send_frame(
    sock: socket.socket,
    cmd: int,
    parts: Sequence[bytes | bytearray | memoryview] = (),
    deadline: float | None = None,
    held: bytes | bytearray = b"",
) -> None:
    """Send one request: ``cmd``, the total size of ``parts``, then the parts (small frames in one write).

    ``held``: whole frames (:func:`frame_bytes`) not sent yet, which go first, in the same write for a small frame.
    With ``deadline`` the whole frame must be sent by then (``TimeoutError`` otherwise).
    """
    size = sum(memoryview(p).nbytes for p in parts)
    head = _REQUEST_HEADER.pack(cmd, size)
    if size <= 1 << 16:
        send_all(sock, b"".join([held, head, *(bytes(p) if isinstance(p, memoryview) else p for p in parts)]), deadline)
        return
    if held:
        send_all(sock, held, deadline)
    send_all(sock, head, deadline)
    for p in parts:
        send_all(sock, p, deadline)


def frame_bytes(cmd: int, parts: Sequence[bytes | bytearray | memoryview] = ()) -> bytes:
    """The bytes :func:`send_frame` sends for ``cmd`` and ``parts`` (a frame to send later, with others)."""
    size = sum(memoryview(p).nbytes for p in parts)
    return b"".join([_REQUEST_HEADER.pack(cmd, size), *(bytes(p) if isinstance(p, memoryview) else p for p in parts)])


def _remaining(sock: socket.socket, deadline: float | None) -> None:
    """Set the socket's timeout to what is left until ``deadline`` (monotonic seconds); TimeoutError when none."""
    if deadline is None:
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the message's deadline passed")
    now = sock.gettimeout()
    if now is None or not left * 0.9 - 0.05 <= now <= left * 1.1 + 0.05:  # one close enough is kept: a syscall
        sock.settimeout(min(left, 86400.0))  # saved per message (time_t bounds the value; days are as good as none)


def recv_into_exact(sock: socket.socket, out: memoryview, deadline: float | None = None) -> None:
    """Fill ``out`` from ``sock``; ``EOFError`` when the peer closes first.

    With ``deadline`` (``time.monotonic()`` seconds) the *whole* read must finish by then (to within 10 % and
    50 ms), however the bytes trickle in (``TimeoutError`` otherwise); without it the socket's own timeout applies
    to each ``recv``.
    """
    out = out.cast("B") if out.format != "B" else out
    got, n = 0, out.nbytes
    while got < n:
        _remaining(sock, deadline)
        try:
            k = sock.recv_into(out[got:], min(n - got, 1 << 24))
        except TimeoutError:
            if deadline is None or time.monotonic() >= deadline:
                raise
            sock.settimeout(None)  # a kept timeout ran out before the deadline: the next round sets the exact one
            continue
        if k == 0:
            raise EOFError(f"connection closed after {got} of {n} bytes")
        got += k


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytearray:
    """Read exactly ``n`` bytes (the caller bounds ``n`` before calling), by ``deadline`` when given."""
    out = bytearray(n)
    if n:
        recv_into_exact(sock, memoryview(out), deadline)
    return out


def send_all(sock: socket.socket, data: bytes | bytearray | memoryview, deadline: float | None = None) -> None:
    """``sendall`` that finishes by ``deadline`` (``TimeoutError`` otherwise, however slowly the peer reads)."""
    _remaining(sock, deadline)
    sock.sendall(data)  # since Python 3.5 the timeout bounds the whole call, not each send()


def name_bytes(name: str) -> bytes:
    """A tensor name as the 64-byte NUL-padded field (at most 63 bytes of UTF-8, cut on a character boundary)."""
    raw = name.encode("utf-8")[: MAX_NAME - 1]
    return raw.decode("utf-8", errors="ignore").encode("utf-8")
