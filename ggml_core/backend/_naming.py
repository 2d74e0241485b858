"""Who may use a name, in which order plugins load, and when two devices are the same hardware.

The clash rule does not depend on entry-point order: first-party distributions load first, then the others by
distribution name (then entry-point name); the first to claim a device or registry name keeps it and a later
claim is refused. The first-party name families (``CPU``, ``OpenCL*``, ``CUDA*``, ``RPC*``, ``WebGPU*``) are never
up for grabs: a plugin from another distribution that uses one is refused even when the owner is not installed.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ggml_core.backend.interfaces import Device

__all__ = [
    "FIRST_PARTY",
    "drop_same_hardware",
    "is_first_party",
    "load_order_key",
    "normalize_device_id",
    "normalize_dist",
    "reserved_owner",
]

#: first-party distribution → the name family it owns (exact name, or prefix when ending in ``*``)
FIRST_PARTY: Final[dict[str, str]] = {
    "ggml-cpu": "CPU",
    "ggml-opencl": "OpenCL*",
    "ggml-cuda": "CUDA*",
    "ggml-rpc": "RPC*",
    "ggml-webgpu": "WebGPU*",
}

_PCI: Final = re.compile(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$")


def normalize_dist(distribution: str | None) -> str:
    """A distribution name in PEP 503's normal form (runs of ``-_.`` as one ``-``, lower case); "" for None."""
    return re.sub(r"[-_.]+", "-", distribution or "").lower()


def is_first_party(distribution: str | None) -> bool:
    """True for the project's own plugin distributions."""
    return normalize_dist(distribution) in FIRST_PARTY


def reserved_owner(name: str) -> str | None:
    """The first-party distribution that owns ``name`` (case-insensitive), or None when the name is free."""
    low = name.lower()
    for dist, family in FIRST_PARTY.items():
        stem = family.rstrip("*").lower()
        if low == stem or (family.endswith("*") and low.startswith(stem)):
            return dist
    return None


def may_use(name: str, distribution: str | None) -> str | None:
    """None when a plugin of ``distribution`` may claim ``name``; else the first-party owner that keeps it.

    A plugin with no distribution (registered in-process by the program itself) may use a reserved name; it still
    loses a clash to the owner, which loads first.
    """
    owner = reserved_owner(name)
    if owner is None or distribution is None or normalize_dist(distribution) == owner:
        return None
    return owner


def load_order_key(distribution: str | None, entry_point: str, value: str) -> tuple[int, str, str, str]:
    """Stable load order: first-party distributions first, then by distribution name, entry-point name, value."""
    return (0 if is_first_party(distribution) else 1, normalize_dist(distribution), entry_point, value)


def normalize_device_id(device_id: str | None) -> str:
    """A comparable device id: PCI bus ids as ``dddd:bb:dd.f`` lower-case, anything else stripped; "" if none."""
    text = (device_id or "").strip().lower()
    m = _PCI.match(text)
    if m:
        domain, bus, dev, fn = m.groups()
        return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"
    return text


def drop_same_hardware(ordered: list[Device]) -> tuple[list[Device], list[tuple[Device, Device]]]:
    """The same physical device reached through two plugins is listed once (the first in order is kept)."""
    same: list[tuple[Device, Device]] = []
    seen: dict[str, Device] = {}
    out: list[Device] = []
    for dev in ordered:
        try:
            key = normalize_device_id(dev.device_id)
        except Exception:  # noqa: BLE001 - a flaky property: an unknown id, never merged
            key = ""
        if key and key in seen:
            same.append((dev, seen[key]))
            continue
        if key:
            seen[key] = dev
        out.append(dev)
    return out, same
