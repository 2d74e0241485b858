"""ggml-core: ggml's backend system in Python.

The compute model (types, tensors, ops, graphs), the backend model (registry → device → buffer type → buffer;
backends as streams), the pluggy hooks through which backend plugins register, the allocator and the scheduler.
Plugins (ggml-cpu, ggml-opencl, ggml-cuda, ...) are separate packages found through the ``ggml.backends``
entry points.
"""

from __future__ import annotations

from typing import Any

from ggml_core import ops
from ggml_core._context import Context, current_context
from ggml_core._errors import (
    AllocationError,
    ComputeError,
    DeviceNotFoundError,
    GGMLError,
    GGUFError,
    GraphError,
    OpError,
    OutOfBoundsError,
    PluginError,
    TensorError,
    UnsupportedOpError,
)
from ggml_core._graph import Graph, build_graph
from ggml_core._tensor import Tensor, TensorFlag
from ggml_core._types import GGMLType, as_type, row_size, type_traits
from ggml_core.alloc import GraphAllocator, alloc_ctx_tensors
from ggml_core.backend import (
    API_VERSION,
    Backend,
    BackendReg,
    Buffer,
    BufferType,
    BufferUsage,
    Device,
    DeviceCaps,
    DeviceProps,
    DeviceType,
    Event,
    get_registry,
    hookimpl,
)
from ggml_core.ops import GGMLOp, GluOp, UnaryOp
from ggml_core.sched import Scheduler

__all__ = [
    "API_VERSION",
    "AllocationError",
    "Backend",
    "BackendReg",
    "Buffer",
    "BufferType",
    "BufferUsage",
    "ComputeError",
    "Context",
    "Device",
    "DeviceCaps",
    "DeviceNotFoundError",
    "DeviceProps",
    "DeviceType",
    "Event",
    "GGMLError",
    "GGMLOp",
    "GGMLType",
    "GGUFError",
    "GluOp",
    "Graph",
    "GraphAllocator",
    "GraphError",
    "OpError",
    "OutOfBoundsError",
    "PluginError",
    "Scheduler",
    "Tensor",
    "TensorError",
    "TensorFlag",
    "UnaryOp",
    "UnsupportedOpError",
    "alloc_ctx_tensors",
    "as_type",
    "build_graph",
    "current_context",
    "devices",
    "get_device",
    "get_registry",
    "hookimpl",
    "init_backend",
    "init_best",
    "ops",
    "row_size",
    "type_traits",
]


def _public_exceptions_here() -> None:
    """Tracebacks and reprs name the exceptions as users import them (``ggml_core.OpError``), not by private module."""
    for name in __all__:
        obj = globals().get(name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            obj.__module__ = __name__


_public_exceptions_here()


def devices() -> list[Device]:
    """Every device of every loaded plugin, accelerators first and the CPU last."""
    return get_registry().devices()


def get_device(name: str) -> Device:
    """A device by case-insensitive name, e.g. ``get_device("cpu")``."""
    return get_registry().get_device(name)


def init_backend(name: str, params: str | None = None) -> Backend:
    """A new backend (stream) on the named device."""
    return get_registry().init_backend(name, params)


def init_best() -> Backend:
    """A backend on the best device: the first GPU, else IGPU, else the CPU."""
    return get_registry().init_best()


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("ggml-core")
        except PackageNotFoundError:  # running from a source tree
            return "0+unknown"
    raise AttributeError(f"module 'ggml_core' has no attribute {name!r}")
