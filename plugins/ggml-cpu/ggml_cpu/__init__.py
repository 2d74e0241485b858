"""ggml-cpu: the host CPU as a ggml-core device, with numpy kernels (the reference backend).

The entry point ``cpu = ggml_cpu.plugin`` registers it; import :mod:`ggml_cpu.plugin` to use the classes directly.
Layers, bottom up: :mod:`ggml_cpu.jit` (numba plumbing, LLVM intrinsics, the spinning helper threads) →
:mod:`ggml_cpu.threads` → :mod:`ggml_cpu.quant` (quantized products) → :mod:`ggml_cpu.ops` (one module per op family)
→ :mod:`ggml_cpu._device` → :mod:`ggml_cpu.plugin`.
"""

from ggml_cpu.plugin import CPUBackend, CPUBuffer, CPUBufferType, CPUDevice, CPUReg, cpu_reg

__all__ = ["CPUBackend", "CPUBuffer", "CPUBufferType", "CPUDevice", "CPUReg", "cpu_reg"]
