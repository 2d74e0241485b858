"""Fixtures of the CUDA plugin's tests.

Three kinds of tests live here, named by what they need:

- ``test_fake_driver_*``: host-side logic against :mod:`fake_driver` (simulated memory, recorded launches). They
  run everywhere and verify what the host asks a GPU to do, not what a GPU computes.
- ``test_nvcc_*`` / ``test_kernel_abi``: compile every kernel with nvcc (``--ptx``, no GPU needed); they skip,
  saying so, where nvcc is absent.
- ``test_gpu_*`` / ``test_conformance``: a real CUDA device through pycuda; they skip with the exact reason
  (``no CUDA driver: ImportError: libcuda.so.1 ...``) where there is none.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from cuda_helpers import gpu_skip_reason, real_cuda_device
from fake_driver import FakeDriver, fake_compiler, fake_info

import ggml_core as g
from ggml_cuda._compile import CompileError, compile_module, find_nvcc, module_names
from ggml_cuda._device import CUDABackend, CUDADevice


def pytest_configure(config: pytest.Config) -> None:
    """Register this suite's markers (it also runs from the repository root, outside this package's config)."""
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU with pycuda (skipped with the reason otherwise)")


@pytest.fixture()
def driver() -> FakeDriver:
    """A fake driver with one sm_90 device of 1 GiB."""
    return FakeDriver()


@pytest.fixture()
def compile_log() -> list[tuple[str, str]]:
    """(module, arch) pairs the fake compiler was asked for."""
    return []


@pytest.fixture()
def device(driver: FakeDriver, compile_log: list[tuple[str, str]]) -> CUDADevice:
    """CUDA0 on the fake driver."""
    return CUDADevice(driver, driver.infos[0], 0, fake_compiler(compile_log))


@pytest.fixture()
def backend(device: CUDADevice) -> Iterator[CUDABackend]:
    """A backend (stream) on the fake CUDA0."""
    be = device.init_backend()
    assert isinstance(be, CUDABackend)
    yield be
    be.free()


@pytest.fixture()
def two_devices(compile_log: list[tuple[str, str]]) -> tuple[FakeDriver, CUDADevice, CUDADevice]:
    """A fake driver with two devices (sm_90 and sm_80) and their CUDADevices."""
    drv = FakeDriver(infos=[fake_info(0, (9, 0)), fake_info(1, (8, 0))])
    comp = fake_compiler(compile_log)
    return drv, CUDADevice(drv, drv.infos[0], 0, comp), CUDADevice(drv, drv.infos[1], 1, comp)


@pytest.fixture(scope="session")
def nvcc() -> str:
    """nvcc's path; skips the test, saying so, where the CUDA toolkit is absent."""
    path = find_nvcc()
    if path is None:
        pytest.skip("nvcc not found (install the CUDA toolkit, or set GGML_CUDA_NVCC)")
    return path


@pytest.fixture(scope="session")
def ptx(nvcc: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], str]]:
    """(module, arch) → PTX, compiled once per session into a fresh cache (so every source really compiles)."""
    old = os.environ.get("GGML_CUDA_CACHE_DIR")
    os.environ["GGML_CUDA_CACHE_DIR"] = str(tmp_path_factory.mktemp("ptx-cache"))
    try:
        jobs = [(m, a) for m in module_names() for a in ("sm_80", "sm_90")]
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = dict(zip(jobs, pool.map(lambda ma: _try_compile(nvcc, *ma), jobs), strict=True))
        yield results
    finally:
        if old is None:
            os.environ.pop("GGML_CUDA_CACHE_DIR", None)
        else:
            os.environ["GGML_CUDA_CACHE_DIR"] = old


def _try_compile(nvcc: str, module: str, arch: str) -> str:
    try:
        return compile_module(module, arch, target="ptx", nvcc=nvcc).decode()
    except CompileError as exc:  # reported by the test of that module
        return f"COMPILE ERROR: {exc}"


@pytest.fixture(scope="session")
def gpu() -> CUDADevice:
    """The real CUDA0; skips with the exact reason where pycuda, the driver or a GPU is missing."""
    dev = real_cuda_device()
    if dev is None:
        pytest.skip(gpu_skip_reason())
    return dev


@pytest.fixture(scope="session")
def cpu() -> g.Device:
    """The CPU plugin's device (the reference)."""
    try:
        return g.get_device("CPU")
    except g.DeviceNotFoundError as exc:
        pytest.skip(f"the CPU plugin is not installed: {exc}")
