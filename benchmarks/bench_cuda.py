"""CUDA plugin speed on a real GPU, each number next to a baseline measured in the same run.

Usage: ``python benchmarks/bench_cuda.py [--device CUDA0] [--quick] [--json PATH]``
(results as JSON in ``benchmarks/results/bench_cuda.json`` by default)

1. GEMM ``4096³`` in f16 and f32: our MUL_MAT graph (f16 weights × f32 activations, converted to f16 on the device
   and multiplied on tensor cores; f32 on the SIMT kernel) against cuBLAS through CuPy (``a @ b`` in the same
   precision). Target: ≥ 0.7× cuBLAS in f16.
2. Quantized matrix × vector (Q4_0, Q8_0, Q4_K; weights larger than L2) in GB/s of bytes moved, against the card's
   device-to-device copy bandwidth measured in this run (bytes read + written). Target: ≥ 60 % of it.
3. A LLaMA model (llama-bench's 512-wide shape from bench_e2e.py) over CPU alone, split over CUDA0 + CPU (through
   the scheduler), and on CUDA0 alone: prompt processing (128 tokens) and generation in tokens/s.

GPU times come from CUDA events around ``LOOPS`` queued computes (the host only enqueues), medians of
``--repeat`` samples. Needs pycuda, CuPy (for cuBLAS) and a GPU; without them it says what is missing and exits 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np

import ggml_core as g
from ggml_core import ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import add_json_option, machine, write_json

TARGET_F16_VS_CUBLAS: Final = 0.7
TARGET_MV_VS_COPY: Final = 0.6


def _events() -> Any:
    import pycuda.driver as cuda

    return cuda.Event(), cuda.Event()


def gpu_time(dev: Any, stream: Any, enqueue: Callable[[], None], loops: int, repeat: int) -> float:
    """Median seconds per ``enqueue()`` measured with CUDA events on ``stream`` (after a warm-up)."""
    with dev.driver.activate(dev.ordinal):
        enqueue()
        stream.synchronize()
        samples = []
        for _ in range(repeat):
            start, end = _events()
            start.record(stream)
            for _ in range(loops):
                enqueue()
            end.record(stream)
            end.synchronize()
            samples.append(end.time_since(start) / 1e3 / loops)
    return statistics.median(samples)


def cupy_time(fn: Callable[[], object], loops: int, repeat: int) -> float:
    """Median seconds per ``fn()`` on CuPy's current stream, with CUDA events."""
    import cupy as cp

    fn()
    cp.cuda.Device().synchronize()
    samples = []
    for _ in range(repeat):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(loops):
            fn()
        end.record()
        end.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, end) / 1e3 / loops)
    return statistics.median(samples)


def _mul_mat_graph(
    dev: Any, wtype: str, m: int, n: int, k: int, weights: np.ndarray | None, rng: np.random.Generator
) -> tuple[Any, g.Graph, Any]:
    """(backend, graph, buffer) of one MUL_MAT; ``weights``: raw row bytes to tile, or None for random floats."""
    ctx = g.Context("bench")
    a = ctx.new_tensor_2d(wtype, k, m, "w")
    b = ctx.new_tensor_2d("f32", k, n, "x")
    graph = g.build_graph(ops.mul_mat(a, b))
    backend = dev.init_backend()
    buf = g.alloc_ctx_tensors(ctx, backend)
    if weights is None:
        a.set_data(rng.uniform(-1, 1, (m, k)).astype(np.float32))
    else:
        reps = -(-m // weights.shape[0])
        a.set_bytes(np.tile(weights, (reps, 1))[:m])
    b.set_data(rng.uniform(-1, 1, (n, k)).astype(np.float32))
    return backend, graph, buf


def _computer(backend: Any, graph: g.Graph) -> Callable[[], None]:
    """A closure queueing ``graph`` on ``backend``."""
    return lambda: backend.graph_compute_async(graph)


def _cupy_product(x: Any, w: Any) -> Callable[[], object]:
    """A closure computing ``x @ w.T`` with cuBLAS."""
    return lambda: x @ w.T


def bench_gemm(dev: Any, size: int, loops: int, repeat: int, rng: np.random.Generator) -> dict[str, Any]:
    """f16 and f32 GEMM size³: ours vs cuBLAS (CuPy)."""
    import cupy as cp

    out: dict[str, Any] = {}
    flop = 2.0 * size**3
    for wtype, cp_type in (("f16", cp.float16), ("f32", cp.float32)):
        backend, graph, buf = _mul_mat_graph(dev, wtype, size, size, size, None, rng)
        ours = gpu_time(dev, backend.stream, _computer(backend, graph), loops, repeat)
        backend.free()
        buf.free()
        x = cp.asarray(rng.uniform(-1, 1, (size, size)), dtype=cp_type)
        w = cp.asarray(rng.uniform(-1, 1, (size, size)), dtype=cp_type)
        ref = cupy_time(_cupy_product(x, w), loops, repeat)
        del x, w
        cp.get_default_memory_pool().free_all_blocks()
        ratio = ref / ours
        out[wtype] = {
            "ours_tflops": flop / ours / 1e12,
            "cublas_tflops": flop / ref / 1e12,
            "ratio": ratio,
            "ours_ms": ours * 1e3,
            "cublas_ms": ref * 1e3,
        }
        print(
            f"GEMM {size}^3 {wtype}: ours {flop / ours / 1e12:7.1f} TFLOP/s ({ours * 1e3:.3f} ms)   "
            f"cuBLAS {flop / ref / 1e12:7.1f} TFLOP/s ({ref * 1e3:.3f} ms)   ratio {ratio:.2f}x"
            + (f"   (target >= {TARGET_F16_VS_CUBLAS}x)" if wtype == "f16" else "")
        )
    return out


def copy_bandwidth(dev: Any, nbytes: int, loops: int, repeat: int) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read and written."""
    drv, o = dev.driver, dev.ordinal
    src, dst = drv.alloc(o, nbytes), drv.alloc(o, nbytes)
    backend = dev.init_backend()
    t = gpu_time(
        dev, backend.stream, lambda: drv.copy_dtod(o, int(dst), int(src), nbytes, backend.stream), loops, repeat
    )
    backend.free()
    drv.free(o, src)
    drv.free(o, dst)
    bw = 2 * nbytes / t
    print(f"device copy {nbytes / 2**30:.1f} GiB: {bw / 1e9:8.1f} GB/s (read + write)")
    return bw


def bench_matvec(
    dev: Any, types: list[str], size: int, copy_bw: float, loops: int, repeat: int, rng: np.random.Generator
) -> dict[str, Any]:
    """Quantized weights (size × size) times one activation column: bandwidth against the copy bandwidth."""
    from ggml_core.quants import quantize

    out: dict[str, Any] = {}
    for t in types:
        qt = g.as_type(t)
        sample = quantize(rng.uniform(-1, 1, (64, size)).astype(np.float32), qt).reshape(64, -1)
        backend, graph, buf = _mul_mat_graph(dev, t, size, 1, size, sample, rng)
        sec = gpu_time(dev, backend.stream, _computer(backend, graph), loops, repeat)
        backend.free()
        buf.free()
        moved = size * sample.shape[1] + size * 4 + size * 4  # weights, activations, result
        bw = moved / sec
        out[t] = {"us": sec * 1e6, "gbps": bw / 1e9, "fraction_of_copy": bw / copy_bw}
        print(
            f"matvec {t:>5} {size}x{size}: {sec * 1e6:8.1f} us  {bw / 1e9:8.1f} GB/s  "
            f"{100 * bw / copy_bw:5.1f} % of copy (target >= {100 * TARGET_MV_VS_COPY:.0f} %)"
        )
    return out


def bench_model(dev_name: str, wtypes: list[str], n_gen: int) -> dict[str, Any]:
    """bench_e2e's model over CPU, CUDA0 + CPU (split through the scheduler) and CUDA0 alone: tokens/s."""
    from bench_e2e import N_PROMPT, write_bench_model

    from ggml_core.models import Model, ModelParams, PlacementRequest, scheduler_available

    placements = {"CPU": PlacementRequest(devices=["CPU"]), dev_name: PlacementRequest(devices=[dev_name])}
    if scheduler_available():
        placements[f"{dev_name}+CPU"] = PlacementRequest(devices=[dev_name, "CPU"], tensor_split=[1, 1])
    out: dict[str, Any] = {}
    rng = np.random.default_rng(0)
    prompt = rng.integers(3, 4000, N_PROMPT).tolist()
    with tempfile.TemporaryDirectory() as tmp:
        for wtype in wtypes:
            path = write_bench_model(Path(tmp) / f"bench-{wtype}.gguf", wtype)
            for label, req in placements.items():
                try:
                    model = Model.load(path, ModelParams(placement=req, n_ctx=512, progress=False))
                    pp, tg, splits = _time_model(model, prompt, n_gen)
                except Exception as exc:  # noqa: BLE001 - one failing placement must not hide the others
                    out[f"{wtype}/{label}"] = {"error": f"{type(exc).__name__}: {exc}"}
                    print(f"model {wtype:>5} on {label:<12}: FAILED {type(exc).__name__}: {str(exc)[:300]}")
                    continue
                out[f"{wtype}/{label}"] = {"pp128_tps": pp, "tg_tps": tg, "splits": splits}
                print(
                    f"model {wtype:>5} on {label:<12}: pp128 {pp:9.1f} tokens/s   tg {tg:8.1f} tokens/s   "
                    f"({splits} split{'s' if splits != 1 else ''})"
                )
    return out


def _time_model(model: Any, prompt: list[int], n_gen: int) -> tuple[float, float, int]:
    """(prompt tokens/s, generated tokens/s, splits) of one loaded model; closes it."""
    with model as m:
        m.process_prompt(prompt[:8])  # warm-up: kernels, plans
        m.reset()
        t0 = time.perf_counter()
        m.process_prompt(prompt)
        pp = len(prompt) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for i in range(n_gen):
            m.decode([int(prompt[i % len(prompt)])])
        tg = n_gen / (time.perf_counter() - t0)
        return pp, tg, m.executor.n_splits


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="CUDA0")
    p.add_argument("--size", type=int, default=4096, help="GEMM size (M = N = K)")
    p.add_argument("--mv-size", type=int, default=32768, help="matrix-vector weights: size x size")
    p.add_argument("--types", default="q4_0,q8_0,q4_K")
    p.add_argument("--model-types", default="f16,q4_0")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--loops", type=int, default=10)
    p.add_argument("--n-gen", type=int, default=32)
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    p.add_argument("--skip", default="", help="comma list of parts to skip: gemm,matvec,model")
    add_json_option(p, "bench_cuda")
    args = p.parse_args(argv)
    if args.quick:
        args.size, args.mv_size, args.repeat, args.loops, args.n_gen = 1024, 8192, 3, 3, 8
    try:
        dev = g.get_device(args.device)
        import cupy  # noqa: F401 - the cuBLAS baseline
        import pycuda.driver  # noqa: F401 - CUDA events
    except (g.DeviceNotFoundError, ImportError) as exc:
        from ggml_cuda.plugin import cuda_reg

        print(f"bench_cuda: cannot run: {type(exc).__name__}: {exc} (CUDA: {cuda_reg().unavailable_reason})")
        return 2
    props = dev.props()
    print(
        f"{props.name}: {props.description}, cc {props.extra.get('compute_capability')}, "
        f"{props.memory_total / 2**30:.0f} GiB"
    )
    rng = np.random.default_rng(0)
    skip = set(args.skip.split(","))
    results: dict[str, Any] = {
        "machine": machine(),
        "device": props.name,
        "description": props.description,
        "extra": props.extra,
    }
    if "gemm" not in skip:
        results["gemm"] = bench_gemm(dev, args.size, args.loops, args.repeat, rng)
    if "matvec" not in skip:
        bw = copy_bandwidth(dev, 1 << 30 if not args.quick else 1 << 28, args.loops, args.repeat)
        results["copy_gbps"] = bw / 1e9
        results["matvec"] = bench_matvec(dev, args.types.split(","), args.mv_size, bw, args.loops, args.repeat, rng)
    if "model" not in skip:
        results["model"] = bench_model(props.name, args.model_types.split(","), args.n_gen)
    write_json(results, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
