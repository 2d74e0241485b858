"""Tensor parallelism over RPC servers: one model on one server against two servers under ``-sm tensor`` and
``-sm layer``, prompt and generation tokens/s measured in the same run.

The model is bench_e2e.py's llama (512 wide, 4 layers, 8 heads and 8 KV heads, n_ff 1536, vocabulary 4096, random
weights in ``--type``), written once into a temporary directory. Two ``ggml-core rpc-server --device CPU -t 1``
processes serve on 127.0.0.1 (stopped at the end, also on errors); this process is the client (``n_threads`` 1).
Three configurations are loaded at once and measured in rotation, one repetition of each per round, so that the
load of a shared machine hits all of them alike:

- ``1 server``: every layer on the first server (``--device RPC0``);
- ``2 servers -sm tensor``: every layer split 1:1 over both servers (KV heads and feed-forward width);
- ``2 servers -sm layer``: the layers split 1:1 over both servers (``--device RPC0,RPC1``, ``-ts 1,1``).

pp: one ``--n-prompt``-token prompt in one batch on an empty cache; tg: ``--n-gen`` single-token steps on an empty
cache (as llama-bench). Each row gives medians of ``--reps`` repetitions and the ratio to ``1 server``. The
scheduler does not time its splits, so for each configuration the decode step's (one token) splits (in all and per
backend), the all-reduces and the bytes copied between devices per token are printed from the scheduler's plan,
with the CPU time of the client + the two servers per prompt and per generated token (user + system, from
``/proc``, in 10 ms ticks: what the processes computed or spent on the protocol, against the wall time).

Usage: ``python benchmarks/bench_tp.py [--type q8_0] [--n-prompt 128] [--n-gen 16] [--reps 3] [--json PATH]``;
the results go to ``benchmarks/results/bench_tp.json`` as JSON.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Final

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import Results, add_json_option
from bench_e2e import SHAPE, write_bench_model

CONFIGS: Final = ("1 server", "2 servers -sm tensor", "2 servers -sm layer")


@contextmanager
def rpc_server(threads: int) -> Iterator[tuple[str, int]]:
    """(address, process id) of a ``ggml-core rpc-server`` serving the CPU with ``threads`` threads on 127.0.0.1 (a
    port it picks); the process is stopped on exit."""
    cmd = [sys.executable, "-m", "ggml_core.cli", "rpc-server", "--host", "127.0.0.1", "--port", "0"]
    cmd += ["--device", "CPU", "-t", str(threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the server prints "endpoint : HOST:PORT" once it listens
            if line.strip().startswith("endpoint"):
                yield line.split(":", 1)[1].strip(), proc.pid
                return
        raise RuntimeError(f"rpc-server exited (code {proc.wait()}) before printing its endpoint")
    finally:
        proc.kill()  # it holds nothing worth a clean shutdown
        proc.wait()


def _params(config: str, devices: list[str]) -> Any:
    from ggml_core.models import ModelParams, PlacementRequest

    if config == "1 server":
        req = PlacementRequest(devices=devices[:1])
    elif config.endswith("tensor"):
        req = PlacementRequest(devices=devices, split_mode="tensor", tensor_split=(1, 1))
    else:
        req = PlacementRequest(devices=devices, split_mode="layer", tensor_split=(1, 1))
    return ModelParams(placement=req, n_ctx=SHAPE["n_ctx"], n_threads=1, progress=False)


def _cpu_s(pids: list[int]) -> np.ndarray:
    """User + system CPU seconds of this process and of the servers ``pids`` together (Linux ``/proc``)."""
    servers = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        servers += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return np.array([time.process_time(), servers])


def _pp(m: Any, prompt: list[int]) -> float:
    m.reset()
    t0 = time.perf_counter()
    m.process_prompt(prompt)
    return len(prompt) / (time.perf_counter() - t0)


def _tg(m: Any, prompt: list[int], n_gen: int) -> float:
    m.reset()
    t0 = time.perf_counter()
    for tok in prompt[:n_gen]:
        m.decode([tok])
    return n_gen / (time.perf_counter() - t0)


def _timed(fn: Any, pids: list[int], acc: list[np.ndarray]) -> float:
    """``fn()``, adding the CPU seconds of this process and of the servers it took to ``acc``."""
    c0 = _cpu_s(pids)
    out = float(fn())
    acc.append(_cpu_s(pids) - c0)
    return out


def _per_token(m: Any) -> dict[str, Any]:
    """The last graph's (a decode step's) splits (and per backend), input copies, bytes copied and all-reduces per
    compute."""
    plan = m.executor.plan()
    tp = m.executor.tensor_parallel
    owner = tp.owner if tp is not None else None
    return {
        "splits": plan.n_splits,
        "splits_per_backend": dict(Counter(s.backend for s in plan.splits)),
        "copies": plan.n_copies,
        "bytes_copied": plan.bytes_copied,
        "all_reduces": owner.n_all_reduces if owner is not None else 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--type", default="q8_0", help="weight type of the matrices (default q8_0)")
    ap.add_argument("--n-prompt", type=int, default=128)
    ap.add_argument("--n-gen", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    add_json_option(ap, "bench_tp")
    args = ap.parse_args()

    from ggml_core.backend.registry import get_registry, reset_registry
    from ggml_core.models import Model

    res = Results("bench_tp", vars(args) | {"shape": SHAPE, "server_threads": 1, "client_threads": 1})
    print(f"# CPU: {res.data['machine']['cpu']} ({res.data['machine']['cores']} cores)")
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, SHAPE["n_vocab"], max(args.n_prompt, args.n_gen)).tolist()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        path = write_bench_model(Path(tmp) / f"bench-llama-{args.type}.gguf", args.type)
        servers = [stack.enter_context(rpc_server(1)) for _ in range(2)]
        addresses, pids = [a for a, _ in servers], [p for _, p in servers]
        os.environ["GGML_RPC_SERVERS"] = ",".join(addresses)
        reset_registry()
        devices = [get_registry().get_reg(f"RPC[{a}]").devices[0].name for a in addresses]
        models = {c: stack.enter_context(Model.load(path, _params(c, devices))) for c in CONFIGS}
        for m in models.values():  # warm-up: graph build, split, allocation for both batch shapes
            _pp(m, prompt[: args.n_prompt])
            _tg(m, prompt, 2)
        pp: dict[str, list[float]] = {c: [] for c in CONFIGS}
        tg: dict[str, list[float]] = {c: [] for c in CONFIGS}
        # CPU seconds (client, servers) of the pp and of the tg runs
        cpu_pp: dict[str, list[np.ndarray]] = {c: [] for c in CONFIGS}
        cpu: dict[str, list[np.ndarray]] = {c: [] for c in CONFIGS}
        for _ in range(args.reps):
            for c, m in models.items():
                pp[c].append(_timed(lambda m=m: _pp(m, prompt[: args.n_prompt]), pids, cpu_pp[c]))
            for c, m in models.items():
                tg[c].append(_timed(lambda m=m: _tg(m, prompt, args.n_gen), pids, cpu[c]))
        per_token = {c: _per_token(m) for c, m in models.items()}

    base_pp, base_tg = statistics.median(pp[CONFIGS[0]]), statistics.median(tg[CONFIGS[0]])
    print(f"# {args.type}, pp{args.n_prompt}, tg{args.n_gen}, medians of {args.reps}; servers and client 1 thread")
    head = f"{'configuration':<22} {'pp t/s':>8} {'×':>5} {'tg t/s':>8} {'×':>5} {'tg ms/tok':>9} {'CPU ms/tok':>14}"
    print(head + f" {'splits':>6} {'all-red':>7} {'KiB copied/tok':>14}")
    for c in CONFIGS:
        p, g, t = statistics.median(pp[c]), statistics.median(tg[c]), per_token[c]
        cl, sv = (float(v) for v in np.median(np.array(cpu[c]), axis=0) * 1e3 / args.n_gen)
        print(
            f"{c:<22} {p:8.1f} {p / base_pp:5.2f} {g:8.1f} {g / base_tg:5.2f} {1e3 / g:9.2f} {cl:6.2f} + {sv:5.2f} "
            f"{t['splits']:>6} {t['all_reduces']:>7} {t['bytes_copied'] / 1024:14.1f}"
        )
        res.add(
            args.type, c, pp_tokens_per_s=p, tg_tokens_per_s=g, pp_ratio=p / base_pp, tg_ratio=g / base_tg,
            pp_all=pp[c], tg_all=tg[c], tg_client_cpu_ms_per_token=cl, tg_servers_cpu_ms_per_token=sv,
            decode_splits=t["splits"], decode_copies=t["copies"], decode_bytes_copied=t["bytes_copied"],
            decode_splits_per_backend=t["splits_per_backend"], all_reduces_per_token=t["all_reduces"],
        )  # fmt: skip
    for c in CONFIGS:
        pcl, psv = (float(v) for v in np.median(np.array(cpu_pp[c]), axis=0) * 1e3)
        res.data["rows"][CONFIGS.index(c)].update(pp_client_cpu_ms=round(pcl, 3), pp_servers_cpu_ms=round(psv, 3))
        print(
            f"# {c}: pp{args.n_prompt} {1e3 * args.n_prompt / statistics.median(pp[c]):.1f} ms wall, CPU "
            f"{pcl:.1f} + {psv:.1f} ms; decode splits per backend {per_token[c]['splits_per_backend']}"
        )
    res.write_json(args.json)


if __name__ == "__main__":
    main()
