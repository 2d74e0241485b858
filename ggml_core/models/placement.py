"""Which device holds which layer: llama.cpp's placement (``--device``, ``--n-gpu-layers``, ``--split-mode``,
``--tensor-split``) and the check that every device has the memory for its share, done before anything is allocated.

Slots: ``-1`` is the input layer (token embeddings, always on the CPU as in llama.cpp: GET_ROWS is cheap there),
``0 .. n_layer-1`` the repeating layers, ``n_layer`` the output layer (final norm and lm_head). With ``N`` =
``--n-gpu-layers``, slots ``i >= n_layer + 1 - N`` are offloaded, shared among the chosen devices in proportion to
``--tensor-split`` (default: each device's free memory); ``--split-mode none`` puts them all on the main device.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from ggml_core._errors import AllocationError, DeviceNotFoundError
from ggml_core.backend.interfaces import Device, DeviceType
from ggml_core.backend.registry import get_registry

__all__ = [
    "INPUT_SLOT",
    "SPLIT_MODES",
    "DeviceShare",
    "Placement",
    "PlacementRequest",
    "maps_weights",
    "plan_placement",
    "resolve_devices",
]

SPLIT_MODES: Final = ("none", "layer")
INPUT_SLOT: Final = -1


@dataclass(frozen=True)
class PlacementRequest:
    """What the user asked for (the CLI flags)."""

    #: device names in order (``--device CPU,OpenCL0``); None: the best accelerator, if any
    devices: Sequence[str] | None = None
    #: slots to offload (``--n-gpu-layers``); None: all of them
    n_gpu_layers: int | None = None
    split_mode: str = "layer"
    #: share per device (``--tensor-split 3,1``); None: proportional to free memory
    tensor_split: Sequence[float] | None = None
    #: index into ``devices`` of the main device for ``--split-mode none``
    main_device: int = 0


@dataclass
class DeviceShare:
    """One device's part of the model."""

    device: Device
    #: repeating layers held here
    layers: list[int] = field(default_factory=list)
    has_input: bool = False
    has_output: bool = False
    #: bytes of weights this device must allocate (0 where the weights are used in place from the mmap)
    weight_bytes: int = 0
    #: bytes of weights used in place from the memory-mapped file
    mapped_bytes: int = 0
    kv_bytes: int = 0
    compute_bytes: int = 0

    @property
    def name(self) -> str:
        """The device's name."""
        return self.device.name

    @property
    def total_bytes(self) -> int:
        """Device memory needed: weights + KV cache + compute estimate."""
        return self.weight_bytes + self.kv_bytes + self.compute_bytes

    def describe_layers(self) -> str:
        """E.g. ``layers 0-3 + output``."""
        parts = []
        if self.has_input:
            parts.append("input")
        if self.layers:
            lo, hi = self.layers[0], self.layers[-1]
            parts.append(f"layer {lo}" if lo == hi else f"layers {lo}-{hi}")
        if self.has_output:
            parts.append("output")
        return " + ".join(parts) or "nothing"


@dataclass
class Placement:
    """The placement plan: a device per slot and each device's share, offload devices first, the CPU last."""

    n_layer: int
    slot_device: dict[int, Device]
    shares: list[DeviceShare]
    split_mode: str

    def device_of(self, slot: int) -> Device:
        """The device of a slot (-1 input, 0..n_layer-1 layers, n_layer output)."""
        return self.slot_device[slot]

    @property
    def devices(self) -> list[Device]:
        """Devices that hold something, in scheduler priority order (CPU last)."""
        return [s.device for s in self.shares]

    def as_dict(self) -> list[dict[str, object]]:
        """Per device: name, layers, MB (weights + KV), for ``--json``."""
        return [
            {
                "name": s.name,
                "layers": len(s.layers),
                "layer_range": s.describe_layers(),
                "MB": round((s.weight_bytes + s.mapped_bytes + s.kv_bytes) / 2**20, 3),
                "weights_MB": round((s.weight_bytes + s.mapped_bytes) / 2**20, 3),
                "weights_mapped": s.mapped_bytes > 0,
                "kv_MB": round(s.kv_bytes / 2**20, 3),
                "compute_MB_estimate": round(s.compute_bytes / 2**20, 3),
            }
            for s in self.shares
        ]


def resolve_devices(names: Sequence[str] | None) -> list[Device]:
    """Devices by name (case-insensitive, "did you mean" on typos); None gives the best accelerator, if any."""
    reg = get_registry()
    if names is None:
        for kind in (DeviceType.GPU, DeviceType.IGPU):
            found = reg.devices_by_type(kind)
            if found:
                return [found[0]]
        return []
    out: list[Device] = []
    for n in names:
        n = n.strip()
        if not n or n.lower() == "none":
            continue
        d = reg.get_device(n)
        if d not in out:
            out.append(d)
    return out


def _cpu_device() -> Device:
    reg = get_registry()
    cpus = reg.devices_by_type(DeviceType.CPU)
    if not cpus:
        raise DeviceNotFoundError("CPU", [d.name for d in reg.devices()])
    return cpus[0]


def plan_placement(
    request: PlacementRequest,
    n_layer: int,
    slot_bytes: Mapping[int, int],
    kv_bytes_per_layer: int,
    compute_bytes: int,
    *,
    check_fit: bool = True,
) -> Placement:
    """Assign every slot a device and check that each device has the free memory for its share.

    :param slot_bytes: weight bytes per slot (-1 input, 0..n_layer-1, n_layer output)
    :param kv_bytes_per_layer: KV cache bytes of one layer
    :param compute_bytes: an estimate of one device's compute buffer
    :raises AllocationError: a device lacks the memory (the message says how many layers would fit)
    """
    if request.split_mode not in SPLIT_MODES:
        raise ValueError(f"--split-mode must be one of {', '.join(SPLIT_MODES)}, got {request.split_mode!r}")
    devs = resolve_devices(request.devices)
    if devs and not 0 <= request.main_device < len(devs):
        raise ValueError(f"--main-gpu {request.main_device} is outside the device indices 0..{len(devs) - 1}")
    cpu = _cpu_device()
    n_slots = n_layer + 1
    ngl = n_slots if request.n_gpu_layers is None else max(0, min(int(request.n_gpu_layers), n_slots))
    i_start = n_slots - ngl
    slot_device: dict[int, Device] = {INPUT_SLOT: cpu}
    if devs and ngl:
        if request.split_mode == "none":
            weights = [1.0 if i == request.main_device else 0.0 for i in range(len(devs))]
        elif request.tensor_split is not None:
            weights = [float(w) for w in request.tensor_split]
            if len(weights) > len(devs):
                raise ValueError(f"--tensor-split has {len(weights)} values for {len(devs)} devices")
            weights += [0.0] * (len(devs) - len(weights))
            if any(w < 0 for w in weights) or sum(weights) <= 0:
                raise ValueError(f"--tensor-split needs non-negative shares with a positive sum, got {weights}")
        else:
            weights = [float(max(d.memory()[0], 1)) for d in devs]
        total = sum(weights)
        cum, acc = [], 0.0
        for w in weights:
            acc += w
            cum.append(acc / total)
        for slot in range(n_slots):
            if slot < i_start:
                slot_device[slot] = cpu
            else:
                # llama.cpp: the device whose cumulative share first exceeds this slot's fraction of the offload
                k = bisect.bisect_right(cum, (slot - i_start) / ngl)
                slot_device[slot] = devs[min(k, len(devs) - 1)]
    else:
        for slot in range(n_slots):
            slot_device[slot] = cpu
    order = [d for d in devs if d is not cpu] + [cpu]
    shares = {d.name: DeviceShare(d) for d in order}
    for slot, dev in slot_device.items():
        share = shares[dev.name]
        nbytes = slot_bytes.get(slot, 0)
        if maps_weights(dev):
            share.mapped_bytes += nbytes
        else:
            share.weight_bytes += nbytes
        if slot == INPUT_SLOT:
            share.has_input = True
        elif slot == n_layer:
            share.has_output = True
        else:
            share.layers.append(slot)
            share.kv_bytes += kv_bytes_per_layer
    used = [s for s in shares.values() if s.layers or s.has_input or s.has_output]
    for s in used:
        s.compute_bytes = compute_bytes
    plan = Placement(n_layer, slot_device, used, request.split_mode)
    if check_fit:
        for s in used:
            _check_fit(s, slot_bytes, kv_bytes_per_layer, n_layer)
    return plan


def maps_weights(dev: Device) -> bool:
    """True when the device uses host memory in place (the CPU's mmap'd weights)."""
    return dev.type == DeviceType.CPU and dev.caps.buffer_from_host_ptr


def _check_fit(s: DeviceShare, slot_bytes: Mapping[int, int], kv_per_layer: int, n_layer: int) -> None:
    free, _total = s.device.memory()
    need = s.total_bytes
    if need <= free:
        return
    fixed = s.compute_bytes
    if not maps_weights(s.device):
        fixed += (slot_bytes.get(n_layer, 0) if s.has_output else 0) + (slot_bytes.get(-1, 0) if s.has_input else 0)
    per_layer = [(0 if maps_weights(s.device) else slot_bytes.get(i, 0)) + kv_per_layer for i in s.layers]
    fit, room = 0, free - fixed
    for b in per_layer:
        if room < b:
            break
        room -= b
        fit += 1  # noqa: SIM113 - counts only the layers that fit
    mib = 2**20
    detail = (
        f"weights {s.weight_bytes / mib:.1f} MiB + KV cache {s.kv_bytes / mib:.1f} MiB + compute "
        f"{s.compute_bytes / mib:.1f} MiB for {s.describe_layers()}"
    )
    if room < 0:
        hint = "not even the fixed part fits; use fewer or other devices"
        fit = 0
    else:
        hint = (
            f"at most {fit} of its {len(s.layers)} layers would fit; lower --n-gpu-layers, give the device a smaller "
            f"--tensor-split share, use a smaller --ctx-size, or add a device"
        )
    raise AllocationError(s.name, need, free, f"the model does not fit: {detail}; {hint}")
