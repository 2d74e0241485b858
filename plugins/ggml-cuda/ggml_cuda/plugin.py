"""The CUDA backend plugin's registration; the plugin reads checks → kernels → buffers → device → registration.

Read in that order: :mod:`ggml_cuda._driver` (the only module importing pycuda, and the checks that say why
there is no device), :mod:`ggml_cuda._compile` / :mod:`ggml_cuda._programs` (``kernels/*.cu`` built per
architecture), :mod:`ggml_cuda.ops` (graph node → kernel launches, one module per op family),
:mod:`ggml_cuda._buffers` (buffer types and buffers), :mod:`ggml_cuda._device` (the device, its backend and
events), then the registration below.

The ``CUDA`` registry is always registered. Its devices are enumerated lazily; when pycuda, the driver, a GPU or
nvcc is missing it has none and :attr:`CUDAReg.unavailable_reason` says exactly why (``ggml-core devices``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ggml_core import Device
from ggml_core.backend import LazyReg, PluginHooks

if TYPE_CHECKING:  # the driver layer, nvcc lookup and devices load when the devices are enumerated
    from ggml_cuda._driver import Driver
    from ggml_cuda._programs import Compiler

__all__ = ["HOOKS", "CUDAReg", "cuda_reg", "ggml_api_version", "ggml_register_backends"]

DriverLoader = Callable[[], "tuple[Driver | None, str | None]"]


class CUDAReg(LazyReg):
    """The ``CUDA`` backend registry: one device per GPU the driver reports.

    :param loader: returns (driver, None) or (None, reason); the default (None) imports pycuda
    :param nvcc: how to find nvcc (returns its path or None); the default (None) searches the usual places
    :param compiler: optional (module, arch) → image for the devices (tests)
    """

    def __init__(
        self,
        loader: DriverLoader | None = None,
        nvcc: Callable[[], str | None] | None = None,
        compiler: Compiler | None = None,
    ) -> None:
        super().__init__("CUDA", description="NVIDIA GPUs through pycuda", priority=100)
        self._loader = loader
        self._nvcc = nvcc
        self._compiler = compiler
        self.driver: Driver | None = None

    def enumerate_devices(self) -> list[Device]:
        """CUDA0, CUDA1, ...; none (with :attr:`unavailable_reason` set) when something is missing."""
        if self._loader is None:
            from ggml_cuda._driver import load_driver

            self._loader = load_driver
        driver, reason = self._loader()
        if driver is None:
            self.unavailable_reason = reason or "the CUDA driver could not be loaded"
            return []
        if self._compiler is None and self._find_nvcc() is None:
            self.unavailable_reason = (
                "nvcc not found: the plugin compiles its kernels at run time; put the CUDA toolkit's bin folder on "
                "PATH or set GGML_CUDA_NVCC"
            )
            return []
        self.driver = driver
        from ggml_cuda._device import CUDADevice

        devices: list[Device] = []
        try:
            for ordinal in range(driver.device_count()):
                devices.append(CUDADevice(driver, driver.device_info(ordinal), ordinal, self._compiler))
        except Exception as exc:  # noqa: BLE001 - pycuda's errors are not builtins; report, never crash the host
            self.unavailable_reason = f"reading the CUDA devices failed: {type(exc).__name__}: {exc}"
            return []
        if not devices:
            self.unavailable_reason = "the CUDA driver reports no devices"
        return devices

    def features(self) -> dict[str, str]:
        """The driver layer and the nvcc in use."""
        out: dict[str, Any] = {}
        if self.driver is not None:
            out["driver"] = self.driver.name
        nvcc = self._find_nvcc()
        if nvcc:
            from ggml_cuda._compile import nvcc_version

            out["nvcc"] = f"{nvcc} ({nvcc_version(nvcc)})"
        else:
            out["nvcc"] = "not found"
        return out

    def _find_nvcc(self) -> str | None:
        if self._nvcc is None:
            from ggml_cuda._compile import find_nvcc

            self._nvcc = find_nvcc
        return self._nvcc()


HOOKS = PluginHooks(CUDAReg)
#: the process-wide CUDA registry
cuda_reg = HOOKS.reg
ggml_api_version = HOOKS.ggml_api_version
ggml_register_backends = HOOKS.ggml_register_backends
