"""ggml-webgpu: every wgpu adapter (Vulkan, Metal, D3D12) as a ggml-core device, with WGSL kernels.

The entry point ``webgpu = ggml_webgpu.plugin`` registers it; import :mod:`ggml_webgpu.plugin` for the classes.
"""

from ggml_webgpu.plugin import (
    WebGPUBackend,
    WebGPUBuffer,
    WebGPUBufferType,
    WebGPUDevice,
    WebGPUEvent,
    WebGPUReg,
    discover,
    webgpu_reg,
)

__all__ = [
    "WebGPUBackend",
    "WebGPUBuffer",
    "WebGPUBufferType",
    "WebGPUDevice",
    "WebGPUEvent",
    "WebGPUReg",
    "discover",
    "webgpu_reg",
]
