"""RPC over loopback: SET_TENSOR / GET_TENSOR throughput against a raw socket copy, and the per-token cost of a
layer split over the local CPU and a loopback RPC device.

Usage: ``python benchmarks/bench_rpc.py [--mib 64] [--repeat 5] [--tokens 16] [--llama-cpp]``.

Servers run in their own processes (``ggml-core rpc-server --port 0``; with ``--llama-cpp`` also llama.cpp's
``ggml-rpc-server`` from the interop test's cache, if it was built), so that client and server do not share a GIL.
Measured, as medians of ``--repeat`` runs in this one run:

- ``raw socket``: the same bytes through a plain TCP socket to a Python peer that reads them into (or sends them from)
  a preallocated buffer and answers one byte — the ceiling for any Python protocol over this loopback;
- ``SET_TENSOR``: one ``set_tensor`` of ``--mib`` MiB plus the round trip that waits for the server to have it;
- ``GET_TENSOR``: one ``get_tensor`` of the same bytes, straight into a preallocated array;
- per token: decode steps of the embedded default model (4 layers) on the CPU alone and split 1:1 over the CPU and
  the loopback device, with the commands each token sends.

Numbers are noisy on a shared machine; compare the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

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
        while got < n: got += conn.recv_into(mv[got:n])
        conn.sendall(b"\1")
    else:         # send n bytes
        conn.sendall(mv[:n])
"""


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
                yield got
                return
        raise RuntimeError(f"{cmd[0]} did not start")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _ours() -> Iterator[str]:
    cmd = [sys.executable, "-m", "ggml_core.cli", "rpc-server", "--port", "0", "--device", "CPU"]
    return _process(cmd, lambda line: line.split(":", 1)[1].strip() if line.strip().startswith("endpoint") else None)


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def raw_socket(nbytes: int, repeat: int) -> tuple[float, float]:
    """(send ms, receive ms) of ``nbytes`` through a plain socket to a Python peer process."""
    import socket
    import struct

    with _process([sys.executable, "-c", _RAW_PEER, str(nbytes)], lambda line: line.strip()) as port:
        s = socket.create_connection(("127.0.0.1", int(port)), timeout=60)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
        out = memoryview(bytearray(nbytes))

        def send() -> None:
            s.sendall(struct.pack("<BQ", 0, nbytes))
            s.sendall(data)
            s.recv(1)

        def recv() -> None:
            s.sendall(struct.pack("<BQ", 1, nbytes))
            got = 0
            while got < nbytes:
                got += s.recv_into(out[got:])

        result = _median_ms(send, repeat), _median_ms(recv, repeat)
        s.close()
        return result


def rpc_transfer(endpoint: str, nbytes: int, repeat: int) -> tuple[float, float]:
    """(SET_TENSOR ms, GET_TENSOR ms) of ``nbytes`` to and from the RPC device at ``endpoint``."""
    from ggml_rpc import RPCReg, disconnect_all

    dev = RPCReg(endpoint).devices[0]
    ctx = Context()
    t = ctx.new_tensor("i8", (nbytes,))
    buf = alloc_ctx_tensors(ctx, dev.buffer_type())
    data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
    out = np.empty(nbytes, np.uint8)

    def put() -> None:
        buf.set_tensor(t, memoryview(data))
        dev.conn.sync()

    def get() -> None:
        buf.get_tensor(t, memoryview(out))

    result = _median_ms(put, repeat), _median_ms(get, repeat)
    assert np.array_equal(out, data)
    buf.free()
    disconnect_all()
    return result


def per_token(endpoint: str | None, tokens: int, model: Path) -> tuple[float, dict[str, float]]:
    """(median ms per decoded token, commands per token) on the CPU alone (None) or split with ``endpoint``."""
    import os

    from ggml_core.models import Model, ModelParams, PlacementRequest
    from ggml_rpc import disconnect_all

    if endpoint:
        os.environ["GGML_RPC_SERVERS"] = endpoint
    else:
        os.environ.pop("GGML_RPC_SERVERS", None)
    reset_registry()
    devices = ["CPU"]
    if endpoint:
        devices.append(get_registry().get_reg(f"RPC[{endpoint}]").devices[0].name)
    params = ModelParams(
        placement=PlacementRequest(devices=devices, tensor_split=[1, 1] if endpoint else None),
        n_ctx=256,
        progress=False,
    )
    counts: dict[str, float] = {}
    with Model.load(model, params) as m:
        m.process_prompt([1, 2, 3, 4])
        m.decode([5])  # warm-up: the first decode graph is planned and sent
        conn = getattr(m.placement.devices[0], "conn", None) if endpoint else None
        before = dict(conn.counts) if conn is not None else {}
        times = []
        for i in range(tokens):
            t0 = time.perf_counter()
            m.decode([6 + i % 50])
            times.append((time.perf_counter() - t0) * 1e3)
        if conn is not None:
            counts = {k: (v - before.get(k, 0)) / tokens for k, v in conn.counts.items() if v - before.get(k, 0)}
    disconnect_all()
    return statistics.median(times), counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--mib", type=int, default=64, help="MiB per transfer (default 64)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per median (default 5)")
    ap.add_argument("--tokens", type=int, default=16, help="decode steps per model measurement (default 16)")
    ap.add_argument("--llama-cpp", action="store_true", help="also against llama.cpp's ggml-rpc-server (if built)")
    args = ap.parse_args()
    nbytes = args.mib << 20
    gb = nbytes / 1e9

    print(f"loopback transfers of {args.mib} MiB, medians of {args.repeat}")
    raw_put, raw_get = raw_socket(nbytes, args.repeat)
    rows = [("raw socket", raw_put, raw_get)]
    servers: list[tuple[str, Callable[[], Iterator[str]]]] = [("ggml-core rpc-server", _ours)]
    if args.llama_cpp:
        exe = Path.home() / ".cache" / "ggml-core" / "llama-rpc-server-0c1e570" / "ggml-rpc-server"
        if exe.is_file():
            port = str(_free_port())
            servers.append(("llama.cpp ggml-rpc-server", lambda: _llama(exe, port)))
        else:
            print(f"  (no llama.cpp server at {exe}: run the interop test once to build it)")
    endpoints = {}
    for name, start in servers:
        with start() as ep:
            put, get = rpc_transfer(ep, nbytes, args.repeat)
        rows.append((name, put, get))
        endpoints[name] = start
    print(f"  {'':28}{'SET (GB/s)':>12}{'vs raw':>8}{'GET (GB/s)':>12}{'vs raw':>8}")
    for name, put, get in rows:
        print(f"  {name:28}{gb / put * 1e3:12.2f}{raw_put / put:8.2f}{gb / get * 1e3:12.2f}{raw_get / get:8.2f}")

    from ggml_core.models.default_model import write_default_model

    with tempfile.TemporaryDirectory() as tmp:
        model = write_default_model(Path(tmp) / "default.gguf")
        print(f"\nper decoded token, default model (4 layers), medians of {args.tokens} tokens")
        cpu_ms, _ = per_token(None, args.tokens, model)
        print(f"  {'CPU alone':36}{cpu_ms:9.2f} ms")
        for name, start in servers:
            with start() as ep:
                ms, counts = per_token(ep, args.tokens, model)
            what = ", ".join(f"{k} {v:g}" for k, v in sorted(counts.items()))
            print(f"  {'CPU + ' + name:36}{ms:9.2f} ms  (+{ms - cpu_ms:.2f} ms per token; per token: {what})")
    reset_registry()
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _llama(exe: Path, port: str) -> Iterator[str]:
    import socket

    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", port, "-t", "2"], stdout=subprocess.DEVNULL)
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
