"""Fixtures of the WebGPU plugin's tests: the WebGPU devices present (tests skip, with the reason, without one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from wgpu_helpers import no_device_reason, webgpu_devices

import ggml_core as g
from ggml_core import Device
from ggml_webgpu import WebGPUDevice


@pytest.fixture(scope="session")
def wdev() -> WebGPUDevice:
    """The first WebGPU device (WebGPU0)."""
    devs = webgpu_devices()
    if not devs:
        pytest.skip(no_device_reason())
    return devs[0]


@pytest.fixture(scope="session")
def cpu() -> Device:
    """The CPU plugin's device, the reference."""
    try:
        return g.get_device("CPU")
    except g.DeviceNotFoundError as exc:
        pytest.skip(f"the CPU plugin is not installed: {exc}")


@pytest.fixture()
def backend(wdev: WebGPUDevice) -> Iterator[g.Backend]:
    """A fresh backend on WebGPU0, freed afterwards."""
    be = wdev.init_backend()
    yield be
    be.free()
