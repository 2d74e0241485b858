"""RPC across hosts on one machine: ``ggml-core rpc-server`` processes in network namespaces, each behind a veth link
with a ``tbf`` rate and a relay's delay (``ggml_rpc.testing.NetBed``).

Needs root and iproute2 (``ip``, ``tc``); skips with the reason otherwise.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from rpc_helpers import RawClient, raw_tensor, rel, rpc_env, split_logits, streaming_run

from ggml_core.backend.registry import get_registry, reset_registry
from ggml_core.models import scheduler_available
from ggml_core.models.default_model import write_default_model
from ggml_rpc import disconnect_all
from ggml_rpc.protocol import Cmd
from ggml_rpc.testing import Link, NetBed, netbed_unavailable

_why = netbed_unavailable()
pytestmark = [
    pytest.mark.skipif(_why is not None, reason=_why or ""),
    pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed"),
]

#: (1 ms each way, 1 Gbit/s)
LAN = Link(0.001, 1_000_000_000)
#: the client's deadline for any answer in the partition test (seconds)
DEADLINE = 5


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_default_model(tmp_path_factory.mktemp("model") / "default.gguf")


@pytest.fixture()
def two_hosts() -> Iterator[NetBed]:
    """Two ggml-core server hosts on (1 ms, 1 Gbit/s) links; everything is torn down afterwards, pass or fail."""
    with NetBed() as bed:
        for _ in range(2):
            bed.add_host(LAN)
        yield bed


def test_the_bed_delays_limits_and_tears_down() -> None:
    """A round trip through a host's link takes at least twice its delay, 4 MiB through a 50 Mbit/s link at least
    the time the rate allows, and closing leaves no namespace or process."""
    with NetBed() as bed:
        host = bed.add_host(Link(0.02, 50_000_000))
        names = set(bed.namespaces)
        with RawClient(host.endpoint) as c:
            t0 = time.monotonic()
            assert c.device_count() >= 1
            assert time.monotonic() - t0 >= 0.04
            handle, _ = c.alloc(4 << 20)
            t0 = time.monotonic()
            c.set_tensor(raw_tensor(buffer=handle, ne=(1 << 20, 1, 1, 1), data=c.base(handle)), bytes(4 << 20))
            assert c.device_count() >= 1
            assert time.monotonic() - t0 >= (4 << 20) * 8 / 50e6  # 0.67 s: the rate holds
        server = host.server
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=20).stdout
    assert not names & {line.split()[0] for line in listed.splitlines() if line.strip()}
    assert server is not None and server.poll() is not None


def test_the_relay_counts_bytes_chunks_and_turns() -> None:
    """Three DEVICE_COUNT requests, each answered before the next: 3 turns, 3 x 9 bytes out (command byte, size),
    3 x 12 bytes back (size, count); a pipelined pair (both sent, then both answers read) is 1 or 2 turns as the
    answers arrive, never more."""
    with NetBed() as bed:
        host = bed.add_host(Link(0.0001, 1_000_000_000))
        with RawClient(host.endpoint) as c:
            c.device_count()
            before = bed.traffic(host)
            for _ in range(3):
                assert c.device_count() >= 1
            got = bed.traffic(host) - before
            assert (got.turns, got.sent, got.received) == (3, 27, 36)
            assert got.sent_chunks == 3 and got.received_chunks == 3
            before = bed.traffic(host)
            c.sock.sendall(2 * struct.pack("<BQ", Cmd.DEVICE_COUNT, 0))
            c.answer(4)
            c.answer(4)
            got = bed.traffic(host) - before
            assert got.turns in (1, 2) and (got.sent, got.received) == (18, 24)


def test_logits_over_two_hosts_equal_the_local_run(
    model_path: Path, two_hosts: NetBed, monkeypatch: pytest.MonkeyPatch
) -> None:
    local, local_steps, _ = split_logits(model_path, ["CPU"], None)
    monkeypatch.setenv("GGML_RPC_SERVERS", ",".join(h.endpoint for h in two_hosts.hosts))
    reset_registry()
    try:
        names = [get_registry().get_reg(f"RPC[{h.endpoint}]").devices[0].name for h in two_hosts.hosts]
        prompt, steps, m = split_logits(model_path, names, [1, 1])
        assert {s.name for s in m.placement.shares if s.layers} == set(names)
        first, second = (get_registry().get_device(n).conn for n in names)  # type: ignore[attr-defined]
        # the activations went from host to host (through the bed's peer relay), none through this client
        assert first.counts["EXT_PEER_SEND"] > 0 and second.counts["EXT_PEER_RECV"] == first.counts["EXT_PEER_SEND"]
        assert first.counts["GET_TENSOR"] == 0 and first.bytes_received < 4096, first.counts
    finally:
        disconnect_all()
        monkeypatch.delenv("GGML_RPC_SERVERS")
        reset_registry()
    assert rel(prompt, local) <= 1e-5 and rel(steps, local_steps) <= 1e-5
    assert np.array_equal(prompt.argmax(-1), local.argmax(-1))


def _run_argv(model: Path, bed: NetBed, n: int) -> list[str]:
    return [sys.executable, "-m", "ggml_core.cli", "run", str(model), "--rpc",
            ",".join(h.endpoint for h in bed.hosts), "--device", "RPC0,RPC1", "-ts", "1,1", "--tokens", "1,2,3",
            "-n", str(n), "-c", "4096", "--ignore-eos", "--no-progress"]  # fmt: skip


@pytest.mark.parametrize(("how", "victim"), [("link", 1), ("relay", 1), ("relay", 0)])
def test_a_partitioned_host_ends_the_run_within_the_deadline(
    model_path: Path, two_hosts: NetBed, how: str, victim: int
) -> None:
    """Host 1 holds the last layers (its read is the logits); host 0's outputs are copied to host 1 through the
    client, their reads pipelined: either one cut off ends the run, naming it."""
    warm = subprocess.run(_run_argv(model_path, two_hosts, 2), capture_output=True, env=rpc_env(600), timeout=900)
    assert warm.returncode == 0, warm.stderr.decode()
    proc, _ = streaming_run(_run_argv(model_path, two_hosts, 4000), DEADLINE)
    try:
        two_hosts.partition(two_hosts.hosts[victim], how)
        cut = time.monotonic()
        proc.wait(timeout=DEADLINE + 60)  # the deadline, plus room for a loaded machine: not a hang
        took = time.monotonic() - cut
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    lines = [line for line in err.splitlines() if line.startswith("ggml-core run:")]
    assert proc.returncode == 2 and "Traceback" not in err and len(lines) == 1, err
    # host 1's failure meets the read of the logits; host 0's the launch of host 1's split, which waits for the
    # activations read from host 0 (the scheduler's line names that split, then the host that failed)
    endpoint = two_hosts.hosts[victim].endpoint
    assert lines[0].startswith("ggml-core run: error: "), err
    assert f"RPC server {endpoint}: no complete answer within {DEADLINE} s (GGML_RPC_TIMEOUT)" in lines[0], err
    assert two_hosts.hosts[1 - victim].endpoint not in lines[0], err
    assert took >= DEADLINE * 0.9, err
