"""The CPU backend plugin's registration: checks (:mod:`._cpu`) → kernels (:mod:`.ops`) → buffers (:mod:`._buffers`)
→ device and backend (:mod:`._device`) → the registry and the hooks the ``ggml.backends`` entry point names.
"""

from __future__ import annotations

import numpy as np

from ggml_core import Backend, BackendReg, Device
from ggml_core.backend import PluginHooks
from ggml_cpu._buffers import CPUBuffer, CPUBufferType
from ggml_cpu._cpu import blas_kernels, kernel_variant
from ggml_cpu._device import CPUBackend, CPUDevice

__all__ = [
    "CPUBackend",
    "CPUBuffer",
    "CPUBufferType",
    "CPUDevice",
    "CPUReg",
    "blas_kernels",
    "cpu_reg",
    "ggml_api_version",
    "ggml_register_backends",
    "kernel_variant",
]


class CPUReg(BackendReg):
    """The ``CPU`` backend registry: one device."""

    def __init__(self) -> None:
        super().__init__("CPU", description="numpy on the host CPU", priority=0)

    def enumerate_devices(self) -> list[Device]:
        """The single CPU device."""
        return [CPUDevice()]

    def set_n_threads(self, backend: Backend, n_threads: int) -> None:
        """ggml's ``ggml_backend_set_n_threads`` proc address."""
        backend.set_n_threads(n_threads)

    def features(self) -> dict[str, str]:
        """numpy version, the BLAS it uses, and the compiled kernels' state."""
        out = {"numpy": np.__version__}
        try:
            cfg = np.show_config(mode="dicts")
            blas = cfg.get("Build Dependencies", {}).get("blas", {})
            if blas:
                out["BLAS"] = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
        except Exception:  # noqa: BLE001 - informative only
            pass
        kernels = blas_kernels()
        if kernels:
            out["BLAS kernels"] = kernels
        from ggml_cpu.engine import describe

        out["kernels"] = kernel_variant()
        out.update(describe())
        return out


HOOKS = PluginHooks(CPUReg)
#: the process-wide CPU registry (one per process, like ggml's)
cpu_reg = HOOKS.reg
ggml_api_version = HOOKS.ggml_api_version
ggml_register_backends = HOOKS.ggml_register_backends
