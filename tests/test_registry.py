"""Plugin discovery and selection, with faked entry points (no installation needed)."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest

import ggml_core as g
from ggml_core.backend import (
    API_VERSION,
    Backend,
    BackendReg,
    Buffer,
    BufferType,
    Device,
    DeviceType,
    Registry,
    hookimpl,
)


class FakeDist:
    def __init__(self, name: str, version: str = "1.0") -> None:
        self.name = name
        self.version = version
        self.metadata = {"Name": name}


class FakeEntryPoint:
    """Quacks like importlib.metadata.EntryPoint."""

    def __init__(self, name: str, loader: Callable[[], Any], dist: str | None = None) -> None:
        self.name = name
        self.value = f"fake_{name}"
        self._loader = loader
        self.dist = FakeDist(dist) if dist else None

    def load(self) -> Any:
        return self._loader()


class FakeBufferType(BufferType):
    def _alloc(self, size: int) -> Buffer:
        raise NotImplementedError("need _alloc")


class FakeDevice(Device):
    def __init__(self, name: str, type: DeviceType = DeviceType.GPU) -> None:
        super().__init__(name, f"fake {name}")
        self.type = type
        self._buft = FakeBufferType(name, self)

    def memory(self) -> tuple[int, int]:
        return 1, 2

    def buffer_type(self) -> BufferType:
        return self._buft

    def init_backend(self, params: str | None = None) -> Backend:
        return Backend(self)

    def supports_op(self, op: g.Tensor) -> bool:
        return False


def make_plugin(
    reg_name: str,
    devices: list[Device] | Callable[[], list[Device]],
    *,
    version: int = API_VERSION,
    score: int | None = None,
    priority: int = 0,
) -> types.SimpleNamespace:
    """A plugin object registering one registry."""

    class Reg(BackendReg):
        def enumerate_devices(self) -> list[Device]:
            return devices() if callable(devices) else devices

    ns = types.SimpleNamespace()

    @hookimpl
    def ggml_api_version() -> int:
        return version

    @hookimpl
    def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
        register(Reg(reg_name, priority=priority))

    ns.ggml_api_version = ggml_api_version
    ns.ggml_register_backends = ggml_register_backends
    if score is not None:

        @hookimpl
        def ggml_score() -> int:
            return score

        ns.ggml_score = ggml_score
    return ns


def registry(eps: list[FakeEntryPoint], **env: str) -> Registry:
    return Registry(entry_points=lambda: eps, environ=env).load()


def test_good_plugin_registers_devices_in_priority_order() -> None:
    cpu = make_plugin("CPU", [FakeDevice("CPU", DeviceType.CPU)])
    gpu = make_plugin("Fake", [FakeDevice("Fake0"), FakeDevice("Fake1")])
    r = registry([FakeEntryPoint("cpu", lambda: cpu, "ggml-cpu"), FakeEntryPoint("fake", lambda: gpu, "ggml-fake")])
    assert [d.name for d in r.devices()] == ["Fake0", "Fake1", "CPU"]  # accelerators first, CPU last
    info = {p.name: p for p in r.plugins}
    assert info["cpu"].status == "loaded" and info["cpu"].distribution == "ggml-cpu"
    assert info["fake"].regs[0].name == "Fake"
    assert r.get_device("fake1").name == "Fake1"  # case-insensitive
    assert r.get_device("FAKE1").reg is info["fake"].regs[0]


def test_import_error_is_recorded_and_others_still_load() -> None:
    def boom() -> Any:
        raise ImportError("libfoo.so: cannot open shared object file")

    cpu = make_plugin("CPU", [FakeDevice("CPU", DeviceType.CPU)])
    r = registry([FakeEntryPoint("broken", boom), FakeEntryPoint("cpu", lambda: cpu)])
    info = {p.name: p for p in r.plugins}
    assert info["broken"].status == "error"
    assert "import failed" in (info["broken"].error or "") and "libfoo.so" in (info["broken"].error or "")
    assert info["broken"].traceback and "ImportError" in info["broken"].traceback
    assert [d.name for d in r.devices()] == ["CPU"]
    assert r.errors() == {"broken": info["broken"].error}


def test_system_exit_at_import_does_not_end_the_host() -> None:
    def leave() -> Any:
        raise SystemExit(3)

    r = registry([FakeEntryPoint("rude", leave)])
    assert r.plugins[0].status == "error" and "SystemExit" in (r.plugins[0].error or "")


def test_hook_exception_api_mismatch_missing_hooks_and_score_zero() -> None:
    raising = make_plugin("R", [])

    @hookimpl
    def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
        raise RuntimeError("no device driver")

    raising.ggml_register_backends = ggml_register_backends
    old = make_plugin("Old", [], version=API_VERSION + 41)
    no_version = types.SimpleNamespace(ggml_register_backends=make_plugin("N", []).ggml_register_backends)
    zero = make_plugin("Zero", [FakeDevice("Zero0")], score=0)
    r = registry(
        [
            FakeEntryPoint("raising", lambda: raising),
            FakeEntryPoint("old", lambda: old),
            FakeEntryPoint("noversion", lambda: no_version),
            FakeEntryPoint("zero", lambda: zero),
        ]
    )
    info = {p.name: p for p in r.plugins}
    assert info["raising"].status == "error" and "no device driver" in (info["raising"].error or "")
    assert info["old"].status == "error" and f"version {API_VERSION + 41}" in (info["old"].error or "")
    assert info["noversion"].status == "error" and "ggml_api_version" in (info["noversion"].error or "")
    assert info["zero"].status == "skipped" and "score 0" in (info["zero"].error or "")
    assert r.devices() == []


def test_invalid_hookimpl_signature_is_recorded() -> None:
    bad = make_plugin("Bad", [])

    @hookimpl
    def ggml_register_backends(register: Any, unknown_argument: int) -> None:
        raise AssertionError("never called")

    bad.ggml_register_backends = ggml_register_backends
    r = registry([FakeEntryPoint("bad", lambda: bad)])
    assert r.plugins[0].status == "error"
    assert "unknown_argument" in (r.plugins[0].error or "")


def test_enumeration_failure_is_a_warning_with_reason() -> None:
    def fail() -> list[Device]:
        raise OSError("device lost")

    p = make_plugin("Flaky", fail)
    cpu = make_plugin("CPU", [FakeDevice("CPU", DeviceType.CPU)])
    r = registry([FakeEntryPoint("flaky", lambda: p), FakeEntryPoint("cpu", lambda: cpu)])
    assert [d.name for d in r.devices()] == ["CPU"]
    flaky = {x.name: x for x in r.plugins}["flaky"]
    assert flaky.status == "loaded"
    assert any("device lost" in w for w in flaky.warnings)
    assert "device lost" in (r.get_reg("flaky").unavailable_reason or "")


def test_duplicate_names() -> None:
    a = make_plugin("Same", [FakeDevice("Dup0")])
    b = make_plugin("Same", [FakeDevice("Other0")])
    c = make_plugin("Third", [FakeDevice("dup0")])
    r = registry([FakeEntryPoint("a", lambda: a), FakeEntryPoint("b", lambda: b), FakeEntryPoint("c", lambda: c)])
    info = {p.name: p for p in r.plugins}
    assert info["b"].status == "error" and "already registered by plugin 'a'" in (info["b"].error or "")
    assert [d.name for d in r.devices()] == ["Dup0"]
    assert any("already used" in w for w in info["c"].warnings)


def test_ggml_backends_restricts_and_orders() -> None:
    cpu = make_plugin("CPU", [FakeDevice("CPU", DeviceType.CPU)])
    gpu = make_plugin("Fake", [FakeDevice("Fake0")])
    other = make_plugin("Other", [FakeDevice("Other0")])
    loaded: list[str] = []

    def track(name: str, plugin: Any) -> Callable[[], Any]:
        def load() -> Any:
            loaded.append(name)
            return plugin

        return load

    eps = [
        FakeEntryPoint("cpu", track("cpu", cpu)),
        FakeEntryPoint("fake", track("fake", gpu)),
        FakeEntryPoint("other", track("other", other)),
    ]
    r = registry(eps, GGML_BACKENDS="CPU, fake")
    assert sorted(loaded) == ["cpu", "fake"]  # 'other' is never even imported
    assert {p.name: p.status for p in r.plugins}["other"] == "disabled"
    assert [d.name for d in r.devices()] == ["CPU", "Fake0"]  # the variable's order wins over device type


def test_strict_mode_raises_plugin_error() -> None:
    def boom() -> Any:
        raise ImportError("nope")

    with pytest.raises(g.PluginError, match=r"'broken'.*nope"):
        registry([FakeEntryPoint("broken", boom)], GGML_STRICT_PLUGINS="1")


def test_extra_buffer_types_from_another_plugin() -> None:
    cpu_dev = FakeDevice("CPU", DeviceType.CPU)
    cpu = make_plugin("CPU", [cpu_dev])
    pinned = FakeBufferType("CPU_Pinned", None, is_host=True)
    helper = types.SimpleNamespace()

    @hookimpl
    def ggml_api_version() -> int:
        return API_VERSION

    @hookimpl
    def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
        pass

    @hookimpl
    def ggml_register_buffer_types(device: Device, register: Callable[[BufferType], None]) -> None:
        if device.type == DeviceType.CPU:
            register(pinned)

    helper.ggml_api_version = ggml_api_version
    helper.ggml_register_backends = ggml_register_backends
    helper.ggml_register_buffer_types = ggml_register_buffer_types
    r = registry([FakeEntryPoint("cpu", lambda: cpu), FakeEntryPoint("pinner", lambda: helper)])
    dev = r.get_device("CPU")
    assert pinned in dev.extra_buffer_types
    assert pinned in dev.all_buffer_types()
    assert dev.supports_buft(pinned)


def test_register_devices_hook_adds_to_another_registry() -> None:
    base = make_plugin("Remote", [])
    adder = types.SimpleNamespace()

    @hookimpl
    def ggml_api_version() -> int:
        return API_VERSION

    @hookimpl
    def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
        pass

    @hookimpl
    def ggml_register_devices(reg: BackendReg, register: Callable[[Device], None]) -> None:
        if reg.name == "Remote":
            register(FakeDevice("Remote0"))

    adder.ggml_api_version = ggml_api_version
    adder.ggml_register_backends = ggml_register_backends
    adder.ggml_register_devices = ggml_register_devices
    r = registry([FakeEntryPoint("remote", lambda: base), FakeEntryPoint("adder", lambda: adder)])
    assert [d.name for d in r.devices()] == ["Remote0"]
    assert r.get_device("remote0").reg is r.get_reg("remote")


def test_unknown_device_suggests_close_names() -> None:
    cpu = make_plugin("CPU", [FakeDevice("CPU", DeviceType.CPU)])
    gpu = make_plugin("OpenCL", [FakeDevice("OpenCL0")])
    r = registry([FakeEntryPoint("cpu", lambda: cpu), FakeEntryPoint("ocl", lambda: gpu)])
    with pytest.raises(g.DeviceNotFoundError, match=r"did you mean 'OpenCL0'\?") as err:
        r.get_device("opencl1")
    assert err.value.known == ("OpenCL0", "CPU")
    with pytest.raises(LookupError):  # the builtin a caller would catch
        r.get_device("xyz")


def test_init_best_prefers_gpu_then_igpu_then_cpu() -> None:
    cpu = make_plugin("CPU", [FakeDevice("CPU", DeviceType.CPU)])
    igpu = make_plugin("I", [FakeDevice("I0", DeviceType.IGPU)])
    gpu = make_plugin("G", [FakeDevice("G0", DeviceType.GPU)])
    r = registry([FakeEntryPoint("cpu", lambda: cpu), FakeEntryPoint("i", lambda: igpu)])
    assert r.init_best().device.name == "I0"
    r = registry(
        [FakeEntryPoint("cpu", lambda: cpu), FakeEntryPoint("i", lambda: igpu), FakeEntryPoint("g", lambda: gpu)]
    )
    assert r.init_best().device.name == "G0"


def test_registry_priority_breaks_ties_between_same_type_devices() -> None:
    low = make_plugin("Low", [FakeDevice("Low0")], priority=1)
    high = make_plugin("High", [FakeDevice("High0")], priority=5)
    r = registry([FakeEntryPoint("a_low", lambda: low), FakeEntryPoint("b_high", lambda: high)])
    assert [d.name for d in r.devices()] == ["High0", "Low0"]


def test_register_plugin_in_process() -> None:
    r = registry([])
    info = r.register_plugin(make_plugin("Inline", [FakeDevice("Inline0")]), "inline")
    assert info.status == "loaded"
    assert [d.name for d in r.devices()] == ["Inline0"]


def test_installed_cpu_plugin_is_found_through_entry_points() -> None:
    r = Registry(environ={}).load()
    names = {p.name: p for p in r.plugins}
    assert "cpu" in names and names["cpu"].status == "loaded"
    assert names["cpu"].distribution == "ggml-cpu"
    assert r.get_device("cpu").type == DeviceType.CPU
