"""Fixtures of the WebGPU plugin's tests: the WebGPU devices present (tests skip, with the reason, without one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from wgpu_helpers import no_device_reason

import ggml_core as g
from ggml_core import Device
from ggml_core.testing.plugin_tests import backend_on, cpu_reference, first_device
from ggml_webgpu import WebGPUDevice


@pytest.fixture(scope="session")
def wdev() -> WebGPUDevice:
    """The first WebGPU device (WebGPU0)."""
    return first_device(WebGPUDevice, no_device_reason)


@pytest.fixture(scope="session")
def cpu() -> Device:
    """The CPU plugin's device, the reference."""
    return cpu_reference()


@pytest.fixture()
def backend(wdev: WebGPUDevice) -> Iterator[g.Backend]:
    """A fresh backend on WebGPU0, freed afterwards."""
    yield from backend_on(wdev)
