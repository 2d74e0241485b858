"""The CPU plugin's kernels, one module per op family; importing this package fills the kernel table."""

from ggml_cpu.kernels import (  # noqa: F401 - importing registers the kernels
    attention,
    binary,
    conv,
    flash_attn,
    glu,
    layout,
    matmul,
    matmul_id,
    movement,
    norm,
    recurrent,
    reduce,
    unary,
)
from ggml_cpu.kernels._base import bind, supports

__all__ = ["bind", "supports"]
