"""The OpenCL0 device for tests that run on it, or a skip naming what is missing."""

from __future__ import annotations

import pytest

import ggml_core as gc
from ggml_core import DeviceNotFoundError, get_registry
from ggml_core.models import scheduler_available


def opencl_backend() -> gc.Backend:
    try:
        dev = gc.get_device("OpenCL0")
    except gc.DeviceNotFoundError as exc:
        pytest.skip(f"no OpenCL device here (ggml-opencl plugin and an OpenCL platform needed): {exc}")
    try:
        return dev.init_backend()
    except Exception as exc:  # noqa: BLE001 - a broken driver is a reason to skip, named
        pytest.skip(f"OpenCL0 is listed but cannot start a backend: {exc}")


def require_opencl() -> None:
    if not scheduler_available():
        pytest.skip("the scheduler (ggml_core.sched) is not installed: no multi-device runs")
    try:
        get_registry().get_device("OpenCL0")
    except DeviceNotFoundError:
        pytest.skip("no OpenCL0 device (install ggml-opencl and an OpenCL platform such as PoCL)")
