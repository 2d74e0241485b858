"""Helpers shared by the CUDA plugin's tests (a uniquely named module: pytest puts this folder on sys.path)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

import numpy as np

import ggml_core as g
from ggml_core.testing.plugin_tests import devices_of
from ggml_cuda._device import CUDABackend, CUDADevice, Step
from ggml_cuda.plugin import cuda_reg


def real_cuda_device() -> CUDADevice | None:
    """CUDA0 from the process-wide registry, or None."""
    devs = devices_of(CUDADevice)
    return devs[0] if devs else None


def gpu_skip_reason() -> str:
    """Why there is no CUDA device here, as the plugin reports it."""
    return f"no CUDA device: {cuda_reg().unavailable_reason or 'none found'}"


# ------------------------------------------------------------------------------------------------ graphs on a device


def alloc_and_plan(
    backend: CUDABackend, ctx: g.Context, outputs: g.Tensor | Iterable[g.Tensor], fill: bool = True
) -> tuple[g.Graph, list[Step]]:
    """Allocate ``ctx`` on the backend's device, fill inputs with small random values, and bind the graph."""
    outs = [outputs] if isinstance(outputs, g.Tensor) else list(outputs)
    graph = g.build_graph(outs)
    g.alloc_ctx_tensors(ctx, backend)
    if fill:
        rng = np.random.default_rng(0)
        for t in graph.leafs:
            if t.is_contiguous and t.nbytes:
                t.set_bytes(rng.integers(0, 4, t.nbytes, dtype=np.uint8))
    return graph, backend.plan(graph)


# ------------------------------------------------------------------------------------------------ PTX


_ENTRY_RE = re.compile(r"\.entry\s+(\w+)\s*\((.*?)\)", re.S)
_PARAM_RE = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+\w+(?:\[(\d+)\])?")
_SCALAR = {"u64": 8, "s64": 8, "b64": 8, "f64": 8, "u32": 4, "s32": 4, "b32": 4, "f32": 4, "u16": 2, "s16": 2}


def ptx_param_layouts(ptx: str) -> dict[str, list[tuple[int, int]]]:
    """Kernel name → [(size, alignment)] of each parameter, read from nvcc's PTX."""
    out: dict[str, list[tuple[int, int]]] = {}
    for name, params in _ENTRY_RE.findall(ptx):
        layout = []
        for align, kind, count in _PARAM_RE.findall(params):
            if count:  # .align A .b8 name[N]: a struct passed by value
                layout.append((int(count), int(align or 1)))
            else:
                size = _SCALAR[kind]
                layout.append((size, size))
        out[name] = layout
    return out


def compile_ptx(nvcc: str, module: str, arch: str) -> str:
    """``nvcc --ptx -arch=<arch>`` of one kernel module (no GPU needed)."""
    from ggml_cuda._compile import compile_module

    return compile_module(module, arch, target="ptx", nvcc=nvcc).decode()


def kernel_sources() -> dict[str, str]:
    """Module name → CUDA source text."""
    from ggml_cuda._compile import KERNEL_DIR

    return {p.stem: p.read_text() for p in sorted(Path(KERNEL_DIR).glob("*.cu"))}


def build_host_program(nvcc: str, name: str, tmp: Path) -> Path:
    """Compile tests/<name>.cu, a host program that includes kernel sources (``-I kernels/``, no floating-point
    contraction, as the kernels' ``*_rn`` helpers on the device), into ``tmp``; fails the test with nvcc's output
    when it does not build."""
    import pytest

    from ggml_cuda._compile import KERNEL_DIR

    exe = tmp / name
    cmd = [nvcc, "-O2", "-std=c++17", "-I", str(KERNEL_DIR), "-Xcompiler", "-ffp-contract=off", "-o", str(exe)]
    res = subprocess.run(
        [*cmd, str(Path(__file__).with_name(f"{name}.cu"))], capture_output=True, text=True, timeout=600, check=False
    )
    if res.returncode != 0:
        pytest.fail(f"building {name}.cu failed:\n{res.stderr}")
    return exe
