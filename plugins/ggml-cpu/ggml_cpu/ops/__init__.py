"""The CPU plugin's kernels, one module per op family (each with its numpy path and its compiled path side by side);
importing this package fills :data:`KERNELS`."""

from ggml_cpu.ops import (  # noqa: F401 - importing registers the kernels
    attention,
    binary,
    conv,
    flash_attn,
    fused,
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
from ggml_cpu.ops._base import KERNELS

__all__ = ["KERNELS"]
