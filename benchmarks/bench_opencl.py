"""OpenCL plugin speed, each number next to a baseline measured in the same run.

Usage: ``python benchmarks/bench_opencl.py [--device OpenCL0] [--size 1024] [--repeat 7] [--types q4_0,q8_0,...]
[--json PATH]``; the results also go to ``benchmarks/results/bench_opencl.json`` as JSON.

Prints the CPU model, the load average and the device, then best-of and median of ``--repeat`` interleaved rounds
(after a warm-up that builds the kernels and, on first use, tunes them for this device: see docs/opencl.md): each
round runs ours and the baseline, in alternating order, so that both see the same load — after a pause, two calls
of each, the second timed (calls in a row, as in a model); the matrix-vector product also prints the best first
call after the pause ("cold": it includes waking the worker threads):

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _device_graphs import add_runners, mul_mat_runner, open_device
from _util import Results, add_json_option, machine


class Paired:
    """Two functions timed in interleaved rounds: best-of and median of each, and their ratios."""

    def __init__(self, fa: Callable[[], object], fb: Callable[[], object], rounds: int) -> None:
        """Each round runs both, in alternating order: a short pause, then two calls of one, timed apart.

        Interleaving gives both the same machine load (this machine is shared); the pause lets numpy's BLAS
        threads and PoCL's worker threads, which keep spinning for a moment after their work, go quiet before the
        other one runs. The first call after the pause pays for waking its worker threads (``cold``: ~0.5-1 ms
        for PoCL here); the second is the steady state of calls in a row, as in a model's decoding loop (the
        default numbers). Best-of is the least disturbed run of each; the median is what a typical call costs.
        """
        fa()
        fb()
        self.a: list[float] = []
        self.b: list[float] = []
        self.cold_a: list[float] = []
        self.cold_b: list[float] = []
        for rnd in range(rounds):
            pair = ((fa, self.a, self.cold_a), (fb, self.b, self.cold_b))
            for fn, out, cold in pair if rnd % 2 == 0 else pair[::-1]:
                time.sleep(0.02)
                t0 = time.perf_counter()
                fn()
                t1 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t1)
                cold.append(t1 - t0)

    @property
    def best(self) -> tuple[float, float]:
        """Fastest steady-state run of each (s)."""
        return min(self.a), min(self.b)

    @property
    def median(self) -> tuple[float, float]:
        """Median steady-state run of each (s)."""
        return statistics.median(self.a), statistics.median(self.b)

    @property
    def cold_best(self) -> tuple[float, float]:
        """Fastest first call after the pause of each (s)."""
        return min(self.cold_a), min(self.cold_b)


def _mul_mat_runner(dev: g.Device, wtype: str, m: int, n: int, k: int, rng: np.random.Generator) -> Callable[[], None]:
    w = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    return mul_mat_runner(dev, wtype, w, rng.uniform(-1, 1, (n, k)).astype(np.float32))


def bench_sgemm(res: Results, dev: g.Device, size: int, repeat: int, rng: np.random.Generator) -> float:
    """Our SGEMM vs numpy; returns our time (s)."""
    run = _mul_mat_runner(dev, "f32", size, size, size, rng)
    a = rng.uniform(-1, 1, (size, size)).astype(np.float32)
    b = rng.uniform(-1, 1, (size, size)).astype(np.float32)
    p = Paired(run, lambda: b @ a.T, repeat)
    flop = 2.0 * size**3
    for how, (ours, ref) in (("best-of", p.best), ("median", p.median)):
        res.add("sgemm", how, size=size, ours_ms=ours * 1e3, numpy_ms=ref * 1e3, gflops=flop / ours / 1e9)
        print(
            f"SGEMM {size}^3 f32 {how:7}: {dev.name} {flop / ours / 1e9:7.1f} GFLOP/s ({ours * 1e3:.1f} ms)   "
            f"numpy {flop / ref / 1e9:7.1f} GFLOP/s ({ref * 1e3:.1f} ms)   ratio {ref / ours:.2f}x"
        )
    return p.best[0]


def bench_matvec(res: Results, dev: g.Device, repeat: int, rng: np.random.Generator) -> None:
    """4096×4096 f32 weights times one activation row: ours vs numpy."""
    m = k = 4096
    run = _mul_mat_runner(dev, "f32", m, 1, k, rng)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    x = rng.uniform(-1, 1, k).astype(np.float32)
    p = Paired(run, lambda: a @ x, repeat)
    gb = m * k * 4 / 2**30
    for how, (ours, ref) in (("best-of", p.best), ("median", p.median), ("cold", p.cold_best)):
        res.add("matvec", how, ours_ms=ours * 1e3, numpy_ms=ref * 1e3)
        print(
            f"MATVEC 4096x4096 f32 {how:7}: {dev.name} {ours * 1e3:.2f} ms ({gb / ours:.1f} GiB/s)   numpy "
            f"{ref * 1e3:.2f} ms ({gb / ref:.1f} GiB/s)   time ratio {ours / ref:.2f}x (goal <= 2x)"
        )


def bench_quantized(
    res: Results,
    dev: g.Device,
    types: list[str],
    size: int,
    repeat: int,
    rng: np.random.Generator,
    shapes: tuple[str, ...],
) -> None:
    """Quantized weights against f32 weights, as a matrix product and as a matrix-vector product."""
    for label, (m, n, k) in (("matmul", (size, size, size)), ("matvec", (4096, 1, 4096))):
        if label not in shapes:
            continue
        f32_run = _mul_mat_runner(dev, "f32", m, n, k, rng)
        print(
            f"MUL_MAT {label} M={m} N={n} K={k} (each type timed in interleaved rounds with f32 weights; "
            f"best-of, then median):"
        )
        for t in types:
            p = Paired(_mul_mat_runner(dev, t, m, n, k, rng), f32_run, repeat)
            (tq, base), (mq, mbase) = p.best, p.median
            res.add(
                f"quantized {label}",
                t,
                best_ms=tq * 1e3,
                f32_best_ms=base * 1e3,
                median_ms=mq * 1e3,
                f32_median_ms=mbase * 1e3,
            )
            print(
                f"    {t:>6} weights {tq * 1e3:8.2f} ms   f32 weights {base * 1e3:8.2f} ms   ratio {tq / base:5.2f}x"
                f"   (median {mq * 1e3:.2f} / {mbase * 1e3:.2f} ms, {mq / mbase:.2f}x)"
            )


def bench_add(res: Results, dev: g.Device, repeat: int, rng: np.random.Generator) -> None:
    """ADD of 16M f32 values: bandwidth of our kernel and of numpy."""
    n = 16 * 2**20
    ours_add, numpy_add = add_runners(dev, n, rng)
    ours, ref = Paired(ours_add, numpy_add, repeat).best
    gb = 3 * 4 * n / 2**30
    res.add("add", "best-of", ours_ms=ours * 1e3, numpy_ms=ref * 1e3)
    print(
        f"ADD 16M f32 best-of: {dev.name} {gb / ours:6.1f} GiB/s ({ours * 1e3:.1f} ms)   numpy {gb / ref:6.1f} GiB/s "
        f"({ref * 1e3:.1f} ms)   ratio {ref / ours:.2f}x"
    )


def main() -> int:
    """Run the three benchmarks on one OpenCL device."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="OpenCL0")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=15, help="interleaved rounds per measurement")
    p.add_argument("--types", default="q4_0,q8_0,q4_K,q6_K")
    p.add_argument("--only", choices=("sgemm", "matvec", "quant", "quant-matvec", "add"), default=None)
    add_json_option(p, "bench_opencl")
    args = p.parse_args()
    opened = open_device(args, "OpenCL", "bench_opencl")
    if opened is None:
        return 1
    dev, res = opened
    info = res.data["machine"]
    print(
        f"CPU: {info['cpu']}{_simd()} ({info['cores']} cores visible, load average {info['load_average']}); "
        f"numpy {np.__version__}"
    )
    print(f"{dev.name}: {dev.description}")
    rng = np.random.default_rng(0)
    if args.only in (None, "sgemm"):
        bench_sgemm(res, dev, args.size, args.repeat, rng)
    if args.only in (None, "matvec"):
        bench_matvec(res, dev, args.repeat, rng)
    if args.only in (None, "quant", "quant-matvec"):
        shapes = ("matvec",) if args.only == "quant-matvec" else ("matmul", "matvec")
        types = [t.strip() for t in args.types.split(",") if t.strip()]
        bench_quantized(res, dev, types, args.size, args.repeat, rng, shapes)
    if args.only in (None, "add"):
        bench_add(res, dev, args.repeat, rng)
    _print_tuning(dev)
    print(f"load average at the end: {machine()['load_average']}")
    res.write_json(args.json)
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
