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
from ggml_core.models import Model, ModelParams, PlacementRequest

__all__ = [
    "Build",
    "backend_on",
    "compute_built",
    "cpu_reference",
    "devices_of",
    "first_device",
    "model_logits",
    "run_python",
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
