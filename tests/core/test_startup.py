"""Start-up stays lazy: what ``import ggml_core``, ``--help`` and ``devices --json`` import (module names, not
times; the times are benchmarks/bench_startup.py's)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

#: modules that listing devices never needs: kernels, compilers, the allocator and scheduler, servers
HEAVY = (
    "ggml_core.alloc",
    "ggml_core.sched",
    "ggml_core.models",
    "ggml_core.ops.attention",
    "ggml_cpu.ops",
    "ggml_cpu.engine",
    "ggml_opencl.ops",
    "ggml_cuda._device",
    "ggml_rpc.server",
    "numba",
    "gguf",
)


def _imported_by(code: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_BACKENDS", "GGML_STRICT_PLUGINS")}
    probe = f"import contextlib, io, sys\nwith contextlib.redirect_stdout(io.StringIO()):\n    {code}\n"
    probe += "print(__import__('json').dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_import_ggml_core_imports_nothing_heavy() -> None:
    modules = _imported_by("import ggml_core")
    assert "numpy" not in modules and not _heavy(modules)
    assert not [m for m in modules if m.startswith("ggml_core.")]  # every name loads on first use


def test_names_still_load_on_first_use() -> None:
    modules = _imported_by("import ggml_core as g; g.Tensor; g.ops.add; g.Scheduler; g.GraphAllocator")
    assert {"ggml_core._tensor", "ggml_core.ops.attention", "ggml_core.sched", "ggml_core.alloc"} <= modules


def test_listing_devices_imports_no_kernels() -> None:
    modules = _imported_by("from ggml_core.cli import main; main(['devices', '--json'])")
    assert not _heavy(modules)
    modules = _imported_by("from ggml_core.cli import build_parser; build_parser().format_help()")
    assert not _heavy(modules) and "pyopencl" not in modules
    if importlib.util.find_spec("ggml_rpc") is not None:
        assert "ggml_rpc.cli" in modules  # asked for its command, which imports nothing else
