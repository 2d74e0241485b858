"""The listening server: binds (loopback by default), accepts clients, one thread and one :class:`Session` each.

ggml's RPC protocol has no authentication: anyone who can connect can allocate memory and run graphs. The server
therefore binds to 127.0.0.1 unless told otherwise and warns loudly when it is not loopback unless it was given
both a token and TLS (:mod:`ggml_rpc._security`: both optional, off by default, as llama.cpp). At most
``max_clients`` connections are served at once; a connection beyond that is closed at once (never queued, so a
client is told "busy" instead of waiting). Memory granted to clients is counted against one budget per device.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Final

from ggml_core import Device, DeviceType
from ggml_rpc._security import TLS_SCHEME
from ggml_rpc.protocol import CAPS_MAGIC, HELLO_CAPS, Caps
from ggml_rpc.server._cache import TensorCache
from ggml_rpc.server._limits import Budget, ServerLimits, default_budget
from ggml_rpc.server._peer import PeerHub
from ggml_rpc.server._session import Session

__all__ = ["DEFAULT_PORT", "RPCServer", "default_devices", "is_loopback"]

log = logging.getLogger("ggml_rpc.server")

#: llama.cpp's rpc-server port
DEFAULT_PORT: Final = 50052


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_devices(devices: Sequence[Device]) -> list[Device]:
    """llama.cpp's choice: every accelerator (not CPU, not ACCEL), else the CPU; remote devices never."""
    local = [d for d in devices if not type(d).__module__.startswith("ggml_rpc")]
    acc = [d for d in local if d.type not in (DeviceType.CPU, DeviceType.ACCEL)]
    return acc or [d for d in local if d.type == DeviceType.CPU][:1]


class RPCServer:
    """Serves ``devices`` over ggml's RPC protocol 7.0.0.

    :param devices: the devices to expose, as device 0, 1, ... of the protocol
    :param host: the address to bind (default loopback)
    :param port: the port (0: any free port; see :attr:`address`)
    :param cache_dir: where SET_TENSOR_HASH finds tensors by hash (None: no cache)
    :param limits: every bound (:class:`ServerLimits`)
    :param n_threads: threads for each backend (None: the backends' default)
    :param token: a shared secret every client must send before HELLO (None: none, as llama.cpp)
    :param tls: serve TLS only, with this server context (None: plain TCP, as llama.cpp)
    :param peer_copy: take part in server-to-server copies with other ggml-core servers (advertised in HELLO)
    :param peer_address: ``host:port`` at which other servers reach this one (default: the bound address; a
        server bound to a wildcard address needs it for peer copies)

    Shared state: :attr:`memory` (one :class:`Budget` per device: buffers granted and kernel scratch),
    :attr:`graph_memory` (decoded and stored graphs), :attr:`cache` (the tensor cache, or None), :attr:`peers`
    (server-to-server copies), :attr:`stats`.
    """

    def __init__(
        self,
        devices: Sequence[Device],
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        limits: ServerLimits | None = None,
        n_threads: int | None = None,
        token: bytes | None = None,
        tls: ssl.SSLContext | None = None,
        peer_copy: bool = True,
        peer_address: str | None = None,
    ) -> None:
        if not devices:
            raise ValueError("RPCServer needs at least one device")
        if token is not None and not token:
            raise ValueError("RPCServer's token must not be empty")
        self.token = token
        self.tls = tls
        self.devices = list(devices)
        self.host, self.port = host, port
        self.limits = limits or ServerLimits()
        self.n_threads = n_threads
        lim = self.limits
        self.cache = TensorCache(cache_dir, lim.cache_max_bytes, lim.cache_min_bytes) if cache_dir is not None else None
        self.cache_dir = self.cache.dir if self.cache is not None else None
        #: device memory granted to clients, one pool per device
        self.memory = [Budget(f"{d.name} memory", default_budget(d.memory()[1], lim)) for d in self.devices]
        #: server memory spent decoding and storing graphs, over all connections
        self.graph_memory = Budget("graph memory", lim.graph_memory)
        self._peer_copy, self._peer_address = peer_copy, peer_address
        #: server-to-server copies (its address is set when the server binds)
        self.peers = PeerHub(None, lim.max_peer_bytes)
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._device_locks = [threading.RLock() for _ in self.devices]
        self._sessions: set[Session] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._accept_thread: threading.Thread | None = None
        self._busy_logged = -1.0
        #: connections served so far
        self.n_connections = 0
        #: commands received, by name, over all connections; also "cache hits", "refused", "internal errors"
        self.stats: Counter[str] = Counter()

    # ----------------------------------------------------------------------------------------------- lifecycle

    def bind(self) -> tuple[str, int]:
        """Create the listening socket; returns the bound (host, port)."""
        if not is_loopback(self.host) and (self.token is None or self.tls is None):
            missing = " and ".join(n for n, v in (("no token", self.token), ("no TLS", self.tls)) if v is None)
            log.warning(
                "!!! binding to %s, which is not loopback, with %s: anyone who can reach this port can %s. Only "
                "do this on a trusted, private network, or give --token and --tls-cert/--tls-key. !!!",
                self.host,
                missing,
                "allocate memory and run graphs on this machine" if self.token is None else "read the token",
            )
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(8)
        sock.settimeout(0.2)
        self._listener = sock
        self.host, self.port = sock.getsockname()[:2]
        self.peers.address = self._advertised()
        return self.host, self.port

    def _advertised(self) -> str | None:
        """The address other servers use for peer copies (None: peer copies off)."""
        if not self._peer_copy:
            return None
        address = self._peer_address
        if address is None:
            if self.host in ("0.0.0.0", "::"):
                log.info("peer copies off: bound to %s; give --peer-address HOST:PORT to take part", self.host)
                return None
            address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        return f"{TLS_SCHEME}{address}" if self.tls is not None and not address.startswith(TLS_SCHEME) else address

    @property
    def address(self) -> str:
        """``host:port`` the server listens on."""
        return f"{self.host}:{self.port}"

    def serve_forever(self) -> None:
        """Accept and serve clients until :meth:`shutdown`."""
        if self._listener is None:
            self.bind()
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, peer = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    break
                raise
            with self._lock:
                busy = len(self._sessions) >= self.limits.max_clients
            if busy:  # closed at once: the client learns "busy" now instead of waiting behind the others
                self.count("connections refused (busy)")
                now = time.monotonic()
                if now - self._busy_logged >= 1.0:  # a storm of connections must not become a storm of log lines
                    self._busy_logged = now
                    log.warning(
                        "refusing %s:%s: already serving %d clients (--max-clients; %d refused so far)",
                        *peer[:2],
                        self.limits.max_clients,
                        self.stats["connections refused (busy)"],
                    )
                with contextlib.suppress(OSError):
                    conn.close()
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            session = Session(self, conn, f"{peer[0]}:{peer[1]}")
            thread = threading.Thread(target=self._serve, args=(session,), name=f"rpc-{peer[1]}", daemon=True)
            with self._lock:
                self._sessions.add(session)
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.append(thread)
                self.n_connections += 1
            thread.start()

    def _serve(self, session: Session) -> None:
        log.info("client %s connected", session.peer)
        try:
            session.run()
        finally:
            with self._lock:
                self._sessions.discard(session)
            log.info("client %s gone after %d commands", session.peer, session.commands)

    def start(self) -> RPCServer:
        """Bind and serve in a background thread; returns self (use :attr:`address`)."""
        if self._listener is None:
            self.bind()
        self._accept_thread = threading.Thread(target=self.serve_forever, name="rpc-accept", daemon=True)
        self._accept_thread.start()
        return self

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting, close every connection, wait for the threads."""
        self._stop.set()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._lock:
            sessions = list(self._sessions)
            threads = list(self._threads)
        for s in sessions:
            with contextlib.suppress(OSError):
                s.sock.shutdown(socket.SHUT_RDWR)
        for t in threads:
            t.join(timeout)

    def __enter__(self) -> RPCServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def active_sessions(self) -> int:
        """Connections being served now."""
        with self._lock:
            return len(self._sessions)

    # ----------------------------------------------------------------------------------------------- shared state

    @property
    def hello_caps(self) -> bytes:
        """The capability bytes of the HELLO answer: peer copies when on, the cache and its minimum when there is
        one."""
        caps = Caps.PEER_COPY if self.peers.enabled else Caps.NONE
        if self.cache is not None:
            caps |= Caps.TENSOR_CACHE
        return HELLO_CAPS.pack(CAPS_MAGIC, caps, self.cache.min_bytes if self.cache is not None else 0)

    def count(self, what: str) -> None:
        """Count one served command (or event) in :attr:`stats`."""
        with self._lock:
            self.stats[what] += 1

    @contextlib.contextmanager
    def device_lock(self, index: int) -> Iterator[None]:
        """Serialise work on one device across connections."""
        with self._device_locks[index]:
            yield
