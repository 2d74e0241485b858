"""WebGPU plugin speed, each number next to a numpy baseline measured in the same run.

Usage: ``python benchmarks/bench_webgpu.py [--device WebGPU0] [--size 256] [--repeat 5] [--types q4_0,q8_0,...]
[--json PATH]``; the results also go to ``benchmarks/results/bench_webgpu.json`` as JSON.

Prints the CPU model and the adapter, then medians of ``--repeat`` runs (after a warm-up that compiles the
pipelines and records the graph), each timed alternately with its baseline so that both see the same load:

1. SGEMM ``size``³ f32: our MUL_MAT graph in GFLOP/s, numpy's ``b @ a.T``, and the ratio.
2. Matrix-vector products (one activation row, ``4 size`` × ``4 size`` weights) for f32 and each quantized type:
   time, and the ratio to numpy's f32 matrix-vector product and to our f32 weights.
3. ADD of 4M f32 values: GiB/s (bytes read + written) against numpy's ``np.add(..., out=)``.
4. Uploads of 64 MiB (``set_tensor``, waited for): through the plugin's staging ring of mapped buffers against
   ``queue.write_buffer`` (wgpu's plain upload), and numpy's copy of the same bytes.
5. RMS_NORM + MUL over 512 rows of 4096 (a llama layer's norm at batch 512): fused into one dispatch against the
   two dispatches (``WebGPUBackend.fusion`` off), and numpy.

Device times include recording, submitting and waiting (``graph_compute``), not host↔device copies. On lavapipe
(Mesa's Vulkan on the CPU) the plugin is a correctness target: expect ratios far below 1; the interesting numbers
come from a real GPU adapter. Numbers are noisy on a shared machine: compare the ratios, and rerun.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="ggml-webgpu-"))  # wgpu-native warns without it

from _device_graphs import add_runners, mul_mat_runner, open_device
from _util import Results, add_json_option, machine, paired_ms

import ggml_core as g
from ggml_core import ops


def bench_sgemm(res: Results, dev: g.Device, size: int, repeat: int, rng: np.random.Generator) -> None:
    """Our SGEMM against numpy's."""
    w = rng.uniform(-1, 1, (size, size)).astype(np.float32)
    x = rng.uniform(-1, 1, (size, size)).astype(np.float32)
    ours, ref = paired_ms(mul_mat_runner(dev, "f32", w, x), lambda: x @ w.T, repeat)
    flop = 2.0 * size**3
    res.add("sgemm", f"{size}^3", ours_ms=ours, numpy_ms=ref)
    print(
        f"SGEMM {size}^3 f32: {dev.name} {flop / ours / 1e6:8.2f} GFLOP/s ({ours:.1f} ms)   "
        f"numpy {flop / ref / 1e6:8.2f} GFLOP/s ({ref:.2f} ms)   ratio {ref / ours:.3f}x"
    )


def bench_matvec(
    res: Results, dev: g.Device, types: list[str], size: int, repeat: int, rng: np.random.Generator
) -> None:
    """Matrix-vector products per weight type against numpy's f32 one and our f32 weights."""
    k = m = 4 * size
    w = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    x = rng.uniform(-1, 1, (1, k)).astype(np.float32)
    f32_run = mul_mat_runner(dev, "f32", w, x)
    ours_f32, ref = paired_ms(f32_run, lambda: x @ w.T, repeat)
    res.add("matvec", "f32", ours_ms=ours_f32, numpy_ms=ref)
    print(f"MUL_MAT matvec M={m} K={k}: numpy f32 {ref:.3f} ms")
    print(f"    {'f32':>6} weights {ours_f32:9.2f} ms   ratio to numpy {ours_f32 / ref:8.1f}x")
    for t in types:
        tq, base = paired_ms(mul_mat_runner(dev, t, w, x), f32_run, repeat)
        res.add("matvec", t, ours_ms=tq, f32_weights_ms=base, numpy_ms=ref)
        print(
            f"    {t:>6} weights {tq:9.2f} ms   ratio to numpy {tq / ref:8.1f}x   to our f32 weights {tq / base:5.2f}x"
        )


def bench_add(res: Results, dev: g.Device, repeat: int, rng: np.random.Generator) -> None:
    """ADD of 4M f32 values: bandwidth of our kernel and of numpy."""
    n = 4 * 2**20
    ours, ref = paired_ms(*add_runners(dev, n, rng), repeat)
    gib = 3 * 4 * n / 2**30
    res.add("add", "4M f32", ours_ms=ours, numpy_ms=ref)
    print(
        f"ADD 4M f32: {dev.name} {gib / ours * 1e3:6.2f} GiB/s ({ours:.1f} ms)   numpy {gib / ref * 1e3:6.1f} GiB/s "
        f"({ref:.2f} ms)   ratio {ref / ours:.3f}x"
    )


def bench_upload(res: Results, dev: g.Device, repeat: int, rng: np.random.Generator) -> None:
    """64 MiB host -> device: the staging ring against ``queue.write_buffer`` and a numpy copy."""
    n = 64 * 2**20
    buf = dev.buffer_type().alloc_buffer(n)
    host = rng.integers(0, 256, n, dtype=np.uint8)
    copy = np.empty_like(host)
    queue, gpu = dev.queue, buf.gpu  # type: ignore[attr-defined]

    def staged() -> None:
        buf.write(0, host.data)
        dev.wait_idle()  # type: ignore[attr-defined]

    def write_buffer() -> None:
        queue.write_buffer(gpu, 0, host)
        dev.wait_idle()  # type: ignore[attr-defined]

    ours, plain = paired_ms(staged, write_buffer, repeat)
    ref, _ = paired_ms(lambda: np.copyto(copy, host), lambda: None, repeat)
    assert buf.read(0, n) == host.tobytes()
    gib = n / 2**30
    res.add("upload", "64 MiB", staging_ms=ours, write_buffer_ms=plain, numpy_copy_ms=ref)
    print(
        f"UPLOAD 64 MiB: staging ring {gib / ours * 1e3:5.2f} GiB/s ({ours:.1f} ms)   queue.write_buffer "
        f"{gib / plain * 1e3:5.2f} GiB/s ({plain:.1f} ms)   ratio {plain / ours:.2f}x   numpy copy "
        f"{gib / ref * 1e3:5.1f} GiB/s"
    )
    buf.free()


def bench_fusion(res: Results, dev: g.Device, repeat: int, rng: np.random.Generator) -> None:
    """RMS_NORM + MUL fused (one dispatch) against unfused (two), and numpy."""
    rows, n = 512, 4096
    ctx = g.Context("norm")
    x = ctx.new_tensor_2d("f32", n, rows, "x")
    w = ctx.new_tensor_1d("f32", n, "w")
    out = ops.mul(ops.rms_norm(x, 1e-6), w)
    graph = g.build_graph(out)
    g.alloc_ctx_tensors(ctx, dev.buffer_type())
    xv = rng.uniform(-1, 1, (rows, n)).astype(np.float32)
    wv = rng.uniform(-1, 1, n).astype(np.float32)
    x.set_data(xv)
    w.set_data(wv)
    fused, plain = dev.init_backend(), dev.init_backend()
    plain.fusion = False  # type: ignore[attr-defined]
    t_fused, t_plain = paired_ms(lambda: fused.graph_compute(graph), lambda: plain.graph_compute(graph), repeat)

    def numpy_norm() -> None:
        (xv / np.sqrt(np.mean(xv * xv, axis=1, keepdims=True) + 1e-6)) * wv

    ref, _ = paired_ms(numpy_norm, lambda: None, repeat)
    res.add("fusion", "RMS_NORM+MUL", fused_ms=t_fused, two_dispatches_ms=t_plain, numpy_ms=ref)
    print(
        f"RMS_NORM+MUL {rows}x{n} f32: fused {t_fused:.1f} ms   two dispatches {t_plain:.1f} ms   "
        f"ratio {t_plain / t_fused:.2f}x   numpy {ref:.2f} ms"
    )


def main() -> int:
    """Run the three benchmarks on one WebGPU device."""
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--device", default="WebGPU0")
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--types", default="q4_0,q8_0,q4_K,q6_K")
    p.add_argument("--only", choices=("sgemm", "matvec", "add", "upload", "fusion"), default=None)
    add_json_option(p, "bench_webgpu")
    args = p.parse_args()
    opened = open_device(args, "WebGPU", "bench_webgpu")
    if opened is None:
        return 1
    dev, res = opened
    info = res.data["machine"]
    print(f"CPU: {info['cpu']} ({info['cores']} cores, load {info['load_average']}); numpy {info['numpy']}")
    print(f"{dev.name}: {dev.description}, type {dev.type.name}")
    rng = np.random.default_rng(0)
    if args.only in (None, "sgemm"):
        bench_sgemm(res, dev, args.size, args.repeat, rng)
    if args.only in (None, "matvec"):
        bench_matvec(res, dev, [t.strip() for t in args.types.split(",") if t.strip()], args.size, args.repeat, rng)
    if args.only in (None, "add"):
        bench_add(res, dev, args.repeat, rng)
    if args.only in (None, "upload"):
        bench_upload(res, dev, args.repeat, rng)
    if args.only in (None, "fusion"):
        bench_fusion(res, dev, args.repeat, rng)
    print(f"load average at the end: {machine()['load_average']}")
    res.write_json(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
