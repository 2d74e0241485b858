"""Gemma 3 270M (Q4_K_M, 262k vocab) against llama.cpp, measured in the same run: open + first token, then speed.

**Open + first token** (target: ``<= 1.5 x llama.cpp``). Each measurement is a fresh process, what a
user waits for after typing the command, on the CPU. ggml-core's child reports its phases: ``imports`` (Python's
start-up to ``ggml_core.models`` imported), ``open`` (the bounded header walk), ``load`` (hyperparameters,
placement, weights mapped in place, KV cache, reserve), ``tokenizer`` (the 262k vocabulary), ``first token`` (the
prompt's batch through the graph, then argmax), and of the first token the share that is numba's (its import and
loading the compiled kernels from its cache: ``numba``); ``process`` is the child's whole wall time seen from
outside, and ``start-up + exit`` what of it lies outside the phases (the interpreter's start, and its exit).
llama.cpp: its harness (ggml_core/testing/llama_cpp.py, built on this machine on first use) loading the model,
decoding the prompt and producing one greedy token, also a whole process timed from outside, so the two
``process`` figures compare like with like (the ratio printed). The two alternate, so both see the same load.

**Speed** (``--speed``): prompt processing of 128 tokens and generation of 32, as llama-bench times them (a
warm-up, then repetitions on a cleared cache: generation is 32 single-token steps from an empty cache on both sides;
llama.cpp through the harness's ``bench``), tokens/s medians. Ours is also timed generating 32 tokens greedily after
the 128-token prompt (``tg32 after the prompt``: the cache holds 128 more cells, which llama-bench does not measure).

The child names its device (``PlacementRequest(devices=["CPU"])``, as ``run --device CPU``): only the CPU
registry enumerates, so no GPU driver (pyopencl, wgpu, pycuda) is imported; llama.cpp's harness is a CPU-only build,
so this is CPU-only against CPU-only. Before measuring, the project's packages are byte-compiled (``compileall``, as
``pip install`` does for a regular install): an editable install under ``PYTHONDONTWRITEBYTECODE=1`` would otherwise
compile every module from source in every process (0.3-0.5 s here), which no installed copy does.

The model comes from the test's cache (tests/models/test_models_gemma3_real.py fetches it); prints the CPU model and the
load average. Usage: ``python benchmarks/bench_load.py [--reps 3] [--speed] [--threads N] [--json PATH]``;
the results go to ``benchmarks/results/bench_load.json`` as JSON (a bare ``--json`` prints them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _util import add_json_option, machine, write_json

MODEL = Path.home() / ".cache" / "ggml-core" / "gemma3-270m" / "gemma-3-270m-q4_k_m.gguf"
PROMPT = "The capital of France is"
PHASES = ("imports", "open", "load", "tokenizer", "first token", "numba", "start-up + exit", "process")
TIMED = ("imports", "open", "load", "tokenizer", "first token")

_CHILD = r"""
import json, sys, time
t_start = time.perf_counter()
import numpy as np
from ggml_core.models import Model, ModelParams, PlacementRequest, open_gguf
t0 = time.perf_counter()
f = open_gguf(sys.argv[1])
t1 = time.perf_counter()
params = ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=256, n_threads=int(sys.argv[3]),
                     progress=False)
m = Model.load(f, params)
t2 = time.perf_counter()
ids = m.tokenizer.encode(sys.argv[2])
t3 = time.perf_counter()
tok = int(np.argmax(m.process_prompt(ids)[-1]))
t4 = time.perf_counter()
numba = 0.0
try:
    from ggml_cpu.jit import _jit
    numba = _jit.import_seconds() + sum(_jit.compile_seconds().values())
except (ImportError, AttributeError):
    pass
print(json.dumps({"imports": t0 - t_start, "open": t1 - t0, "load": t2 - t1, "tokenizer": t3 - t2,
                  "first token": t4 - t3, "numba": numba, "token": tok}))
"""

_SPEED_CHILD = r"""
import json, statistics, sys, time
from ggml_core.models import Model, ModelParams, PlacementRequest, Sampler, SamplerParams
n_prompt, n_gen, reps, threads = (int(a) for a in sys.argv[2:6])
params = ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=n_prompt + n_gen + 8, n_threads=threads,
                     progress=False)
prompt = [2] + [(7 * i + 1000) % 262144 for i in range(n_prompt - 1)]
pp, tg, after = [], [], []
with Model.load(sys.argv[1], params) as m:
    greedy = Sampler(SamplerParams(temperature=0.0))
    m.generate(prompt, 4, greedy)  # warm-up: graphs, kernels, allocation
    m.reset()
    m.generate(prompt[:1], 4, greedy)
    for _ in range(reps):
        m.reset()
        res = m.generate(prompt, n_gen + 1, greedy)
        pp.append(res.prompt_tokens_per_s)
        after.append(res.gen_tokens_per_s)
        m.reset()  # generation as llama-bench times it (and llama.cpp's side here): steps on an empty cache
        t0 = time.perf_counter()
        for tok in prompt[:n_gen]:
            m.decode([tok])
        tg.append(n_gen / (time.perf_counter() - t0))
print(json.dumps({"pp": statistics.median(pp), "tg": statistics.median(tg), "tg_after": statistics.median(after)}))
"""


def _byte_compile() -> None:
    """Write the bytecode of ggml-core and its plugins (what an installed package ships) where it is missing."""
    import compileall
    import importlib.util

    for name in ("ggml_core", "ggml_cpu", "ggml_opencl", "ggml_webgpu", "ggml_rpc", "ggml_cuda"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            for path in spec.submodule_search_locations:
                compileall.compile_dir(path, quiet=1)


def _ours(model: Path, threads: int) -> dict[str, float]:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", _CHILD, str(model), PROMPT, str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    row: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    row["process"] = time.perf_counter() - t0
    row["start-up + exit"] = row["process"] - sum(row[k] for k in TIMED)
    return row


def _llama_cpp(model: Path, threads: int) -> float:
    from ggml_core.testing.llama_cpp import LlamaCpp

    lc = LlamaCpp(model, threads=threads, kv_type="f16", passive_wait=False)
    ids = lc.tokenize(PROMPT)
    t0 = time.perf_counter()
    lc.generate(ids, 1)
    return time.perf_counter() - t0


def _speed(model: Path, threads: int, reps: int, llama: bool) -> dict[str, float]:
    n_prompt, n_gen = 128, 32
    args = [str(model), str(n_prompt), str(n_gen), str(reps), str(threads)]
    out = subprocess.run([sys.executable, "-c", _SPEED_CHILD, *args], capture_output=True, text=True, check=True)
    ours = json.loads(out.stdout.strip().splitlines()[-1])
    row = {"pp128 ours": ours["pp"], "tg32 ours": ours["tg"], "tg32 after the prompt, ours": ours["tg_after"]}
    if llama:
        from ggml_core.testing.llama_cpp import LlamaCpp

        times = LlamaCpp(model, threads=threads, kv_type="f16", passive_wait=False).bench(n_prompt, n_gen, reps)
        row["pp128 llama.cpp"] = n_prompt / statistics.median(times["pp"])
        row["tg32 llama.cpp"] = n_gen / statistics.median(times["tg"])
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--speed", action="store_true", help="also pp128 / tg32 against llama.cpp")
    add_json_option(ap, "bench_load")
    args = ap.parse_args()
    if not MODEL.is_file():
        print(f"{MODEL} is missing: run tests/models/test_models_gemma3_real.py once to fetch it", file=sys.stderr)
        return 2
    _byte_compile()
    info = machine()
    print(f"CPU: {info.get('cpu')}  ({os.cpu_count()} cores, {args.threads} threads), load average {os.getloadavg()}")
    llama, why = True, ""
    try:
        from ggml_core.testing.llama_cpp import Unavailable, harness

        harness()
    except (ImportError, Unavailable) as exc:
        llama, why = False, str(exc)
    rows, ref = [], []
    for _ in range(args.reps):  # alternate, so that both see the same machine load
        rows.append(_ours(MODEL, args.threads))
        if llama:
            ref.append(_llama_cpp(MODEL, args.threads))
    med = {k: statistics.median(r[k] for r in rows) for k in PHASES}
    phases = ", ".join(f"{k} {med[k]:.3f} s" for k in TIMED)
    print(f"ggml-core (median of {args.reps}): {phases}")
    print(f"  of the first token, numba's import and kernel loading: {med['numba']:.3f} s")
    print(f"  outside the phases (the interpreter's start and exit): {med['start-up + exit']:.3f} s")
    print(f"  whole process (Python start-up included): {med['process']:.3f} s")
    result: dict[str, object] = {"machine": info, "load_average": os.getloadavg(), "ggml_core_s": med}
    if ref:
        lc = statistics.median(ref)
        ratio = med["process"] / lc
        print(f"llama.cpp load + prompt + 1 token (whole process): {lc:.3f} s; ratio {ratio:.2f}x (target 1.5x)")
        result["llama_cpp_s"] = lc
        result["ratio"] = ratio
    else:
        print(f"llama.cpp: cannot be built here ({why}); no ratio")
    if args.speed:
        speed = _speed(MODEL, args.threads, args.reps, llama)
        result["speed_tokens_per_s"] = speed
        print("speed (tokens/s): " + ", ".join(f"{k} {v:.1f}" for k, v in speed.items()))
        if llama:
            print(
                f"  ratios: pp128 {speed['pp128 ours'] / speed['pp128 llama.cpp']:.2f}x, "
                f"tg32 {speed['tg32 ours'] / speed['tg32 llama.cpp']:.2f}x"
            )
    result["settings"] = {"reps": args.reps, "threads": args.threads, "speed": args.speed}
    write_json(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
