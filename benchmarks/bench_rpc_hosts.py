"""RPC across hosts: a model split over 2 and 3 server hosts behind (delay, rate) links, ggml-core's client with
ggml-core's servers (with server-to-server copies, and without: ``--no-peer-copy``) and with llama.cpp's
``ggml-rpc-server``, and llama.cpp's client (``llama-bench --rpc``) with both servers.

Usage (as root, with iproute2): ``python benchmarks/bench_rpc_hosts.py [--hosts 2,3] [--prompt 64] [--tokens 64]
[--repeat 5] [--model PATH] [--links 0,1,2,3] [--no-llama-client] [--json PATH]``; the results also go to
``benchmarks/results/bench_rpc_hosts.json``.

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
  counters), and the same counted by the hosts' relays: turns (an answer after a request on a connection: a round
  trip for a client that waits for each answer; a client that reads an answer later is seen making more) and bytes
  each way.

llama.cpp's client: ``llama-bench -m MODEL --rpc ENDPOINTS -ngl 99 -ts 1/1[/1] -fa 0 -t 1 -p P -n N -r R`` (built
on first use by :func:`ggml_core.testing.llama_cpp.llama_bench`, 13-20 minutes), on the same bed after ggml-core's
client, against the ``ggml-core rpc-server`` hosts and the llama.cpp hosts. ``-ts`` with equal shares gives the
split ggml-core's client makes (both place layer ``i`` of ``n + 1`` slots, the output last, on the device whose
cumulative share first exceeds ``i / (n + 1)``; the token embeddings stay on the client's CPU). Its prompt and
generation tokens/s are from the median of its per-repetition times: prompts from a run of prompts alone (``-n 0``),
generation over two runs without prompts, ``-n N`` and ``-n 2N``. Its traffic per generated token is the relays'
difference between those two runs over the ``R * N`` extra tokens, so that the load, the context, the warm-ups and
the per-run commands cancel.

llama.cpp's server runs with one thread (``-t 1``), ours with ``--threads 1``: the machine has two cores for the
client and all the hosts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ggml_core.backend.registry import get_registry, reset_registry
from ggml_core.models import Model, ModelParams, PlacementRequest
from ggml_core.models.default_model import write_default_model
from ggml_core.testing.llama_cpp import Unavailable, llama_bench
from ggml_rpc import disconnect_all
from ggml_rpc.testing import (
    Host,
    Link,
    NetBed,
    ServerArgv,
    Traffic,
    ggml_core_server,
    llama_cpp_server,
    netbed_unavailable,
)

LINKS = (Link(0.0001, 10_000_000_000), Link(0.001, 1_000_000_000), Link(0.005, 100_000_000))
#: the client far from the hosts, the hosts near each other (a rack reached over a slow link)
CLUSTER, CLUSTER_PEER_DELAY = Link(0.005, 100_000_000), 0.0001
LLAMA_SERVER = Path.home() / ".cache" / "ggml-core" / "llama-rpc-server-0c1e570" / "ggml-rpc-server"
#: the server kinds llama.cpp's client is measured with
LLAMA_CLIENT_SERVERS = ("ggml-core rpc-server", "llama.cpp ggml-rpc-server")
#: the ``--rpc`` client has this many seconds for one ``llama-bench`` run
LLAMA_BENCH_TIMEOUT = 900.0


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


def _per_token(traffic: Traffic, tokens: int) -> dict[str, float]:
    return {
        "relay_turns_per_token": traffic.turns / tokens,
        "relay_sent_per_token": traffic.sent / tokens,
        "relay_received_per_token": traffic.received / tokens,
    }


def measure(
    model_path: Path,
    placements: dict[str, list[str]],
    prompt: int,
    tokens: int,
    repeat: int,
    relays: dict[str, Callable[[], Traffic]] | None = None,
) -> dict[str, dict[str, float]]:
    """Prompt and generation tokens/s and per-token traffic of the model split over each entry's devices.

    Every placement is loaded at once and measured in rotation (one prompt, or one decode step, each in turn), so
    that the load of a shared machine hits them alike; tokens/s are from the median prompt and step times.
    ``relays`` (by placement) read what crossed its hosts' relays: the generation's share goes in as well."""
    relays = relays or {}
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
        relayed_before = {name: read() for name, read in relays.items()}
        tg: dict[str, list[float]] = {name: [] for name in models}
        for i in range(tokens):
            for name, m in models.items():
                t0 = time.perf_counter()
                m.decode([10 + i % 100])
                tg[name].append(time.perf_counter() - t0)
        after = _counters(models)
        relayed = {name: read() - relayed_before[name] for name, read in relays.items()}
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
            **(_per_token(relayed[name], tokens) if name in relayed else {}),
        }
        for name in models
    }


def _relayed(address: str, port: int, peer: str = "") -> list[str]:
    """``ggml-core rpc-server`` without server-to-server copies: activations go through the client (as with
    llama.cpp's server)."""
    return [*ggml_core_server(address, port), "--no-peer-copy"]


def _llama_bench_run(
    exe: Path, model_path: Path, endpoints: Sequence[str], prompt: int, tokens: int, repeat: int
) -> tuple[list[float], list[float]]:
    """One ``llama-bench`` run (``prompt`` or ``tokens`` 0: no such test): (seconds per prompt, seconds per generated
    token), one entry per repetition."""
    split = "/".join("1" for _ in endpoints)
    cmd = [str(exe), "-m", str(model_path), "--rpc", ",".join(endpoints), "-ngl", "99", "-ts", split, "-fa", "0",
           "-t", "1", "-p", str(prompt), "-n", str(tokens), "-r", str(repeat), "-o", "json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LLAMA_BENCH_TIMEOUT, check=False)
    if proc.returncode:
        raise RuntimeError(f"llama-bench failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
    pp: list[float] = []
    tg: list[float] = []
    for test in json.loads(proc.stdout):
        n_gen = int(test["n_gen"])
        for ns in test["samples_ns"]:
            if n_gen:
                tg.append(ns / 1e9 / n_gen)
            else:
                pp.append(ns / 1e9)
    return pp, tg


def llama_client(
    exe: Path, model_path: Path, bed: NetBed, hosts: list[Host], prompt: int, tokens: int, repeat: int
) -> dict[str, float]:
    """llama.cpp's client on ``hosts``: prompt tokens/s from a run of prompts alone; generation tokens/s over runs
    with ``-n tokens`` and ``-n 2*tokens`` (no prompt), and the relays' traffic per generated token from the
    difference between those two."""
    endpoints = [h.endpoint for h in hosts]
    total = _relay_reader(bed, hosts)
    pp, _ = _llama_bench_run(exe, model_path, endpoints, prompt, 0, repeat)
    tg: list[float] = []
    crossed: list[Traffic] = []
    for n in (tokens, 2 * tokens):  # one test, one context each: the runs differ only by the extra tokens
        before = total()
        tg += _llama_bench_run(exe, model_path, endpoints, 0, n, repeat)[1]
        crossed.append(_settled(total, hosts[0].link.delay) - before)
    extra = repeat * tokens
    return {
        "prompt_tok_s": prompt / statistics.median(pp),
        "gen_tok_s": 1 / statistics.median(tg),
        **_per_token(crossed[1] - crossed[0], extra),
    }


def on_bed(
    model_path: Path,
    link: Link,
    n: int,
    servers: dict[str, ServerArgv],
    peer_delay: float | None = None,
    llama_bench: Path | None = None,
    **kw: int,
) -> dict[tuple[str, str], dict[str, float]]:
    """``measure`` with the model over ``n`` hosts behind ``link`` (``peer_delay`` apart: default the star's two
    links) for each kind of server (``n`` hosts each, all in one bed and measured in rotation), then ``llama_bench``
    (llama.cpp's client) on the hosts of :data:`LLAMA_CLIENT_SERVERS`. Keys: (client, server)."""
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
            relays = {name: _relay_reader(bed, hs) for name, hs in hosts.items()}
            out = {("ggml-core", k): r for k, r in measure(model_path, placements, relays=relays, **kw).items()}
        finally:
            disconnect_all()
            os.environ.pop("GGML_RPC_SERVERS", None)
            reset_registry()
        for name in LLAMA_CLIENT_SERVERS:
            if llama_bench is not None and name in hosts:
                out["llama.cpp", name] = llama_client(llama_bench, model_path, bed, hosts[name], **kw)
        return out


def _relay_reader(bed: NetBed, hosts: list[Host]) -> Callable[[], Traffic]:
    return lambda: sum((bed.traffic(h) for h in hosts), Traffic(0, 0, 0, 0, 0))


def _settled(total: Callable[[], Traffic], delay: float) -> Traffic:
    """``total()`` once it stops changing: the answers to a client's last commands (the frees as it exits) may
    still be on their way when it has gone."""
    last = total()
    while True:
        time.sleep(0.2 + 4 * delay)
        now = total()
        if now == last:
            return now
        last = now


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--hosts", default="2,3", help="host counts (default 2,3)")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens (default 64)")
    ap.add_argument("--tokens", type=int, default=64, help="generated tokens per pairing (default 64)")
    ap.add_argument("--repeat", type=int, default=5, help="prompts per pairing (default 5)")
    ap.add_argument("--model", type=Path, help="a GGUF model (default: the embedded default model)")
    ap.add_argument("--links", default="0,1,2,3", help="which links, by row: 0.1 ms, 1 ms, 5 ms, 5 ms near peers")
    ap.add_argument("--no-llama-client", action="store_true", help="leave out llama.cpp's client (llama-bench)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _util import Results, add_json_option

    add_json_option(ap, "bench_rpc_hosts")
    args = ap.parse_args()
    why = netbed_unavailable()
    if why is not None:
        print(f"bench_rpc_hosts: cannot build the host bed: {why}", file=sys.stderr)
        return 2
    model_path = args.model or write_default_model(Path(os.environ.get("TMPDIR", "/tmp")) / "bench_rpc_hosts.gguf")
    exe: Path | None = None
    if not args.no_llama_client:
        try:
            exe = llama_bench()
        except Unavailable as exc:
            print(f"  (no llama-bench: {exc})")
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
    print(f"  {'link':38}{'hosts':>6} {'client':10}{'server':27}{'pp tok/s':>9}{'tg tok/s':>9}{'RT/tok':>7}"
          f"{'turns/tok':>10}{'sent/tok':>9}{'recv/tok':>9}")  # fmt: skip
    rows = [*((link, None) for link in LINKS), (CLUSTER, CLUSTER_PEER_DELAY)]
    for link, peer_delay in (rows[int(i)] for i in args.links.split(",")):
        where = str(link) if peer_delay is None else f"{link}, hosts {peer_delay * 1e3:g} ms apart"
        for n in (int(x) for x in args.hosts.split(",")):
            for (client, name), r in on_bed(model_path, link, n, servers, peer_delay, exe, **kw).items():
                out.add(where, f"{n} hosts, {client} client, {name}", link_delay_ms=link.delay * 1e3,
                        link_rate_bit_s=link.rate, hosts=n, server=name, client=client,
                        peer_delay_ms=(2 * link.delay if peer_delay is None else peer_delay) * 1e3, **r)  # fmt: skip
                rt = f"{r['round_trips_per_token']:7.1f}" if "round_trips_per_token" in r else f"{'-':>7}"
                print(f"  {where:38}{n:>6} {client:10}{name:27}{r['prompt_tok_s']:9.0f}{r['gen_tok_s']:9.1f}{rt}"
                      f"{r['relay_turns_per_token']:10.2f}{r['relay_sent_per_token']:9.0f}"
                      f"{r['relay_received_per_token']:9.0f}", flush=True)  # fmt: skip
    out.write_json(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
