"""ggml-core: ggml's backend system in Python.

The compute model (types, tensors, ops, graphs), the backend model (registry → device → buffer type → buffer;
backends as streams), the pluggy hooks through which backend plugins register, the allocator and the scheduler.
Plugins (ggml-cpu, ggml-opencl, ggml-cuda, ...) are separate packages found through the ``ggml.backends``
entry points.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names load on first use (see __getattr__): ``import ggml_core`` stays cheap
    from ggml_core import ops
    from ggml_core._context import Context, current_context
    from ggml_core._errors import (
        AllocationError,
        BufferFreedError,
        ChatTemplateError,
        ComputeError,
        DeviceNotFoundError,
        GGMLError,
        GGUFError,
        GraphError,
        GraphInUseError,
        ModelInUseError,
        OpError,
        OpFilterError,
        OutOfBoundsError,
        PluginError,
        TensorDataError,
        TensorError,
        UnknownTypeError,
        UnsupportedOpError,
        VocabularyError,
    )
    from ggml_core._graph import Graph, build_graph
    from ggml_core._tensor import MAX_DIMS, MAX_NAME, MAX_OP_PARAMS, MAX_SRC, Tensor, TensorFlag
    from ggml_core._text import safe_text
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
        HostBuffer,
        get_registry,
        hookimpl,
    )
    from ggml_core.ops import GGMLOp, GluOp, UnaryOp
    from ggml_core.sched import Scheduler

__all__ = [
    "API_VERSION",
    "MAX_DIMS",
    "MAX_NAME",
    "MAX_OP_PARAMS",
    "MAX_SRC",
    "AllocationError",
    "Backend",
    "BackendReg",
    "Buffer",
    "BufferFreedError",
    "BufferType",
    "BufferUsage",
    "ChatTemplateError",
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
    "GraphInUseError",
    "HostBuffer",
    "ModelInUseError",
    "OpError",
    "OpFilterError",
    "OutOfBoundsError",
    "PluginError",
    "Scheduler",
    "Tensor",
    "TensorDataError",
    "TensorError",
    "TensorFlag",
    "UnaryOp",
    "UnknownTypeError",
    "UnsupportedOpError",
    "VocabularyError",
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
    "safe_text",
    "type_traits",
]


#: public name → the module that defines it (imported on first access, then cached in this module's namespace)
_WHERE: dict[str, str] = {
    "ops": "ggml_core.ops",
    **dict.fromkeys(["Context", "current_context"], "ggml_core._context"),
    **dict.fromkeys(
        [
            "AllocationError",
            "BufferFreedError",
            "ChatTemplateError",
            "ComputeError",
            "DeviceNotFoundError",
            "GGMLError",
            "GGUFError",
            "GraphError",
            "GraphInUseError",
            "ModelInUseError",
            "OpError",
            "OpFilterError",
            "OutOfBoundsError",
            "PluginError",
            "TensorDataError",
            "TensorError",
            "UnknownTypeError",
            "UnsupportedOpError",
            "VocabularyError",
        ],
        "ggml_core._errors",
    ),
    **dict.fromkeys(["Graph", "build_graph"], "ggml_core._graph"),
    **dict.fromkeys(["MAX_DIMS", "MAX_NAME", "MAX_OP_PARAMS", "MAX_SRC", "Tensor", "TensorFlag"], "ggml_core._tensor"),
    **dict.fromkeys(["safe_text"], "ggml_core._text"),
    **dict.fromkeys(["GGMLType", "as_type", "row_size", "type_traits"], "ggml_core._types"),
    **dict.fromkeys(["GraphAllocator", "alloc_ctx_tensors"], "ggml_core.alloc"),
    **dict.fromkeys(
        [
            "API_VERSION",
            "Backend",
            "BackendReg",
            "Buffer",
            "BufferType",
            "BufferUsage",
            "Device",
            "DeviceCaps",
            "DeviceProps",
            "DeviceType",
            "Event",
            "HostBuffer",
            "get_registry",
            "hookimpl",
        ],
        "ggml_core.backend",
    ),
    **dict.fromkeys(["GGMLOp", "GluOp", "UnaryOp"], "ggml_core.ops"),
    "Scheduler": "ggml_core.sched",
}


def devices() -> list[Device]:
    """Every device of every loaded plugin, accelerators first and the CPU last."""
    from ggml_core.backend.registry import get_registry

    return get_registry().devices()


def get_device(name: str) -> Device:
    """A device by case-insensitive name, e.g. ``get_device("cpu")``."""
    from ggml_core.backend.registry import get_registry

    return get_registry().get_device(name)


def init_backend(name: str, params: str | None = None) -> Backend:
    """A new backend (stream) on the named device."""
    from ggml_core.backend.registry import get_registry

    return get_registry().init_backend(name, params)


def init_best() -> Backend:
    """A backend on the best device: the first GPU, else IGPU, else the CPU."""
    from ggml_core.backend.registry import get_registry

    return get_registry().init_best()


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is not None:
        value = importlib.import_module(module)
        if name != "ops":
            value = getattr(value, name)
        globals()[name] = value
        return value
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("ggml-core")
        except PackageNotFoundError:  # running from a source tree
            return "0+unknown"
    raise AttributeError(f"module 'ggml_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
