"""What the GPU-plugin benchmarks (bench_opencl, bench_webgpu) share: the device named on the command line with
the results that record it, and the graphs they time against numpy (a MUL_MAT, an ADD), allocated on the device
with their inputs set, as calls that compute them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from _util import Results

import ggml_core as g
from ggml_core import ops
from ggml_core.quants import quantize

__all__ = ["add_runners", "mul_mat_runner", "open_device"]


def open_device(args: argparse.Namespace, kind: str, benchmark: str) -> tuple[g.Device, Results] | None:
    """``args.device`` and the results of ``benchmark`` (settings: ``args`` but ``--json``; the device recorded);
    None, after printing why, where there is no such device."""
    try:
        dev = g.get_device(args.device)
    except g.DeviceNotFoundError as exc:
        print(f"no {kind} device to benchmark: {exc}")
        return None
    res = Results(benchmark, {k: v for k, v in vars(args).items() if k != "json"})
    res.data["device"] = f"{dev.name}: {dev.description}"
    return dev, res


def mul_mat_runner(dev: g.Device, wtype: str, w: np.ndarray, x: np.ndarray) -> Callable[[], None]:
    """MUL_MAT of weights ``w`` (rows × K, stored as ``wtype``) and activations ``x`` (N × K) on a backend of
    ``dev``."""
    ctx = g.Context("bench")
    a = ctx.new_tensor_2d(wtype, w.shape[1], w.shape[0], "w")
    b = ctx.new_tensor_2d("f32", x.shape[1], x.shape[0], "x")
    graph = g.build_graph(ops.mul_mat(a, b))
    backend = dev.init_backend()
    g.alloc_ctx_tensors(ctx, dev.buffer_type())
    a.set_bytes(w.tobytes() if wtype == "f32" else quantize(w, wtype).tobytes())
    b.set_data(x)
    return lambda: backend.graph_compute(graph)


def add_runners(dev: g.Device, n: int, rng: np.random.Generator) -> tuple[Callable[[], None], Callable[[], object]]:
    """ADD of two vectors of ``n`` random f32 values on a backend of ``dev``, and numpy's ``np.add(..., out=)`` of
    the same values."""
    ctx = g.Context("add")
    x = ctx.new_tensor_1d("f32", n, "x")
    y = ctx.new_tensor_1d("f32", n, "y")
    graph = g.build_graph(ops.add(x, y))
    backend = dev.init_backend()
    g.alloc_ctx_tensors(ctx, dev.buffer_type())
    xv = rng.uniform(-1, 1, n).astype(np.float32)
    yv = rng.uniform(-1, 1, n).astype(np.float32)
    x.set_data(xv)
    y.set_data(yv)
    zv = np.empty_like(xv)
    return lambda: backend.graph_compute(graph), lambda: np.add(xv, yv, out=zv)
