"""Where a prompt batch's time goes on the CPU: per-op kernel CPU time of one 128-token prompt on the bench models.

Writes the 512-wide 4-layer bench models of ``bench_e2e.py`` (or takes ``--model``), processes a 128-token prompt
once to warm up, then ``--reps`` times with the CPU engine's replay wrapped to time each node (~0.1 µs a node), and
prints, per type, milliseconds of the process's CPU time (all threads: fair on a shared machine) per prompt batch
for each op kind (MUL_MAT split by weight type and shape) and the host work around the kernels. Prints the CPU model
and load average.

Usage: ``python benchmarks/bench_prompt.py [--types f32,q8_0,q4_0,q4_k] [--threads 1] [--reps 5] [--model PATH]
[--wall] [--json PATH]`` (``--wall``: wall-clock time, to see what threads gain; CPU time counts every thread's
work); the rows go to ``benchmarks/results/bench_prompt.json`` as JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import Results, add_json_option
from bench_e2e import N_PROMPT, SHAPE, write_bench_model


def profile(
    path: Path, threads: int, reps: int, n_prompt: int = N_PROMPT, wall: bool = False
) -> tuple[dict[str, float], float]:
    """(ms per prompt batch by op key, total ms per batch) for ``path`` on the CPU with ``threads`` threads."""
    from ggml_core.models import Model, ModelParams, PlacementRequest
    from ggml_cpu.engine import Engine

    params = ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=512, n_threads=threads, progress=False)
    rng = np.random.default_rng(1)
    acc: dict[str, float] = {}
    original = Engine._replay

    def timed(self: Engine, plan: Any) -> None:
        clock = time.perf_counter if wall else time.process_time  # CPU time of the process: fair on a shared machine
        for node, thunk in plan.steps:
            t0 = clock()
            thunk()
            fused = getattr(thunk, "fused", None)
            name = f"{node.op.name}+{fused}" if fused else node.op.name
            if node.op.name == "MUL_MAT":
                a = node.src[0]
                name += f" {a.type.name} {a.ne[1]}x{a.ne[0]}"
            acc[name] = acc.get(name, 0.0) + clock() - t0

    with Model.load(path, params) as m:
        n_vocab = m.vocab.n_tokens if hasattr(m, "vocab") and hasattr(m.vocab, "n_tokens") else SHAPE["n_vocab"]
        prompt = rng.integers(0, min(n_vocab, SHAPE["n_vocab"]), n_prompt).tolist()
        m.process_prompt(prompt)
        Engine._replay = timed  # type: ignore[method-assign]
        total = 0.0
        try:
            for _ in range(reps):
                m.reset()
                t0 = (time.perf_counter if wall else time.process_time)()
                m.process_prompt(prompt)
                total += (time.perf_counter if wall else time.process_time)() - t0
        finally:
            Engine._replay = original  # type: ignore[method-assign]
    out = {k: v / reps * 1e3 for k, v in sorted(acc.items(), key=lambda kv: -kv[1])}
    out["host"] = total / reps * 1e3 - sum(out.values())
    return out, total / reps * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", default="f32,q8_0,q4_0,q4_k")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--model", type=Path, help="a GGUF model instead of the bench models")
    ap.add_argument("--wall", action="store_true", help="wall-clock time instead of the process's CPU time")
    add_json_option(ap, "bench_prompt")
    args = ap.parse_args(argv)
    results = Results("bench_prompt", {k: str(v) for k, v in vars(args).items() if k != "json"})
    from ggml_core.testing.llama_cpp import cpu_model

    print(f"# CPU: {cpu_model()} ({os.cpu_count()} cores), load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="ggml-bench-") as tmp:
        paths = [args.model] if args.model else [
            write_bench_model(Path(tmp) / f"bench-{t}.gguf", t) for t in args.types.split(",")]  # fmt: skip
        for path in paths:
            for th in (int(x) for x in args.threads.split(",")):
                ops, total = profile(path, th, args.reps, wall=args.wall)
                print(f"{path.name} x{th}: {total:.2f} ms per {N_PROMPT}-token batch "
                      f"({N_PROMPT / total * 1e3:.0f} tok/s), load {os.getloadavg()[0]:.2f}")  # fmt: skip
                for k, v in ops.items():
                    print(f"  {k:<34} {v:8.3f} ms  {v / total * 100:5.1f} %")
                results.add(path.name, f"x{th}", threads=th, batch_ms=total, ops_ms=ops)
    results.write_json(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
