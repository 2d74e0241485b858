"""ggml-cuda: NVIDIA GPUs as ggml-core devices (CUDA0, CUDA1, ...) through pycuda.

The entry point ``cuda = ggml_cuda.plugin`` registers the ``CUDA`` backend. Importing this package never imports
pycuda: without pycuda, the NVIDIA driver or a GPU the backend has no devices and says why
(``ggml-core devices``).
"""

from ggml_cuda.plugin import CUDAReg, cuda_reg

__all__ = ["CUDAReg", "cuda_reg"]
