"""End-to-end LLaMA speed on the CPU: prompt processing of 128 tokens and generation, vs llama.cpp's CPU backend.

The model is llama-bench's shape for this comparison: 512 wide, 4 layers, 8 heads, n_ff 1536, vocab 4096, random
weights in f32, q8_0 and q4_0 (written once into a temporary directory). Each (type, threads) runs in its own
process (its peak RSS is its own; BLAS threads are set to the same count). Prints tokens/s (median of the
repetitions) and the ratio to llama.cpp figures measured in ANOTHER run (on an AMD EPYC, 2 threads; not a
same-run baseline, so the "x quoted" columns are indicative only; the same-run llama.cpp comparison is open work):

    pp128: f32 3520, q8_0 3705, q4_0 3787 tokens/s       tg: f32 320, q8_0 897, q4_0 865 tokens/s

Targets: prompt processing >= 1.0x, generation >= 0.5x of those. Numbers are noisy on a shared machine, so each
process also times, in the same run, a floor for any numpy implementation: the model's matrix products alone
(``x @ W.T`` for every weight matrix, float32, dequantized once) for a 128-token batch and for one token. The
``x floor`` columns are ggml-core's speed divided by that (1.0 = no overhead beyond the products).

Usage: ``python benchmarks/bench_e2e.py [--types f32,q8_0,q4_0] [--threads 1,2] [--n-gen 32] [--reps 3] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import numpy as np

#: llama.cpp CPU backend, 2 threads, same model shape (tokens/s)
LLAMA_CPP_PP128: Final = {"f32": 3520.0, "q8_0": 3705.0, "q4_0": 3787.0}
LLAMA_CPP_TG: Final = {"f32": 320.0, "q8_0": 897.0, "q4_0": 865.0}
TARGET_PP: Final = 1.0
TARGET_TG: Final = 0.5

SHAPE: Final = {"n_embd": 512, "n_layer": 4, "n_head": 8, "n_ff": 1536, "n_vocab": 4096, "n_ctx": 512}
N_PROMPT: Final = 128


def write_bench_model(path: Path, wtype: str, seed: int = 0) -> Path:
    """The benchmark model with matrices in ``wtype`` (norms f32), llama.cpp's tensor and key names."""
    from gguf import GGMLQuantizationType, GGUFWriter

    from ggml_core.quants import quantize

    rng = np.random.default_rng(seed)
    e, f, v = SHAPE["n_embd"], SHAPE["n_ff"], SHAPE["n_vocab"]
    w = GGUFWriter(str(path), "llama")
    w.add_uint32("llama.context_length", SHAPE["n_ctx"])
    w.add_uint32("llama.embedding_length", e)
    w.add_uint32("llama.block_count", SHAPE["n_layer"])
    w.add_uint32("llama.feed_forward_length", f)
    w.add_uint32("llama.attention.head_count", SHAPE["n_head"])
    w.add_uint32("llama.attention.head_count_kv", SHAPE["n_head"])
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)

    def add(name: str, rows: int, cols: int) -> None:
        a = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
        if wtype == "f32":
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, quantize(a, wtype), raw_dtype=GGMLQuantizationType[wtype.upper()])

    add("token_embd.weight", v, e)
    for il in range(SHAPE["n_layer"]):
        b = f"blk.{il}."
        w.add_tensor(b + "attn_norm.weight", np.ones(e, np.float32))
        for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
            add(b + n + ".weight", e, e)
        w.add_tensor(b + "ffn_norm.weight", np.ones(e, np.float32))
        add(b + "ffn_gate.weight", f, e)
        add(b + "ffn_up.weight", f, e)
        add(b + "ffn_down.weight", e, f)
    w.add_tensor("output_norm.weight", np.ones(e, np.float32))
    add("output.weight", v, e)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def run_one(path: Path, threads: int, n_gen: int, reps: int) -> dict[str, Any]:
    """In this process: load on the CPU, time pp128 and generation ``reps`` times, report medians and peak RSS."""
    from ggml_core.models import Model, ModelParams, PlacementRequest, Sampler, SamplerParams

    params = ModelParams(
        placement=PlacementRequest(devices=["CPU"]), n_ctx=SHAPE["n_ctx"], n_threads=threads, progress=False
    )
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, SHAPE["n_vocab"], N_PROMPT).tolist()
    pp, tg = [], []
    t_load = time.perf_counter()
    with Model.load(path, params) as m:
        t_load = time.perf_counter() - t_load
        m.process_prompt(prompt)  # warm-up: graph build, kernel binding, allocation
        m.reset()
        m.generate(prompt[:8], 4, Sampler(SamplerParams(temperature=0.0)))
        for _ in range(reps):
            m.reset()
            res = m.generate(prompt, n_gen + 1, Sampler(SamplerParams(temperature=0.0)))
            pp.append(res.prompt_tokens_per_s)
            tg.append(res.gen_tokens_per_s)
        peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the floor's copies
        floor_pp, floor_tg = _matmul_floor(m, reps)
    return {
        "pp_tokens_per_s": statistics.median(pp),
        "tg_tokens_per_s": statistics.median(tg),
        "floor_pp_tokens_per_s": floor_pp,
        "floor_tg_tokens_per_s": floor_tg,
        "pp_all": pp,
        "tg_all": tg,
        "load_s": t_load,
        "peak_rss_mb": peak_rss_mb,
    }


def _matmul_floor(m: Any, reps: int) -> tuple[float, float]:
    """Tokens/s of the model's matrix products alone in numpy (float32), for a 128-token batch and for one token."""
    mats = [t.to_numpy().reshape(t.ne[1], t.ne[0]) for name, t in m.weights.tensors.items()
            if t.ne[1] > 1 and name != "token_embd.weight"]  # fmt: skip
    rng = np.random.default_rng(2)
    out = []
    for n in (N_PROMPT, 1):
        xs = {w.shape[1]: rng.standard_normal((n, w.shape[1])).astype(np.float32) for w in mats}
        times = []
        for _ in range(max(reps, 3)):
            t0 = time.perf_counter()
            for w in mats:
                xs[w.shape[1]] @ w.T
            times.append(time.perf_counter() - t0)
        out.append(n / statistics.median(times))
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    """Write the models, run every (type, threads) in a subprocess, print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default="f32,q8_0,q4_0")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--n-gen", type=int, default=32, help="tokens generated per repetition")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(Path(args.one[0]), int(args.one[1]), args.n_gen, args.reps)))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="ggml-bench-") as tmp:
        for wtype in args.types.split(","):
            t0 = time.perf_counter()
            path = write_bench_model(Path(tmp) / f"bench-{wtype}.gguf", wtype)
            print(f"# wrote {wtype} model ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)  # fmt: skip
            for th in (int(x) for x in args.threads.split(",")):
                env = dict(os.environ)
                for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
                    env[k] = str(th)
                cmd = [sys.executable, __file__, "--one", str(path), str(th), "--n-gen", str(args.n_gen)]
                cmd += ["--reps", str(args.reps)]
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    print(f"# {wtype} x{th} failed:\n{proc.stderr}", file=sys.stderr)
                    continue
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                r.update(type=wtype, threads=th)
                r["pp_ratio"] = r["pp_tokens_per_s"] / LLAMA_CPP_PP128[wtype]
                r["tg_ratio"] = r["tg_tokens_per_s"] / LLAMA_CPP_TG[wtype]
                r["pp_vs_floor"] = r["pp_tokens_per_s"] / r["floor_pp_tokens_per_s"]
                r["tg_vs_floor"] = r["tg_tokens_per_s"] / r["floor_tg_tokens_per_s"]
                rows.append(r)
                print(f"# {wtype} x{th}: pp {r['pp_tokens_per_s']:.1f}, tg {r['tg_tokens_per_s']:.1f}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    head = f"{'type':<6} {'thr':>3} {'pp128 tok/s':>12} {'x quoted':>11} {'x floor':>8} {'tg tok/s':>9}"
    head += f" {'x quoted':>11} {'x floor':>8} {'peak RSS MB':>12}"
    print(f"{head}  (x quoted: against llama.cpp figures from another run, not this one)")
    for r in rows:
        print(
            f"{r['type']:<6} {r['threads']:>3} {r['pp_tokens_per_s']:>12.1f} {r['pp_ratio']:>10.3f}x "
            f"{r['pp_vs_floor']:>7.2f}x {r['tg_tokens_per_s']:>9.1f} {r['tg_ratio']:>10.3f}x {r['tg_vs_floor']:>7.2f}x "
            f"{r['peak_rss_mb']:>12.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
