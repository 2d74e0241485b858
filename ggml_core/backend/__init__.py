"""The backend model and plugin surface: interfaces to subclass, hooks to implement, the registry that finds them."""

from ggml_core.backend.hookspecs import ENTRY_POINT_GROUP, hookimpl, hookspec
from ggml_core.backend.host import HostBuffer
from ggml_core.backend.interfaces import (
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
    buffer_of,
)
from ggml_core.backend.kit import EMPTY_OPS, KernelTable, LazyReg, PluginHooks
from ggml_core.backend.registry import PluginInfo, Registry, get_registry, reset_registry

__all__ = [
    "API_VERSION",
    "EMPTY_OPS",
    "ENTRY_POINT_GROUP",
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
    "KernelTable",
    "LazyReg",
    "PluginHooks",
    "PluginInfo",
    "Registry",
    "buffer_of",
    "get_registry",
    "hookimpl",
    "hookspec",
    "reset_registry",
]
