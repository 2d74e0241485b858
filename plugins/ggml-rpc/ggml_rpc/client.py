"""One TCP connection to an RPC server: connect, HELLO (version check), requests with timeouts, clear failures.

A connection is shared by every device and backend of its endpoint (as ggml's per-endpoint dispatcher) and is
serialised by a lock. Commands without an answer (SET_TENSOR, GRAPH_COMPUTE, ...) are only *sent*; the server runs
commands in order, so the next answered command waits for them, and a server that refused one of them (it closes
the connection) or died meanwhile is reported then, naming the commands that were still unanswered. A failed
connection stays failed: the server freed its buffers when it closed, so nothing can continue silently.

Environment: ``GGML_RPC_TIMEOUT`` (seconds for any whole send and any whole answer, plus its size at
:data:`MIN_RATE`, 1 MiB/s; default 300),
``GGML_RPC_CONNECT_TIMEOUT`` (connecting and the whole HELLO exchange, default 10). These are deadlines for whole
messages: a server that trickles its answer a byte at a time is reported unavailable when they pass.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final

from ggml_rpc.protocol import (
    FIXED_RESPONSE_SIZE,
    GGML_CORE_MARK,
    HELLO_CAPS_SIZE,
    PROTO_VERSION,
    Cmd,
    RPCError,
    RPCVersionError,
    recv_exact,
    recv_into_exact,
    send_frame,
)

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "MIN_RATE",
    "Connection",
    "connection",
    "disconnect_all",
    "parse_endpoint",
]

#: seconds to wait for an answer (a graph computed remotely counts; raise it for very slow servers)
DEFAULT_TIMEOUT: Final = 300.0
#: seconds to wait for the TCP connection and the HELLO answer
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
#: bytes per second a large message may move at, on top of the timeout (a 1 GiB tensor gets 1024 s more)
MIN_RATE: Final = float(1 << 20)

_U64: Final = struct.Struct("<Q")


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) → (host, port); ValueError naming the endpoint otherwise."""
    text = endpoint.strip()
    host, sep, port_s = text.rpartition(":")
    if not sep or not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise ValueError(f"RPC endpoint {endpoint!r}: expected HOST:PORT with a port in 1..65535, e.g. 127.0.0.1:50052")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_s)


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected a number of seconds") from None
    if value <= 0:
        raise ValueError(f"{name}={raw!r}: must be positive")
    return value


class Connection:
    """A connected, version-checked client socket to one endpoint.

    :param endpoint: ``host:port``
    :param timeout: seconds for any answer or send (default ``GGML_RPC_TIMEOUT`` or 300)
    :param connect_timeout: seconds for connecting and HELLO (default ``GGML_RPC_CONNECT_TIMEOUT`` or 10)
    """

    def __init__(self, endpoint: str, *, timeout: float | None = None, connect_timeout: float | None = None) -> None:
        self.endpoint = endpoint
        self.host, self.port = parse_endpoint(endpoint)
        self.timeout = timeout if timeout is not None else _env_seconds("GGML_RPC_TIMEOUT", DEFAULT_TIMEOUT)
        self.connect_timeout = (
            connect_timeout
            if connect_timeout is not None
            else _env_seconds("GGML_RPC_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT)
        )
        self.lock = threading.RLock()
        #: why the connection failed (set once; every later call raises with it)
        self.failed: str | None = None
        #: the server's protocol version
        self.version: tuple[int, int, int] = (0, 0, 0)
        #: True when the server is a ggml-core server (it understands the extension commands)
        self.ggml_core = False
        #: the last GRAPH_COMPUTE payload sent per remote device (GRAPH_RECOMPUTE when the next one is equal)
        self.last_graph: dict[int, bytes] = {}
        #: commands sent so far, by name (for benchmarks and tests)
        self.counts: Counter[str] = Counter()
        #: commands sent since the last answer (to name them if the server fails)
        self._unanswered: list[str] = []
        self._sock: socket.socket | None = None
        self._connect()

    def __repr__(self) -> str:
        state = "failed" if self.failed else "open"
        return f"Connection({self.endpoint!r}, {state}, v{'.'.join(map(str, self.version))})"

    # ----------------------------------------------------------------------------------------------- setup

    def _connect(self) -> None:
        deadline = time.monotonic() + self.connect_timeout  # connecting and the whole HELLO exchange
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except OSError as exc:
            raise RPCError(
                self.endpoint, f"cannot connect: {exc} (is ggml-rpc-server / ggml-core rpc-server running?)"
            ) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        try:
            send_frame(sock, Cmd.HELLO, [bytes(HELLO_CAPS_SIZE)], deadline)
            size = _U64.unpack(recv_exact(sock, 8, deadline))[0]
            if size != FIXED_RESPONSE_SIZE[Cmd.HELLO]:
                raise RPCVersionError(
                    self.endpoint, f"HELLO answer has {size} bytes, protocol 7 has 28: not an RPC 7.x server"
                )
            rsp = recv_exact(sock, size, deadline)
        except RPCError:
            self.close()
            raise
        except TimeoutError as exc:
            self.close()
            raise RPCError(
                self.endpoint,
                f"no complete HELLO answer within {self.connect_timeout:g} s (GGML_RPC_CONNECT_TIMEOUT): the "
                "server is unavailable (overloaded, stopped, or not an RPC server)",
            ) from exc
        except (OSError, EOFError) as exc:
            self.close()
            raise RPCVersionError(
                self.endpoint,
                f"the server closed the connection during HELLO ({exc}): it is busy (serving as many clients as it "
                f"allows) or speaks an RPC protocol older than {PROTO_VERSION[0]}.x (llama.cpp builds before "
                "protocol 7; update the server)",
            ) from exc
        self.version = (rsp[0], rsp[1], rsp[2])
        if self.version[0] != PROTO_VERSION[0] or self.version[1] > PROTO_VERSION[1]:
            self.close()
            mine = ".".join(map(str, PROTO_VERSION))
            raise RPCVersionError(
                self.endpoint,
                f"speaks RPC protocol {'.'.join(map(str, self.version))}, this client speaks {mine} "
                f"(it accepts {PROTO_VERSION[0]}.0 up to {PROTO_VERSION[0]}.{PROTO_VERSION[1]}); "
                "use matching versions of the server and ggml-rpc",
            )
        self.ggml_core = rsp[3] == GGML_CORE_MARK
        sock.settimeout(self.timeout)

    def close(self) -> None:
        """Close the socket (the server then frees this connection's buffers)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    @property
    def closed(self) -> bool:
        """True once closed or failed."""
        return self._sock is None

    # ----------------------------------------------------------------------------------------------- requests

    def _live(self, cmd: Cmd) -> socket.socket:
        if self.failed is not None:
            raise RPCError(self.endpoint, f"cannot send {cmd.name}: the connection failed earlier ({self.failed})")
        if self._sock is None:
            raise RPCError(self.endpoint, f"cannot send {cmd.name}: the connection is closed")
        return self._sock

    def _fail(self, cmd: Cmd, exc: BaseException, limit: float | None = None) -> RPCError:
        pending = [n for n in self._unanswered if n != cmd.name]
        after = f" (unanswered before it: {', '.join(dict.fromkeys(pending))})" if pending else ""
        if isinstance(exc, TimeoutError | socket.timeout):
            which = "GGML_RPC_TIMEOUT" if limit in (None, self.timeout) else "GGML_RPC_CONNECT_TIMEOUT"
            what = f"no complete answer within {limit or self.timeout:g} s ({which}): the server is unavailable"
        elif isinstance(exc, EOFError | ConnectionResetError | BrokenPipeError):
            what = (
                "the server closed the connection: it refused a message or stopped (see the server's log); "
                "its buffers are gone"
            )
        else:
            what = f"{type(exc).__name__}: {exc}"
        self.failed = f"{what}, during {cmd.name}{after}"
        self.close()
        return RPCError(self.endpoint, self.failed)

    def send(self, cmd: Cmd, parts: Sequence[bytes | bytearray | memoryview] = ()) -> None:
        """Send a command that has no answer."""
        with self.lock:
            sock = self._live(cmd)
            try:
                send_frame(sock, cmd, parts, time.monotonic() + self.timeout + _size(parts) / MIN_RATE)
            except (OSError, EOFError) as exc:
                raise self._fail(cmd, exc) from exc
            self._unanswered.append(cmd.name)
            self.counts[cmd.name] += 1

    def request(
        self,
        cmd: Cmd,
        parts: Sequence[bytes | bytearray | memoryview] = (),
        size: int | None = None,
        *,
        timeout: float | None = None,
    ) -> bytes:
        """Send a command and return its answer, which must have ``size`` bytes (default: the fixed size).

        ``timeout`` replaces :attr:`timeout` for this exchange (discovery uses the connect timeout).
        """
        want = FIXED_RESPONSE_SIZE[cmd] if size is None else size
        out = bytearray(want)
        self.request_into(cmd, parts, memoryview(out), timeout=timeout)
        return bytes(out)

    def request_into(
        self,
        cmd: Cmd,
        parts: Sequence[bytes | bytearray | memoryview],
        out: memoryview,
        *,
        timeout: float | None = None,
    ) -> None:
        """Send a command and read its answer (exactly ``out.nbytes`` bytes) straight into ``out``."""

        def read(sock: socket.socket, got: int, deadline: float) -> None:
            if got != out.nbytes:
                raise EOFError(f"answer of {got} bytes, expected {out.nbytes}: malformed answer")
            if got:
                recv_into_exact(sock, out, deadline)

        self._exchange(cmd, parts, read, timeout)

    def request_variable(
        self,
        cmd: Cmd,
        parts: Sequence[bytes | bytearray | memoryview],
        limit: int,
        *,
        timeout: float | None = None,
    ) -> bytes:
        """Send a command whose answer has a server-chosen size of at most ``limit`` bytes."""
        data = bytearray()

        def read(sock: socket.socket, got: int, deadline: float) -> None:
            if got > limit:
                raise EOFError(f"answer of {got} bytes, more than the {limit} allowed: malformed answer")
            data.extend(recv_exact(sock, got, deadline))

        self._exchange(cmd, parts, read, timeout)
        return bytes(data)

    def _exchange(
        self,
        cmd: Cmd,
        parts: Sequence[bytes | bytearray | memoryview],
        read: Callable[[socket.socket, int, float], None],
        timeout: float | None = None,
    ) -> None:
        """Send ``cmd``, read the answer's size, let ``read`` take the answer; any failure fails the connection.

        The send, and then the whole answer, must each complete within :attr:`timeout` seconds (or ``timeout``)
        plus their size at :data:`MIN_RATE`.
        """
        limit = self.timeout if timeout is None else timeout
        with self.lock:
            sock = self._live(cmd)
            self._unanswered.append(cmd.name)
            self.counts[cmd.name] += 1
            try:
                send_frame(sock, cmd, parts, time.monotonic() + limit + _size(parts) / MIN_RATE)
                deadline = time.monotonic() + limit
                got = _U64.unpack(recv_exact(sock, 8, deadline))[0]
                read(sock, got, deadline + min(got, 2**50) / MIN_RATE)  # (read checks the size first)
            except (OSError, EOFError) as exc:
                raise self._fail(cmd, exc, limit) from exc
            self._unanswered.clear()

    def sync(self, *, graphs_only: bool = False) -> None:
        """Wait until the server has run every command sent so far (a DEVICE_COUNT round trip if any is pending).

        With ``graphs_only`` the round trip is made only when a graph is still unanswered: tensor writes need no
        wait (the bytes left this process when ``send`` returned, and everything later on this connection is
        ordered after them).
        """
        with self.lock:
            pending = self._unanswered
            if pending and (not graphs_only or "GRAPH_COMPUTE" in pending or "GRAPH_RECOMPUTE" in pending):
                self.request(Cmd.DEVICE_COUNT)

    def forget_graphs(self) -> None:
        """The server dropped its stored graphs (a buffer was freed): the next compute sends the whole graph."""
        self.last_graph.clear()


def _size(parts: Sequence[bytes | bytearray | memoryview]) -> int:
    return sum(memoryview(p).nbytes for p in parts)


# ================================================================================================ shared connections

_connections: dict[str, Connection] = {}
_connections_lock = threading.Lock()


def connection(endpoint: str) -> Connection:
    """The process-wide connection to ``endpoint``: reused while healthy, else a new one (as ggml's dispatcher).

    llama.cpp's server serves one client at a time, so a second socket from this process would wait forever.
    """
    host, port = parse_endpoint(endpoint)
    key = f"{host}:{port}"
    with _connections_lock:
        conn = _connections.get(key)
        if conn is None or conn.failed is not None or conn.closed:
            conn = Connection(endpoint)
            _connections[key] = conn
        return conn


def disconnect_all() -> None:
    """Close every shared connection (their remote buffers are freed by the servers)."""
    with _connections_lock:
        conns = list(_connections.values())
        _connections.clear()
    for c in conns:
        with c.lock:
            c.close()
