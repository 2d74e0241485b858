"""Checks: pyopencl, and which OpenCL devices of which platforms become devices (``GGML_OPENCL_DEVICES``).

pyopencl is imported by the first device enumeration, not when the plugin loads; :data:`cl` stands for it in the
modules that run once there are devices. :func:`discover` never raises: a missing pyopencl or ICD, a platform
without devices or a filter that selects nothing are reasons, shown by ``ggml-core devices``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ggml_opencl._device_info import DeviceInfo, device_info

__all__ = ["Discovery", "cl", "discover", "import_cl"]

#: pyopencl, imported by the first device enumeration (:func:`import_cl`): loading the plugin does not pay for it
_CL: Any = None
#: why pyopencl is not importable (None: not tried yet, or imported)
_IMPORT_ERROR: str | None = None


def import_cl() -> Any:
    """pyopencl, or None with :data:`_IMPORT_ERROR` saying why (optional: the registry then reports no devices)."""
    global _CL, _IMPORT_ERROR
    if _CL is None and _IMPORT_ERROR is None:
        try:
            import pyopencl

            _CL = pyopencl
        except Exception as exc:  # noqa: BLE001 - ImportError, or a broken ICD loader raising at import
            _IMPORT_ERROR = f"pyopencl is not importable: {type(exc).__name__}: {exc} (pip install pyopencl)"
    return _CL


class _PyOpenCL:
    """``cl.X`` is ``pyopencl.X``, pyopencl being imported on first use (devices, buffers and backends exist only
    once the enumeration has imported it)."""

    def __getattr__(self, name: str) -> Any:
        mod = import_cl()
        if mod is None:
            raise RuntimeError(_IMPORT_ERROR or "pyopencl is not importable (pip install pyopencl)")
        return getattr(mod, name)


#: pyopencl, for the modules that use it once there are devices
cl: Any = _PyOpenCL()


@dataclass
class Discovery:
    """The outcome of looking for OpenCL devices: usable ones, those left out (with why), or why there are none."""

    devices: list[tuple[DeviceInfo, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    reason: str | None = None


def _selected(info: DeviceInfo, tokens: Sequence[str]) -> bool:
    """GGML_OPENCL_DEVICES: an integer token is a device index, anything else a case-insensitive name substring."""
    desc = info.description.lower()
    return any(int(t) == info.index if t.isdigit() else t.lower() in desc for t in tokens)


def discover(environ: Mapping[str, str]) -> Discovery:
    """Every device of every platform (honouring GGML_OPENCL_DEVICES); never raises."""
    out = Discovery()
    if import_cl() is None:
        out.reason = _IMPORT_ERROR
        return out
    try:
        platforms = cl.get_platforms()
    except Exception as exc:  # noqa: BLE001 - pyopencl.Error (LogicError: PLATFORM_NOT_FOUND_KHR) or loader errors
        vendors = environ.get("OCL_ICD_VENDORS", "/etc/OpenCL/vendors")
        out.reason = f"no OpenCL platform (ICD loader found none in {vendors}): {type(exc).__name__}: {exc}"
        return out
    if not platforms:
        out.reason = "no OpenCL platform is installed (install an ICD, e.g. pocl-opencl-icd)"
        return out
    tokens = [t.strip() for t in environ.get("GGML_OPENCL_DEVICES", "").split(",") if t.strip()]
    index = 0
    for p_index, platform in enumerate(platforms):
        try:
            devs = platform.get_devices()
        except Exception as exc:  # noqa: BLE001 - DEVICE_NOT_FOUND on an empty platform
            out.skipped[platform.name.strip()] = f"no devices: {type(exc).__name__}: {exc}"
            continue
        for dev in devs:
            try:
                info = device_info(cl, dev, index, p_index, platform.name)
            except Exception as exc:  # noqa: BLE001
                out.skipped[f"device {index}"] = f"cannot read its properties: {type(exc).__name__}: {exc}"
                index += 1
                continue
            index += 1
            if tokens and not _selected(info, tokens):
                out.skipped[f"{info.index} {info.description}"] = "not selected by GGML_OPENCL_DEVICES"
                continue
            out.devices.append((info, dev))
    if not out.devices:
        if tokens and index:
            wanted = environ["GGML_OPENCL_DEVICES"]
            out.reason = f"GGML_OPENCL_DEVICES={wanted!r} selects none of the {index} devices found"
        elif not index:
            out.reason = "the OpenCL platforms have no devices"
    return out
