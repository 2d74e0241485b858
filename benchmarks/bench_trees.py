"""Prompt and generation speed of two source trees of ggml-core and of llama.cpp, alternating in one run.

Each tree is an export of a commit (``git archive COMMIT | tar -x -C DIR``); its ``bench_e2e.py --one`` runs in a
process of its own with ``PYTHONPATH`` at that tree (the script's own directory comes first on ``sys.path``, so the
tree's ``ggml_core`` and ``ggml_cpu`` are the ones imported), then llama.cpp through the harness, ``--rounds`` times
per (type, threads), on the bench models of ``bench_e2e.py``. Prints tokens/s medians, ratios to llama.cpp and the
1-minute load average per row.

Usage: ``python benchmarks/bench_trees.py BEFORE_DIR AFTER_DIR [--types f32,q8_0,q4_0,q4_k] [--threads 1,2]
[--rounds 2] [--reps 3] [--n-gen 16] [--json PATH]``; the rows go to ``benchmarks/results/bench_trees.json`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _util import Results, add_json_option
from bench_e2e import llama_cpp_speed, load_average, write_bench_model


def _ours(tree: str, path: Path, threads: int, n_gen: int, reps: int) -> dict[str, Any] | None:
    env = dict(os.environ, PYTHONPATH=f"{tree}:{tree}/plugins/ggml-cpu")
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[k] = str(threads)
    cmd = [sys.executable, f"{tree}/benchmarks/bench_e2e.py", "--one", str(path), str(threads),
           "--n-gen", str(n_gen), "--reps", str(reps)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        print(f"# {tree} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--types", default="f32,q8_0,q4_0,q4_k")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--n-gen", type=int, default=16)
    add_json_option(ap, "bench_trees")
    args = ap.parse_args(argv)
    results = Results("bench_trees", {k: v for k, v in vars(args).items() if k != "json"})
    trees = {"before": args.before, "after": args.after}
    print(f"# load average at start {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ggml-bench-") as tmp:
        for wtype in args.types.split(","):
            path = write_bench_model(Path(tmp) / f"bench-{wtype}.gguf", wtype)
            for th in (int(t) for t in args.threads.split(",")):
                pp: dict[str, list[float]] = {"before": [], "after": [], "llama.cpp": []}
                tg: dict[str, list[float]] = {"before": [], "after": [], "llama.cpp": []}
                loads = []
                for _ in range(args.rounds):
                    for name, tree in trees.items():
                        r = _ours(tree, path, th, args.n_gen, args.reps)
                        if r is not None:
                            pp[name] += r["pp_all"]
                            tg[name] += r["tg_all"]
                    theirs = llama_cpp_speed(path, th, args.n_gen, args.reps)
                    pp["llama.cpp"] += theirs["pp"]
                    tg["llama.cpp"] += theirs["tg"]
                    loads.append(load_average())
                if not all(pp.values()):
                    continue
                p = {k: statistics.median(v) for k, v in pp.items()}
                g = {k: statistics.median(v) for k, v in tg.items()}
                results.add(
                    wtype, f"x{th}", threads=th, pp_tokens_per_s=p, tg_tokens_per_s=g, load=[min(loads), max(loads)]
                )
                print(
                    f"{wtype:5} x{th}: pp128 before {p['before']:7.0f} after {p['after']:7.0f} llama.cpp"
                    f" {p['llama.cpp']:7.0f} | ratio {p['before'] / p['llama.cpp']:.2f}x -> "
                    f"{p['after'] / p['llama.cpp']:.2f}x | tg before {g['before']:.0f} after {g['after']:.0f}"
                    f" llama.cpp {g['llama.cpp']:.0f} | load {min(loads):.1f}-{max(loads):.1f}",
                    flush=True,
                )
    results.write_json(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
