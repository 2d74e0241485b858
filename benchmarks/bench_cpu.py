"""CPU plugin speed, each number next to a baseline measured in the same run (medians; ratios; ``--json``).

Usage: ``python benchmarks/bench_cpu.py [--threads N] [--repeat R] [--types q4_0,q8_0,q4_k,q6_k] [--sections ...]
[--json PATH]``

The results go to ``benchmarks/results/bench_cpu.json`` (``--json PATH`` elsewhere).

Sections (all by default):

``f32``       MUL_MAT with f32 weights K=M=4096 through a graph vs numpy ``x @ w.T`` on the same arrays, batch 1, 32,
              512 (target: ratio numpy/graph ≥ 0.95).
``dispatch``  a graph of 1,000 ADDs on 64-element tensors vs a bare loop of the same ``np.add(a, b, out=c)`` calls
              (target: per-node time ≤ 3× the loop's). Also the first compute (planning) of that graph.
``quant``     quantized MUL_MAT, weights 4096×4096, batch 1 and 32: time, GB/s of weight bytes read, and the ratio to
              ggml's C (target: ≤ 2×): to reference figures of ggml on a 2-core AMD EPYC (0.64 / 0.81 / 0.42 ms
              for Q4_0 / Q8_0 / Q4_K, two threads) and, when ggml-python (``import ggml``) is installed, to the real
              ggml CPU backend timed here with the same thread count. f32 weights (numpy) for scale.
``memory``    peak resident memory added by quantized products (batch 1 and 512) over the tensors themselves.
``jit``       first-call cost in a fresh process: compiling the kernels (empty cache) and loading them (warm).

Every figure is a median of ``--repeat`` runs, each timed alternately with its baseline. The machine may be shared:
rerun, and compare ratios rather than absolute times.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import Results, add_json_option, median_ms, paired_ms

import ggml_core as gc
from ggml_core import Context, GGMLType, ops
from ggml_core.quants import quantize

#: ggml's own matrix-vector times, 4096×4096, 2 threads, on a 2-core AMD EPYC (reference figures), in ms
GGML_QUOTED_MS = {"q4_0": 0.64, "q8_0": 0.81, "q4_k": 0.42}

SECTIONS = ("f32", "dispatch", "quant", "memory", "jit")


def _backend(threads: int) -> gc.Backend:
    return gc.init_backend("CPU", f"n_threads={threads}")


def _mul_mat(be: gc.Backend, wtype: str, m: int, n: int, k: int, seed: int = 0) -> tuple[Callable[[], None], Any]:
    """A graph computing one MUL_MAT on ``be``: (compute function, (w tensor, x tensor, out tensor))."""
    r = np.random.default_rng(seed)
    ctx = Context("bench")
    w = ctx.new_tensor(wtype, [k, m])
    x = ctx.new_tensor("f32", [k, n])
    out = ops.mul_mat(w, x)
    gc.alloc_ctx_tensors(ctx, be)
    w.set_data(r.standard_normal((m, k)).astype(np.float32))
    x.set_data(r.standard_normal((n, k)).astype(np.float32))
    graph = gc.build_graph(out)
    be.graph_compute(graph)  # plan (and compile kernels) outside the timing
    return lambda: be.graph_compute(graph), (w, x, out)


# ------------------------------------------------------------------------------------------------ f32


def bench_f32(res: Results, threads: int, repeat: int, size: int) -> None:
    be = _backend(threads)
    print(f"\nMUL_MAT f32 weights K=M={size} through a graph vs numpy x @ w.T on the same arrays (target ratio ≥ 0.95)")
    for n in (1, 32, 512):
        run, (w, x, _) = _mul_mat(be, "f32", size, n, size)
        wv, xv = w.numpy_view()[0, 0], x.numpy_view()[0, 0]
        ours, base = paired_ms(run, lambda: xv @ wv.T, repeat)  # noqa: B023 - called before the loop moves on
        gflops = 2.0 * size * size * n / ours / 1e6
        row = res.add("f32", f"batch {n}", batch=n, ours_ms=ours, numpy_ms=base, ratio=base / ours, gflops=gflops)
        print(
            f"  batch {n:4d}: graph {ours:8.3f} ms ({gflops:6.1f} GFLOP/s)   numpy {base:8.3f} ms   "
            f"ratio {row['ratio']:.3f}"
        )


# ------------------------------------------------------------------------------------------------ dispatch


def bench_dispatch(res: Results, threads: int, repeat: int, n_nodes: int = 1000, width: int = 64) -> None:
    be = _backend(threads)
    ctx = Context("adds")
    a = ctx.new_tensor("f32", [width])
    b = ctx.new_tensor("f32", [width])
    y = a
    for _ in range(n_nodes):
        y = ops.add(y, b)
    gc.alloc_ctx_tensors(ctx, be)
    a.set_data(np.ones(width, np.float32))
    b.set_data(np.full(width, 0.5, np.float32))
    graph = gc.build_graph(y)
    first = median_ms(lambda: (be.engine.forget(), be.graph_compute(graph)), 3, warmup=0)  # type: ignore[attr-defined]
    be.graph_compute(graph)
    triples = [(t.src[0].numpy_view(), t.src[1].numpy_view(), t.numpy_view()) for t in graph.nodes]  # type: ignore[union-attr]

    def bare() -> None:
        for p, q, out in triples:
            np.add(p, q, out=out)

    ours, base = paired_ms(lambda: be.graph_compute(graph), bare, repeat)
    thunks = be.engine.plan(graph).thunks  # type: ignore[attr-defined]

    def kernels_only() -> None:  # the kernels' own cost: the bound thunks called in a bare loop
        with np.errstate(all="ignore"):
            for thunk in thunks:
                thunk()

    own = median_ms(kernels_only, repeat)
    per_node, per_add, per_thunk = ours * 1e3 / n_nodes, base * 1e3 / n_nodes, own * 1e3 / n_nodes
    np.testing.assert_allclose(y.numpy_view(), 1 + 0.5 * n_nodes)
    res.add(
        "dispatch",
        f"{n_nodes} ADDs of {width}",
        nodes=n_nodes,
        graph_us_per_node=per_node,
        loop_us_per_add=per_add,
        ratio=per_node / per_add,
        kernel_us_per_node=per_thunk,
        engine_us_per_node=per_node - per_thunk,
        first_compute_ms=first,
    )
    print(f"\nDispatch: graph of {n_nodes} ADDs on {width}-element tensors vs a bare numpy loop (target ≤ 3×)")
    print(
        f"  graph {per_node:6.2f} µs/node   bare loop {per_add:6.2f} µs/add   ratio {per_node / per_add:5.2f}x   "
        f"(first compute, planning included: {first:.1f} ms)"
    )
    print(
        f"  of which the ADD kernel's own thunk {per_thunk:6.2f} µs and the engine (plan check, replay loop) "
        f"{per_node - per_thunk:6.2f} µs per node"
    )


# ------------------------------------------------------------------------------------------------ quantized


def _ggml_runner(wtype: str, m: int, n: int, k: int, threads: int) -> Callable[[], None] | None:
    """The same product on real ggml's CPU backend (ggml-python), or None when it is not installed."""
    try:
        import ggml
    except ImportError:
        return None
    t = gc.as_type(wtype)
    params = ggml.ggml_init_params(mem_size=16 << 20, mem_buffer=None, no_alloc=True)
    ctx = ggml.ggml_init(params)
    a = ggml.ggml_new_tensor_2d(ctx, int(t), k, m)
    b = ggml.ggml_new_tensor_2d(ctx, int(GGMLType.F32), k, n)
    out = ggml.ggml_mul_mat(ctx, a, b)
    graph = ggml.ggml_new_graph(ctx)
    ggml.ggml_build_forward_expand(graph, out)
    be = ggml.ggml_backend_cpu_init()
    ggml.ggml_backend_cpu_set_n_threads(be, threads)
    ggml.ggml_backend_alloc_ctx_tensors(ctx, be)
    r = np.random.default_rng(0)
    wf = r.standard_normal((m, k)).astype(np.float32)
    raw = (wf if t == GGMLType.F32 else quantize(wf, t)).tobytes()
    xb = r.standard_normal((n, k)).astype(np.float32).tobytes()
    ggml.ggml_backend_tensor_set(a, ctypes.c_char_p(raw), 0, len(raw))
    ggml.ggml_backend_tensor_set(b, ctypes.c_char_p(xb), 0, len(xb))
    return lambda: ggml.ggml_backend_graph_compute(be, graph)


def bench_quant(res: Results, threads: int, repeat: int, types: list[str], size: int) -> None:
    be = _backend(threads)
    have_ggml = _ggml_runner("q4_0", 32, 1, 32, threads) is not None
    print(
        f"\nQuantized MUL_MAT {size}x{size} weights, {threads} thread(s): time, GB/s of weight bytes, ratio to ggml "
        f"(target ≤ 2x){'' if have_ggml else '   [ggml-python not installed: quoted ggml figures only]'}"
    )
    for n in (1, 32):
        f32_run, _ = _mul_mat(be, "f32", size, n, size)
        f32_ms = median_ms(f32_run, repeat)
        print(f"  batch {n}: f32 weights (numpy BLAS) {f32_ms:.3f} ms")
        for name in types:
            run, (w, _, _) = _mul_mat(be, name, size, n, size)
            gg = _ggml_runner(name, size, n, size, threads)
            if gg is not None:
                ours, ggml_ms = paired_ms(run, gg, repeat)
            else:
                ours, ggml_ms = median_ms(run, repeat), None
            gbs = w.nbytes / ours / 1e6
            quoted = GGML_QUOTED_MS.get(name) if n == 1 else None
            row = res.add(
                "quant",
                f"{name} batch {n}",
                type=name,
                batch=n,
                ours_ms=ours,
                gbytes_per_s=gbs,
                weight_bytes=w.nbytes,
                ggml_ms=ggml_ms,
                ratio_ggml=ours / ggml_ms if ggml_ms else None,
                ggml_quoted_ms=quoted,
                ratio_quoted=ours / quoted if quoted else None,
                f32_ms=f32_ms,
            )
            extra = f"   ggml here {ggml_ms:7.3f} ms  ratio {row['ratio_ggml']:5.2f}x" if ggml_ms else ""
            extra += f"   ggml quoted {quoted:.2f} ms  ratio {row['ratio_quoted']:5.2f}x" if quoted else ""
            print(f"    {name:>5}: {ours:8.3f} ms  {gbs:6.1f} GB/s{extra}")


# ------------------------------------------------------------------------------------------------ memory


_MEMORY = textwrap.dedent("""
    import gc as pygc, sys, numpy as np, ggml_core as gc
    from ggml_core import ops
    from ggml_core.quants import quantize

    def kb(field):
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith(field + ":"))

    name, n, size, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    be = gc.init_backend("CPU", f"n_threads={threads}")
    ctx = gc.Context("m")
    w, x = ctx.new_tensor(name, [size, size]), ctx.new_tensor("f32", [size, n])
    y = ops.mul_mat(w, x)
    gc.alloc_ctx_tensors(ctx, be)
    r = np.random.default_rng(0)
    w.set_bytes(np.tile(quantize(r.standard_normal((64, size)).astype(np.float32), name), (size // 64, 1)))
    x.set_data(r.standard_normal((n, size)).astype(np.float32))
    g = gc.build_graph(y)
    warm = gc.Context("warm")  # load the compiled kernels first: their code is not part of a product's memory
    w2, x2 = warm.new_tensor(name, [256, 32]), warm.new_tensor("f32", [256, n])
    y2 = ops.mul_mat(w2, x2)
    gc.alloc_ctx_tensors(warm, be)
    be.graph_compute(gc.build_graph(y2))
    pygc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) restarts from the current resident size
    before = kb("VmRSS")
    for _ in range(3):
        be.graph_compute(g)
    extra = (kb("VmHWM") - before) * 1024
    print(w.nbytes + x.nbytes + y.nbytes, extra)
""")


def bench_memory(res: Results, threads: int, size: int) -> None:
    if not os.access("/proc/self/clear_refs", os.W_OK):
        print("\nMemory: skipped (needs Linux /proc/self/clear_refs)")
        return
    print(f"\nMemory: peak resident memory a product adds over its tensors (fresh process, weights {size}x{size})")
    for name in ("q4_0", "q6_k"):
        for n in (1, 512):
            args = [sys.executable, "-c", _MEMORY, name, str(n), str(size), str(threads)]
            done = subprocess.run(args, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                print(f"  {name} batch {n}: failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            tensors, extra = (int(v) for v in done.stdout.split())
            ratio = (tensors + extra) / tensors
            res.add(
                "memory",
                f"{name} batch {n}",
                type=name,
                batch=n,
                tensor_bytes=tensors,
                extra_peak_bytes=extra,
                ratio=ratio,
            )
            print(
                f"  {name} batch {n:3d}: tensors {tensors / 2**20:7.1f} MiB   extra peak {extra / 2**20:6.1f} MiB   "
                f"= {ratio:.3f}x the tensors (a float32 copy of the weights: {4 * size * size / 2**20:.0f} MiB)"
            )


# ------------------------------------------------------------------------------------------------ jit


_FIRST_CALL = textwrap.dedent("""
    import time
    t0 = time.perf_counter()
    import numpy as np, ggml_core as gc
    from ggml_core import ops
    be = gc.init_backend("CPU")
    t1 = time.perf_counter()
    out = {}
    for name in ("q4_0", "q4_k"):
        ctx = gc.Context("t")
        w, x = ctx.new_tensor(name, [4096, 64]), ctx.new_tensor("f32", [4096, 1])
        y = ops.mul_mat(w, x)
        gc.alloc_ctx_tensors(ctx, be)
        g = gc.build_graph(y)
        t = time.perf_counter()
        be.graph_compute(g)
        out[name] = time.perf_counter() - t
    print(f"{t1 - t0:.3f} {out['q4_0']:.3f} {out['q4_k']:.3f}")
""")


def bench_jit(res: Results) -> None:
    print("\nFirst call in a fresh process (import + backend; first Q4_0 and Q4_K matrix-vector products)")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for label in ("cold cache (compile)", "warm cache (load)"):
            done = subprocess.run(
                [sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True, text=True, timeout=600
            )
            if done.returncode != 0:
                print(f"  {label}: failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            imp, q40, q4k = (float(v) for v in done.stdout.split())
            res.add("jit", label, import_s=imp, first_q4_0_s=q40, first_q4_k_s=q4k)
            print(
                f"  {label:22}: import {imp:6.2f} s   first Q4_0 product {q40:6.2f} s   first Q4_K product {q4k:6.2f} s"
            )


# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    """Run the selected sections; returns 0."""
    from ggml_cpu.threads import default_threads

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=default_threads(), help="CPU backend threads (default: all)")
    ap.add_argument("--repeat", type=int, default=9, help="timed runs per measurement (median reported)")
    ap.add_argument("--types", default="q4_0,q8_0,q4_k,q6_k", help="weight types of the quantized section")
    ap.add_argument("--size", type=int, default=4096, help="K = M of the products (multiple of 256)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {', '.join(SECTIONS)}")
    add_json_option(ap, "bench_cpu")
    args = ap.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    types = [t.strip().lower() for t in args.types.split(",") if t.strip()]
    res = Results("bench_cpu", {"threads": args.threads, "repeat": args.repeat, "size": args.size, "types": types})
    features = gc.get_registry().get_device("CPU").reg.features()  # type: ignore[union-attr]
    print(f"CPU plugin: {features}")
    print(f"threads {args.threads}, median of {args.repeat} runs; load average {res.data['machine']['load_average']}")
    res.data["features"] = features
    if "f32" in sections:
        bench_f32(res, args.threads, args.repeat, args.size)
    if "dispatch" in sections:
        bench_dispatch(res, args.threads, max(args.repeat, 15))
    if "quant" in sections:
        bench_quant(res, args.threads, max(args.repeat, 15), types, args.size)
    if "memory" in sections:
        bench_memory(res, args.threads, args.size)
    if "jit" in sections:
        bench_jit(res)
    res.write_json(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
