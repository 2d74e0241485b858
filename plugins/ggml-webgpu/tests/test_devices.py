"""Enumeration: one device per adapter, typed from the adapter, API in the description, limits in the props;
filters, and zero devices with the reason when wgpu or an adapter is missing."""

from __future__ import annotations

import pytest

import ggml_core as g
from ggml_core import DeviceType
from ggml_webgpu import ADAPTER_TYPES, AdapterInfo, WebGPUDevice, WebGPUReg, _adapters, _buffers, discover


def test_devices_are_named_in_order_with_their_api(wdev: WebGPUDevice) -> None:
    names = [d.name for d in g.devices() if isinstance(d, WebGPUDevice)]
    assert names == [f"WebGPU{i}" for i in range(len(names))]
    api = wdev.info.backend
    assert api in ("Vulkan", "Metal", "D3D12", "OpenGL")
    assert wdev.description.endswith(f"({api})")


def test_type_comes_from_the_adapter(wdev: WebGPUDevice) -> None:
    assert wdev.type == ADAPTER_TYPES.get(wdev.info.adapter_type, DeviceType.ACCEL)
    assert ADAPTER_TYPES["DiscreteGPU"] == DeviceType.GPU and ADAPTER_TYPES["IntegratedGPU"] == DeviceType.IGPU


def test_a_cpu_adapter_is_never_preferred_over_the_cpu(wdev: WebGPUDevice, cpu: g.Device) -> None:
    """lavapipe/WARP are ACCEL: listed after GPUs, never chosen as the default device, the CPU stays the CPU."""
    if wdev.info.adapter_type != "CPU":
        pytest.skip(f"{wdev.name} is a {wdev.info.adapter_type} adapter, not a CPU one")
    assert wdev.type == DeviceType.ACCEL
    assert g.get_registry().devices_by_type(DeviceType.CPU)[0] is cpu
    from ggml_core.models.plan.placement import resolve_devices

    assert wdev not in resolve_devices(None)


def test_props_show_limits_and_features(wdev: WebGPUDevice) -> None:
    extra = wdev.props().extra
    assert extra["api"] == wdev.info.backend
    assert extra["max-storage-buffer-binding-size"] >= 2**20
    assert extra["binding window"] <= extra["max-storage-buffer-binding-size"]
    assert set(extra["features"].split(", ")) == set(wdev.info.features)
    assert wdev.buffer_type().alignment == _buffers.ALIGNMENT
    assert wdev.buffer_type().max_size == int(wdev.gpu.limits["max-buffer-size"])


def test_filter_selects_by_index_and_name(wdev: WebGPUDevice) -> None:
    found = discover({"GGML_WEBGPU_ADAPTERS": str(wdev.info.index)})
    assert [i.index for i, _ in found.adapters] == [wdev.info.index]
    none = WebGPUReg({"GGML_WEBGPU_ADAPTERS": "no-such-adapter"})
    assert none.devices == []
    assert "selects none" in (none.unavailable_reason or "")
    assert all(why == "not selected by GGML_WEBGPU_ADAPTERS" for why in none.skipped.values())


def test_a_bad_binding_override_is_reported() -> None:
    reg = WebGPUReg({"GGML_WEBGPU_MAX_BINDING": "lots"})
    assert reg.devices == []
    assert "GGML_WEBGPU_MAX_BINDING" in (reg.unavailable_reason or "")


def test_missing_wgpu_gives_zero_devices_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_adapters, "wgpu", None)
    monkeypatch.setattr(_adapters, "_IMPORT_ERROR", "wgpu is not importable: ModuleNotFoundError (pip install wgpu)")
    reg = WebGPUReg({})
    assert reg.devices == []
    assert "pip install wgpu" in (reg.unavailable_reason or "")


def test_no_adapter_gives_zero_devices_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    class _NoAdapters:
        @staticmethod
        def enumerate_adapters_sync() -> list[object]:
            return []

    class _FakeWgpu:
        gpu = _NoAdapters()

    monkeypatch.setattr(_adapters, "wgpu", _FakeWgpu())
    reg = WebGPUReg({})
    assert reg.devices == []
    assert "no adapter" in (reg.unavailable_reason or "")


def test_an_opengl_duplicate_of_a_native_adapter_is_left_out() -> None:
    """lavapipe shows up through Vulkan and OpenGL: only the native API is a device (unless selected by name)."""
    found = discover({})
    apis = {(i.device, i.backend) for i, _ in found.adapters}
    native = {d for d, api in apis if api != "OpenGL"}
    assert not any(api == "OpenGL" and d in native for d, api in apis)


def test_adapter_description_names_the_api() -> None:
    info = AdapterInfo(0, "Apple M2", "apple", "Metal", "IntegratedGPU", "", (), {})
    assert info.description == "Apple M2 (Metal)" and info.type == DeviceType.IGPU


def test_every_kernel_compiles(wdev: WebGPUDevice) -> None:
    """Families compile on first use; this compiles every entry point of every WGSL file on this adapter."""
    wdev.pipelines.compile_all()
    from ggml_webgpu._shaders import FAMILIES

    for family, entries in FAMILIES.items():
        for entry in entries:
            assert wdev.pipelines.get(f"{family}.{entry}") is not None
