"""RPC over loopback: SET_TENSOR / GET_TENSOR throughput against a raw socket copy, and the per-token cost of a
layer split over the local CPU and a loopback RPC device.

Usage: ``python benchmarks/bench_rpc.py [--mib 64] [--repeat 5] [--tokens 16] [--llama-cpp] [--before REV]
[--json PATH]``; the results also go to ``benchmarks/results/bench_rpc.json`` as JSON.

Servers run in their own processes (``ggml-core rpc-server --port 0``; with ``--llama-cpp`` also llama.cpp's
``ggml-rpc-server`` from the interop test's cache, if it was built; with ``--before REV`` also the ggml-rpc server
package as it was at git revision REV, e.g. the commit before the hardening, served from a temporary copy), so that
client and server do not share a GIL. The hardening's cost is the ratio of ``ggml-core rpc-server`` to the
``--before`` one in the same run.
Measured, as medians of ``--repeat`` runs in this one run:

- ``raw socket``: the same bytes through a plain TCP socket to a Python peer that reads them into (or sends them from)
  a preallocated buffer and answers one byte — the ceiling for any Python protocol over this loopback;
- ``SET_TENSOR``: one ``set_tensor`` of ``--mib`` MiB plus the round trip that waits for the server to have it;
- ``GET_TENSOR``: one ``get_tensor`` of the same bytes, straight into a preallocated array;
- small command: the round trip of a 64-byte GET_TENSOR (the per-command cost of each server);
- per token: decode steps of the embedded default model (4 layers) on the CPU alone and split 1:1 over the CPU and
  each loopback device, with the commands each token sends and the server process's CPU time per token (user +
  system: on a loaded machine far steadier than wall time, since waiting for a core does not count).

Targets are measured in rotation (one transfer or decode step each, round after round), so that the load of a
shared machine hits all of them alike.

Numbers are noisy on a shared machine; compare the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ggml_core import Context, alloc_ctx_tensors
from ggml_core.backend.registry import get_registry, reset_registry

_RAW_PEER = r"""
import socket, struct, sys
lst = socket.create_server(("127.0.0.1", 0)); print(lst.getsockname()[1], flush=True)
conn, _ = lst.accept(); conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); conn.settimeout(60)
buf = bytearray(b"\x5a") * int(sys.argv[1]); mv = memoryview(buf)  # touched, as a real buffer
while True:
    head = conn.recv(9, socket.MSG_WAITALL)
    if len(head) < 9: break
    op, n = head[0], struct.unpack("<Q", head[1:])[0]
    if op == 0:   # receive n bytes, answer one byte
        got = 0
        while got < n: got += conn.recv_into(mv[got:n], min(n - got, 1 << 24))
        conn.sendall(b"\1")
    else:         # send n bytes
        conn.sendall(mv[:n])
"""


#: the process serving each endpoint (for its CPU time)
_PIDS: dict[str, int] = {}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux ``/proc``): unlike wall time, scheduling delays do not count."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _process(cmd: list[str], ready: Callable[[str], str | None]) -> Iterator[str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{cmd[0]} exited early")
            got = ready(line)
            if got:
                _PIDS[got] = proc.pid
                yield got
                return
        raise RuntimeError(f"{cmd[0]} did not start")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _endpoint(line: str) -> str | None:
    return line.split(":", 1)[1].strip() if line.strip().startswith("endpoint") else None


def _ours() -> Iterator[str]:
    cmd = [sys.executable, "-m", "ggml_core.cli", "rpc-server", "--port", "0", "--device", "CPU"]
    return _process(cmd, _endpoint)


_BEFORE = r"""
import sys
sys.path.insert(0, sys.argv[1])  # the old ggml_rpc package first (the plugin entry point imports it from there)
import ggml_core as g
from ggml_rpc.server import RPCServer
srv = RPCServer([g.get_device("CPU")], "127.0.0.1", 0)
srv.bind()
print("endpoint :", srv.address, flush=True)
srv.serve_forever()
"""


@contextmanager
def _before(rev: str) -> Iterator[str]:
    """The ggml-rpc package of git revision ``rev`` (a temporary copy) serving the CPU, in its own process."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", rev, "plugins/ggml-rpc/ggml_rpc"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        with _process([sys.executable, "-c", _BEFORE, str(Path(tmp) / "plugins" / "ggml-rpc")], _endpoint) as ep:
            yield ep


class _Raw:
    """A plain socket to a Python peer process that reads (or sends) the bytes and answers one byte."""

    def __init__(self, port: str, nbytes: int) -> None:
        import socket

        self.sock = socket.create_connection(("127.0.0.1", int(port)), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.n = nbytes
        self.data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
        self.out = memoryview(bytearray(nbytes))

    def put(self) -> None:
        import struct

        self.sock.sendall(struct.pack("<BQ", 0, self.n))
        self.sock.sendall(self.data)
        self.sock.recv(1)

    def get(self) -> None:
        import struct

        self.sock.sendall(struct.pack("<BQ", 1, self.n))
        got = 0
        while got < self.n:
            got += self.sock.recv_into(self.out[got:])

    def close(self) -> None:
        self.sock.close()


class _Rpc:
    """SET_TENSOR (+ the round trip that waits for it) and GET_TENSOR of one tensor on an RPC device."""

    def __init__(self, endpoint: str, nbytes: int) -> None:
        from ggml_rpc import RPCReg

        self.dev = RPCReg(endpoint).devices[0]
        ctx = Context()
        self.t = ctx.new_tensor("i8", (nbytes,))
        self.buf = alloc_ctx_tensors(ctx, self.dev.buffer_type())
        self.data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
        self.out = np.empty(nbytes, np.uint8)

    def put(self) -> None:
        self.buf.set_tensor(self.t, memoryview(self.data))
        self.dev.conn.sync()

    def get(self) -> None:
        self.buf.get_tensor(self.t, memoryview(self.out))

    def close(self) -> None:
        assert np.array_equal(self.out, self.data)
        self.buf.free()


def transfers(targets: dict[str, object], repeat: int) -> dict[str, tuple[float, float]]:
    """Median (put ms, get ms) per target, measured in rotation so that machine load hits every target alike."""
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in targets}
    for _ in range(repeat + 1):  # the first round warms up (page faults, socket buffers)
        for name, tgt in targets.items():
            for i, fn in enumerate((tgt.put, tgt.get)):  # type: ignore[attr-defined]
                t0 = time.perf_counter()
                fn()
                times[name][i].append((time.perf_counter() - t0) * 1e3)
    return {name: (statistics.median(p[1:]), statistics.median(g[1:])) for name, (p, g) in times.items()}


def round_trips(endpoints: dict[str, str], n: int, rounds: int) -> dict[str, float]:
    """Median µs of one small answered command (a 64-byte GET_TENSOR) per server, ``n`` per round, in rotation."""
    from ggml_rpc import RPCReg

    bufs = {}
    for name, ep in endpoints.items():
        dev = RPCReg(ep).devices[0]
        ctx = Context()
        t = ctx.new_tensor("i8", (64,))
        bufs[name] = (alloc_ctx_tensors(ctx, dev.buffer_type()), t, np.empty(64, np.uint8))
    times: dict[str, list[float]] = {name: [] for name in endpoints}
    for _ in range(rounds + 1):  # the first round warms up
        for name, (buf, t, out) in bufs.items():
            t0 = time.perf_counter()
            for _ in range(n):
                buf.get_tensor(t, memoryview(out))
            times[name].append((time.perf_counter() - t0) / n * 1e6)
    for buf, _, _ in bufs.values():
        buf.free()
    return {name: statistics.median(v[1:]) for name, v in times.items()}


def _tensor(buffer: int, data: int, op: int = 0, src: tuple[int, ...] = (), tid: int = 1) -> bytes:
    """A 16-float ``rpc_tensor`` (raw wire bytes)."""
    from ggml_rpc.protocol import RPC_TENSOR

    srcs = [*src, *[0] * (10 - len(src))]
    return RPC_TENSOR.pack(tid, 0, buffer, 16, 1, 1, 1, 4, 64, 64, 64, op, *[0] * 16, 16 if op else 0, *srcs, 0, 0,
                           data, b"t", 0)  # fmt: skip


def command_mix_cpu(endpoints: dict[str, str], n: int, rounds: int) -> dict[str, list[float]]:
    """Server CPU µs for one decode step's commands (6 SET_TENSOR, GRAPH_RECOMPUTE, DEVICE_COUNT, GET_TENSOR),
    ``n`` in a row per round, rounds in rotation; from the server process's CPU time (``/proc``)."""
    import struct

    from ggml_rpc import Connection
    from ggml_rpc.protocol import Cmd

    conns = {}
    for name, ep in endpoints.items():
        if ep not in _PIDS:
            continue
        c = Connection(ep, timeout=60)
        handle, _ = struct.unpack("<QQ", c.request(Cmd.ALLOC_BUFFER, [struct.pack("<IQ", 0, 4096)]))
        base = struct.unpack("<Q", c.request(Cmd.BUFFER_GET_BASE, [struct.pack("<Q", handle)]))[0]
        x, out = _tensor(handle, base), _tensor(handle, base + 1024, op=2, src=(1, 1), tid=2)
        graph = struct.pack("<IIQI", 0, 1, 2, 2) + x + out
        c.send(Cmd.GRAPH_COMPUTE, [graph])
        c.request(Cmd.DEVICE_COUNT)
        conns[name] = (c, x, out)
    result: dict[str, list[float]] = {name: [] for name in conns}
    answer = memoryview(bytearray(64))
    for _ in range(rounds):
        for name, (c, x, out) in conns.items():
            cpu0 = _cpu_seconds(_PIDS[endpoints[name]])
            for _ in range(n):
                for _ in range(6):
                    c.send(Cmd.SET_TENSOR, [x, struct.pack("<BQ", 0, 0), bytes(64)])
                c.send(Cmd.GRAPH_RECOMPUTE, [struct.pack("<I", 0)])
                c.request(Cmd.DEVICE_COUNT)
                c.request_into(Cmd.GET_TENSOR, [out, struct.pack("<QQ", 0, 64)], answer)
            result[name].append((_cpu_seconds(_PIDS[endpoints[name]]) - cpu0) / n * 1e6)
    for c, _, _ in conns.values():
        c.close()
    return result


def per_token(endpoints: dict[str, str], tokens: int, model: Path) -> dict[str, tuple[float, dict[str, float]]]:
    """Median ms per decoded token and commands per token: the CPU alone, and split 1:1 with each endpoint.

    Every configuration is loaded at once and the decode steps run in rotation, so that load hits them alike.
    """
    import os

    from ggml_core.models import Model, ModelParams, PlacementRequest

    os.environ["GGML_RPC_SERVERS"] = ",".join(endpoints.values())
    reset_registry()
    configs = {"CPU alone": (["CPU"], None)}
    for name, ep in endpoints.items():
        configs[f"CPU + {name}"] = (["CPU", get_registry().get_reg(f"RPC[{ep}]").devices[0].name], [1.0, 1.0])
    models = {}
    for name, (devices, split) in configs.items():
        req = PlacementRequest(devices=devices, tensor_split=split)
        models[name] = Model.load(model, ModelParams(placement=req, n_ctx=256, progress=False))
    times: dict[str, list[float]] = {name: [] for name in models}
    before: dict[str, dict[str, int]] = {}
    for name, m in models.items():
        m.process_prompt([1, 2, 3, 4])
        m.decode([5])  # warm-up: the first decode graph is planned and sent
        conn = getattr(m.placement.devices[0], "conn", None)
        before[name] = dict(conn.counts) if conn is not None else {}
    pids = {f"CPU + {name}": _PIDS[ep] for name, ep in endpoints.items() if ep in _PIDS}
    cpu0 = {name: _cpu_seconds(pid) for name, pid in pids.items()}
    for i in range(tokens):
        for name, m in models.items():
            t0 = time.perf_counter()
            m.decode([6 + i % 50])
            times[name].append((time.perf_counter() - t0) * 1e3)
    server_cpu = {name: (_cpu_seconds(pid) - cpu0[name]) / tokens * 1e3 for name, pid in pids.items()}
    out = {}
    for name, m in models.items():
        conn = getattr(m.placement.devices[0], "conn", None)
        counts = {}
        if conn is not None:
            counts = {
                k: (v - before[name].get(k, 0)) / tokens for k, v in conn.counts.items() if v - before[name].get(k, 0)
            }
        if name in server_cpu:
            counts["server CPU ms"] = server_cpu[name]
        out[name] = (statistics.median(times[name]), counts)
        m.close()
    os.environ.pop("GGML_RPC_SERVERS", None)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--mib", type=int, default=64, help="MiB per transfer (default 64)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per median (default 5)")
    ap.add_argument("--tokens", type=int, default=16, help="decode steps per model measurement (default 16)")
    ap.add_argument("--llama-cpp", action="store_true", help="also against llama.cpp's ggml-rpc-server (if built)")
    ap.add_argument("--before", metavar="REV", help="also the ggml-rpc server of git revision REV (before/after)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _util import Results, add_json_option

    add_json_option(ap, "bench_rpc")
    args = ap.parse_args()
    nbytes = args.mib << 20
    gb = nbytes / 1e9
    out = Results("bench_rpc", {k: v for k, v in vars(args).items() if k != "json"})

    print(f"machine: {out.data['machine']}")
    print(f"loopback transfers of {args.mib} MiB, medians of {args.repeat} (targets measured in rotation)")
    servers: list[tuple[str, Callable[[], Any]]] = [("ggml-core rpc-server", _ours)]
    if args.before:
        servers.append((f"ggml-core @ {args.before[:10]}", lambda: _before(args.before)))
    if args.llama_cpp:
        exe = Path.home() / ".cache" / "ggml-core" / "llama-rpc-server-0c1e570" / "ggml-rpc-server"
        if exe.is_file():
            port = str(_free_port())
            servers.append(("llama.cpp ggml-rpc-server", lambda: _llama(exe, port)))
        else:
            print(f"  (no llama.cpp server at {exe}: run the interop test once to build it)")
    with ExitStack() as stack:
        raw_port = stack.enter_context(_process([sys.executable, "-c", _RAW_PEER, str(nbytes)], lambda x: x.strip()))
        targets: dict[str, Any] = {"raw socket": _Raw(raw_port, nbytes)}
        for name, start in servers:
            targets[name] = _Rpc(stack.enter_context(start()), nbytes)
        result = transfers(targets, args.repeat)
        for tgt in targets.values():
            tgt.close()
        from ggml_rpc import disconnect_all

        disconnect_all()
    raw_put, raw_get = result["raw socket"]
    print(f"  {'':28}{'SET (GB/s)':>12}{'vs raw':>8}{'GET (GB/s)':>12}{'vs raw':>8}")
    for name, (put, get) in result.items():
        out.add("transfer", name, set_ms=put, get_ms=get, set_gb_s=gb / put * 1e3, get_gb_s=gb / get * 1e3)
        print(f"  {name:28}{gb / put * 1e3:12.2f}{raw_put / put:8.2f}{gb / get * 1e3:12.2f}{raw_get / get:8.2f}")

    with ExitStack() as stack:
        eps = {name: stack.enter_context(start()) for name, start in servers}
        rtt = round_trips(eps, 200, args.repeat)
        from ggml_rpc import disconnect_all

        disconnect_all()
    print(f"\nsmall answered command (64-byte GET_TENSOR), median µs of {args.repeat} rounds of 200 (in rotation)")
    for name, us in rtt.items():
        out.add("small command", name, round_trip_us=us)
        print(f"  {name:36}{us:9.1f} µs")
    if args.before:
        ratio = rtt["ggml-core rpc-server"] / rtt[f"ggml-core @ {args.before[:10]}"]
        print(f"  now / before: {ratio:.2f}")
        with ExitStack() as stack:
            eps = {name: stack.enter_context(start()) for name, start in servers[:2]}
            mix = command_mix_cpu(eps, 1000, 4)
        print("\nserver CPU for one decode step's commands, µs, 4 rounds of 1000 (in rotation)")
        for name, us in mix.items():
            print(f"  {name:36}" + " ".join(f"{u:7.0f}" for u in us) + f"   median {statistics.median(us):.0f}")

    from ggml_core.models.default_model import write_default_model

    with tempfile.TemporaryDirectory() as tmp:
        model = write_default_model(Path(tmp) / "default.gguf")
        print(f"\nper decoded token, default model (4 layers), medians of {args.tokens} tokens (in rotation)")
        with ExitStack() as stack:
            eps = {name: stack.enter_context(start()) for name, start in servers}
            res = per_token(eps, args.tokens, model)
            from ggml_rpc import disconnect_all

            disconnect_all()
        cpu_ms = res["CPU alone"][0]
        for name, (ms, counts) in res.items():
            out.add("per token", name, ms=ms, **counts)
            what = ", ".join(f"{k} {v:.3g}" for k, v in sorted(counts.items()))
            extra = f"  (+{ms - cpu_ms:.2f} ms per token; per token: {what})" if counts else ""
            print(f"  {name:36}{ms:9.2f} ms{extra}")
        if args.before:
            old = res[f"CPU + ggml-core @ {args.before[:10]}"][0] - cpu_ms
            new = res["CPU + ggml-core rpc-server"][0] - cpu_ms
            print(f"  RPC overhead per token, now / before: {new:.2f} / {old:.2f} ms = {new / old:.2f}")
            cpu_new = res["CPU + ggml-core rpc-server"][1]["server CPU ms"]
            cpu_old = res[f"CPU + ggml-core @ {args.before[:10]}"][1]["server CPU ms"]
            print(f"  server CPU per token, now / before: {cpu_new:.3f} / {cpu_old:.3f} ms = {cpu_new / cpu_old:.2f}")
    if args.before:
        put_old, get_old = result[f"ggml-core @ {args.before[:10]}"]
        put_new, get_new = result["ggml-core rpc-server"]
        print(f"  transfer time now / before: SET {put_new / put_old:.2f}, GET {get_new / get_old:.2f}")
    reset_registry()
    out.write_json(args.json)
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _llama(exe: Path, port: str) -> Iterator[str]:
    import socket

    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", port, "-t", "1"], stdout=subprocess.DEVNULL)
    _PIDS[f"127.0.0.1:{port}"] = proc.pid
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("llama.cpp's ggml-rpc-server did not start") from None
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    sys.exit(main())
