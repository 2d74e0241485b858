"""A TCP relay that holds each chunk for a fixed delay in each direction (user-space latency: this kernel has no
``netem``), and enters a network namespace to reach its target.

Run as ``python -m ggml_rpc.testing._relay --netns NS --target HOST:PORT --delay SECONDS``: it listens on
127.0.0.1 (an ephemeral port, printed as ``relay 127.0.0.1:PORT``; ``--listen HOST:PORT`` for another address) in
the namespace it was started in, and opens each upstream connection inside ``NS``. SIGUSR1 makes it drop everything
from then on (a partition: connections stay open, no byte passes either way). At most :data:`MAX_CONNECTIONS`
connections at once; each chunk is at most :data:`CHUNK` bytes, and at most :data:`MAX_HELD` bytes are held per
direction (the reader waits beyond that).

Traffic is counted over every connection: bytes and chunks each way, and *turns*: the chunks from the target that
follow a chunk from the client on the same connection (a reply after a request: one round trip on the wire,
however many requests were pipelined before it). SIGUSR2 prints ``traffic UP_BYTES DOWN_BYTES UP_CHUNKS
DOWN_CHUNKS TURNS`` (totals since the start) on standard output.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
import time

__all__ = ["open_in_netns"]

CLONE_NEWNET = 0x40000000
CHUNK = 1 << 16
MAX_HELD = 64 << 20
MAX_CONNECTIONS = 64

_libc = ctypes.CDLL(None, use_errno=True)
_dropping = threading.Event()


class _Traffic:
    """Totals over every connection (one lock: a relay moves a few thousand chunks a second at most)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bytes = [0, 0]  # [to the target, from the target]
        self.chunks = [0, 0]
        self.turns = 0

    def line(self) -> str:
        with self.lock:
            return f"traffic {self.bytes[0]} {self.bytes[1]} {self.chunks[0]} {self.chunks[1]} {self.turns}"


_traffic = _Traffic()


class _Turns:
    """Which way a connection's last chunk went: a chunk back after one out is a turn (a round trip)."""

    def __init__(self) -> None:
        self.last = 1

    def saw(self, way: int, n: int) -> None:
        with _traffic.lock:
            _traffic.bytes[way] += n
            _traffic.chunks[way] += 1
            if way == 1 and self.last == 0:
                _traffic.turns += 1
            self.last = way


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def open_in_netns(netns: str, address: tuple[str, int], timeout: float) -> socket.socket:
    """A TCP connection to ``address`` made from inside the network namespace ``netns`` (``/run/netns/NAME``).

    The socket is created in a short-lived thread that enters the namespace (a socket belongs to the namespace it
    was created in; the calling thread's namespace is never changed)."""
    result: list[socket.socket | OSError] = []

    def make() -> None:
        try:
            with open(f"/run/netns/{netns}") as target:
                _setns(target.fileno())
            result.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        except OSError as exc:  # handed to the caller
            result.append(exc)

    t = threading.Thread(target=make, daemon=True)
    t.start()
    t.join(10)
    if not result:
        raise OSError(f"entering the network namespace {netns} did not finish")
    got = result[0]
    if isinstance(got, OSError):
        raise got
    try:
        got.settimeout(timeout)
        got.connect(address)
        got.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        got.settimeout(None)
    except OSError:
        got.close()
        raise
    return got


class _Direction:
    """One direction of a relayed connection: a reader that stamps chunks, a writer that sends each when due."""

    def __init__(
        self, src: socket.socket, dst: socket.socket, delay: float, done: threading.Event, way: int, turns: _Turns
    ) -> None:
        self.src, self.dst, self.delay, self.done = src, dst, delay, done
        self.way, self.turns = way, turns
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.held = 0
        self.cond = threading.Condition()

    def start(self) -> None:
        threading.Thread(target=self.read, daemon=True).start()
        threading.Thread(target=self.write, daemon=True).start()

    def read(self) -> None:
        try:
            while not self.done.is_set():
                chunk = self.src.recv(CHUNK)
                if not chunk:
                    break
                if _dropping.is_set():
                    continue
                self.turns.saw(self.way, len(chunk))
                with self.cond:
                    while self.held > MAX_HELD and not self.done.is_set():
                        self.cond.wait(0.1)
                    self.queue.append((time.monotonic() + self.delay, chunk))
                    self.held += len(chunk)
                    self.cond.notify_all()
        except OSError:
            pass
        with self.cond:
            self.queue.append((time.monotonic() + self.delay, b""))  # the end, after what was held, delayed as well
            self.cond.notify_all()

    def write(self) -> None:
        try:
            while True:
                with self.cond:
                    while not self.queue:
                        self.cond.wait(0.5)
                        if self.done.is_set():
                            return
                    due, chunk = self.queue.popleft()
                    self.held -= len(chunk)
                    self.cond.notify_all()
                if not chunk:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not _dropping.is_set():
                    self.dst.sendall(chunk)
        except OSError:
            pass
        finally:
            self.done.set()
            for s in (self.src, self.dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def _serve(listener: socket.socket, netns: str, target: tuple[str, int], delay: float) -> None:
    active = threading.BoundedSemaphore(MAX_CONNECTIONS)
    while True:
        client, _ = listener.accept()
        if not active.acquire(blocking=False):
            client.close()
            continue
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream = open_in_netns(netns, target, timeout=10)
        except OSError as exc:
            print(f"relay: cannot reach {target[0]}:{target[1]} in {netns}: {exc}", file=sys.stderr, flush=True)
            client.close()
            active.release()
            continue
        done, turns = threading.Event(), _Turns()
        _Direction(client, upstream, delay, done, 0, turns).start()
        _Direction(upstream, client, delay, done, 1, turns).start()

        def release(done: threading.Event = done, pair: tuple[socket.socket, ...] = (client, upstream)) -> None:
            done.wait()
            time.sleep(1)
            for s in pair:
                s.close()
            active.release()

        threading.Thread(target=release, daemon=True).start()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--netns", required=True)
    ap.add_argument("--target", required=True, help="HOST:PORT inside the namespace")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds each chunk is held, in each direction")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on (default 127.0.0.1, any port)")
    args = ap.parse_args()
    host, port = args.target.rsplit(":", 1)
    listen_host, listen_port = args.listen.rsplit(":", 1)
    signal.signal(signal.SIGUSR1, lambda *_: _dropping.set())
    signal.signal(signal.SIGUSR2, lambda *_: print(_traffic.line(), flush=True))
    listener = socket.create_server((listen_host, int(listen_port)))
    print(f"relay {listen_host}:{listener.getsockname()[1]}", flush=True)
    _serve(listener, args.netns, (host, int(port)), max(0.0, args.delay))
    return 0


if __name__ == "__main__":
    sys.exit(main())
