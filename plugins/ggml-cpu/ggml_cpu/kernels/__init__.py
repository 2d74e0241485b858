"""The CPU plugin's kernels, one module per op family; importing this package fills the kernel table."""

from ggml_cpu.kernels import attention, elementwise, matmul, movement, norm  # noqa: F401 - registers kernels
from ggml_cpu.kernels._base import bind, supports

__all__ = ["bind", "supports"]
