"""``ggml-core rpc-server``: serve local devices over ggml's RPC protocol 7.0.0 (llama.cpp's ``--rpc`` can use it).

The protocol has no authentication: the server binds to 127.0.0.1 unless ``--host`` says otherwise, and then warns.
Needs the ``ggml-rpc`` plugin package. Also holds :func:`use_rpc_servers`, which ``ggml-core run --rpc`` calls.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["add_parser", "loopback_warning", "run", "use_rpc_servers"]

_MISSING = "the ggml-rpc plugin is not installed: install ggml-rpc (pip install -e plugins/ggml-rpc)"


def use_rpc_servers(endpoints: Sequence[str] | None) -> None:
    """Add ``endpoints`` to ``GGML_RPC_SERVERS`` and reload the registry so that their devices appear.

    Called before any device is enumerated (``ggml-core run --rpc host:port``); raises ``RuntimeError`` when the
    ggml-rpc plugin is not installed.
    """
    if not endpoints:
        return
    if importlib.util.find_spec("ggml_rpc") is None:
        raise RuntimeError(f"--rpc: {_MISSING}")
    from ggml_core.backend.registry import reset_registry

    known = [e.strip() for e in os.environ.get("GGML_RPC_SERVERS", "").split(",") if e.strip()]
    os.environ["GGML_RPC_SERVERS"] = ",".join(dict.fromkeys([*known, *endpoints]))
    reset_registry()


def loopback_warning(host: str) -> str | None:
    """The warning printed when ``host`` is not a loopback address (None for loopback)."""
    from ggml_rpc.server import is_loopback

    if is_loopback(host):
        return None
    bar = "!" * 72
    return (
        f"\n{bar}\nWARNING: binding to {host!r}, which is not loopback.\n"
        "ggml's RPC protocol has no authentication and no encryption: anyone who can reach this port can\n"
        "allocate memory and run graphs here. Never expose it to an open network.\n"
        f"{bar}\n"
    )


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(
        name,
        help="serve local devices over ggml's RPC protocol (llama.cpp --rpc compatible)",
        description=(
            "Serve local devices over ggml's RPC protocol 7.0.0: ggml-core clients (--rpc, GGML_RPC_SERVERS) and "
            "llama.cpp (--rpc) can use them.\n\nThe protocol has no authentication: the server binds to 127.0.0.1 "
            "unless --host says otherwise, and then warns. Needs the ggml-rpc plugin package."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", "-H", default="127.0.0.1", help="address to bind (default 127.0.0.1; see the warning)")
    p.add_argument("--port", "-p", type=int, default=50052, help="port (default 50052; 0 picks a free one)")
    p.add_argument(
        "--device",
        "-d",
        type=_names,
        action="extend",
        help="devices to serve, e.g. OpenCL0,CPU (default: every accelerator, else the CPU)",
    )
    p.add_argument("--cache-dir", "-c", help="directory of the tensor cache used by SET_TENSOR_HASH (default: none)")
    p.add_argument("--threads", "-t", type=int, help="threads per backend")
    p.add_argument("--max-clients", type=int, default=4, help="connections served at once; more are refused (4)")
    p.add_argument(
        "--max-memory", type=float, help="MiB all clients may allocate per device (default: its memory less 1/8)"
    )
    p.add_argument("--max-client-memory", type=float, help="MiB one connection may allocate (default: --max-memory)")
    p.add_argument("--idle-timeout", type=float, help="seconds a client may stay silent (default: no limit)")
    p.add_argument("--frame-timeout", type=float, default=60.0, help="seconds per message on top of its size (60)")
    p.add_argument("--min-rate", type=float, default=1024.0, help="KiB/s every message must at least move (1024)")
    p.add_argument("--hello-timeout", type=float, default=10.0, help="seconds for the whole HELLO (10)")
    p.add_argument("--cache-max", type=float, default=8192.0, help="MiB the --cache-dir may hold (8192; LRU)")
    p.add_argument("--verbose", "-v", action="store_true", help="log every connection and cache event")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Start the server and serve until interrupted."""
    if importlib.util.find_spec("ggml_rpc") is None:
        print(f"ggml-core {args.command}: {_MISSING}", file=sys.stderr)
        return 2
    from ggml_core.backend.registry import get_registry
    from ggml_rpc.protocol import PROTO_VERSION
    from ggml_rpc.server import RPCServer, ServerLimits, default_devices

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    reg = get_registry()
    devices = [reg.get_device(n) for n in args.device] if args.device else default_devices(reg.devices())
    if not devices:
        print(f"ggml-core {args.command}: no device to serve (see 'ggml-core devices')", file=sys.stderr)
        return 2

    def mib(value: float | None) -> int | None:
        return int(value * 2**20) if value else None

    for flag in ("frame_timeout", "min_rate", "hello_timeout", "cache_max"):
        if getattr(args, flag) <= 0:
            print(f"ggml-core {args.command}: --{flag.replace('_', '-')} must be positive", file=sys.stderr)
            return 2
    limits = ServerLimits(
        max_clients=max(1, args.max_clients),
        max_memory=mib(args.max_memory),
        max_bytes=mib(args.max_client_memory),
        idle_timeout=args.idle_timeout,
        frame_timeout=args.frame_timeout,
        min_rate=args.min_rate * 1024,
        hello_timeout=args.hello_timeout,
        cache_max_bytes=int(args.cache_max * 2**20),
    )
    warning = loopback_warning(args.host)
    if warning:
        print(warning, file=sys.stderr)
    server = RPCServer(devices, args.host, args.port, cache_dir=args.cache_dir, limits=limits, n_threads=args.threads)
    server.bind()
    print(f"ggml-core RPC server, protocol v{'.'.join(map(str, PROTO_VERSION))}")
    print(f"  endpoint    : {server.address}")
    print(f"  local cache : {args.cache_dir or 'n/a'}")
    print("  devices     :")
    for i, d in enumerate(devices):
        free, total = d.memory()
        grant = server.memory[i].total >> 20
        print(f"    {i}: {d.name}: {d.description} ({total >> 20} MiB, {free >> 20} MiB free, grants {grant} MiB)")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr)
    finally:
        server.shutdown()
    return 0
