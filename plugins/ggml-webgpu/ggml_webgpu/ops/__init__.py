"""Graph node → WGSL dispatches, one module per op family (the shaders themselves are in ``shaders/*.wgsl``).

Importing this package registers every family's binders in :data:`KERNELS`: the device asks
``KERNELS.supports(node, limits)``, the backend binds a node with ``KERNELS.get(node)(backend, node)``. The device
imports it on the first support question or bind, not when the devices are listed.
"""

from ggml_webgpu.ops import attention, elementwise, matmul, movement, recurrent, rows  # noqa: F401 - registers kernels
from ggml_webgpu.ops._dispatch import KERNELS, Binder, Dispatch, Launcher, Limits

__all__ = ["KERNELS", "Binder", "Dispatch", "Launcher", "Limits"]
