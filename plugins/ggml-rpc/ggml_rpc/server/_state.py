"""What a connection sees of its server: the shared state every :class:`~ggml_rpc.server._session.Session` reads and
counts against. :class:`~ggml_rpc.server.RPCServer` provides it; a session depends only on this description."""

from __future__ import annotations

import contextlib
import ssl
from typing import Protocol

from ggml_core import Device
from ggml_rpc.server._cache import TensorCache
from ggml_rpc.server._limits import Budget, ServerLimits
from ggml_rpc.server._peer import PeerHub

__all__ = ["ServerState"]


class ServerState(Protocol):
    """The server's shared state as a connection uses it."""

    #: every bound
    limits: ServerLimits
    #: the served devices, as device 0, 1, ... of the protocol
    devices: list[Device]
    #: the token every client must send before HELLO (None: none)
    token: bytes | None
    #: the TLS server context (None: plain TCP)
    tls: ssl.SSLContext | None
    #: the tensor cache (None: none)
    cache: TensorCache | None
    #: device memory granted to clients, one pool per device
    memory: list[Budget]
    #: server memory spent decoding and storing graphs
    graph_memory: Budget
    #: threads for each backend (None: the backends' default)
    n_threads: int | None
    #: server-to-server copies: the connections' mailboxes and this server's address for peers
    peers: PeerHub

    @property
    def hello_caps(self) -> bytes:
        """The capability bytes of this server's HELLO answer."""
        ...

    def count(self, what: str) -> None:
        """Count one served command (or event)."""
        ...

    def device_lock(self, index: int) -> contextlib.AbstractContextManager[None]:
        """Serialise work on one device across connections."""
        ...
