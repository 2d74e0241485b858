"""Server hosts on one machine: network namespaces joined by veth pairs, rate-limited links, and latency.

Layout (names carry this process's id, so that beds of parallel runs never meet)::

    root namespace                      hub namespace               host namespace i
    client -> 127.0.0.1:P_i (relay_i) ==setns==> 10.231.i.1 --veth--> 10.231.i.2:50052 (server)

- Every address lives inside the namespaces the bed made (the hub and the hosts): the root namespace gets no
  interface, address or route. The client reaches host ``i`` through relay ``i``, a process listening on loopback
  that opens its upstream connection inside the hub namespace (:mod:`._relay`) and holds each chunk for the link's
  one-way delay in each direction (this kernel has no ``netem``): a round trip costs twice the delay.
- Hosts reach each other (server-to-server copies) through a second relay per host, listening in the hub at
  ``10.231.i.1:50053`` (:attr:`Host.peer_address`, given to ggml-core servers as ``--peer-address``): it holds each
  chunk for twice the host's delay, the two links a path between two hosts of this star crosses (the bench gives
  every host the same link), or for ``peer_delay`` (hosts near each other, far from the client); the bytes pass
  both hosts' rates.
- The rate is a ``tc ... tbf`` qdisc on both ends of each veth pair (each direction).
- A server is started in its namespace with ``ip netns exec``; :meth:`NetBed.partition` sets a host's link down
  (or has its relay drop everything).
- :meth:`NetBed.close` (also on ``with`` exit, and on any failure while building) stops every relay and server it
  started and deletes every namespace (which removes the veth pairs). Every command has a timeout; at most
  :data:`MAX_HOSTS` hosts.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._relay import open_in_netns

__all__ = [
    "Host",
    "Link",
    "NetBed",
    "NetBedError",
    "Traffic",
    "ggml_core_server",
    "llama_cpp_server",
    "netbed_unavailable",
]

MAX_HOSTS = 12
SERVER_PORT = 50052
#: the port of each host's peer relay (in the hub, on the hub's address towards the host)
PEER_PORT = 50053
#: seconds any one ``ip``/``tc`` command may take
COMMAND_TIMEOUT = 20.0
#: seconds a server may take to start listening (a first start may compile kernels)
START_TIMEOUT = 180.0


class NetBedError(RuntimeError):
    """The bed could not be built or a host did not start (the message names the command or host)."""


@dataclass(frozen=True)
class Link:
    """A link between the client and a host: one-way delay (seconds) and rate (bits per second)."""

    delay: float
    rate: int

    def __str__(self) -> str:
        ms = self.delay * 1e3
        rate = f"{self.rate / 1e9:g} Gbit/s" if self.rate >= 1e9 else f"{self.rate / 1e6:g} Mbit/s"
        return f"{ms:g} ms, {rate}"


@dataclass(frozen=True)
class Traffic:
    """What crossed a host's client relay since it started: bytes and chunks each way, and turns (replies after
    requests: round trips on the wire). Subtract two readings for what passed between them."""

    sent: int
    received: int
    sent_chunks: int
    received_chunks: int
    turns: int

    def __sub__(self, other: Traffic) -> Traffic:
        return Traffic(*(a - b for a, b in zip(self.fields(), other.fields(), strict=True)))

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(*(a + b for a, b in zip(self.fields(), other.fields(), strict=True)))

    def fields(self) -> tuple[int, int, int, int, int]:
        """(sent, received, sent_chunks, received_chunks, turns)."""
        return self.sent, self.received, self.sent_chunks, self.received_chunks, self.turns


@dataclass
class Host:
    """One server host of a bed."""

    index: int
    netns: str
    address: str  # inside the namespaces
    link: Link
    endpoint: str = ""  # what the client connects to (the relay, on loopback)
    server: subprocess.Popen[bytes] | None = None
    relay: subprocess.Popen[str] | None = None
    peer_relay: subprocess.Popen[str] | None = None
    peer_delay: float = 0.0  # one-way, from the other hosts
    log: Path | None = None
    veth: tuple[str, str] = ("", "")  # (hub end, host end)

    @property
    def peer_address(self) -> str:
        """Where the other hosts reach this one (its peer relay in the hub)."""
        return f"10.231.{self.index}.1:{PEER_PORT}"

    @property
    def pid(self) -> int | None:
        """The server process's id (``ip netns exec`` execs into it)."""
        return self.server.pid if self.server is not None else None


def netbed_unavailable() -> str | None:
    """Why a bed cannot be built here (None: it can)."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "building network namespaces needs root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"iproute2's {tool!r} is not installed"
    probe = f"gcbedprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except NetBedError as exc:
        return f"cannot create a network namespace: {exc}"
    try:
        _ip("netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1gbit", "burst",
            "64kb", "latency", "50ms")  # fmt: skip
    except NetBedError as exc:
        return f"the kernel has no tbf qdisc: {exc}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _ip(*args: str, check: bool = True) -> None:
    cmd = ["ip", *args] if args[0] != "tc" else list(args)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetBedError(f"{' '.join(cmd)}: {exc}") from None
    if check and r.returncode != 0:
        raise NetBedError(f"{' '.join(cmd)}: {r.stderr.strip() or f'exit code {r.returncode}'}")


def _tbf(netns: str, dev: str, rate: int) -> None:
    # burst: at least 4 ms at the rate and 256 KiB (veth hands tbf segments of up to 64 KiB)
    burst = max(rate // 8 // 250, 256 << 10)
    _ip("netns", "exec", netns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{rate}bit",
        "burst", str(burst), "latency", "100ms")  # fmt: skip


def _stop(proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(OSError):
        os.kill(proc.pid, signal.SIGCONT)
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


#: a server's command line from the address and port it serves on and the address other hosts reach it at
ServerArgv = Callable[[str, int, str], Sequence[str]]


def ggml_core_server(address: str, port: int, peer: str = "", threads: int = 1) -> list[str]:
    """``ggml-core rpc-server`` serving the CPU on ``address:port`` (reached by other hosts at ``peer``)."""
    argv = [sys.executable, "-m", "ggml_core.cli", "rpc-server", "--host", address, "--port", str(port),
            "--device", "CPU", "--threads", str(threads)]  # fmt: skip
    return [*argv, "--peer-address", peer] if peer else argv


def llama_cpp_server(exe: str | os.PathLike[str]) -> ServerArgv:
    """llama.cpp's ``ggml-rpc-server`` at ``exe``, serving on ``address:port`` with one thread."""

    def argv(address: str, port: int, peer: str = "") -> list[str]:
        return [os.fspath(exe), "-H", address, "-p", str(port), "-t", "1"]

    return argv


class NetBed:
    """N server hosts in network namespaces, each behind its own (delay, rate) link. Use as a context manager."""

    def __init__(self) -> None:
        self.tag = f"gcb{os.getpid() % 100000}"
        self.hub = f"{self.tag}hub"
        self.hosts: list[Host] = []
        self.namespaces: list[str] = []
        self._dir = Path(tempfile.mkdtemp(prefix="ggml-netbed-"))
        self._closed = False
        try:
            self._netns(self.hub)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> NetBed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")

    def add_host(
        self,
        link: Link,
        server: ServerArgv = ggml_core_server,
        env: dict[str, str] | None = None,
        peer_delay: float | None = None,
    ) -> Host:
        """A host namespace behind ``link``, running ``server(address, port, peer_address)`` (argv), reachable at the
        returned host's ``endpoint``; other hosts reach it with ``peer_delay`` seconds each way (default twice the
        link's delay: the star's path through the hub). Any failure tears the whole bed down and raises
        :class:`NetBedError`."""
        if len(self.hosts) >= MAX_HOSTS:
            raise NetBedError(f"a bed holds at most {MAX_HOSTS} hosts")
        i = len(self.hosts)
        host = Host(i, f"{self.tag}h{i}", f"10.231.{i}.2", link, veth=(f"{self.tag}a{i}", f"{self.tag}b{i}"))
        host.peer_delay = 2 * link.delay if peer_delay is None else peer_delay
        self.hosts.append(host)
        try:
            self._wire(host)
            self._start(host, list(server(host.address, SERVER_PORT, host.peer_address)), env)
        except BaseException:
            self.close()
            raise
        return host

    def _wire(self, host: Host) -> None:
        hub_end, host_end = host.veth
        self._netns(host.netns)
        _ip("link", "add", hub_end, "netns", self.hub, "type", "veth", "peer", "name", host_end, "netns", host.netns)
        i = host.index
        for ns, dev, addr in ((self.hub, hub_end, f"10.231.{i}.1/30"), (host.netns, host_end, f"10.231.{i}.2/30")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _tbf(ns, dev, host.link.rate)
        _ip("-n", host.netns, "route", "add", "10.231.0.0/16", "via", f"10.231.{i}.1")  # the other hosts, via the hub

    def _start(self, host: Host, argv: list[str], env: dict[str, str] | None) -> None:
        host.log = self._dir / f"host{host.index}.log"
        with host.log.open("wb") as log:
            host.server = subprocess.Popen(
                ["ip", "netns", "exec", host.netns, *argv], stdout=log, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if host.server.poll() is not None:
                raise NetBedError(f"host {host.index}: the server exited: {self.log_tail(host)}")
            try:
                open_in_netns(self.hub, (host.address, SERVER_PORT), timeout=2).close()
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise NetBedError(f"host {host.index}: the server is not listening after {START_TIMEOUT:g} s: "
                                      f"{exc}; {self.log_tail(host)}") from None  # fmt: skip
                time.sleep(0.1)
        host.relay = self._relay(host, [], host.link.delay)
        assert host.relay.stdout is not None
        line = host.relay.stdout.readline()  # the relay prints its endpoint at once (or exits)
        if not line.startswith("relay "):
            raise NetBedError(f"host {host.index}: the relay did not start")
        host.endpoint = line.split()[1]
        host.peer_relay = self._relay(host, ["ip", "netns", "exec", self.hub], host.peer_delay, host.peer_address)
        assert host.peer_relay.stdout is not None
        if not host.peer_relay.stdout.readline().startswith("relay "):
            raise NetBedError(f"host {host.index}: the peer relay did not start")

    def _relay(self, host: Host, prefix: list[str], delay: float, listen: str = "127.0.0.1:0") -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*prefix, sys.executable, "-m", "ggml_rpc.testing._relay", "--netns", self.hub,
             "--target", f"{host.address}:{SERVER_PORT}", "--delay", repr(delay), "--listen", listen],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip

    def traffic(self, host: Host) -> Traffic:
        """What has crossed ``host``'s client relay (every connection, both ways) since it started."""
        relay = host.relay
        if relay is None or relay.stdout is None or relay.poll() is not None:
            raise NetBedError(f"host {host.index}: its relay is not running")
        os.kill(relay.pid, signal.SIGUSR2)
        ready, _, _ = select.select([relay.stdout], [], [], COMMAND_TIMEOUT)
        line = relay.stdout.readline() if ready else ""
        if not line.startswith("traffic "):
            raise NetBedError(f"host {host.index}: the relay did not report its traffic (got {line.strip()!r})")
        return Traffic(*(int(x) for x in line.split()[1:]))

    def log_tail(self, host: Host, n: int = 2000) -> str:
        """The end of the host's server log."""
        if host.log is None or not host.log.exists():
            return ""
        return host.log.read_bytes()[-n:].decode(errors="replace")

    def partition(self, host: Host, how: str = "link") -> None:
        """Cut the host off: ``link`` sets both ends of its veth pair down; ``relay`` makes its relay drop every byte
        (connections stay open). Either way no byte reaches the server or comes back."""
        if how == "link":
            _ip("-n", host.netns, "link", "set", host.veth[1], "down")
            _ip("-n", self.hub, "link", "set", host.veth[0], "down")
        elif how == "relay" and host.relay is not None:
            for relay in (host.relay, host.peer_relay):
                if relay is not None:
                    os.kill(relay.pid, signal.SIGUSR1)
        else:
            raise ValueError(f"partition how={how!r}: 'link' or 'relay'")

    def close(self) -> None:
        """Stop every relay and server, delete every namespace (and with them the veth pairs). Idempotent."""
        if self._closed:
            return
        self._closed = True
        for host in self.hosts:
            _stop(host.relay)
            _stop(host.peer_relay)
            _stop(host.server)
            for relay in (host.relay, host.peer_relay):
                if relay is not None and relay.stdout is not None:
                    relay.stdout.close()
        for ns in reversed(self.namespaces):
            _ip("netns", "del", ns, check=False)
        shutil.rmtree(self._dir, ignore_errors=True)
