"""ggml-opencl: every OpenCL device (any platform, GPU or CPU-type such as PoCL) as a ggml-core device.

The entry point ``opencl = ggml_opencl.plugin`` registers it; import :mod:`ggml_opencl.plugin` for the classes.
"""

from ggml_opencl.plugin import (
    OpenCLBackend,
    OpenCLBuffer,
    OpenCLBufferType,
    OpenCLDevice,
    OpenCLEvent,
    OpenCLReg,
    discover,
    opencl_reg,
)

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
