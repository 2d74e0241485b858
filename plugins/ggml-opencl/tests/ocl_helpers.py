"""Helpers shared by the OpenCL plugin's tests (a uniquely named module: pytest puts this folder on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys

import ggml_core as g
from ggml_opencl import OpenCLDevice, opencl_reg


def opencl_devices() -> list[OpenCLDevice]:
    """Every OpenCL device the process-wide registry exposes."""
    return [d for d in g.devices() if isinstance(d, OpenCLDevice)]


def no_device_reason() -> str:
    """Why there is no OpenCL device here (for skip messages)."""
    return f"no OpenCL device: {opencl_reg().unavailable_reason or 'none found'}"


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (the ICD loader reads its environment once per process)."""
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=timeout, check=False
    )
