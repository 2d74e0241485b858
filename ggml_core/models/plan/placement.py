"""Which device holds which layer: llama.cpp's placement (``--device``, ``--n-gpu-layers``, ``--split-mode``,
``--tensor-split``) and the check that every device has the memory for its share, done before anything is allocated.

Slots: ``-1`` is the input layer (token embeddings, always on the CPU as in llama.cpp: GET_ROWS is cheap there),
``0 .. n_layer-1`` the repeating layers, ``n_layer`` the output layer (final norm and lm_head). With ``N`` =
``--n-gpu-layers``, slots ``i >= n_layer + 1 - N`` are offloaded, shared among the offload devices in proportion to
``--tensor-split`` (default: each device's free memory); ``--split-mode none`` puts them all on the main device.

The CPU is the host, not an offload device (as in llama.cpp): the default device list is every RPC device, then
every GPU, then the iGPUs only when there is nothing else; a device that is the host CPU seen through another API
(``Device.host_cpu``, e.g. PoCL's OpenCL CPU device) is left out unless named. Naming the CPU in ``--device`` is a
ggml-core extension: without ``-ngl`` it takes its ``--tensor-split`` share of the slots like a device; with
``-ngl N`` the N offloaded slots go to the other devices only and the CPU holds the rest.

Which buffer type holds each weight, and where each layer's KV cache lives, is decided afterwards weight by weight
(:func:`ggml_core.models.plan.bufts.assign_weights`); :meth:`Placement.account` then sizes the shares from those
choices.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ggml_core._errors import AllocationError, DeviceNotFoundError
from ggml_core.backend.interfaces import Device, DeviceType
from ggml_core.backend.registry import get_registry
from ggml_core.models.params import SPLIT_MODES, PlacementRequest

__all__ = [
    "INPUT_SLOT",
    "DeviceShare",
    "Placement",
    "default_devices",
    "fit_check",
    "is_rpc",
    "maps_weights",
    "plan_placement",
    "resolve_devices",
]

INPUT_SLOT: Final = -1


@dataclass
class DeviceShare:
    """One device's part of the model."""

    device: Device
    #: repeating layers whose home is this device
    layers: list[int] = field(default_factory=list)
    has_input: bool = False
    has_output: bool = False
    #: bytes of weights this device must allocate (0 where the weights are used in place from the mmap)
    weight_bytes: int = 0
    #: bytes of weights used in place from the memory-mapped file
    mapped_bytes: int = 0
    kv_bytes: int = 0
    compute_bytes: int = 0
    #: weight bytes held here per slot, other devices' slots included (weights they could not take)
    slot_bytes: dict[int, int] = field(default_factory=dict)
    #: layers whose KV cache is here
    kv_layers: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The device's name."""
        return self.device.name

    @property
    def total_bytes(self) -> int:
        """Device memory needed: weights + KV cache + compute estimate."""
        return self.weight_bytes + self.kv_bytes + self.compute_bytes

    @property
    def used(self) -> bool:
        """True when the device holds anything."""
        return bool(self.layers or self.has_input or self.has_output or self.slot_bytes or self.kv_layers)

    def describe_layers(self, n_layer: int) -> str:
        """E.g. ``layers 0-3 + output`` (+ ``weights of 2 other slots`` held for devices that cannot use them)."""
        parts = []
        if self.has_input:
            parts.append("input")
        if self.layers:
            lo, hi = self.layers[0], self.layers[-1]
            parts.append(f"layer {lo}" if lo == hi else f"layers {lo}-{hi}")
        if self.has_output:
            parts.append("output")
        own = set(self.layers) | ({INPUT_SLOT} if self.has_input else set()) | ({n_layer} if self.has_output else set())
        other = [k for k in self.slot_bytes if k not in own]
        if other:
            parts.append(f"weights of {len(other)} other slot{'s' if len(other) != 1 else ''}")
        return " + ".join(parts) or "nothing"


@dataclass
class Placement:
    """The placement plan: a device per slot and each device's share, offload devices first, the CPU last.

    After :func:`~ggml_core.models.plan.bufts.assign_weights`, ``weights`` holds every weight's buffer type and the
    reason, ``kv_device`` each layer's KV cache device and ``notes`` what was changed from the request and why.
    """

    n_layer: int
    slot_device: dict[int, Device]
    shares: list[DeviceShare]
    split_mode: str
    #: weight name -> :class:`~ggml_core.models.plan.bufts.WeightChoice`
    weights: dict[str, Any] = field(default_factory=dict)
    kv_device: dict[int, Device] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: ``--split-mode auto``'s choice and prediction (:class:`~ggml_core.models.plan.autosplit.AutoChoice`), else None
    auto: Any = None
    #: the request's ``mmap``: whether the CPU's weights may be used in place from the mapped file
    mmap: bool = True
    #: ``--split-mode tensor``: the devices every layer is split over (request order) and their shares
    tensor_devices: list[Device] = field(default_factory=list)
    tensor_shares: tuple[float, ...] = ()

    def maps(self, dev: Device) -> bool:
        """True when ``dev``'s weights are used in place from the memory-mapped file (the CPU, unless --no-mmap)."""
        return self.mmap and maps_weights(dev)

    def device_of(self, slot: int) -> Device:
        """The device of a slot (-1 input, 0..n_layer-1 layers, n_layer output)."""
        return self.slot_device[slot]

    def kv_device_of(self, layer: int) -> Device:
        """The device holding layer ``layer``'s KV cache (its layer's device unless decided otherwise)."""
        return self.kv_device.get(layer) or self.slot_device[layer]

    @property
    def devices(self) -> list[Device]:
        """Devices that hold something, in scheduler priority order (CPU last)."""
        return [s.device for s in self.shares]

    def account(
        self,
        items: Iterable[tuple[Device, int, int, bool]],
        kv_bytes_per_layer: int,
        compute_bytes: int,
        order: Sequence[Device],
    ) -> None:
        """Rebuild :attr:`shares` from ``(device, slot, bytes, mapped)`` weight items and the KV devices."""
        items = list(items)
        cpu = _cpu_device()
        seq = [d for d in order if d.type != DeviceType.CPU]
        for d in [*(i[0] for i in items), *self.slot_device.values(), *self.kv_device.values()]:
            if d.type != DeviceType.CPU and d not in seq:
                seq.append(d)
        shares = {d.name: DeviceShare(d) for d in [*seq, cpu]}
        for slot, dev in sorted(self.slot_device.items()):
            share = shares[dev.name]
            if slot == INPUT_SLOT:
                share.has_input = True
            elif slot == self.n_layer:
                share.has_output = True
            else:
                share.layers.append(slot)
        for dev, slot, nbytes, mapped in items:
            share = shares[dev.name]
            share.slot_bytes[slot] = share.slot_bytes.get(slot, 0) + nbytes
            if mapped:
                share.mapped_bytes += nbytes
            else:
                share.weight_bytes += nbytes
        for il in range(self.n_layer):
            share = shares[self.kv_device_of(il).name]
            share.kv_layers.append(il)
            share.kv_bytes += kv_bytes_per_layer
        used = [s for s in shares.values() if s.used]
        for s in used:
            s.compute_bytes = compute_bytes
        self.shares = used

    def as_dict(self) -> list[dict[str, object]]:
        """Per device: name, layers, MB (weights + KV), for ``--json``."""
        return [
            {
                "name": s.name,
                "layers": len(s.layers),
                "layer_range": s.describe_layers(self.n_layer),
                "MB": round((s.weight_bytes + s.mapped_bytes + s.kv_bytes) / 2**20, 3),
                "weights_MB": round((s.weight_bytes + s.mapped_bytes) / 2**20, 3),
                "weights_mapped": s.mapped_bytes > 0,
                "kv_MB": round(s.kv_bytes / 2**20, 3),
                "kv_layers": len(s.kv_layers),
                "compute_MB_estimate": round(s.compute_bytes / 2**20, 3),
            }
            for s in self.shares
        ]


def is_rpc(dev: Device) -> bool:
    """A device of an RPC registry (llama.cpp tells them by the registry's name, ``RPC``; here ``RPC[host:port]``)."""
    return dev.reg is not None and dev.reg.name.upper().startswith("RPC")


def default_devices(devices: Sequence[Device] | None = None) -> list[Device]:
    """llama.cpp's default device list: every RPC device (first: fewer network transfers), then every GPU (one per
    device id), then the iGPUs only when there is nothing else; never the CPU, ACCEL devices, or a device that is
    the host CPU seen through another API (``host_cpu``: it would only compete with the CPU plugin for the cores)."""
    devs = get_registry().devices() if devices is None else list(devices)
    rpc = [d for d in devs if d.type == DeviceType.GPU and is_rpc(d)]
    gpus: list[Device] = []
    seen: set[str] = set()
    for d in devs:
        if d.type != DeviceType.GPU or is_rpc(d) or getattr(d, "host_cpu", False):
            continue
        if d.device_id is not None and d.device_id in seen:
            continue  # the same hardware through a second driver of one plugin
        if d.device_id is not None:
            seen.add(d.device_id)
        gpus.append(d)
    out = rpc + gpus
    if not out:
        out = [d for d in devs if d.type == DeviceType.IGPU and not getattr(d, "host_cpu", False)]
    return out


def resolve_devices(names: Sequence[str] | None) -> list[Device]:
    """Devices by name (case-insensitive, "did you mean" on typos); None: :func:`default_devices`; ``none``: []."""
    reg = get_registry()
    if names is None:
        return default_devices()
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


def _shares_of(request: PlacementRequest, devs: list[Device], cpu: Device, counted: bool) -> list[tuple[Device, float]]:
    """(device, share) of the devices that take slots; ``counted``: -ngl was given, so the CPU takes none."""
    if request.split_mode == "none":
        return [(devs[request.main_device], 1.0)]
    if request.tensor_split is not None:
        weights = [float(w) for w in request.tensor_split]
        if len(weights) > len(devs):
            raise ValueError(f"--tensor-split has {len(weights)} values for {len(devs)} devices")
        weights += [0.0] * (len(devs) - len(weights))
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"--tensor-split needs non-negative shares with a positive sum, got {weights}")
    else:
        weights = [float(max(d.memory()[0], 1)) for d in devs]
    pairs = [(d, w) for d, w in zip(devs, weights, strict=True) if not (counted and d is cpu)]
    if sum(w for _, w in pairs) <= 0:
        pairs = [(d, 1.0) for d, _ in pairs]  # -ts gave every share to the CPU, which -ngl does not count
    return pairs


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
    if request.split_mode == "none":  # llama.cpp: -mg < 0 offloads nothing, past the list is an error
        if request.main_device < 0:
            devs = []
        elif request.main_device >= len(devs):
            raise ValueError(
                f"--main-gpu {request.main_device} is outside the device list "
                f"({len(devs)} device{'s' if len(devs) != 1 else ''}: {', '.join(d.name for d in devs) or 'none'})"
            )
    cpu = _cpu_device()
    n_slots = n_layer + 1
    if request.split_mode == "tensor":
        return _plan_tensor(request, devs, cpu, n_layer, slot_bytes, kv_bytes_per_layer, compute_bytes)
    counted = request.n_gpu_layers is not None
    if counted and int(request.n_gpu_layers or 0) < 0:
        counted = False  # -ngl -1: all, as llama.cpp
    ngl = n_slots if not counted else min(int(request.n_gpu_layers or 0), n_slots)
    i_start = n_slots - ngl
    slot_device: dict[int, Device] = {INPUT_SLOT: cpu}
    pairs = _shares_of(request, devs, cpu, counted) if devs and ngl else []
    if pairs:
        total = sum(w for _, w in pairs)
        cum, acc = [], 0.0
        for _, w in pairs:
            acc += w
            cum.append(acc / total)
        for slot in range(n_slots):
            if slot < i_start:
                slot_device[slot] = cpu
            else:
                # llama.cpp: the device whose cumulative share first exceeds this slot's fraction of the offload
                k = bisect.bisect_right(cum, (slot - i_start) / ngl)
                slot_device[slot] = pairs[min(k, len(pairs) - 1)][0]
    else:
        for slot in range(n_slots):
            slot_device[slot] = cpu
    plan = Placement(n_layer, slot_device, [], request.split_mode, mmap=request.mmap)
    items = [(dev, slot, slot_bytes.get(slot, 0), plan.maps(dev)) for slot, dev in slot_device.items()]
    plan.account(items, kv_bytes_per_layer, compute_bytes, devs)
    if check_fit:
        fit_check(plan)
    return plan


def _plan_tensor(
    request: PlacementRequest,
    devs: list[Device],
    cpu: Device,
    n_layer: int,
    slot_bytes: Mapping[int, int],
    kv_bytes_per_layer: int,
    compute_bytes: int,
) -> Placement:
    """``--split-mode tensor``: every layer over all of ``devs`` (the CPU too when named), in ``--tensor-split``
    shares (default: free memory); the mirrored weights and the output on the first device, the input on the CPU.
    The shards themselves are the meta device's (:mod:`ggml_core.models.tensor_parallel`)."""
    if len(devs) < 2:
        raise ValueError(
            f"--split-mode tensor splits every layer over at least two devices, got "
            f"{', '.join(d.name for d in devs) or 'none'} (name them: --device CPU,OpenCL0)"
        )
    if request.n_gpu_layers not in (None, -1):
        raise ValueError("--split-mode tensor splits every layer over its devices: --n-gpu-layers does not apply")
    shares = tuple(w for _, w in _shares_of(request, devs, cpu, False))
    slot_device: dict[int, Device] = {INPUT_SLOT: cpu} | {slot: devs[0] for slot in range(n_layer + 1)}
    plan = Placement(n_layer, slot_device, [], "tensor", mmap=request.mmap, tensor_devices=devs, tensor_shares=shares)
    items = [(dev, slot, slot_bytes.get(slot, 0), plan.maps(dev)) for slot, dev in slot_device.items()]
    plan.account(items, kv_bytes_per_layer, compute_bytes, devs)
    split = ", ".join(f"{d.name} {w / sum(shares):.2f}" for d, w in zip(devs, shares, strict=True))
    plan.notes.append(
        f"--split-mode tensor: attention by KV heads and the feed-forward by columns over {split}; embeddings, "
        f"norms and output on {devs[0].name}"
    )
    return plan


def maps_weights(dev: Device) -> bool:
    """True when the device uses host memory in place (the CPU's mmap'd weights)."""
    return dev.type == DeviceType.CPU and dev.caps.buffer_from_host_ptr


def fit_check(plan: Placement, ctx_flag: str = "--ctx-size") -> None:
    """Every share against its device's free memory; AllocationError saying how many layers would fit.
    ``ctx_flag`` is what makes the context smaller (``run`` without ``-c`` sizes it from ``-n``)."""
    for s in plan.shares:
        _check_fit(s, plan.n_layer, ctx_flag, plan.maps(s.device))


def _check_fit(s: DeviceShare, n_layer: int, ctx_flag: str, mapped: bool) -> None:
    free, _total = s.device.memory()
    need = s.total_bytes
    if need <= free:
        return
    kv_per_layer = s.kv_bytes // max(len(s.kv_layers), 1)
    per_layer = [
        (0 if mapped else s.slot_bytes.get(i, 0)) + (kv_per_layer if i in s.kv_layers else 0) for i in s.layers
    ]
    fixed = s.total_bytes - sum(per_layer)
    fit, room = 0, free - fixed
    for b in per_layer:
        if room < b:
            break
        room -= b
        fit += 1  # noqa: SIM113 - counts only the layers that fit
    mib = 2**20
    detail = (
        f"weights {s.weight_bytes / mib:.1f} MiB + KV cache {s.kv_bytes / mib:.1f} MiB + compute "
        f"{s.compute_bytes / mib:.1f} MiB for {s.describe_layers(n_layer)}"
    )
    if room < 0 and s.compute_bytes > free:  # the compute buffer alone, sized by the context, is too big
        hint = f"the KV cache and compute buffer grow with the context: a smaller {ctx_flag} needs less"
        fit = 0
    elif room < 0:
        hint = "not even the fixed part fits; use fewer or other devices"
        fit = 0
    else:
        hint = (
            f"at most {fit} of its {len(s.layers)} layers would fit; lower --n-gpu-layers, give the device a smaller "
            f"--tensor-split share, use a smaller {ctx_flag}, or add a device"
        )
    raise AllocationError(s.name, need, free, f"the model does not fit: {detail}; {hint}")
