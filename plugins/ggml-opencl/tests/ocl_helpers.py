"""Helpers shared by the OpenCL plugin's tests (a uniquely named module: pytest puts this folder on sys.path)."""

from __future__ import annotations

from ggml_core.testing.plugin_tests import devices_of
from ggml_opencl import OpenCLDevice, opencl_reg


def opencl_devices() -> list[OpenCLDevice]:
    """Every OpenCL device the process-wide registry exposes."""
    return devices_of(OpenCLDevice)


def no_device_reason() -> str:
    """Why there is no OpenCL device here (for skip messages)."""
    return f"no OpenCL device: {opencl_reg().unavailable_reason or 'none found'}"
