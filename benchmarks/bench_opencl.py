"""OpenCL plugin speed, each number next to a baseline measured in the same run.

Usage: ``python benchmarks/bench_opencl.py [--device OpenCL0] [--size 1024] [--repeat 7] [--types q4_0,q8_0,...]``

Prints the CPU model and the device, then medians of ``--repeat`` runs (after a warm-up that builds the kernels
and, on first use, tunes them for this device: see docs/opencl.md), each measurement timed in alternating blocks
with its baseline so that both see the same load:

1. SGEMM ``size``³ f32: our MUL_MAT graph (weights packed and multiplied on the device) in GFLOP/s, numpy's
   ``b @ a.T`` in GFLOP/s, and the ratio (the goal is ≥ 0.5×).
2. Matrix-vector product, 4096×4096 f32 weights and one activation row, against numpy's ``a @ x`` (the goal is
   at most 2× numpy's time).
3. Quantized MUL_MAT at the SGEMM shape and as the matrix-vector product: time per type and the ratio to the f32
   weights' time (the goal for the matrix-vector product is ≤ 1×).
4. Elementwise ADD of 16M f32 values: GB/s (bytes read + written) against numpy's ``np.add(..., out=)``.

At the end it prints the kernel configuration the tuner chose (or read from its cache) per shape class. The device
times include enqueueing and waiting (``graph_compute``), not host↔device copies. Numbers are noisy on a shared
machine: compare the ratios, and rerun.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import ggml_core as g
from ggml_core import ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import machine


def _paired_median_s(fa: Callable[[], object], fb: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Medians of two functions timed in alternating blocks, so that both see the same machine load.

    Blocks (not single calls) with a pause between them: numpy's BLAS threads and PoCL's worker threads keep
    spinning for a moment after their work, and would otherwise slow down whichever runs next.
    """
    fa()
    fb()
    ta: list[float] = []
    tb: list[float] = []
    block = max(1, repeat // 3)
    while len(ta) < repeat:
        for fn, out in ((fa, ta), (fb, tb)):
            time.sleep(0.05)
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def _mul_mat_runner(dev: g.Device, wtype: str, m: int, n: int, k: int, rng: np.random.Generator) -> Callable[[], None]:
    ctx = g.Context("bench")
    a = ctx.new_tensor_2d(wtype, k, m, "w")
    b = ctx.new_tensor_2d("f32", k, n, "x")
    out = ops.mul_mat(a, b)
    graph = g.build_graph(out)
    backend = dev.init_backend()
    g.alloc_ctx_tensors(ctx, backend)
    a.set_data(rng.uniform(-1, 1, (m, k)).astype(np.float32))
    b.set_data(rng.uniform(-1, 1, (n, k)).astype(np.float32))
    return lambda: backend.graph_compute(graph)


def bench_sgemm(dev: g.Device, size: int, repeat: int, rng: np.random.Generator) -> float:
    """Our SGEMM vs numpy; returns our time (s)."""
    run = _mul_mat_runner(dev, "f32", size, size, size, rng)
    a = rng.uniform(-1, 1, (size, size)).astype(np.float32)
    b = rng.uniform(-1, 1, (size, size)).astype(np.float32)
    ours, ref = _paired_median_s(run, lambda: b @ a.T, repeat)
    flop = 2.0 * size**3
    print(f"SGEMM {size}^3 f32: {dev.name} {flop / ours / 1e9:7.1f} GFLOP/s ({ours * 1e3:.1f} ms)   "
          f"numpy {flop / ref / 1e9:7.1f} GFLOP/s ({ref * 1e3:.1f} ms)   ratio {ref / ours:.2f}x")
    return ours


def bench_matvec(dev: g.Device, repeat: int, rng: np.random.Generator) -> None:
    """4096×4096 f32 weights times one activation row: ours vs numpy."""
    m = k = 4096
    run = _mul_mat_runner(dev, "f32", m, 1, k, rng)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    x = rng.uniform(-1, 1, k).astype(np.float32)
    ours, ref = _paired_median_s(run, lambda: a @ x, repeat)
    gb = m * k * 4 / 2**30
    print(f"MATVEC 4096x4096 f32: {dev.name} {ours * 1e3:.2f} ms ({gb / ours:.1f} GiB/s)   numpy {ref * 1e3:.2f} ms "
          f"({gb / ref:.1f} GiB/s)   time ratio {ours / ref:.2f}x (goal <= 2x)")


def bench_quantized(dev: g.Device, types: list[str], size: int, repeat: int, rng: np.random.Generator) -> None:
    """Quantized weights against f32 weights, as a matrix product and as a matrix-vector product."""
    for label, (m, n, k) in (("matmul", (size, size, size)), ("matvec", (4096, 1, 4096))):
        f32_run = _mul_mat_runner(dev, "f32", m, n, k, rng)
        print(f"MUL_MAT {label} M={m} N={n} K={k} (each type timed in alternating blocks with f32 weights):")
        for t in types:
            tq, base = _paired_median_s(_mul_mat_runner(dev, t, m, n, k, rng), f32_run, repeat)
            print(f"    {t:>6} weights {tq * 1e3:8.2f} ms   f32 weights {base * 1e3:8.2f} ms   ratio {tq / base:5.2f}x")


def bench_add(dev: g.Device, repeat: int, rng: np.random.Generator) -> None:
    """ADD of 16M f32 values: bandwidth of our kernel and of numpy."""
    n = 16 * 2**20
    ctx = g.Context("add")
    x = ctx.new_tensor_1d("f32", n, "x")
    y = ctx.new_tensor_1d("f32", n, "y")
    out = ops.add(x, y)
    graph = g.build_graph(out)
    backend = dev.init_backend()
    g.alloc_ctx_tensors(ctx, backend)
    xv = rng.uniform(-1, 1, n).astype(np.float32)
    yv = rng.uniform(-1, 1, n).astype(np.float32)
    x.set_data(xv)
    y.set_data(yv)
    zv = np.empty_like(xv)
    ours, ref = _paired_median_s(lambda: backend.graph_compute(graph), lambda: np.add(xv, yv, out=zv), repeat)
    gb = 3 * 4 * n / 2**30
    print(f"ADD 16M f32: {dev.name} {gb / ours:6.1f} GiB/s ({ours * 1e3:.1f} ms)   numpy {gb / ref:6.1f} GiB/s "
          f"({ref * 1e3:.1f} ms)   ratio {ref / ours:.2f}x")


def main() -> int:
    """Run the three benchmarks on one OpenCL device."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="OpenCL0")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--types", default="q4_0,q8_0,q4_K,q6_K")
    p.add_argument("--only", choices=("sgemm", "matvec", "quant", "add"), default=None)
    args = p.parse_args()
    try:
        dev = g.get_device(args.device)
    except g.DeviceNotFoundError as exc:
        print(f"no OpenCL device to benchmark: {exc}")
        return 1
    info = machine()
    print(f"CPU: {info['cpu']}{_simd()} ({info['cores']} cores visible, load average {info['load_average']}); "
          f"numpy {np.__version__}")
    print(f"{dev.name}: {dev.description}")
    rng = np.random.default_rng(0)
    if args.only in (None, "sgemm"):
        bench_sgemm(dev, args.size, args.repeat, rng)
    if args.only in (None, "matvec"):
        bench_matvec(dev, args.repeat, rng)
    if args.only in (None, "quant"):
        bench_quantized(dev, [t.strip() for t in args.types.split(",") if t.strip()], args.size, args.repeat, rng)
    if args.only in (None, "add"):
        bench_add(dev, args.repeat, rng)
    _print_tuning(dev)
    return 0


def _simd() -> str:
    """The widest x86 vector extension the CPU reports (the model name alone may be generic in a VM)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return ""
    best = next((x for x in ("avx512f", "avx2", "sse4_2") if x in flags), None)
    return f", {best.upper()}" if best else ""


def _print_tuning(dev: g.Device) -> None:
    """The kernel configuration in use per shape class (ggml-opencl's tuner)."""
    try:
        from ggml_opencl._tuning import tuner_for
    except ImportError:
        return
    if not hasattr(dev, "cl_device"):
        return
    tuner = tuner_for(dev.context, dev.cl_device, dev.info)
    print(f"tuned configurations ({tuner.cache_file}):")
    for shape, cfg in sorted(tuner.chosen.items()):
        timed = tuner.timings.get(shape)
        how = f"tuned now over {len(timed)} candidates" if timed else "from the cache or the default"
        print(f"    {shape:16} {cfg.label():28} ({how})")


if __name__ == "__main__":
    raise SystemExit(main())
