"""End-to-end LLaMA speed on the CPU against llama.cpp itself, measured in the same run on the same machine.

The model is llama-bench's shape for this comparison: 512 wide, 4 layers, 8 heads, n_ff 1536, vocab 4096, random
weights in f32, q8_0, q4_0 and q4_K (written once into a temporary directory). For each (type, threads) the
benchmark alternates, ``--rounds`` times: ggml-core in its own process (its peak RSS is its own; BLAS threads set
to the same count), then llama.cpp (0c1e570, built here for this CPU by ``ggml_core.testing.llama_cpp``; a
prompt of 128 tokens in one batch and single-token generation on an empty cache, as llama-bench does; ggml-core's
generation is timed the same way, and also after the 128-token prompt with greedy sampling, ``tg_after_prompt`` in
the JSON, which llama-bench does not measure). Prints the
CPU model, tokens/s of both (medians over all repetitions), the ratios, and a floor for any numpy implementation
measured in ggml-core's process: the model's matrix products alone (``x @ W.T`` for every weight matrix, float32)
for a 128-token batch and for one token (``x floor``: 1.0 = no overhead beyond the products).

The hybrid bench models (``--models``) have the same frame (512 wide, 4 layers, n_ff 1536, vocabulary 4096, 8
attention heads) with three recurrent layers and one attention layer (the last): ``granitehybrid`` (Mamba-2: d_inner
1024, 16 heads of 64, d_state 128, one group, d_conv 4; Granite's scales), ``qwen35`` (gated delta net: 2 key and 4
value heads of 128, d_conv 4; gated attention with 2 KV heads of 64, IMROPE on 16 dimensions) and ``lfm2`` (short
convolutions, l_cache 3). Their rows carry the model's name.

Usage: ``python benchmarks/bench_e2e.py [--models llama,granitehybrid,qwen35,lfm2] [--types f32,q8_0,q4_0,q4_k]
[--threads 1,2] [--n-gen 32] [--reps 3] [--rounds 2] [--json PATH] [--no-llama-cpp] [--keep DIR]
[--baseline-tree DIR]``; the rows go
to ``benchmarks/results/bench_e2e.json`` as JSON (a bare ``--json`` prints them instead of the table); ``--keep``
leaves the models in DIR (``bench-<model>-<type>.gguf``, for ``bench_prompt.py --model``); ``--baseline-tree``
times a second source checkout of ggml-core (its own ``benchmarks/bench_e2e.py --one``) alternating with this one,
so a change is measured before and after in one run.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))  # qwen35's writer: tests/delta_net_models.py
from _util import add_json_option, machine, write_json

TARGET_PP: Final = 1.0
TARGET_TG: Final = 0.7

SHAPE: Final = {"n_embd": 512, "n_layer": 4, "n_head": 8, "n_ff": 1536, "n_vocab": 4096, "n_ctx": 512}
N_PROMPT: Final = 128
MODELS: Final = ("llama", "granitehybrid", "qwen35", "lfm2")


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
    # a SentencePiece vocabulary of the model's size (llama.cpp refuses a model without one; text is not used)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581t{i}" for i in range(v - len(tokens))]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * v)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (v - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

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


def write_hybrid_model(path: Path, model: str, wtype: str, seed: int = 0) -> Path:
    """A hybrid bench model (three recurrent layers, then attention) of ``SHAPE``'s frame, matrices in ``wtype``."""
    from ggml_core.testing import recurrent_models as rm

    e, f, v, ctx = SHAPE["n_embd"], SHAPE["n_ff"], SHAPE["n_vocab"], SHAPE["n_ctx"]
    if model == "granitehybrid":
        g = rm.GraniteConfig(n_vocab=v, n_embd=e, n_layer=4, d_inner=2 * e, d_state=128, n_head=16, n_group=1,
                             kv_heads=(0, 0, 0, 8), n_attn_head=8, n_ff=f, n_ctx=ctx)  # fmt: skip
        return rm.write_granitehybrid(path, g, rm.granite_weights(g, seed), wtype)
    if model == "lfm2":
        lf = rm.LFM2Config(n_vocab=v, n_embd=e, kv_heads=(0, 0, 0, 8), n_head=8, n_ff=f, n_ctx=ctx)
        return rm.write_lfm2(path, lf, rm.lfm2_weights(lf, seed), wtype)
    if model == "qwen35":
        from delta_net_models import DeltaNetConfig, delta_net_model_weights, write_delta_net_model

        q = DeltaNetConfig(n_vocab=v, n_embd=e, n_layer=4, recurrent=(True, True, True, False), n_head=8,
                           n_head_kv=2, head_dim=64, n_rot=16, sections=(3, 3, 2, 0), n_ff=f, n_k_heads=2,
                           n_v_heads=4, d_state=128, n_ctx=ctx)  # fmt: skip
        return write_delta_net_model(path, q, delta_net_model_weights(q, seed), wtype)
    raise ValueError(f"unknown bench model {model!r}: choose from {', '.join(MODELS)}")


def run_one(path: Path, threads: int, n_gen: int, reps: int) -> dict[str, Any]:
    """In this process: load on the CPU, time pp128 and generation ``reps`` times, report medians and peak RSS."""
    from ggml_core.models import Model, ModelParams, PlacementRequest, Sampler, SamplerParams

    params = ModelParams(
        placement=PlacementRequest(devices=["CPU"]), n_ctx=SHAPE["n_ctx"], n_threads=threads, progress=False
    )
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, SHAPE["n_vocab"], N_PROMPT).tolist()
    pp, tg, tg_after = [], [], []
    t_load = time.perf_counter()
    with Model.load(path, params) as m:
        t_load = time.perf_counter() - t_load
        m.process_prompt(prompt)  # warm-up: graph build, kernel binding, allocation
        m.reset()
        m.generate(prompt[:8], 4, Sampler(SamplerParams(temperature=0.0)))
        splits = _split_counts()
        for _ in range(reps):
            m.reset()
            res = m.generate(prompt, n_gen + 1, Sampler(SamplerParams(temperature=0.0)))
            pp.append(res.prompt_tokens_per_s)
            tg_after.append(res.gen_tokens_per_s)
            # llama-bench's tg (and the llama.cpp side here): single-token steps on an empty cache, logits read
            m.reset()
            t0 = time.perf_counter()
            for tok in prompt[:n_gen]:
                m.decode([tok])
            tg.append(n_gen / (time.perf_counter() - t0))
        splits = [b - a for a, b in zip(splits, _split_counts(), strict=True)]
        peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the floor's copies
        breakdown = _decode_breakdown(m, prompt, n_gen)
        floor_pp, floor_tg = _matmul_floor(m, reps)
    return {
        "pp_tokens_per_s": statistics.median(pp),
        "tg_tokens_per_s": statistics.median(tg),
        "floor_pp_tokens_per_s": floor_pp,
        "floor_tg_tokens_per_s": floor_tg,
        "tg_after_prompt_tokens_per_s": statistics.median(tg_after),
        "pp_all": pp,
        "tg_all": tg,
        "load_s": t_load,
        "peak_rss_mb": peak_rss_mb,
        "decode_breakdown_ms": breakdown,
        # one-row products split over the spinning helpers during the timed runs: [run on 2+ threads, of those
        # stalled (a helper descheduled), run on one thread while backing off after a stall]
        "row_splits": splits,
    }


def _split_counts() -> list[int]:
    """The CPU plugin's row-split counters (:attr:`ggml_cpu.threads.RowSplit.counts`), zeros without it."""
    try:
        from ggml_cpu.threads import RowSplit
    except ImportError:
        return [0, 0, 0]
    return list(RowSplit.counts)


def _decode_breakdown(m: Any, prompt: list[int], n_gen: int) -> dict[str, float]:
    """Milliseconds per generated token: each op kind's kernels (fused pairs as ``A+B``), and the host work around
    them (``host``: graph build, scheduling, plan checks, sampling — everything that is not a kernel), from
    ``n_gen`` timed decode steps.
    The CPU engine's replay is wrapped to time each node; the wrapper costs ~0.1 µs a node."""
    from ggml_cpu.engine import Engine

    acc: dict[str, float] = {}
    original = Engine._replay

    def timed(self: Engine, plan: Any) -> None:
        clock = time.perf_counter
        for node, thunk in plan.steps:
            t0 = clock()
            thunk()
            fused = getattr(thunk, "fused", None)  # a fused pair (RMS_NORM+MUL, MUL_MAT+SOFT_MAX)
            name = f"{node.op.name}+{fused}" if fused else node.op.name
            acc[name] = acc.get(name, 0.0) + clock() - t0

    m.reset()
    m.process_prompt(prompt[:8])
    Engine._replay = timed  # type: ignore[method-assign]
    try:
        t0 = time.perf_counter()
        token = prompt[8]
        for _ in range(n_gen):
            token = int(np.argmax(m.decode([token])[-1]))
        total = time.perf_counter() - t0
    finally:
        Engine._replay = original  # type: ignore[method-assign]
    out = {k: v / n_gen * 1e3 for k, v in sorted(acc.items(), key=lambda kv: -kv[1])}
    out["host"] = (total - sum(acc.values())) / n_gen * 1e3
    out["total"] = total / n_gen * 1e3
    return out


def _matmul_floor(m: Any, reps: int) -> tuple[float, float]:
    """Tokens/s of the model's matrix products alone in numpy (float32), for a 128-token batch and for one token."""
    mats = [t.to_numpy().reshape(t.ne[1], t.ne[0]) for name, t in m.weights.tensors.items()
            if t.ne[1] > 1 and t.ne[2] == 1 and t.ne[0] >= 32 and name != "token_embd.weight"]  # fmt: skip
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


def _tree_path(tree: Path) -> str:
    """PYTHONPATH that makes a process import the core and every plugin from the source checkout ``tree``."""
    plugins = sorted(str(p) for p in (tree / "plugins").iterdir() if any(p.glob("ggml_*/__init__.py")))
    return os.pathsep.join([str(tree), *plugins])


def _ours(path: Path, threads: int, n_gen: int, reps: int, tree: Path | None = None) -> dict[str, Any] | None:
    """ggml-core's speed in a process of its own; from the checkout ``tree`` (its own bench script) when given."""
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[k] = str(threads)
    script = __file__
    if tree is not None:
        env["PYTHONPATH"] = _tree_path(tree)
        script = str(tree / "benchmarks" / "bench_e2e.py")
    cmd = [sys.executable, script, "--one", str(path), str(threads), "--n-gen", str(n_gen), "--reps", str(reps)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(
            f"# ggml-core{f' ({tree})' if tree else ''} {path.name} x{threads} failed:\n{proc.stderr}", file=sys.stderr
        )
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def llama_cpp_speed(path: Path, threads: int, n_gen: int, reps: int) -> dict[str, list[float]]:
    """llama.cpp's tokens/s on the model, as llama-bench times them: prompt (``pp``) and generation (``tg``) per rep."""
    from ggml_core.testing.llama_cpp import LlamaCpp

    times = LlamaCpp(path, threads=threads, kv_type="f16").bench(N_PROMPT, n_gen, reps)
    return {"pp": [N_PROMPT / t for t in times["pp"]], "tg": [n_gen / t for t in times["tg"]]}


def _blas_kernels() -> str:
    """Which OpenBLAS kernels numpy runs here (the same environment as ggml-core's processes), or ''."""
    try:
        from ggml_cpu.plugin import blas_kernels
    except ImportError:
        return ""
    return blas_kernels()


def load_average() -> float:
    """The 1-minute load average (0 where the OS has none): the benchmark shares the machine with other work."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def main(argv: list[str] | None = None) -> int:
    """Write the models, run every (type, threads) alternating ggml-core and llama.cpp, print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="bench models: " + ", ".join(MODELS))
    ap.add_argument("--types", default="f32,q8_0,q4_0,q4_k")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--n-gen", type=int, default=32, help="tokens generated per repetition")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="alternations of ggml-core and llama.cpp")
    ap.add_argument("--no-llama-cpp", action="store_true", help="ggml-core and the numpy floor only")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="write the models into DIR and keep them there")
    ap.add_argument(
        "--baseline-tree",
        type=Path,
        metavar="DIR",
        help="also time ggml-core from this source checkout (e.g. `git worktree add DIR REV`), alternating in the "
        "same run: rows gain baseline tokens/s and the ratio to it",
    )
    add_json_option(ap, "bench_e2e")
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(Path(args.one[0]), int(args.one[1]), args.n_gen, args.reps)))
        return 0
    from ggml_core.testing.llama_cpp import Unavailable, cmake_isa_flags, cpu_model, harness

    use_llama = not args.no_llama_cpp
    if use_llama:
        try:
            harness()
        except Unavailable as exc:
            print(f"# llama.cpp unavailable ({exc}); measuring ggml-core only", file=sys.stderr)
            use_llama = False
    isa = ",".join(f[4:].split("=")[0].lower() for f in cmake_isa_flags() if f.endswith("=ON"))
    print(f"# CPU: {cpu_model()} ({os.cpu_count()} cores); llama.cpp built with {isa}", file=sys.stderr)
    blas = _blas_kernels()
    print(f"# ggml-core's f32 products: {blas or 'numpy BLAS (not OpenBLAS)'}", file=sys.stderr)
    load_start = load_average()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ggml-bench-") as scratch:
        tmp = args.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        for model, wtype in ((m, t) for m in args.models.split(",") for t in args.types.split(",")):
            t0 = time.perf_counter()
            path = tmp / f"bench-{model}-{wtype}.gguf"
            if model == "llama":
                write_bench_model(path, wtype)
            else:
                write_hybrid_model(path, model, wtype)
            print(f"# wrote {model} {wtype} ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)  # fmt: skip
            for th in (int(x) for x in args.threads.split(",")):
                ours: list[dict[str, Any]] = []
                base: list[dict[str, Any]] = []
                theirs: dict[str, list[float]] = {"pp": [], "tg": []}
                for _ in range(args.rounds):
                    r = _ours(path, th, args.n_gen, args.reps)
                    if r is not None:
                        ours.append(r)
                    if args.baseline_tree is not None:
                        b = _ours(path, th, args.n_gen, args.reps, args.baseline_tree)
                        if b is not None:
                            base.append(b)
                    if use_llama:
                        for k, v in llama_cpp_speed(path, th, args.n_gen, args.reps).items():
                            theirs[k] += v
                if not ours:
                    continue
                row: dict[str, Any] = {"model": model, "type": wtype, "threads": th, "cpu": cpu_model()}
                row["load_average"] = load_average()
                row["blas_kernels"] = blas
                for k in ("pp", "tg"):
                    row[f"{k}_tokens_per_s"] = statistics.median(v for r in ours for v in r[f"{k}_all"])
                    row[f"{k}_vs_floor"] = row[f"{k}_tokens_per_s"] / statistics.median(
                        r[f"floor_{k}_tokens_per_s"] for r in ours
                    )
                    if base:
                        row[f"baseline_{k}_tokens_per_s"] = statistics.median(v for b in base for v in b[f"{k}_all"])
                        row[f"{k}_vs_baseline"] = row[f"{k}_tokens_per_s"] / row[f"baseline_{k}_tokens_per_s"]
                    if theirs[k]:
                        row[f"llama_cpp_{k}_tokens_per_s"] = statistics.median(theirs[k])
                        row[f"{k}_ratio"] = row[f"{k}_tokens_per_s"] / row[f"llama_cpp_{k}_tokens_per_s"]
                row["tg_after_prompt_tokens_per_s"] = statistics.median(r["tg_after_prompt_tokens_per_s"] for r in ours)
                row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in ours)
                row["decode_breakdown_ms"] = ours[-1]["decode_breakdown_ms"]
                row["row_splits"] = [sum(r["row_splits"][i] for r in ours) for i in range(3)]
                rows.append(row)
                print(f"# {model} {wtype} x{th}: {json.dumps(row)}", file=sys.stderr)
    keys = ("models", "types", "threads", "n_gen", "reps", "rounds", "no_llama_cpp")
    settings: dict[str, Any] = {k: getattr(args, k) for k in keys}
    settings["baseline_tree"] = str(args.baseline_tree) if args.baseline_tree else None
    write_json({"benchmark": "bench_e2e", "machine": machine(), "settings": settings, "rows": rows}, args.json)
    if args.json == "-":
        return 0
    print(f"CPU: {cpu_model()}; same-run ratios to llama.cpp (targets: pp >= {TARGET_PP}x, tg >= {TARGET_TG}x)")
    print(f"load average (1 min) at start {load_start:.2f}, at end {load_average():.2f} (other work shares the cores)")
    head = f"{'model':<13} {'type':<6} {'thr':>3} {'pp128 tok/s':>12} {'llama.cpp':>10} {'ratio':>7} {'x floor':>8}"
    head += f" {'tg tok/s':>9} {'llama.cpp':>10} {'ratio':>7} {'x floor':>8} {'peak RSS MB':>12} {'load':>5}"
    print(head)
    for r in rows:
        cells = [f"{r['model']:<13} {r['type']:<6} {r['threads']:>3}"]
        for k in ("pp", "tg"):
            ref = r.get(f"llama_cpp_{k}_tokens_per_s")
            cells.append(
                f"{r[f'{k}_tokens_per_s']:>{12 if k == 'pp' else 9}.1f} "
                + (f"{ref:>10.1f} {r[f'{k}_ratio']:>6.2f}x" if ref else f"{'-':>10} {'-':>7}")
                + f" {r[f'{k}_vs_floor']:>7.2f}x"
            )
        cells.append(f"{r['peak_rss_mb']:>12.0f} {r['load_average']:>5.1f}")
        print(" ".join(cells))
    base_rows = [r for r in rows if "pp_vs_baseline" in r]
    if base_rows:
        print(f"\nagainst the baseline checkout {args.baseline_tree} (same run, alternating): tokens/s ratio")
        for r in base_rows:
            print(f"  {r['model']} {r['type']} x{r['threads']}: prompt {r['pp_vs_baseline']:.2f}x "
                  f"({r['baseline_pp_tokens_per_s']:.1f} tok/s before), generation {r['tg_vs_baseline']:.2f}x "
                  f"({r['baseline_tg_tokens_per_s']:.1f} tok/s before)")  # fmt: skip
    print("\nper generated token, ms (kernels by op; host = everything else):")
    for r in rows:
        parts = [f"{k} {v:.3f}" for k, v in r["decode_breakdown_ms"].items()]
        print(f"  {r['model']} {r['type']} x{r['threads']}: " + ", ".join(parts))
    split_rows = [r for r in rows if sum(r["row_splits"])]
    if split_rows:
        print("\none-row products split over the helper threads (timed runs): on 2+ threads / stalled / on one")
        print("thread while backing off after a stall")
        for r in split_rows:
            done, stalled, alone = r["row_splits"]
            print(f"  {r['model']} {r['type']} x{r['threads']}: {done} / {stalled} / {alone}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
