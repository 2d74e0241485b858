"""ggml-opencl: every OpenCL device (any platform, GPU or CPU-type such as PoCL) as a ggml-core device.

The entry point ``opencl = ggml_opencl.plugin`` registers it; :func:`opencl_reg` is the process-wide registry.
"""

from ggml_opencl._buffers import OpenCLBuffer, OpenCLBufferType
from ggml_opencl._device import OpenCLBackend, OpenCLDevice, OpenCLEvent
from ggml_opencl._opencl import discover
from ggml_opencl.plugin import OpenCLReg, opencl_reg

__all__ = [
    "OpenCLBackend",
    "OpenCLBuffer",
    "OpenCLBufferType",
    "OpenCLDevice",
    "OpenCLEvent",
    "OpenCLReg",
    "discover",
    "opencl_reg",
]
