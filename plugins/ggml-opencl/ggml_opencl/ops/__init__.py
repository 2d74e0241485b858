"""Graph node → OpenCL kernel launches, one module per op family (the kernels themselves are in ``kernels/*.cl``).

Importing this package registers every family's binders in :data:`KERNELS`: the device asks
``KERNELS.supports(node, info)``, the backend binds a node with ``KERNELS.get(node)(backend, node)``. The device
imports it on the first support question or bind, not when the devices are listed.
"""

from ggml_opencl.ops import (  # noqa: F401 - registers kernels
    attention,
    conv,
    elementwise,
    layout,
    matmul,
    movement,
    norm,
    recurrent,
    reduce,
)
from ggml_opencl.ops._dispatch import FLOAT_TYPES, KERNELS, QUANT_TYPES, Binder, Launcher, Thunk

__all__ = ["FLOAT_TYPES", "KERNELS", "QUANT_TYPES", "Binder", "Launcher", "Thunk"]
