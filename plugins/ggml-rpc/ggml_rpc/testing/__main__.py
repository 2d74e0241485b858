"""``python -m ggml_rpc.testing``: start server hosts in network namespaces behind (delay, rate) links, print the
endpoints to give ``--rpc``, and keep them until interrupted (Ctrl-C, SIGTERM) or ``--seconds`` pass; then stop
everything that was started. Needs root and iproute2."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading

from ._netbed import MAX_HOSTS, Link, NetBed, NetBedError, ggml_core_server, llama_cpp_server, netbed_unavailable

_RATE_UNITS = {"kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "bit": 1}


def _rate(text: str) -> int:
    low = text.strip().lower()
    for unit, scale in _RATE_UNITS.items():
        if low.endswith(unit):
            try:
                value = float(low[: -len(unit)])
            except ValueError:
                break
            if value > 0:
                return int(value * scale)
    raise argparse.ArgumentTypeError(f"{text!r}: a rate such as 100mbit, 1gbit or 10gbit")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ggml_rpc.testing", description=__doc__)
    ap.add_argument("--hosts", type=int, default=2, choices=range(1, MAX_HOSTS + 1), metavar=f"1..{MAX_HOSTS}")
    ap.add_argument("--delay-ms", type=float, default=1.0, help="one-way delay of each link (default 1)")
    ap.add_argument("--rate", type=_rate, default=10**9, help="rate of each link, e.g. 100mbit (default 1gbit)")
    ap.add_argument("--server", default="ggml-core", help="ggml-core, or the path of llama.cpp's ggml-rpc-server")
    ap.add_argument("--seconds", type=float, help="stop after this long (default: until interrupted)")
    args = ap.parse_args(argv)
    why = netbed_unavailable()
    if why is not None:
        print(f"ggml_rpc.testing: error: {why}", file=sys.stderr)
        return 2
    if not 0 <= args.delay_ms <= 10_000:
        ap.error("--delay-ms: 0 to 10000")
    server = ggml_core_server if args.server == "ggml-core" else llama_cpp_server(args.server)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    link = Link(args.delay_ms / 1e3, args.rate)
    try:
        with NetBed() as bed:
            hosts = [bed.add_host(link, server) for _ in range(args.hosts)]
            print(f"{len(hosts)} hosts at ({link}): --rpc {','.join(h.endpoint for h in hosts)}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait(args.seconds)
    except NetBedError as exc:
        print(f"ggml_rpc.testing: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
