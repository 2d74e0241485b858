"""``ggml-core rpc-server``: serve local devices over ggml's RPC protocol 7.0.0 (llama.cpp's ``--rpc`` can use it).

The protocol has no authentication: the server binds to 127.0.0.1 unless ``--host`` says otherwise, and then warns
unless it was given both ``--token FILE`` and TLS (``--tls-cert FILE --tls-key FILE``).
The plugin contributes the command through the ``ggml_register_commands`` hook (:mod:`ggml_rpc.plugin`); this
module is imported only when ``ggml-core`` builds its parser, and the server modules only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final

from ggml_core.cli.args import MAX_THREADS, directory, float_in, int_in, names

__all__ = ["add_parser", "loopback_warning", "run"]

#: --max-clients above this is a typo (each client is a thread)
MAX_CLIENTS: Final = 4096


def loopback_warning(host: str, *, token: bool = False, tls: bool = False) -> str | None:
    """The warning printed when ``host`` is not a loopback address and the server lacks a token or TLS (None for
    loopback, or with both)."""
    from ggml_rpc.server import is_loopback

    if is_loopback(host) or (token and tls):
        return None
    bar = "!" * 72
    if not token:
        risk = (
            f"{'no authentication and no encryption' if not tls else 'no authentication (--token)'}: anyone who "
            "can reach this port can\nallocate memory and run graphs here. Never expose it to an open network,"
        )
    else:
        risk = "a token but no encryption (--tls-cert/--tls-key): anyone on the path can read the token,"
    return (
        f"\n{bar}\nWARNING: binding to {host!r}, which is not loopback, with {risk}\n"
        "or give --token FILE and --tls-cert FILE --tls-key FILE.\n"
        f"{bar}\n"
    )


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(
        name,
        help="serve local devices over ggml's RPC protocol (llama.cpp --rpc compatible)",
        description=(
            "Serve local devices over ggml's RPC protocol 7.0.0: ggml-core clients (--rpc, GGML_RPC_SERVERS) and "
            "llama.cpp (--rpc) can use them.\n\nThe protocol has no authentication: the server binds to 127.0.0.1 "
            "unless --host says otherwise, and then warns."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", "-H", default="127.0.0.1", help="address to bind (default 127.0.0.1; see the warning)")
    p.add_argument(
        "--port", "-p", type=int_in(0, 65535), default=50052, help="port (default 50052; 0 picks a free one)"
    )
    p.add_argument(
        "--device",
        "-d",
        type=names,
        action="extend",
        help="devices to serve, e.g. OpenCL0,CPU (default: every accelerator, else the CPU)",
    )
    p.add_argument(
        "--cache-dir",
        "-c",
        type=directory,
        help="directory of the tensor cache used by SET_TENSOR_HASH (default: none)",
    )
    p.add_argument("--threads", "-t", type=int_in(1, MAX_THREADS), help="threads per backend")
    p.add_argument(
        "--max-clients",
        type=int_in(1, MAX_CLIENTS),
        default=4,
        help="connections served at once; more are refused (default 4)",
    )
    positive = float_in(0.0, None, lo_open=True)
    p.add_argument(
        "--max-memory", type=positive, help="MiB all clients may allocate per device (default: its memory less 1/8)"
    )
    p.add_argument("--max-client-memory", type=positive, help="MiB one connection may allocate (default: --max-memory)")
    p.add_argument("--idle-timeout", type=positive, help="seconds a client may stay silent (default: no limit)")
    p.add_argument("--frame-timeout", type=positive, default=60.0, help="seconds per message on top of its size (60)")
    p.add_argument("--min-rate", type=positive, default=1024.0, help="KiB/s every message must at least move (1024)")
    p.add_argument("--hello-timeout", type=positive, default=10.0, help="seconds for the whole HELLO (10)")
    p.add_argument("--cache-max", type=positive, default=8192.0, help="MiB the --cache-dir may hold (8192; LRU)")
    p.add_argument(
        "--cache-min",
        type=float_in(0.0, None),
        default=10.0,
        help="MiB a tensor must pass to be cached (10, as llama.cpp; ggml-core clients ask for every larger weight)",
    )
    p.add_argument(
        "--peer-address",
        metavar="HOST:PORT",
        help="where other ggml-core servers reach this one for server-to-server copies (default: --host:--port)",
    )
    p.add_argument(
        "--no-peer-copy", action="store_true", help="take no part in server-to-server copies (as llama.cpp's server)"
    )
    p.add_argument(
        "--token",
        metavar="FILE",
        help="require the secret in FILE from every client before HELLO (clients: GGML_RPC_TOKEN_FILE; "
        "llama.cpp's clients cannot send one)",
    )
    p.add_argument("--tls-cert", metavar="FILE", help="serve TLS only, with this PEM certificate")
    p.add_argument("--tls-key", metavar="FILE", help="the PEM private key of --tls-cert")
    p.add_argument("--verbose", "-v", action="store_true", help="log every connection and cache event")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Start the server and serve until interrupted."""
    import logging

    from ggml_core.backend.registry import get_registry
    from ggml_rpc._security import read_token, server_context
    from ggml_rpc.client import parse_endpoint
    from ggml_rpc.protocol import PROTO_VERSION, RPCConfigError
    from ggml_rpc.server import RPCServer, ServerLimits, default_devices

    if (args.tls_cert is None) != (args.tls_key is None):
        print(f"ggml-core {args.command}: error: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    if args.peer_address is not None:
        try:
            parse_endpoint(args.peer_address)
        except ValueError as exc:
            print(f"ggml-core {args.command}: error: --peer-address: {exc}", file=sys.stderr)
            return 2
    try:
        token = read_token(str(args.token), "token file (--token)") if args.token is not None else None
        tls = server_context(str(args.tls_cert), str(args.tls_key)) if args.tls_cert is not None else None
    except RPCConfigError as exc:
        print(f"ggml-core {args.command}: error: {exc}", file=sys.stderr)
        return 2

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    reg = get_registry()
    devices = [reg.get_device(n) for n in args.device] if args.device else default_devices(reg.devices())
    if not devices:
        print(
            f"ggml-core {args.command}: error: no device to serve: no accelerator and no CPU device; "
            "install ggml-cpu (pip install ggml-cpu), or pick devices with --device (see 'ggml-core devices')",
            file=sys.stderr,
        )
        return 2

    def mib(value: float | None) -> int | None:
        return int(value * 2**20) if value else None

    limits = ServerLimits(
        max_clients=args.max_clients,
        max_memory=mib(args.max_memory),
        max_bytes=mib(args.max_client_memory),
        idle_timeout=args.idle_timeout,
        frame_timeout=args.frame_timeout,
        min_rate=args.min_rate * 1024,
        hello_timeout=args.hello_timeout,
        cache_max_bytes=int(args.cache_max * 2**20),
        cache_min_bytes=int(args.cache_min * 2**20),
    )
    warning = loopback_warning(args.host, token=token is not None, tls=tls is not None)
    if warning:
        print(warning, file=sys.stderr)
    cache_dir = str(args.cache_dir) if args.cache_dir is not None else None
    server = RPCServer(
        devices, args.host, args.port, cache_dir=cache_dir, limits=limits, n_threads=args.threads, token=token,
        tls=tls, peer_copy=not args.no_peer_copy, peer_address=args.peer_address,
    )  # fmt: skip
    try:
        server.bind()
    except OSError as exc:  # address in use, not an address of this machine, a privileged port
        print(
            f"ggml-core {args.command}: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2
    print(f"ggml-core RPC server, protocol v{'.'.join(map(str, PROTO_VERSION))}")
    print(f"  endpoint    : {'tls://' if tls is not None else ''}{server.address}")
    print(f"  token       : {'required' if token is not None else 'none'}")
    print(f"  local cache : {args.cache_dir or 'n/a'}")
    print(f"  peer copies : {server.peers.address or 'off'}")
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
