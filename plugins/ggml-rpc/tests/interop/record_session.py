"""Record what llama.cpp's RPC client sends to a ggml-core server, for the replay test (test_rpc_replay.py).

Runs the client harness (built by the interop test: llama_cpp_interop.py) through a recording proxy in front of a
fresh in-process ggml-core server serving the CPU, and writes every connection's bytes, both ways, gzip-compressed:
``u32 n_connections``, then per connection ``u64 n, client bytes, u64 m, server bytes``.

Usage (from the repository root)::

    python plugins/ggml-rpc/tests/interop/record_session.py \
        plugins/ggml-rpc/tests/data/llama_cpp_client_session.bin.gz
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llama_cpp_interop import llama_cpp_tools

from ggml_core import get_registry
from ggml_rpc.server import RPCServer


def _pump(src: socket.socket, dst: socket.socket, log: bytearray) -> None:
    while True:
        try:
            data = src.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
            return
        log += data
        dst.sendall(data)


def main() -> int:
    out = Path(sys.argv[1])
    tools = llama_cpp_tools()
    server = RPCServer([get_registry().get_device("CPU")], "127.0.0.1", 0).start()
    proxy = socket.create_server(("127.0.0.1", 0))
    proxy.settimeout(0.5)
    sessions: list[tuple[bytearray, bytearray]] = []
    threads: list[threading.Thread] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = proxy.accept()
            except TimeoutError:
                continue
            upstream = socket.create_connection((server.host, server.port))
            c2s, s2c = bytearray(), bytearray()
            sessions.append((c2s, s2c))
            for a, b, log in ((client, upstream, c2s), (upstream, client, s2c)):
                t = threading.Thread(target=_pump, args=(a, b, log), daemon=True)
                t.start()
                threads.append(t)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    endpoint = f"127.0.0.1:{proxy.getsockname()[1]}"
    proc = subprocess.run([str(tools.harness), endpoint, "--no-weights"], capture_output=True, text=True, timeout=600)
    print(proc.stdout)
    stop.set()
    acceptor.join()
    for t in threads:
        t.join(10)
    server.shutdown()
    blob = struct.pack("<I", len(sessions))
    for c2s, s2c in sessions:
        blob += struct.pack("<Q", len(c2s)) + bytes(c2s) + struct.pack("<Q", len(s2c)) + bytes(s2c)
    out.write_bytes(gzip.compress(blob, 9, mtime=0))
    print(f"{len(sessions)} connections, {len(blob)} bytes ({out.stat().st_size} compressed) -> {out}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
