"""Checks: wgpu itself, what it reports about its adapters, which of them become devices (``GGML_WEBGPU_ADAPTERS``)
and the limits a device is opened with.

Never raises: a missing wgpu, an adapter without properties or a filter that selects nothing are reasons, shown
by ``ggml-core devices`` and ``ggml-core plugins``.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ggml_core import DeviceType

__all__ = ["ADAPTER_TYPES", "AdapterInfo", "Discovery", "Limits", "adapter_info", "discover", "import_wgpu"]


def _runtime_dir() -> None:
    """Mesa's Vulkan drivers print "XDG_RUNTIME_DIR is invalid" on every enumeration when it is unset (CI, cron,
    containers): point it at a private per-user directory, as a login session would. A set one is left alone."""
    if os.environ.get("XDG_RUNTIME_DIR"):
        return
    path = os.path.join(tempfile.gettempdir(), f"ggml-webgpu-runtime-{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        if os.stat(path).st_uid == os.getuid():
            os.environ["XDG_RUNTIME_DIR"] = path
    except OSError:
        pass


_runtime_dir()
#: ``wgpu`` before the first device enumeration imports it (:func:`import_wgpu`)
_NOT_IMPORTED: Final = object()
#: the wgpu module, None when it cannot be imported; imported by the first enumeration, not by loading the plugin
#: (it parses wgpu-native's C header: 0.2-0.6 s that a placement on other devices does not pay)
wgpu: Any = _NOT_IMPORTED
#: why wgpu is not importable (None: imported, or not tried yet)
_IMPORT_ERROR: str | None = None
_IMPORT_LOCK = threading.Lock()


def import_wgpu() -> Any:
    """wgpu, imported once (None, with ``_IMPORT_ERROR`` saying why, when it cannot be: ImportError, or wgpu-native
    failing to load); a value set beforehand (tests put a fake or None there) is kept."""
    global wgpu, _IMPORT_ERROR
    with _IMPORT_LOCK:
        if wgpu is _NOT_IMPORTED:
            try:
                import wgpu as _wgpu

                wgpu = _wgpu
            except Exception as exc:  # noqa: BLE001 - ImportError, or wgpu-native failing to load
                wgpu = None
                _IMPORT_ERROR = f"wgpu is not importable: {type(exc).__name__}: {exc} (pip install wgpu)"
        return wgpu


#: wgpu adapter types -> ggml device types; a CPU adapter (lavapipe, WARP) is an ACCEL, never the default device
ADAPTER_TYPES: Final = {
    "DiscreteGPU": DeviceType.GPU,
    "VirtualGPU": DeviceType.GPU,
    "IntegratedGPU": DeviceType.IGPU,
    "CPU": DeviceType.ACCEL,
    "Unknown": DeviceType.ACCEL,
}


@dataclass(frozen=True)
class AdapterInfo:
    """What ggml-core keeps of one wgpu adapter."""

    index: int
    device: str
    vendor: str
    backend: str
    adapter_type: str
    driver: str
    features: tuple[str, ...]
    limits: dict[str, int]

    @property
    def description(self) -> str:
        """``llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)``: the adapter and its native API."""
        return f"{self.device} ({self.backend})"

    @property
    def type(self) -> DeviceType:
        """The ggml device type of this adapter."""
        return ADAPTER_TYPES.get(self.adapter_type, DeviceType.ACCEL)


def adapter_info(index: int, adapter: Any) -> AdapterInfo:
    """The properties of a wgpu adapter."""
    info = adapter.info
    limits = {k: int(v) for k, v in dict(adapter.limits).items() if isinstance(v, int)}
    return AdapterInfo(
        index=index,
        device=str(info.get("device", "") or "unknown adapter"),
        vendor=str(info.get("vendor", "")),
        backend=str(info.get("backend_type", "")),
        adapter_type=str(info.get("adapter_type", "Unknown")),
        driver=str(info.get("description", "")),
        features=tuple(sorted(adapter.features)),
        limits=limits,
    )


@dataclass
class Discovery:
    """The outcome of looking for adapters: usable ones, those left out (with why), or why there are none."""

    adapters: list[tuple[AdapterInfo, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    reason: str | None = None


def _selected(info: AdapterInfo, tokens: Sequence[str]) -> bool:
    """GGML_WEBGPU_ADAPTERS: an integer token is an adapter index, anything else a name/API substring."""
    desc = info.description.lower()
    return any(int(t) == info.index if t.isdigit() else t.lower() in desc for t in tokens)


def discover(environ: Mapping[str, str]) -> Discovery:
    """Every wgpu adapter (honouring GGML_WEBGPU_ADAPTERS); never raises."""
    out = Discovery()
    wgpu = import_wgpu()
    if wgpu is None:
        out.reason = _IMPORT_ERROR or "wgpu is not importable (pip install wgpu)"
        return out
    try:
        adapters = list(wgpu.gpu.enumerate_adapters_sync())
    except Exception as exc:  # noqa: BLE001 - wgpu-native errors come as various types
        out.reason = f"wgpu cannot enumerate adapters: {type(exc).__name__}: {exc}"
        return out
    if not adapters:
        out.reason = "wgpu finds no adapter (no Vulkan/Metal/D3D12 driver; e.g. apt-get install mesa-vulkan-drivers)"
        return out
    tokens = [t.strip() for t in environ.get("GGML_WEBGPU_ADAPTERS", "").split(",") if t.strip()]
    infos = []
    for i, adapter in enumerate(adapters):
        try:
            infos.append((adapter_info(i, adapter), adapter))
        except Exception as exc:  # noqa: BLE001
            out.skipped[f"adapter {i}"] = f"cannot read its properties: {type(exc).__name__}: {exc}"
    native = {(a.device, a.vendor) for a, _ in infos if a.backend != "OpenGL"}
    for info, adapter in infos:
        if tokens and not _selected(info, tokens):
            out.skipped[f"{info.index} {info.description}"] = "not selected by GGML_WEBGPU_ADAPTERS"
        elif not tokens and info.backend == "OpenGL" and any(info.device == d for d, _ in native):
            out.skipped[f"{info.index} {info.description}"] = "the same device through a native API is listed"
        else:
            out.adapters.append((info, adapter))
    if not out.adapters:
        if tokens:
            out.reason = f"GGML_WEBGPU_ADAPTERS={environ['GGML_WEBGPU_ADAPTERS']!r} selects none of the adapters"
        else:
            out.reason = "no usable wgpu adapter"
    return out


@dataclass(frozen=True)
class Limits:
    """What binders need to know about the device: binding and dispatch limits."""

    max_binding: int
    offset_alignment: int
    max_groups: int = 65535

    def __post_init__(self) -> None:
        # descriptors are u32 byte offsets: a window must stay below 2^31 bytes
        object.__setattr__(self, "max_binding", min(self.max_binding, 2**31 - 4) // 4 * 4)
