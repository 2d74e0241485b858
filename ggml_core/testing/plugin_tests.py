"""Pieces every device plugin's own test suite needs: its devices or a named skip, the CPU reference device, a
fresh backend per test, and a fresh interpreter for what a process reads once (environment, plugin discovery).

The skips need pytest, which only test suites import: this module is not loaded by ``ggml_core.testing``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

import ggml_core as g
from ggml_core import ops
from ggml_core.models import Model, ModelParams, PlacementRequest

__all__ = [
    "Build",
    "backend_on",
    "check_host_tensor_refused",
    "check_tensor_copies",
    "compute_built",
    "cpu_reference",
    "devices_of",
    "first_device",
    "model_logits",
    "run_python",
    "tensor_on",
]

D = TypeVar("D", bound=g.Device)

#: Builds a graph's output in the given context; returns it and the bytes of each input tensor.
Build = Callable[[g.Context], tuple[g.Tensor, dict[g.Tensor, bytes]]]


def devices_of(kind: type[D]) -> list[D]:
    """Every device of class ``kind`` the process-wide registry exposes."""
    return [d for d in g.devices() if isinstance(d, kind)]


def first_device(kind: type[D], no_device_reason: Callable[[], str]) -> D:
    """The first device of class ``kind``; skips the test with ``no_device_reason()`` where there is none."""
    devs = devices_of(kind)
    if not devs:
        pytest.skip(no_device_reason())
    return devs[0]


def cpu_reference() -> g.Device:
    """The CPU plugin's device, the reference of other devices' results; skips the test where it is missing."""
    try:
        return g.get_device("CPU")
    except g.DeviceNotFoundError as exc:
        pytest.skip(f"the CPU plugin (ggml-cpu) is not installed: {exc}")


def backend_on(dev: g.Device) -> Iterator[g.Backend]:
    """A fresh backend on ``dev``, freed when the generator closes (the body of a yield fixture)."""
    be = dev.init_backend()
    yield be
    be.free()


def tensor_on(dev: g.Device, n: int, type: str = "f32") -> tuple[g.Tensor, g.Buffer]:
    """A 1-d tensor of ``n`` values of ``type``, alone in a new buffer of ``dev``."""
    ctx = g.Context("t")
    t = ctx.new_tensor_1d(type, n, "t")
    return t, g.alloc_ctx_tensors(ctx, dev.buffer_type())


def check_tensor_copies(dev: g.Device, host: g.Device, n: int) -> tuple[g.Tensor, list[g.Buffer]]:
    """Copy ``n`` random f32 values from a tensor in ``host``'s memory into one of ``dev`` and from there into a
    second one of ``dev`` (``Buffer.cpy_tensor``), checking each copy and the values that arrive; returns the first
    device tensor and the buffers (the caller frees them)."""
    t1, b1 = tensor_on(dev, n)
    t2, b2 = tensor_on(dev, n)
    th, b3 = tensor_on(host, n)
    v = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    th.set_data(v)
    assert t1.buffer is not None and t1.buffer.cpy_tensor(th, t1)  # host -> device
    assert t2.buffer is not None and t2.buffer.cpy_tensor(t1, t2)  # device -> device
    assert np.array_equal(t2.to_numpy().reshape(-1), v)
    return t1, [b1, b2, b3]


def check_host_tensor_refused(backend: g.Backend, host: g.Device) -> None:
    """A graph over a tensor in ``host``'s memory, which ``backend``'s device cannot address: computing it raises
    a ComputeError that names the tensor."""
    ctx = g.Context("host")
    a = ctx.new_tensor_1d("f32", 16, "host_tensor")
    graph = g.build_graph(ops.scale(a, 2.0))
    buf = g.alloc_ctx_tensors(ctx, host.buffer_type())
    with pytest.raises(g.ComputeError, match="host_tensor"):
        backend.graph_compute(graph)
    buf.free()


def compute_built(dev: g.Device, build: Build) -> np.ndarray:
    """Build a graph in a fresh context, allocate it on ``dev``, set its inputs' bytes, compute it on a fresh
    backend and return a copy of the output; asserts first that ``dev`` supports every node."""
    ctx = g.Context("built")
    out, data = build(ctx)
    graph = g.build_graph(out)
    unsupported = [n.op_desc for n in graph.nodes if not dev.supports_op(n)]
    assert not unsupported, f"{dev.name} does not support {unsupported}"
    buf = g.alloc_ctx_tensors(ctx, dev.buffer_type())
    for t, raw in data.items():
        t.set_bytes(raw)
    be = dev.init_backend()
    be.graph_compute(graph)
    got = out.to_numpy().copy()
    be.free()
    buf.free()
    return got


def model_logits(
    path: Path, placement: PlacementRequest, tokens: list[int], *, step: bool = False, **params: Any
) -> tuple[np.ndarray, Model]:
    """Logits of ``tokens`` from the model at ``path`` placed by ``placement`` (``params``: the other
    :class:`ModelParams`): of every position of one prompt, or (``step``) of each token decoded alone in turn; and
    the model, closed, whose placement and executor stay readable."""
    with Model.load(path, ModelParams(placement=placement, progress=False, **params)) as m:
        if step:
            return np.concatenate([m.decode([t]) for t in tokens]), m
        return m.process_prompt(tokens, all_logits=True), m


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with extra environment variables (loaders and plugin discovery read
    the environment once per process)."""
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=timeout, check=False
    )
