"""RPC across hosts: a model split over 2 and 3 server hosts behind (delay, rate) links, ggml-core's client with
ggml-core's servers (with server-to-server copies, and without: ``--no-peer-copy``) and with llama.cpp's
``ggml-rpc-server``.

Usage (as root, with iproute2): ``python benchmarks/bench_rpc_hosts.py [--hosts 2,3] [--prompt 64] [--tokens 64]
[--repeat 5] [--model PATH] [--json PATH]``; the results also go to ``benchmarks/results/bench_rpc_hosts.json``.

The hosts are network namespaces on this machine (``ggml_rpc.testing.NetBed``): each server runs in its own namespace
behind a veth pair with a ``tbf`` rate on both ends and a relay that holds each chunk for the link's delay in each
direction (a round trip costs twice the delay); servers reach each other (server-to-server copies) through a relay
holding each chunk for twice the delay, the two links between two hosts of this star. Links: (0.1 ms, 10 Gbit/s), (1 ms,
1 Gbit/s), (5 ms, 100 Mbit/s), and (5 ms, 100 Mbit/s) to hosts 0.1 ms apart (a rack far from the client). The model (the
embedded default model unless ``--model``) is split by layers over the hosts' devices (equal shares; the client's CPU
holds none). For each link and host count, one bed holds the hosts of every kind of server (``n`` each) and the
placements are loaded at once and measured in rotation, so that the load of the shared machine hits them alike. Per
pairing, after a warm-up prompt and two decode steps:

- prompt tokens/s: ``--prompt`` tokens over the median of ``--repeat`` prompts (each one batch);
- generation tokens/s: one over the median time of ``--tokens`` decode steps, one token each;
- round trips, bytes sent and received per generated token, summed over every server connection (the client's own
  counters).

llama.cpp's server runs with one thread (``-t 1``), ours with ``--threads 1``: the machine has two cores for the
client and all the hosts. llama.cpp's own client (``llama-bench --rpc``) is not measured: it needs a full llama.cpp
build with ``GGML_RPC=ON``, which this bench does not make.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from ggml_core.backend.registry import get_registry, reset_registry
from ggml_core.models import Model, ModelParams, PlacementRequest
from ggml_core.models.default_model import write_default_model
from ggml_rpc import disconnect_all
from ggml_rpc.testing import Link, NetBed, ServerArgv, ggml_core_server, llama_cpp_server, netbed_unavailable

LINKS = (Link(0.0001, 10_000_000_000), Link(0.001, 1_000_000_000), Link(0.005, 100_000_000))
#: the client far from the hosts, the hosts near each other (a rack reached over a slow link)
CLUSTER, CLUSTER_PEER_DELAY = Link(0.005, 100_000_000), 0.0001
LLAMA_SERVER = Path.home() / ".cache" / "ggml-core" / "llama-rpc-server-0c1e570" / "ggml-rpc-server"


def _counters(models: dict[str, Model]) -> dict[str, tuple[int, int, int]]:
    out = {}
    for name, model in models.items():
        conns = {id(c): c for d in model.placement.devices if (c := getattr(d, "conn", None)) is not None}
        out[name] = (
            sum(c.round_trips for c in conns.values()),
            sum(c.bytes_sent for c in conns.values()),
            sum(c.bytes_received for c in conns.values()),
        )
    return out


def measure(
    model_path: Path, placements: dict[str, list[str]], prompt: int, tokens: int, repeat: int
) -> dict[str, dict[str, float]]:
    """Prompt and generation tokens/s and per-token traffic of the model split over each entry's devices.

    Every placement is loaded at once and measured in rotation (one prompt, or one decode step, each in turn), so
    that the load of a shared machine hits them alike; tokens/s are from the median prompt and step times."""
    ids = [1 + (i * 7) % 200 for i in range(prompt)]
    models: dict[str, Model] = {}
    try:
        for name, devices in placements.items():
            split = [1.0] * len(devices) if len(devices) > 1 else None
            req = PlacementRequest(devices=devices, tensor_split=split)
            models[name] = Model.load(model_path, ModelParams(placement=req, n_ctx=512, progress=False))
        for m in models.values():
            m.process_prompt(ids)  # warm-up: graphs planned and sent once
            m.decode([5])
            m.decode([6])
        pp: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(repeat):
            for name, m in models.items():
                m.reset()
                t0 = time.perf_counter()
                m.process_prompt(ids)
                pp[name].append(time.perf_counter() - t0)
        before = _counters(models)
        tg: dict[str, list[float]] = {name: [] for name in models}
        for i in range(tokens):
            for name, m in models.items():
                t0 = time.perf_counter()
                m.decode([10 + i % 100])
                tg[name].append(time.perf_counter() - t0)
        after = _counters(models)
    finally:
        for m in models.values():
            m.close()
    return {
        name: {
            "prompt_tok_s": prompt / statistics.median(pp[name]),
            "gen_tok_s": 1 / statistics.median(tg[name]),
            "round_trips_per_token": (after[name][0] - before[name][0]) / tokens,
            "bytes_sent_per_token": (after[name][1] - before[name][1]) / tokens,
            "bytes_received_per_token": (after[name][2] - before[name][2]) / tokens,
        }
        for name in models
    }


def _relayed(address: str, port: int, peer: str = "") -> list[str]:
    """``ggml-core rpc-server`` without server-to-server copies: activations go through the client (as with
    llama.cpp's server)."""
    return [*ggml_core_server(address, port), "--no-peer-copy"]


def on_bed(
    model_path: Path,
    link: Link,
    n: int,
    servers: dict[str, ServerArgv],
    peer_delay: float | None = None,
    **kw: int,
) -> dict[str, dict[str, float]]:
    """``measure`` with the model over ``n`` hosts behind ``link`` (``peer_delay`` apart: default the star's two
    links) for each kind of server (``n`` hosts each, all in one bed and measured in rotation)."""
    with NetBed() as bed:
        hosts = {
            name: [bed.add_host(link, server, peer_delay=peer_delay) for _ in range(n)]
            for name, server in servers.items()
        }
        os.environ["GGML_RPC_SERVERS"] = ",".join(h.endpoint for hs in hosts.values() for h in hs)
        reset_registry()
        try:
            reg = get_registry()
            placements = {
                name: [reg.get_reg(f"RPC[{h.endpoint}]").devices[0].name for h in hs] for name, hs in hosts.items()
            }
            return measure(model_path, placements, **kw)
        finally:
            disconnect_all()
            os.environ.pop("GGML_RPC_SERVERS", None)
            reset_registry()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--hosts", default="2,3", help="host counts (default 2,3)")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens (default 64)")
    ap.add_argument("--tokens", type=int, default=64, help="generated tokens per pairing (default 64)")
    ap.add_argument("--repeat", type=int, default=5, help="prompts per pairing (default 5)")
    ap.add_argument("--model", type=Path, help="a GGUF model (default: the embedded default model)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _util import Results, add_json_option

    add_json_option(ap, "bench_rpc_hosts")
    args = ap.parse_args()
    why = netbed_unavailable()
    if why is not None:
        print(f"bench_rpc_hosts: cannot build the host bed: {why}", file=sys.stderr)
        return 2
    model_path = args.model or write_default_model(Path(os.environ.get("TMPDIR", "/tmp")) / "bench_rpc_hosts.gguf")
    out = Results("bench_rpc_hosts", {k: str(v) for k, v in vars(args).items() if k != "json"})
    mach = out.data["machine"]
    print(f"# {mach['cpu']}, {mach['cores']} cores, load {mach['load_average']}")
    kw = {"prompt": args.prompt, "tokens": args.tokens, "repeat": args.repeat}
    local = measure(model_path, {"CPU": ["CPU"]}, **kw)["CPU"]
    out.add("local", "CPU alone", **local)
    print(f"  CPU alone: prompt {local['prompt_tok_s']:.0f} tok/s, generation {local['gen_tok_s']:.1f} tok/s")
    servers: dict[str, ServerArgv] = {"ggml-core rpc-server": ggml_core_server, "ggml-core, relayed": _relayed}
    if LLAMA_SERVER.is_file():
        servers["llama.cpp ggml-rpc-server"] = llama_cpp_server(LLAMA_SERVER)
    else:
        print(f"  (no llama.cpp server at {LLAMA_SERVER}: run the RPC interop test once to build it)")
    print(f"  {'link':38}{'hosts':>6} {'server':28}{'pp tok/s':>10}{'tg tok/s':>10}{'RT/tok':>8}{'sent/tok':>10}"
          f"{'recv/tok':>10}")  # fmt: skip
    for link, peer_delay in [*((link, None) for link in LINKS), (CLUSTER, CLUSTER_PEER_DELAY)]:
        where = str(link) if peer_delay is None else f"{link}, hosts {peer_delay * 1e3:g} ms apart"
        for n in (int(x) for x in args.hosts.split(",")):
            for name, r in on_bed(model_path, link, n, servers, peer_delay, **kw).items():
                out.add(where, f"{n} hosts, {name}", link_delay_ms=link.delay * 1e3, link_rate_bit_s=link.rate,
                        peer_delay_ms=(2 * link.delay if peer_delay is None else peer_delay) * 1e3, hosts=n,
                        server=name, client="ggml-core", **r)  # fmt: skip
                print(f"  {where:38}{n:>6} {name:28}{r['prompt_tok_s']:10.0f}{r['gen_tok_s']:10.1f}"
                      f"{r['round_trips_per_token']:8.1f}{r['bytes_sent_per_token']:10.0f}"
                      f"{r['bytes_received_per_token']:10.0f}")  # fmt: skip
    out.write_json(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
