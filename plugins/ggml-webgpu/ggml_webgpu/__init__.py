"""ggml-webgpu: every wgpu adapter (Vulkan, Metal, D3D12) as a ggml-core device, with WGSL kernels.

The entry point ``webgpu = ggml_webgpu.plugin`` registers it; :func:`webgpu_reg` is the process-wide registry.
"""

from ggml_webgpu._adapters import ADAPTER_TYPES, AdapterInfo, discover
from ggml_webgpu._buffers import WebGPUBuffer, WebGPUBufferType, WebGPUHostBuffer, WebGPUHostBufferType
from ggml_webgpu._device import DeviceOpenError, WebGPUBackend, WebGPUDevice, WebGPUEvent
from ggml_webgpu.plugin import WebGPUReg, webgpu_reg

__all__ = [
    "ADAPTER_TYPES",
    "AdapterInfo",
    "DeviceOpenError",
    "WebGPUBackend",
    "WebGPUBuffer",
    "WebGPUBufferType",
    "WebGPUDevice",
    "WebGPUEvent",
    "WebGPUHostBuffer",
    "WebGPUHostBufferType",
    "WebGPUReg",
    "discover",
    "webgpu_reg",
]
