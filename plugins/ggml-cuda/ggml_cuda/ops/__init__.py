"""Graph node → CUDA kernel launches, one module per op family (the kernels themselves are in ``kernels/*.cu``).

Importing this package fills the binder table; :func:`bind` and :func:`supports` consult it.
"""

from ggml_cuda.ops import attention, elementwise, matmul, movement, norm, recurrent  # noqa: F401 - registers binders
from ggml_cuda.ops._base import (
    ARG_LAYOUT,
    STATUS,
    Args,
    BindContext,
    Launch,
    Scratch,
    bind,
    pack_args,
    supports,
)

__all__ = ["ARG_LAYOUT", "STATUS", "Args", "BindContext", "Launch", "Scratch", "bind", "pack_args", "supports"]
