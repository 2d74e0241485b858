"""The start of a connection, before any command is served: TLS (when the server has it), the token (when the server
has one), then HELLO — each within one deadline, each refusal one :class:`Refused` (one log line).

A client on the wrong footing is told in its own protocol before the connection closes, so that it can say what to
do: a plain client of a TLS server gets a HELLO answer marked :data:`GGML_CORE_TLS_REQUIRED` (or EXT_AUTH's
TLS_REQUIRED), a client without a token a HELLO answer marked :data:`GGML_CORE_TOKEN_REQUIRED`, a token for a server
without one EXT_AUTH's NOT_REQUIRED. llama.cpp's clients, which ignore the mark, find the connection closed.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import Final

from ggml_rpc._security import tokens_equal
from ggml_rpc.protocol import (
    GGML_CORE_MARK,
    GGML_CORE_TLS_REQUIRED,
    GGML_CORE_TOKEN_REQUIRED,
    HELLO_CAPS_SIZE,
    PROTO_VERSION,
    TOKEN_MAX,
    Auth,
    Cmd,
    recv_exact,
    send_all,
)
from ggml_rpc.server._validate import Refused

__all__ = ["greet"]

_U64: Final = struct.Struct("<Q")
#: the first byte of a TLS connection (a handshake record)
_TLS_HANDSHAKE: Final = 0x16


def greet(
    sock: socket.socket, token: bytes | None, tls: ssl.SSLContext | None, timeout: float, caps: bytes
) -> socket.socket:
    """TLS, the token and HELLO on a new connection, within ``timeout`` seconds for each stage however the bytes
    trickle; returns the socket to serve on (wrapped in TLS when ``tls`` is given). Raises :class:`Refused`.

    ``caps`` (:data:`HELLO_CAPS_SIZE` bytes) are this server's capabilities, answered to a client whose HELLO had
    all-zero capabilities; a client that sent others (llama.cpp's RDMA) is answered zeros, which keeps it on TCP.
    """
    return _Greeting(sock, timeout).run(token, tls, caps)


class _Greeting:
    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout

    def read(self, n: int) -> bytearray:
        return recv_exact(self.sock, n, self.deadline)

    def answer(self, payload: bytes) -> None:
        send_all(self.sock, _U64.pack(len(payload)) + payload, self.deadline)

    def run(self, token: bytes | None, tls: ssl.SSLContext | None, caps: bytes) -> socket.socket:
        if tls is not None:
            self.tls(tls)
        self.deadline = time.monotonic() + self.timeout  # the whole HELLO, however it trickles
        cmd = self.read(1)[0]
        if cmd == Cmd.EXT_AUTH:
            self.auth(token)
            cmd = self.read(1)[0]
        elif token is not None and cmd == Cmd.HELLO:
            self.hello_body()
            self.answer(bytes([*PROTO_VERSION, GGML_CORE_TOKEN_REQUIRED]) + bytes(HELLO_CAPS_SIZE))
            raise Refused("no token: this server was started with --token (the client needs GGML_RPC_TOKEN_FILE)")
        if cmd != Cmd.HELLO:
            hint = " (a TLS handshake: this server has no TLS; start it with --tls-cert/--tls-key)"
            raise Refused(f"the first command must be HELLO (14), got {cmd}{hint if cmd == _TLS_HANDSHAKE else ''}")
        theirs = self.hello_body()
        self.answer(bytes([*PROTO_VERSION, GGML_CORE_MARK]) + (caps if not any(theirs) else bytes(HELLO_CAPS_SIZE)))
        return self.sock

    def tls(self, context: ssl.SSLContext) -> None:
        """The TLS handshake; a plain client (its first byte is not a TLS record's) is told and refused."""
        self.sock.settimeout(self.timeout)
        first = self.sock.recv(1, socket.MSG_PEEK)
        if first and first[0] != _TLS_HANDSHAKE:
            cmd = self.read(1)[0]
            if cmd == Cmd.EXT_AUTH:
                self.read_token()
                self.answer(bytes([Auth.TLS_REQUIRED]))
            elif cmd == Cmd.HELLO:
                self.hello_body()
                self.answer(bytes([*PROTO_VERSION, GGML_CORE_TLS_REQUIRED]) + bytes(HELLO_CAPS_SIZE))
            raise Refused("a plain client: this server serves TLS only (the client must connect to tls://HOST:PORT)")
        try:
            self.sock = context.wrap_socket(self.sock, server_side=True)  # (the socket's timeout bounds it whole)
        except ssl.SSLError as exc:
            raise Refused(f"TLS handshake failed ({exc.reason or exc})") from None

    def hello_body(self) -> bytearray:
        """The rest of HELLO; returns the client's connection capabilities (RDMA: TCP only here)."""
        (size,) = _U64.unpack(self.read(8))
        if size != HELLO_CAPS_SIZE:
            raise Refused(f"HELLO of {size} bytes, protocol 7 has {HELLO_CAPS_SIZE}: the client needs protocol 7.x")
        return self.read(size)

    def read_token(self) -> bytes:
        (size,) = _U64.unpack(self.read(8))
        if not 0 < size <= TOKEN_MAX:
            raise Refused(f"a token of {size} bytes (1 to {TOKEN_MAX} are accepted)")
        return bytes(self.read(size))

    def auth(self, token: bytes | None) -> None:
        """EXT_AUTH (before HELLO): the client's token compared with the server's, in constant time."""
        given = self.read_token()
        if token is None:
            self.answer(bytes([Auth.NOT_REQUIRED]))
            raise Refused("the client sent a token, and this server was started without --token")
        if not tokens_equal(given, token):
            self.answer(bytes([Auth.REFUSED]))
            raise Refused("wrong token")
        self.answer(bytes([Auth.ACCEPTED]))
