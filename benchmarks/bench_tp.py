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

The all-reduce time per token: a chain of steps ``rms_norm(W2 · (W1 · x))`` over the model's width, split 1:1 over
the same two servers (one all-reduce each, tiny products), timed per step (:func:`all_reduce_round_ms`), times the
decode step's all-reduces.

Usage: ``python benchmarks/bench_tp.py [--type q8_0] [--n-prompt 128] [--n-gen 16] [--reps 3] [--baseline-tree DIR]
[--json PATH]``; ``--baseline-tree`` runs DIR's own bench_tp.py (its own process and servers, one repetition) before
each round, so a change is measured against its baseline under the same load. The results go to
``benchmarks/results/bench_tp.json`` as JSON.
"""

from __future__ import annotations

import argparse
import json
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


def all_reduce_round_ms(backends: list[Any], n_rounds: int, reps: int) -> float:
    """Milliseconds per all-reduce round on ``backends`` under ``-sm tensor``: a chain of ``n_rounds`` steps, each
    ``rms_norm(W2 · (W1 · x))`` over the model's width with a 64-wide middle split 1:1 (W1 by rows, W2 by columns:
    one all-reduce of an ``n_embd`` vector per step, as after a layer's attention or FFN), timed to the read of the
    result. The products are tiny, so this is what each all-reduce costs a decode step: the graphs sent, the
    partial sums exchanged and added, the mirrored sum passed on."""
    from ggml_core import Context, Graph, ops
    from ggml_core.sched import MetaDevice, SplitState

    n_embd, mid = SHAPE["n_embd"], 64
    ctx = Context("bench-allreduce")
    x = ctx.new_tensor("f32", [n_embd, 1], "x").set_input()
    split: dict[int, SplitState] = {}
    h = x
    weights = []
    for i in range(n_rounds):
        w1 = ctx.new_tensor("f32", [n_embd, mid], f"w1.{i}")
        w2 = ctx.new_tensor("f32", [mid, n_embd], f"w2.{i}")
        split[w1.id], split[w2.id] = SplitState.split(1, (mid // 2, mid // 2)), SplitState.split(0, (mid // 2,) * 2)
        weights += [w1, w2]
        h = ops.rms_norm(ops.mul_mat(w2, ops.mul_mat(w1, h)), 1e-6)
    h.set_output()
    g = Graph()
    g.build_forward_expand(h)
    tp = MetaDevice(backends).split_graph(g, lambda t: split.get(t.id))
    tp.alloc_weights()
    rng = np.random.default_rng(2)
    for w in weights:
        tp.set_weight(w, rng.uniform(-0.1, 0.1, w.ne[::-1][2:]).astype(np.float32))
    tp.alloc()
    out = tp.tensor(h)

    def step() -> None:
        x.set_data(rng.standard_normal((1, n_embd)).astype(np.float32))
        tp.compute()
        out.to_numpy()

    step()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3 / n_rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--type", default="q8_0", help="weight type of the matrices (default q8_0)")
    ap.add_argument("--n-prompt", type=int, default=128)
    ap.add_argument("--n-gen", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--baseline-tree",
        type=Path,
        help="a source checkout whose bench_tp.py runs in a process of its own (and its own servers) before each "
        "round, one repetition each: same run, same load; rows gain its tokens/s and the ratio to it",
    )
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
        base_runs: list[dict[str, Any]] = []
        for _ in range(args.reps):
            if args.baseline_tree is not None:
                base_runs.append(_baseline(args, Path(tmp) / "baseline.json"))
            for c, m in models.items():
                pp[c].append(_timed(lambda m=m: _pp(m, prompt[: args.n_prompt]), pids, cpu_pp[c]))
            for c, m in models.items():
                tg[c].append(_timed(lambda m=m: _tg(m, prompt, args.n_gen), pids, cpu[c]))
        per_token = {c: _per_token(m) for c, m in models.items()}
        backends = [get_registry().get_reg(f"RPC[{a}]").devices[0].init_backend() for a in addresses]
        n_red = per_token[CONFIGS[1]]["all_reduces"]
        round_ms = all_reduce_round_ms(backends, n_red, 5 * args.reps)

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
    print(
        f"# all-reduce: {round_ms:.2f} ms per round ({n_red} rounds per decode step: {round_ms * n_red:.1f} ms per "
        "token), from a chain of all-reduces with tiny products on the same two servers"
    )
    res.data["all_reduce_ms_per_round"] = round_ms
    res.data["all_reduce_ms_per_token"] = round_ms * n_red
    if base_runs:
        print(f"# against {args.baseline_tree} (its own process and servers before each round), medians:")
        for i, c in enumerate(CONFIGS):
            row = res.data["rows"][i]
            for k in ("pp", "tg"):
                b = statistics.median(r["rows"][i][f"{k}_all"][0] for r in base_runs)
                row[f"baseline_{k}_tokens_per_s"] = b
                row[f"{k}_vs_baseline"] = row[f"{k}_tokens_per_s"] / b
            print(
                f"{c:<22} pp {row['baseline_pp_tokens_per_s']:8.1f} -> {row['pp_tokens_per_s']:8.1f} t/s "
                f"({row['pp_vs_baseline']:.2f}x), tg {row['baseline_tg_tokens_per_s']:7.1f} -> "
                f"{row['tg_tokens_per_s']:7.1f} t/s ({row['tg_vs_baseline']:.2f}x); baseline ratios to 1 server: pp "
                f"{statistics.median(r['rows'][i]['pp_ratio'] for r in base_runs):.2f}, tg "
                f"{statistics.median(r['rows'][i]['tg_ratio'] for r in base_runs):.2f}, decode splits "
                f"{base_runs[-1]['rows'][i]['decode_splits']}"
            )
    print(
        f"# load average at the end: {os.getloadavg()[0]:.2f} (at the start: {res.data['machine']['load_average'][0]})"
    )
    res.data["settings"]["baseline_tree"] = str(args.baseline_tree) if args.baseline_tree else None
    res.write_json(args.json)


def _baseline(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One repetition of the baseline checkout's bench_tp.py (same settings), its JSON results."""
    tree = args.baseline_tree.resolve()
    plugins = sorted(str(p) for p in (tree / "plugins").iterdir() if any(p.glob("ggml_*/__init__.py")))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), *plugins]))
    env.pop("GGML_RPC_SERVERS", None)
    cmd = [sys.executable, str(tree / "benchmarks" / "bench_tp.py"), "--type", args.type, "--n-prompt"]
    cmd += [str(args.n_prompt), "--n-gen", str(args.n_gen), "--reps", "1", "--json", str(out)]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())  # type: ignore[no-any-return]


if __name__ == "__main__":
    main()
