"""The OpenCL backend plugin's registration; the plugin reads checks → kernels → buffers → device → registration.

Every OpenCL device of every platform becomes a ggml-core device ``OpenCL0``, ``OpenCL1``, … (``GGML_OPENCL_DEVICES``
restricts which). Read in that order: :mod:`ggml_opencl._opencl` and :mod:`ggml_opencl._device_info` (pyopencl,
the platforms and what each device offers), :mod:`ggml_opencl._programs` (the kernels of ``kernels/*.cl``, built
once per device), :mod:`ggml_opencl._tuning` (the MUL_MAT kernels tuned per device), :mod:`ggml_opencl.ops` (graph
node → kernel launches, one module per op family), :mod:`ggml_opencl._buffers`, :mod:`ggml_opencl._device` (the
device, its backend and events), then the registration below.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ggml_core import Device
from ggml_core.backend import LazyReg, PluginHooks
from ggml_opencl._device import OpenCLDevice
from ggml_opencl._opencl import Discovery, cl, discover, import_cl
from ggml_opencl._programs import ProgramCache

__all__ = ["HOOKS", "OpenCLReg", "ggml_api_version", "ggml_register_backends", "opencl_reg"]


class OpenCLReg(LazyReg):
    """The ``OpenCL`` registry: every OpenCL device on every platform, as selected by ``GGML_OPENCL_DEVICES``.

    When there are no devices (pyopencl missing, no ICD or platform, every device failing to build the
    kernels) :attr:`unavailable_reason` says why; reading it enumerates the devices first.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        #: devices found but not exposed (filtered out or failing to build), with the reason
        self.skipped: dict[str, str] = {}
        super().__init__("OpenCL", description="OpenCL devices through pyopencl", priority=10)

    def enumerate_devices(self) -> list[Device]:
        """Discover platforms and devices, build the kernels on each, name the survivors OpenCL0, OpenCL1…"""
        env = os.environ if self._environ is None else self._environ
        found: Discovery = discover(env)
        self.skipped = dict(found.skipped)
        programs = ProgramCache()
        contexts: dict[int, Any] = {}
        devices: list[Device] = []
        for info, cl_device in found.devices:
            name = f"OpenCL{len(devices)}"
            try:
                if info.platform_index not in contexts:
                    mine = [d for i, d in found.devices if i.platform_index == info.platform_index]
                    contexts[info.platform_index] = cl.Context(mine)
                dev = OpenCLDevice(name, info, cl_device, contexts[info.platform_index], programs)
                dev.program()
            except Exception as exc:  # noqa: BLE001 - one device failing must not hide the others
                self.skipped[info.description] = f"cannot build the kernels: {type(exc).__name__}: {exc}"
                continue
            devices.append(dev)
        if not devices:
            reason = found.reason or "no OpenCL device could be used"
            if self.skipped:
                reason += "; " + "; ".join(f"{k}: {v}" for k, v in self.skipped.items())
            self._reason = reason
        return devices

    def features(self) -> dict[str, str]:
        """pyopencl version and the devices left out (with why)."""
        mod = import_cl()
        out = {"pyopencl": getattr(mod, "VERSION_TEXT", "missing") if mod is not None else "missing"}
        for desc, why in self.skipped.items():
            out[f"skipped {desc}"] = why
        return out


HOOKS = PluginHooks(OpenCLReg)
#: the process-wide OpenCL registry
opencl_reg = HOOKS.reg
ggml_api_version = HOOKS.ggml_api_version
ggml_register_backends = HOOKS.ggml_register_backends
