"""Fixtures of the OpenCL plugin's tests: the OpenCL devices present (tests skip, with the reason, without one)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from ocl_helpers import no_device_reason

import ggml_core as g
from ggml_core import Device
from ggml_core.testing.plugin_tests import backend_on, cpu_reference, first_device
from ggml_opencl import OpenCLDevice

# Tuning times candidates (seconds per kernel kind): the tests run the device's default kernel shapes unless the
# caller asks otherwise, and test_tuning.py runs every candidate configuration explicitly. A tuning cache the tests
# write never lands in the user's home.
os.environ.setdefault("GGML_OPENCL_TUNE", "0")


@pytest.fixture(scope="session", autouse=True)
def _tuning_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    old = os.environ.get("GGML_OPENCL_TUNING_DIR")
    os.environ["GGML_OPENCL_TUNING_DIR"] = str(tmp_path_factory.mktemp("opencl-tuning"))
    yield
    if old is None:
        os.environ.pop("GGML_OPENCL_TUNING_DIR", None)
    else:
        os.environ["GGML_OPENCL_TUNING_DIR"] = old


@pytest.fixture(scope="session")
def ocl() -> OpenCLDevice:
    """The first OpenCL device (OpenCL0)."""
    return first_device(OpenCLDevice, no_device_reason)


@pytest.fixture(scope="session")
def cpu() -> Device:
    """The CPU plugin's device, the reference."""
    return cpu_reference()


@pytest.fixture()
def backend(ocl: OpenCLDevice) -> Iterator[g.Backend]:
    """A fresh backend on OpenCL0, freed afterwards."""
    yield from backend_on(ocl)
