"""Soak: 50 well-behaved clients doing mixed work for a bounded time while attackers run, against a real
``ggml-core rpc-server`` process (127.0.0.1 only).

Reported (printed) and asserted: the bystanders' p50/p99/max round-trip latency, their errors (0), server deaths (0),
internal errors in the server's log (0) and the server's peak resident memory above its start (bounded by its
memory budget plus a margin). The attackers' messages are due within 5 s (``--frame-timeout``/``--hello-timeout``),
so a bystander blocked behind one would show a round trip of 5 s or more; the p99 bound (2.5 s) is generous for a
loaded 2-core machine and well below that.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from attack_helpers import Attacker, rss_bytes, trickle
from rpc_helpers import RawClient, raw_tensor

from ggml_core import GGMLOp
from ggml_rpc.protocol import Cmd

CLIENTS = 50
SOAK_S = 10.0
BUDGET_MIB = 512
P99_S = 2.5
ADD, N = int(GGMLOp.ADD), 64


@pytest.fixture(scope="module")
def server_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    log = tmp_path_factory.mktemp("soak") / "server.log"
    cmd = [sys.executable, "-m", "ggml_core.cli", "rpc-server", "--port", "0", "--device", "CPU"]
    cmd += ["--max-clients", "80", "--frame-timeout", "5", "--hello-timeout", "5", "--min-rate", "8192"]
    cmd += ["--max-memory", str(BUDGET_MIB), "--max-client-memory", "64"]
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        endpoint = None
        end = time.monotonic() + 60
        while endpoint is None and time.monotonic() < end:
            line = proc.stdout.readline()
            if not line:
                break
            if line.strip().startswith("endpoint"):
                endpoint = line.split(":", 1)[1].strip()
        assert endpoint, f"the server did not start: {log.read_text()[-2000:]}"
        yield proc, endpoint, log
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        if proc.poll() is None:
            proc.kill()


class Bystander:
    """A well-behaved client: a + b on the server, checked, over and over; every round trip timed."""

    def __init__(self, endpoint: str, seed: int) -> None:
        self.c = RawClient(endpoint, timeout=30)
        self.rng = random.Random(seed)
        self.handle, _ = self.c.alloc(4096)
        assert self.handle
        base = self.c.base(self.handle)
        self.a = raw_tensor(id=1, buffer=self.handle, data=base, ne=(N, 1, 1, 1))
        self.b = raw_tensor(id=2, buffer=self.handle, data=base + 1024, ne=(N, 1, 1, 1))
        self.out = raw_tensor(id=3, buffer=self.handle, data=base + 2048, ne=(N, 1, 1, 1), op=ADD, src=(1, 2),
                              flags=16)  # fmt: skip
        self.times: list[float] = []
        self.errors: list[str] = []

    def step(self, i: int) -> None:
        x = [float(self.rng.randint(-100, 100)) for _ in range(N)]
        y = [float(self.rng.randint(-100, 100)) for _ in range(N)]
        start = time.monotonic()
        self.c.set_tensor(self.a, struct.pack(f"<{N}f", *x))
        self.c.set_tensor(self.b, struct.pack(f"<{N}f", *y))
        if i == 0:
            self.c.graph([3], [self.a, self.b, self.out])
        else:
            self.c.frame(Cmd.GRAPH_RECOMPUTE, struct.pack("<I", 0))
        got = struct.unpack(f"<{N}f", self.c.get_tensor(self.out, 4 * N))
        if i % 5 == 4:  # some allocation traffic too
            h, _ = self.c.alloc(1 << 16)
            if not h:
                self.errors.append("a 64 KiB allocation was refused")
            else:
                self.c.frame(Cmd.FREE_BUFFER, struct.pack("<Q", h))
                self.c.graph([3], [self.a, self.b, self.out])  # FREE_BUFFER forgets the stored graph (as ggml)
                got = struct.unpack(f"<{N}f", self.c.get_tensor(self.out, 4 * N))
        self.times.append(time.monotonic() - start)
        if list(got) != [p + q for p, q in zip(x, y, strict=True)]:
            self.errors.append(f"wrong sum at step {i}")

    def run(self, until: float) -> None:
        i = 0
        try:
            while time.monotonic() < until and i < 10_000:
                self.step(i)
                i += 1
                time.sleep(0.1)
        except (OSError, EOFError, AssertionError) as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")


def _attackers(endpoint: str, until: float) -> list[Callable[[threading.Event], None]]:
    host, port = endpoint.rsplit(":", 1)

    def loop(body: Callable[[threading.Event], None]) -> Callable[[threading.Event], None]:
        def run(stop: threading.Event) -> None:
            for _ in range(100):  # reconnect after every cut-off, a bounded number of times
                if stop.is_set() or time.monotonic() > until:
                    return
                with contextlib.suppress(OSError, EOFError, AssertionError):
                    body(stop)
                stop.wait(0.05)

        return run

    def trickled_set_tensor(stop: threading.Event) -> None:
        with RawClient(endpoint) as c:
            h, _ = c.alloc(1 << 20)
            t = raw_tensor(buffer=h, data=c.base(h), ne=(1 << 18, 1, 1, 1))
            c.sock.sendall(struct.pack("<BQ", Cmd.SET_TENSOR, 305 + (1 << 20)) + t + bytes(9))
            trickle(c.sock, bytes(1 << 20), 0.05, stop, 20.0)

    def unread_answer(stop: threading.Event) -> None:
        with RawClient(endpoint) as c:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            h, _ = c.alloc(32 << 20)
            t = raw_tensor(buffer=h, data=c.base(h), ne=(8 << 20, 1, 1, 1))
            c.frame(Cmd.GET_TENSOR, t + struct.pack("<QQ", 0, 32 << 20))
            stop.wait(10)

    def trickled_hello(stop: threading.Event) -> None:
        with socket.create_connection((host, int(port)), timeout=10) as s:
            trickle(s, struct.pack("<BQ", Cmd.HELLO, 24) + bytes(24), 0.3, stop, 20.0)

    def greedy(stop: threading.Event) -> None:
        with RawClient(endpoint) as c:
            for size in (1 << 40, 1 << 34, 1 << 30, 64 << 20, 64 << 20):
                h, _ = c.alloc(size)
                if h:
                    c.frame(Cmd.BUFFER_CLEAR, struct.pack("<QB", h, 1))  # commit what was granted
            c.device_count()
            stop.wait(2)

    def pool_bomb(stop: threading.Event) -> None:
        with RawClient(endpoint) as c:
            h, _ = c.alloc(4096)
            base = c.base(h)
            x = raw_tensor(id=1, buffer=h, data=base, ne=(1, 1, 1, 1))
            params = (1, 46341, 46341, 1, 1, 23170, 23170)  # AVG, k0, k1, s0, s1, p0, p1
            node = raw_tensor(id=2, buffer=h, data=base + 64, ne=(1, 1, 1, 1), op=int(GGMLOp.POOL_2D), src=(1,),
                              op_params=params, flags=16)  # fmt: skip
            c.graph([2], [x, node])
            c.device_count()  # refused: the server closes

    def garbage(stop: threading.Event) -> None:
        with RawClient(endpoint) as c:
            c.sock.sendall(random.Random(7).randbytes(4096))
            c.device_count()

    bodies = [trickled_set_tensor] * 3 + [unread_answer] * 2 + [trickled_hello] * 2 + [greedy] * 2
    return [loop(b) for b in [*bodies, pool_bomb, garbage]]


def test_soak_bystanders_keep_their_latency_while_attackers_run(
    server_proc: tuple[subprocess.Popen[str], str, Path],
) -> None:
    proc, endpoint, log = server_proc
    start_rss = rss_bytes(proc.pid)
    clients = [Bystander(endpoint, seed) for seed in range(CLIENTS)]
    until = time.monotonic() + SOAK_S
    attackers = [Attacker(body) for body in _attackers(endpoint, until)]
    peak = [start_rss]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set() and proc.poll() is None:
            with contextlib.suppress(OSError, RuntimeError):
                peak[0] = max(peak[0], rss_bytes(proc.pid))
            sampling.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=c.run, args=(until,), daemon=True) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SOAK_S + 60)
    for a in attackers:
        a.stop(30)
    sampling.set()
    sampler.join(5)
    times = sorted(x for c in clients for x in c.times)
    errors = [e for c in clients for e in c.errors]
    for c in clients:
        c.c.close()
    alive = proc.poll() is None
    if alive:
        with RawClient(endpoint) as fresh:
            alive = fresh.device_count() == 1
    text = log.read_text()
    p50, p99 = times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))]
    print(
        f"\nsoak: {CLIENTS} clients x {SOAK_S:g} s, {len(times)} round trips; latency p50 {p50 * 1e3:.1f} ms, "
        f"p99 {p99 * 1e3:.1f} ms, max {times[-1] * 1e3:.1f} ms; bystander errors {len(errors)}; server alive "
        f"{alive}; RSS {start_rss >> 20} MiB -> peak {peak[0] >> 20} MiB (budget {BUDGET_MIB} MiB); "
        f"refusals logged {text.count('closing connection')}, busy {text.count('refusing')}"
    )
    assert alive, "the server died"
    assert not errors, errors[:5]
    assert "internal error" not in text, text[-3000:]
    assert len(times) >= CLIENTS * 5, "the bystanders barely ran"
    assert p99 < P99_S, f"p99 {p99:.2f} s"
    assert peak[0] - start_rss < (BUDGET_MIB + 256) << 20
    assert text.count("closing connection") >= 5  # the attackers were there and were refused
