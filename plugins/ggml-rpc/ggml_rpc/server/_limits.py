"""What clients may ask of the server, and the shared pools every grant is counted against.

:class:`ServerLimits` holds every bound (docs/rpc.md lists them with their defaults and what a client sees when it
is hit). :class:`Budget` is a pool of bytes shared by all connections: device memory granted by ALLOC_BUFFER (one
pool per device) and the memory spent decoding graphs (one pool for the server). A grant is counted when it is
made and returned when the buffer is freed or the connection ends, so lazily committed memory (CPU buffers are
zero pages until touched) cannot be promised twice.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Final

from ggml_rpc.protocol import HASH_THRESHOLD, RPC_TENSOR_SIZE

__all__ = ["GRAPH_TENSOR_COST", "Budget", "ServerLimits", "default_budget"]

#: bytes of server memory one decoded graph tensor may cost (its wire record, the decoded fields, the rebuilt
#: ggml-core tensor and its bookkeeping; measured 1.9 KiB on CPython 3.11, checked by the tests)
GRAPH_TENSOR_COST: Final = 3 << 10
_GIB: Final = 1 << 30


@dataclass(frozen=True)
class ServerLimits:
    """Every bound the server enforces; sizes are checked against these before memory is allocated."""

    #: nodes per graph
    max_nodes: int = 1 << 16
    #: tensors per graph message
    max_tensors: int = 1 << 16
    #: buffers alive per connection
    max_buffers: int = 1 << 14
    #: bytes one connection may hold in buffers (None: only the server's budget)
    max_bytes: int | None = None
    #: bytes all connections together may hold on one device (None: its total memory less ``memory_reserve``)
    max_memory: int | None = None
    #: what the default budget keeps back from a device's total memory (None: an eighth, at least 1 GiB, at most
    #: half)
    memory_reserve: int | None = None
    #: bytes all connections together may spend decoding and storing graphs
    graph_memory: int = 512 << 20
    #: seconds a client may stay silent between commands (None: forever, as llama.cpp's server)
    idle_timeout: float | None = None
    #: seconds a message may take on top of its size at ``min_rate`` (the whole message, not each recv)
    frame_timeout: float = 60.0
    #: bytes per second every message (request or answer) must at least move at
    min_rate: float = float(1 << 20)
    #: seconds for the whole HELLO after connecting
    hello_timeout: float = 10.0
    #: connections served at once; more are closed at once (never queued)
    max_clients: int = 4
    #: bytes of staging per connection for devices whose memory is not host memory
    staging_chunk: int = 4 << 20
    #: the most taps one output element of a pooling window may cover (k0 * k1)
    max_window: int = 1 << 16
    #: multiply-adds one node whose work depends on its op parameters may cost (pooling, convolutions)
    max_node_work: int = 1 << 36
    #: bytes of temporary memory one node's shape may make a kernel need beyond its operands (UPSCALE,
    #: FLASH_ATTN_EXT), at most (None: whatever the device's budget has left while the graph computes)
    max_node_scratch: int | None = None
    #: bytes the tensor cache directory may hold (least recently used files are removed first)
    cache_max_bytes: int = 8 * _GIB
    #: tensors are cached only when larger than this (llama.cpp's HASH_THRESHOLD, 10 MiB)
    cache_min_bytes: int = HASH_THRESHOLD
    #: bytes that peer servers may have delivered to one connection and it has not taken yet (server-to-server
    #: copies of activations)
    max_peer_bytes: int = 256 << 20
    #: seconds EXT_PEER_RECV waits for its data from the source server, on top of its size at ``min_rate`` (the
    #: source sends it after computing the graph before it, so this bounds that graph's time too)
    peer_timeout: float = 300.0

    @property
    def max_graph_bytes(self) -> int:
        """The largest GRAPH_COMPUTE payload the node and tensor limits allow."""
        return 12 + 8 * self.max_nodes + RPC_TENSOR_SIZE * self.max_tensors

    def deadline(self, size: int, start: float | None = None) -> float:
        """When a message of ``size`` bytes begun at ``start`` (default now) must be complete."""
        begun = time.monotonic() if start is None else start
        return begun + self.frame_timeout + size / self.min_rate

    @staticmethod
    def graph_cost(size: int) -> int:
        """Server memory a GRAPH_COMPUTE payload of ``size`` bytes may need at most (its bytes and its tensors)."""
        return size + size // RPC_TENSOR_SIZE * GRAPH_TENSOR_COST


def default_budget(total: int, limits: ServerLimits) -> int:
    """The bytes a device with ``total`` bytes of memory grants over all connections."""
    reserve = limits.memory_reserve
    if reserve is None:  # an eighth, and at least 1 GiB (half of a device smaller than 2 GiB)
        reserve = max(min(_GIB, total // 2), total // 8)
    budget = max(0, total - reserve)
    return budget if limits.max_memory is None else min(budget, limits.max_memory)


class Budget:
    """A pool of ``total`` bytes shared by every connection; thread-safe.

    :param name: what the pool is, for messages (e.g. ``"CPU memory"``)
    :param total: its size in bytes
    """

    def __init__(self, name: str, total: int) -> None:
        self.name = name
        self.total = total
        self.used = 0
        self._cond = threading.Condition()

    def __repr__(self) -> str:
        return f"Budget({self.name!r}, {self.used}/{self.total})"

    @property
    def free(self) -> int:
        """Bytes not granted."""
        with self._cond:
            return self.total - self.used

    def take(self, n: int, wait_until: float | None = None) -> bool:
        """Grant ``n`` bytes: at once, or (with ``wait_until``, monotonic seconds) as soon as others return them."""
        with self._cond:
            while self.used + n > self.total:
                left = None if wait_until is None else wait_until - time.monotonic()
                if n > self.total or left is None or left <= 0:
                    return False
                self._cond.wait(min(left, 1.0))
            self.used += n
            return True

    def give(self, n: int) -> None:
        """Return ``n`` granted bytes."""
        with self._cond:
            self.used = max(0, self.used - n)
            self._cond.notify_all()
