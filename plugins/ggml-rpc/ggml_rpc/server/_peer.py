"""Server-to-server copies: a split's activations go from the server that computed them straight to the server
that needs them, instead of through the client.

A client asks the destination server for its connection's peer key and address (EXT_PEER_INFO, once per
connection). For each copy it sends the source server EXT_PEER_SEND (the source tensor, a ticket, that key and
address) and the destination server EXT_PEER_RECV (the destination tensor and the same ticket); it waits for
neither (the source's one-byte acknowledgement is read whenever convenient), so a copy costs the client no round
trip and none of its bytes. The source server, in its connection's command
order (after the graph that computed the tensor), opens — once — a connection of its own to the peer and sends the
bytes as EXT_PEER_PUT; the destination server holds them in the key's :class:`Mailbox` until EXT_PEER_RECV, in *its*
connection's command order (before the graph that reads them), writes them into the tensor. The key (128 random
bits) is the only way to reach a connection's mailbox; a mailbox holds at most ``max_peer_bytes`` at a time, and an
EXT_PEER_RECV whose data does not come within the message deadline closes the connection naming the ticket.
"""

from __future__ import annotations

import contextlib
import secrets
import struct
import threading
import time
from collections.abc import Callable
from typing import Final

from ggml_rpc._security import TLS_SCHEME
from ggml_rpc.client import Connection
from ggml_rpc.protocol import PEER_ADDRESS_MAX, PEER_KEY_SIZE, PEER_SEND_HEADER, Caps, Cmd, RPCError
from ggml_rpc.server._validate import Refused

__all__ = ["Mailbox", "PeerHub", "PeerPort", "parse_peer_send"]

_U64: Final = struct.Struct("<Q")


def parse_peer_send(size: int, read: Callable[[int], bytearray]) -> tuple[bytes, int, int, int, bytes, str]:
    """EXT_PEER_SEND of ``size`` bytes, whose payload ``read`` gives: (rpc_tensor bytes, offset, size, ticket, key,
    peer address)."""
    head = PEER_SEND_HEADER.size
    if not head < size <= head + PEER_ADDRESS_MAX:
        raise Refused(f"EXT_PEER_SEND of {size} bytes; it has {head} plus an address of 1 to {PEER_ADDRESS_MAX}")
    p = read(size)
    raw, offset, n, ticket, key = PEER_SEND_HEADER.unpack_from(p)
    try:
        address = p[head:].decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("EXT_PEER_SEND: the peer address is not UTF-8") from None
    return raw, offset, n, ticket, key, address


class Mailbox:
    """The bytes peers delivered for one connection, by ticket, until the connection takes them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.bytes = 0
        self._items: dict[int, bytearray] = {}
        self._cond = threading.Condition()

    def put(self, ticket: int, data: bytearray) -> str | None:
        """Hold ``data`` for ``ticket``; why not (None: held)."""
        with self._cond:
            if ticket in self._items:
                return f"ticket {ticket} was delivered twice"
            if self.bytes + len(data) > self.limit:
                return f"{self.bytes} bytes are already waiting; at most {self.limit} may (max_peer_bytes)"
            self._items[ticket] = data
            self.bytes += len(data)
            self._cond.notify_all()
        return None

    def take(self, ticket: int, deadline: float, gone: Callable[[], bool]) -> bytearray | None:
        """The data of ``ticket`` once it is here, or None when ``deadline`` (monotonic seconds) passes first or
        ``gone()`` (asked twice a second) says the connection waiting for it has ended."""
        with self._cond:
            while ticket not in self._items:
                left = deadline - time.monotonic()
                if left <= 0 or gone():
                    return None
                self._cond.wait(min(left, 0.5))
            data = self._items.pop(ticket)
            self.bytes -= len(data)
            return data


class PeerHub:
    """The server's side of peer copies: the mailbox of each connection, by key, and the address peers use.

    :param address: ``host:port`` (``tls://host:port`` for a TLS server) at which other servers reach this one;
        None turns peer copies off (they are not advertised)
    :param limit: bytes one connection's mailbox may hold at a time
    """

    def __init__(self, address: str | None, limit: int) -> None:
        self.address = address
        self.limit = limit
        self._boxes: dict[bytes, Mailbox] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """True when this server takes part in peer copies."""
        return self.address is not None

    def open(self) -> tuple[bytes, Mailbox]:
        """A new key and its empty mailbox (for one connection)."""
        key = secrets.token_bytes(PEER_KEY_SIZE)
        box = Mailbox(self.limit)
        with self._lock:
            self._boxes[key] = box
        return key, box

    def close(self, key: bytes) -> None:
        """Forget a connection's mailbox (and whatever still waits in it)."""
        with self._lock:
            self._boxes.pop(key, None)

    def mailbox(self, key: bytes) -> Mailbox | None:
        """The mailbox of ``key``, or None for a key no connection holds."""
        with self._lock:
            return self._boxes.get(key)


class PeerPort:
    """One connection's side of peer copies: its key and mailbox (made when the client first asks), and the
    connections it opened to peer servers (closed with it).

    :param hub: the server's :class:`PeerHub`
    :param token: the server's token, sent to peers (a cluster's servers share one)
    :param tls: True when the server serves TLS (it then sends to ``tls://`` peers only)
    :param timeout: seconds for each send to a peer; ``connect_timeout``: for connecting and HELLO
    """

    def __init__(self, hub: PeerHub, token: bytes | None, tls: bool, timeout: float, connect_timeout: float) -> None:
        self.hub = hub
        self.token, self.tls = token, tls
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self.key: bytes | None = None
        self.mailbox: Mailbox | None = None
        self._conns: dict[str, Connection] = {}

    def info(self) -> bytes:
        """EXT_PEER_INFO's answer: this connection's key, then the server's peer address."""
        if self.key is None:
            self.key, self.mailbox = self.hub.open()
        assert self.hub.address is not None
        return self.key + self.hub.address.encode("utf-8")

    def send(self, address: str, key: bytes, ticket: int, data: bytes | memoryview) -> None:
        """Deliver ``data`` for ``ticket`` to the connection of ``key`` on the server at ``address``."""
        conn = self._connection(address)
        try:
            conn.send(Cmd.EXT_PEER_PUT, [key, _U64.pack(ticket), data])
        except RPCError as exc:
            raise Refused(f"EXT_PEER_SEND: {exc}") from None

    def _connection(self, address: str) -> Connection:
        conn = self._conns.get(address)
        if conn is not None and conn.failed is None and not conn.closed:
            return conn
        if self.tls and not address.startswith(TLS_SCHEME):
            raise Refused(f"EXT_PEER_SEND to {address}: this server serves TLS and sends to TLS peers only")
        try:
            conn = Connection(address, timeout=self.timeout, connect_timeout=self.connect_timeout, token=self.token)
        except (RPCError, ValueError, OSError) as exc:
            raise Refused(f"EXT_PEER_SEND: cannot reach the peer server: {exc}") from None
        if not conn.caps & Caps.PEER_COPY:
            with conn.lock:
                conn.close()
            raise Refused(f"EXT_PEER_SEND: {address} is not a ggml-core server that takes peer copies")
        self._conns[address] = conn
        return conn

    def put(self, size: int, read: Callable[[int], bytearray]) -> None:
        """EXT_PEER_PUT of ``size`` bytes (from a peer server), whose payload ``read`` gives: the data goes to the
        mailbox its key names (not this connection's: this one is the peer's)."""
        head = PEER_KEY_SIZE + 8
        if size < head:
            raise Refused(f"EXT_PEER_PUT of {size} bytes, shorter than its {head}-byte header")
        raw = read(head)
        box = self.hub.mailbox(bytes(raw[:PEER_KEY_SIZE]))
        if box is None:
            raise Refused("EXT_PEER_PUT with a key no connection of this server holds")
        (ticket,) = _U64.unpack_from(raw, PEER_KEY_SIZE)
        n = size - head
        if box.bytes + n > box.limit:
            raise Refused(f"EXT_PEER_PUT of {n} bytes: the mailbox holds {box.bytes} of {box.limit} (max_peer_bytes)")
        why = box.put(ticket, read(n))
        if why is not None:
            raise Refused(f"EXT_PEER_PUT: {why}")

    def take(self, ticket: int, n: int, deadline: float, what: str, gone: Callable[[], bool]) -> bytearray:
        """The ``n`` bytes of ``ticket`` from this connection's mailbox, once they are here (by ``deadline``, while
        not ``gone()``)."""
        if self.mailbox is None:
            raise Refused("EXT_PEER_RECV before EXT_PEER_INFO: this connection has no mailbox")
        data = self.mailbox.take(ticket, deadline, gone)
        if data is None and gone():
            raise Refused(f"EXT_PEER_RECV: the client went away while ticket {ticket} was awaited")
        if data is None:
            raise Refused(
                f"EXT_PEER_RECV: the data of ticket {ticket} ({n} bytes for {what}) did not come from the source "
                f"server in time (can it reach {self.hub.address}?)"
            )
        if len(data) != n:
            raise Refused(f"EXT_PEER_RECV: ticket {ticket} brought {len(data)} bytes, {n} were expected")
        return data

    def close(self) -> None:
        """Forget the mailbox and close the connections to peers."""
        if self.key is not None:
            self.hub.close(self.key)
        for conn in self._conns.values():
            with contextlib.suppress(Exception), conn.lock:
                conn.close()
        self._conns.clear()
