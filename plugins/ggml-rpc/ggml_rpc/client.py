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
``GGML_RPC_TOKEN_FILE`` (a token sent before HELLO) and ``GGML_RPC_TLS_CA`` (trusted for ``tls://host:port``
endpoints): see :mod:`ggml_rpc._security`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final

from ggml_rpc._security import TLS_SCHEME, TOKEN_FILE_ENV, client_context, client_token
from ggml_rpc.protocol import (
    CAPS_MAGIC,
    FIXED_RESPONSE_SIZE,
    GGML_CORE_MARK,
    GGML_CORE_TLS_REQUIRED,
    GGML_CORE_TOKEN_REQUIRED,
    HELLO_CAPS,
    HELLO_CAPS_SIZE,
    PEER_ADDRESS_MAX,
    PEER_KEY_SIZE,
    PROTO_VERSION,
    Auth,
    Caps,
    Cmd,
    RPCAuthError,
    RPCError,
    RPCVersionError,
    frame_bytes,
    recv_exact,
    recv_into_exact,
    send_frame,
)

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "MAX_DUE_BYTES",
    "MIN_RATE",
    "Connection",
    "connection",
    "disconnect_all",
    "endpoint_key",
    "parse_endpoint",
]

#: seconds to wait for an answer (a graph computed remotely counts; raise it for very slow servers)
DEFAULT_TIMEOUT: Final = 300.0
#: seconds to wait for the TCP connection and the HELLO answer
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
#: bytes per second a large message may move at, on top of the timeout (a 1 GiB tensor gets 1024 s more)
MIN_RATE: Final = float(1 << 20)
#: answers left unread at most by :meth:`Connection.request_later` (well within any socket buffer pair)
MAX_DUE_BYTES: Final = 64 << 10
#: SET_TENSOR frames up to this size wait for the connection's next command and go in its write (a split's inputs
#: and its graph launch in one system call); at most :data:`MAX_HELD_BYTES` of them at a time
MAX_HELD_FRAME: Final = 16 << 10
MAX_HELD_BYTES: Final = 64 << 10

_U64: Final = struct.Struct("<Q")
#: bytes of a request's frame header (command, payload size)
_FRAME_HEAD: Final = 9


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``, either after ``tls://``) → (host, port); ValueError naming the endpoint
    otherwise."""
    text = endpoint.strip()
    if text[: len(TLS_SCHEME)].lower() == TLS_SCHEME:
        text = text[len(TLS_SCHEME) :]
    host, sep, port_s = text.rpartition(":")
    if not sep or not host or "/" in host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise ValueError(
            f"RPC endpoint {endpoint!r}: expected HOST:PORT or tls://HOST:PORT with a port in 1..65535, "
            "e.g. 127.0.0.1:50052"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_s)


def endpoint_key(endpoint: str) -> str:
    """The endpoint as registries and connections are keyed: ``host:port`` or ``tls://host:port``."""
    host, port = parse_endpoint(endpoint)
    scheme = TLS_SCHEME if endpoint.strip()[: len(TLS_SCHEME)].lower() == TLS_SCHEME else ""
    return f"{scheme}{host}:{port}"


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

    :param endpoint: ``host:port``, or ``tls://host:port`` for a server that serves TLS
    :param timeout: seconds for any answer or send (default ``GGML_RPC_TIMEOUT`` or 300)
    :param connect_timeout: seconds for connecting and HELLO (default ``GGML_RPC_CONNECT_TIMEOUT`` or 10)
    :param token: the server's token, sent before HELLO (default: read from ``GGML_RPC_TOKEN_FILE``, else none)
    :param tls: the TLS context for a ``tls://`` endpoint (default: verified against the system's CAs and
        ``GGML_RPC_TLS_CA``)
    """

    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        token: bytes | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.host, self.port = parse_endpoint(endpoint)
        self.tls = endpoint_key(endpoint).startswith(TLS_SCHEME)
        self._tls_context = tls if tls is not None or not self.tls else client_context()
        self._token = token if token is not None else client_token()
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
        #: what a ggml-core server offers (its HELLO answer's capabilities), and the smallest tensor its cache keeps
        self.caps = Caps.NONE
        self.cache_min = 0
        #: True when the server advertised its capabilities (a ggml-core server; llama.cpp's send none)
        self.advertised = False
        #: this connection's peer key and the server's peer address (EXT_PEER_INFO, asked once), and the last
        #: ticket given to a peer copy into this connection
        self._peer: tuple[bytes, bytes] | None = None
        self._ticket = 0
        #: the last GRAPH_COMPUTE payload sent per remote device (GRAPH_RECOMPUTE when the next one is equal)
        self.last_graph: dict[int, bytes] = {}
        #: commands sent so far, by name (for benchmarks and tests)
        self.counts: Counter[str] = Counter()
        #: commands that waited for an answer (each costs one network round trip), and bytes each way, so far
        self.round_trips = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        #: weight bytes the server took from its tensor cache instead of receiving them (SET_TENSOR_HASH hits)
        self.weights_cached = 0
        #: commands sent since the last answer (to name them if the server fails)
        self._unanswered: list[str] = []
        #: requests sent by :meth:`request_later` whose answers are still unread, in order: (command, where the
        #: answer goes, its place in ``_unanswered``); what to run once they are read; their answers' bytes
        self._reads_due: list[tuple[Cmd, memoryview, int]] = []
        self._after_reads: list[Callable[[], None]] = []
        self._due_bytes = 0
        #: connections whose unread answers feed writes to this one (read before this one sends anything that may
        #: observe or overwrite them), and the remote address ranges those writes will cover
        self._feeds: list[Connection] = []
        self._pending_spans: list[tuple[int, int]] = []
        #: connections whose servers were asked to send data to this one's (peer copies) since its last answer: a
        #: missing answer here is blamed on one of them when it has not answered those commands either
        self._peer_sources: list[Connection] = []
        #: small SET_TENSOR frames not sent yet: they go in the write of this connection's next command
        self._held = bytearray()
        self._sock: socket.socket | None = None
        self._connect()

    def __repr__(self) -> str:
        state = "failed" if self.failed else "open"
        return f"Connection({self.endpoint!r}, {state}, v{'.'.join(map(str, self.version))})"

    # ----------------------------------------------------------------------------------------------- setup

    def _connect(self) -> None:
        deadline = time.monotonic() + self.connect_timeout  # connecting, TLS, the token and the whole HELLO
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except OSError as exc:
            raise RPCError(
                self.endpoint,
                f"cannot connect: {exc.strerror or exc} (is ggml-rpc-server / ggml-core rpc-server running there?)",
            ) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        try:
            if self._tls_context is not None:
                sock = self._sock = self._tls_handshake(sock)
            if self._token is not None:
                self._authenticate(sock, self._token, deadline)
            send_frame(sock, Cmd.HELLO, [bytes(HELLO_CAPS_SIZE)], deadline)
            head = bytearray(8)
            try:
                recv_into_exact(sock, memoryview(head), deadline)
            except EOFError:
                if head[:2] in (b"\x15\x03", b"\x16\x03"):  # a TLS record: the server talks TLS to a plain client
                    raise self._tls_required() from None
                raise
            size = _U64.unpack(head)[0]
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
        if rsp[3] == GGML_CORE_TLS_REQUIRED:
            self.close()
            raise self._tls_required()
        if rsp[3] == GGML_CORE_TOKEN_REQUIRED:
            self.close()
            raise RPCAuthError(
                self.endpoint,
                f"the server requires a token (it was started with --token): set {TOKEN_FILE_ENV}=FILE to a file "
                "holding it",
            )
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
        magic, caps, cache_min = HELLO_CAPS.unpack_from(rsp, 4)
        if self.ggml_core and magic == CAPS_MAGIC:
            self.caps, self.cache_min = Caps(caps & (Caps.PEER_COPY | Caps.TENSOR_CACHE)), cache_min
            self.advertised = True
        sock.settimeout(self.timeout)

    def _tls_handshake(self, sock: socket.socket) -> socket.socket:
        """The TLS session over ``sock`` (within the connect timeout, which the socket carries)."""
        assert self._tls_context is not None
        try:
            return self._tls_context.wrap_socket(sock, server_hostname=self.host)
        except ssl.SSLCertVerificationError as exc:
            self.close()
            raise RPCAuthError(
                self.endpoint,
                f"TLS: the server's certificate is not trusted ({exc.verify_message}): give its CA (or the server's "
                "self-signed certificate) with GGML_RPC_TLS_CA=FILE",
            ) from None
        except TimeoutError:
            raise
        except (ssl.SSLError, OSError) as exc:
            self.close()
            why = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else exc.strerror or type(exc).__name__
            raise RPCAuthError(
                self.endpoint,
                f"the TLS handshake failed ({why}): the server does not serve TLS (start it with --tls-cert and "
                f"--tls-key, or connect to {self.host}:{self.port} without {TLS_SCHEME}) or is busy (serving as "
                "many clients as it allows)",
            ) from None

    def _tls_required(self) -> RPCAuthError:
        return RPCAuthError(
            self.endpoint,
            f"the server serves TLS only: connect to {TLS_SCHEME}{self.host}:{self.port} (and trust its certificate "
            "with GGML_RPC_TLS_CA=FILE if it is self-signed)",
        )

    def _authenticate(self, sock: socket.socket, token: bytes, deadline: float) -> None:
        """EXT_AUTH before HELLO: the server accepts the token, refuses it, or takes none."""
        try:
            send_frame(sock, Cmd.EXT_AUTH, [token], deadline)
            size = _U64.unpack(recv_exact(sock, 8, deadline))[0]
            if size != FIXED_RESPONSE_SIZE[Cmd.EXT_AUTH]:
                raise EOFError(f"a token answer of {size} bytes")
            status = recv_exact(sock, 1, deadline)[0]
        except (OSError, EOFError) as exc:
            if isinstance(exc, TimeoutError):
                raise
            raise RPCAuthError(
                self.endpoint,
                "the server closed the connection when given the token: it takes no token (llama.cpp's server "
                f"does not; unset {TOKEN_FILE_ENV} to use it unauthenticated)",
            ) from None
        if status == Auth.TLS_REQUIRED:
            raise self._tls_required()
        if status == Auth.REFUSED:
            raise RPCAuthError(self.endpoint, f"the server refused the token ({TOKEN_FILE_ENV}): it is not its token")
        if status == Auth.NOT_REQUIRED:
            raise RPCAuthError(
                self.endpoint,
                f"the server takes no token (it was started without --token), so the token ({TOKEN_FILE_ENV}) "
                "would secure nothing: start it with --token FILE, or unset the variable",
            )
        if status != Auth.ACCEPTED:
            raise RPCAuthError(self.endpoint, f"answered the token with {status}: a malformed answer")

    def protocol_error(self, cmd: Cmd, message: str) -> RPCError:
        """The error for a well-framed answer to ``cmd`` that makes no sense; the connection fails (nothing more is
        sent to a server that answers nonsense)."""
        with self.lock:
            self.failed = f"{message}, during {cmd.name}"
            self.close()
        return RPCError(self.endpoint, message)

    def close(self) -> None:
        """Close the socket (the server then frees this connection's buffers)."""
        self._reads_due, self._after_reads, self._feeds, self._pending_spans, self._due_bytes = [], [], [], [], 0
        self._held = bytearray()
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

    def send(
        self, cmd: Cmd, parts: Sequence[bytes | bytearray | memoryview] = (), span: tuple[int, int] | None = None
    ) -> None:
        """Send a command that has no answer. The pending copies into this connection (:meth:`request_later`) are
        written first, unless ``span`` — the remote address range the command writes, and all it touches — lies
        apart from all of them."""
        if span is None or any(a < span[1] and span[0] < b for a, b in self._pending_spans):
            self._settle(own=False)
        with self.lock:
            sock = self._live(cmd)
            size = _size(parts)
            if cmd == Cmd.SET_TENSOR and size <= MAX_HELD_FRAME and len(self._held) + size <= MAX_HELD_BYTES:
                self._held += frame_bytes(cmd, parts)
            else:
                try:
                    send_frame(sock, cmd, parts, self._send_deadline(size), self._take_held())
                except (OSError, EOFError) as exc:
                    raise self._fail(cmd, exc) from exc
            self._unanswered.append(cmd.name)
            self.counts[cmd.name] += 1
            self.bytes_sent += _FRAME_HEAD + size

    def _take_held(self) -> bytearray:
        """The held frames (:meth:`send`), to go before the command now sent; none are held afterwards."""
        held, self._held = self._held, bytearray()
        return held

    def _send_deadline(self, size: int) -> float:
        """When a command of ``size`` bytes, after the held frames, must have been sent."""
        return time.monotonic() + self.timeout + (size + len(self._held)) / MIN_RATE

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
        self._settle(own=True)
        with self.lock:
            sock = self._live(cmd)
            self._unanswered.append(cmd.name)
            self.counts[cmd.name] += 1
            try:
                size = _size(parts)
                send_frame(
                    sock, cmd, parts, time.monotonic() + limit + (size + len(self._held)) / MIN_RATE, self._take_held()
                )
                self.round_trips += 1
                self.bytes_sent += _FRAME_HEAD + size
                deadline = time.monotonic() + limit
                got = _U64.unpack(recv_exact(sock, 8, deadline))[0]
                read(sock, got, deadline + min(got, 2**50) / MIN_RATE)  # (read checks the size first)
                self.bytes_received += 8 + got
            except (OSError, EOFError) as exc:
                blame = self._silent_source() if isinstance(exc, TimeoutError) else None
                if blame is not None:
                    self._fail(cmd, EOFError(f"waited for data from {blame.endpoint}, which failed"))
                    raise blame from exc
                raise self._fail(cmd, exc, limit) from exc
            self._unanswered.clear()
            self._peer_sources.clear()

    def request_later(
        self,
        cmd: Cmd,
        parts: Sequence[bytes | bytearray | memoryview],
        out: memoryview,
        then: Callable[[], None],
        into: Connection | None,
        span: tuple[int, int] = (0, 0),
    ) -> None:
        """Send a request whose answer (exactly ``out.nbytes`` bytes) is read only when needed — before this
        connection sends anything else, or before ``into`` does — and then run ``then`` (which writes it to
        ``into``, at the remote addresses ``span``). Requests sent this way one after another are answered in one
        round trip together. Without ``into`` (an acknowledgement nothing waits for) the answer is read before
        this connection's next answered request.

        At most :data:`MAX_DUE_BYTES` of answers are left unread at a time (the earlier ones are read first), so
        that a server never blocks writing answers that this client is not reading.
        """
        self._settle(own=self._due_bytes + 8 + out.nbytes > MAX_DUE_BYTES)
        with self.lock:
            sock = self._live(cmd)
            self._unanswered.append(cmd.name)
            self.counts[cmd.name] += 1
            size = _size(parts)
            try:
                send_frame(sock, cmd, parts, self._send_deadline(size), self._take_held())
            except (OSError, EOFError) as exc:
                raise self._fail(cmd, exc) from exc
            self.bytes_sent += _FRAME_HEAD + size
            self._reads_due.append((cmd, out, len(self._unanswered)))
            self._after_reads.append(then)
            self._due_bytes += 8 + out.nbytes  # (its size on the wire: what the socket buffers hold)
        if into is None:
            return
        with into.lock:
            into._pending_spans.append(span)
            if self not in into._feeds:
                into._feeds.append(self)

    def peer_source(self, source: Connection) -> None:
        """Note that ``source``'s server was asked to send data to this server (a peer copy)."""
        with self.lock:
            if source not in self._peer_sources:
                self._peer_sources.append(source)

    def _silent_source(self) -> RPCError | None:
        """Of the servers asked to send data here since the last answer, one that has not answered those commands
        within a moment (they were due long ago) — the one to blame when this server does not answer: its error."""
        for source in self._peer_sources:
            try:
                source.read_due(limit=0.2)
            except RPCError as exc:
                return exc
        return None

    def read_due(self, limit: float | None = None) -> None:
        """Read the answers of the requests sent by :meth:`request_later` (one wait for all of them: one round
        trip), then run what follows each. ``limit``: seconds to wait for them (default :attr:`timeout`)."""
        with self.lock:
            if not self._reads_due:
                return
            due, self._reads_due = self._reads_due, []
            after, self._after_reads = self._after_reads, []
            self._due_bytes = 0
            cmd = due[0][0]
            try:
                sock = self._live(cmd)
                self.round_trips += 1
                deadline = time.monotonic() + (self.timeout if limit is None else limit)
                for item in due:
                    cmd, out = item[0], item[1]
                    got = _U64.unpack(recv_exact(sock, 8, deadline))[0]
                    if got != out.nbytes:
                        raise EOFError(f"answer of {got} bytes, expected {out.nbytes}: malformed answer")
                    deadline += got / MIN_RATE
                    if got:
                        recv_into_exact(sock, out, deadline)
                    self.bytes_received += 8 + got
            except (OSError, EOFError) as exc:
                raise self._fail(cmd, exc) from exc
            del self._unanswered[: due[-1][2]]  # everything sent up to the last of them has run
        for f in after:
            f()

    def _settle(self, *, own: bool) -> None:
        """Read the unread answers that come before this connection's next command: its own (``own``), and those
        of other connections whose copies write to this one."""
        if own and self._reads_due:
            self.read_due()
        if self._feeds:
            with self.lock:
                feeds, self._feeds, self._pending_spans = self._feeds, [], []
            for c in feeds:
                c.read_due()

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

    def peer_ticket(self) -> tuple[bytes, bytes, int]:
        """For a copy from another server into this one: this connection's peer key, the address at which the
        other server reaches this one (both asked once, one round trip), and a new ticket."""
        with self.lock:
            if self._peer is None:
                raw = self.request_variable(Cmd.EXT_PEER_INFO, [], PEER_KEY_SIZE + PEER_ADDRESS_MAX)
                if len(raw) <= PEER_KEY_SIZE:
                    raise self.protocol_error(Cmd.EXT_PEER_INFO, f"answered EXT_PEER_INFO with {len(raw)} bytes")
                self._peer = (raw[:PEER_KEY_SIZE], raw[PEER_KEY_SIZE:])
            self._ticket += 1
            return self._peer[0], self._peer[1], self._ticket

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
    key = endpoint_key(endpoint)
    with _connections_lock:
        conn = _connections.get(key)
        if conn is None or conn.failed is not None or conn.closed:
            conn = Connection(key)
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
