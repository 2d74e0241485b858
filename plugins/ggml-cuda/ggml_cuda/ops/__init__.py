"""Graph node → CUDA kernel launches, one module per op family (the kernels themselves are in ``kernels/*.cu``).

Importing this package registers every family's binders in :data:`KERNELS`: the device asks
``KERNELS.supports(node)``, the backend binds a node with ``KERNELS.get(node)(node, ctx)``.
"""

from ggml_cuda.ops import attention, elementwise, matmul, movement, norm, recurrent  # noqa: F401 - registers kernels
from ggml_cuda.ops._launch import (
    ARG_LAYOUT,
    KERNELS,
    STATUS,
    Args,
    BindContext,
    Binder,
    Launch,
    Scratch,
    pack_args,
    rows_grid,
)

__all__ = [
    "ARG_LAYOUT",
    "KERNELS",
    "STATUS",
    "Args",
    "BindContext",
    "Binder",
    "Launch",
    "Scratch",
    "pack_args",
    "rows_grid",
]
