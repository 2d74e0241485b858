"""The WebGPU backend plugin's registration; the plugin reads checks → kernels → buffers → device → registration.

Every wgpu adapter (Vulkan, Metal, D3D12; OpenGL only where no other API reaches the same hardware) becomes a
device ``WebGPU0``, ``WebGPU1``, … (``GGML_WEBGPU_ADAPTERS`` restricts which). Read in that order:
:mod:`ggml_webgpu._adapters` (wgpu, its adapters and their limits), :mod:`ggml_webgpu._shaders` /
:mod:`ggml_webgpu._f16` (the WGSL sources), :mod:`ggml_webgpu.ops` (graph node → dispatches, one module per op
family), :mod:`ggml_webgpu._buffers` (storage buffers bound to kernels as windows, the staging ring),
:mod:`ggml_webgpu._device` (the device, its backend and events), then the registration below.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ggml_core import Device
from ggml_core.backend import LazyReg, PluginHooks
from ggml_webgpu._adapters import discover, import_wgpu
from ggml_webgpu._device import WebGPUDevice

__all__ = ["HOOKS", "WebGPUReg", "ggml_api_version", "ggml_register_backends", "webgpu_reg"]


class WebGPUReg(LazyReg):
    """The ``WebGPU`` registry: every wgpu adapter, as selected by ``GGML_WEBGPU_ADAPTERS``.

    ``GGML_WEBGPU_MAX_BINDING`` lowers the storage binding window (bytes), to exercise the windowed paths.
    When there are no devices :attr:`unavailable_reason` says why; reading it enumerates the devices first.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        #: adapters found but not exposed, with the reason
        self.skipped: dict[str, str] = {}
        super().__init__("WebGPU", description="WebGPU adapters (Vulkan, Metal, D3D12) through wgpu-py", priority=5)

    def enumerate_devices(self) -> list[Device]:
        """Discover the adapters and name them WebGPU0, WebGPU1… (each is opened on first use, not here)."""
        env = os.environ if self._environ is None else self._environ
        found = discover(env)
        self.skipped = dict(found.skipped)
        raw = env.get("GGML_WEBGPU_MAX_BINDING", "").strip()
        max_binding = None
        if raw:
            try:
                max_binding = int(raw)
                if max_binding < 4096:
                    raise ValueError("must be at least 4096")
            except ValueError as exc:
                self._reason = f"GGML_WEBGPU_MAX_BINDING={raw!r} is not a byte count: {exc}"
                return []
        devices: list[Device] = []
        for info, adapter in found.adapters:
            try:
                dev = WebGPUDevice(f"WebGPU{len(devices)}", info, adapter, max_binding)
            except Exception as exc:  # noqa: BLE001 - one adapter failing must not hide the others
                self.skipped[f"{info.index} {info.description}"] = f"cannot be used: {type(exc).__name__}: {exc}"
                continue
            devices.append(dev)
        if not devices:
            reason = found.reason or "no wgpu adapter could be used"
            if self.skipped:
                reason += "; " + "; ".join(f"{k}: {v}" for k, v in self.skipped.items())
            self._reason = reason
        return devices

    def features(self) -> dict[str, str]:
        """wgpu version and the adapters left out (with why)."""
        mod = import_wgpu()
        out = {"wgpu": getattr(mod, "__version__", "missing") if mod is not None else "missing"}
        for desc, why in self.skipped.items():
            out[f"skipped {desc}"] = why
        return out


HOOKS = PluginHooks(WebGPUReg)
#: the process-wide WebGPU registry
webgpu_reg = HOOKS.reg
ggml_api_version = HOOKS.ggml_api_version
ggml_register_backends = HOOKS.ggml_register_backends
