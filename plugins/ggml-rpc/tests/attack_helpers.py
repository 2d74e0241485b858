"""Helpers of the attack and soak tests: attackers as threads, bystander timing, the process's resident memory.

Everything is loopback (127.0.0.1) and every loop is bounded in count and in time.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rpc_helpers import RawClient, raw_tensor

from ggml_core import GGMLOp
from ggml_rpc.protocol import Cmd

__all__ = ["Attacker", "Vector", "latencies", "rss_bytes", "trickle"]


def rss_bytes(pid: int | str = "self") -> int:
    """Resident memory of a process (Linux ``/proc``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc")


def trickle(sock: socket.socket, data: bytes, every: float, stop: threading.Event, limit_s: float) -> None:
    """Send ``data`` a byte at a time, one every ``every`` seconds, until sent, stopped, refused or ``limit_s``."""
    end = time.monotonic() + limit_s
    for b in data:
        if stop.is_set() or time.monotonic() > end:
            return
        try:
            sock.sendall(bytes([b]))
        except OSError:
            return  # the server closed it: what the test wants
        stop.wait(every)


class Attacker:
    """Runs ``body(stop)`` in a thread; :meth:`stop` ends it (bodies check the event and bound themselves)."""

    def __init__(self, body: Callable[[threading.Event], None]) -> None:
        self._stop = threading.Event()
        self.error: BaseException | None = None

        def run() -> None:
            try:
                body(self._stop)
            except (OSError, EOFError, AssertionError):
                pass  # a refused attacker
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "an attacker thread did not stop"
        if self.error is not None:
            raise self.error


class Vector:
    """A raw connection with one buffer holding a 16-float vector at its base (a bystander's data)."""

    N = 16

    def __init__(self, address: str, *, timeout: float = 10.0) -> None:
        self.c = RawClient(address, timeout=timeout)
        self.handle, _ = self.c.alloc(4096)
        assert self.handle, "the bystander's allocation was refused"
        self.base = self.c.base(self.handle)
        self.t = raw_tensor(id=1, buffer=self.handle, data=self.base, ne=(self.N, 1, 1, 1))
        self.out = raw_tensor(id=2, buffer=self.handle, data=self.base + 1024, ne=(self.N, 1, 1, 1),
                              op=int(GGMLOp.ADD), src=(1, 1), flags=16)  # fmt: skip
        self.c.set_tensor(self.t, struct.pack(f"<{self.N}f", *range(self.N)))

    def check(self) -> float:
        """One graph (t + t, computed under the device lock) and the GET_TENSOR of its result (values checked):
        the latency of the round trip in seconds."""
        start = time.monotonic()
        self.c.graph([2], [self.t, self.out])
        got = struct.unpack(f"<{self.N}f", self.c.get_tensor(self.out, 4 * self.N))
        took = time.monotonic() - start
        assert got == tuple(2.0 * i for i in range(self.N))
        return took

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.c.close()


def latencies(fn: Callable[[], float], n: int, pause: float) -> list[float]:
    """``n`` timed calls of ``fn`` with ``pause`` seconds between them."""
    out = []
    for _ in range(n):
        out.append(fn())
        time.sleep(pause)
    return out


def alloc_frame(size: int, device: int = 0) -> bytes:
    """An ALLOC_BUFFER request frame."""
    return struct.pack("<BQIQ", Cmd.ALLOC_BUFFER, 12, device, size)
