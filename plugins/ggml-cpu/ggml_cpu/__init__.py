"""ggml-cpu: the host CPU as a ggml-core device, with numpy kernels (the reference backend).

The entry point ``cpu = ggml_cpu.plugin`` registers it; import :mod:`ggml_cpu.plugin` to use the classes directly.
"""

from ggml_cpu.plugin import CPUBackend, CPUBuffer, CPUBufferType, CPUDevice, CPUReg, cpu_reg

__all__ = ["CPUBackend", "CPUBuffer", "CPUBufferType", "CPUDevice", "CPUReg", "cpu_reg"]
