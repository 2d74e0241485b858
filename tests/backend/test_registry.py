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


def hooks_plugin(**hooks: Callable[..., Any]) -> types.SimpleNamespace:
    """A plugin object that registers no registry, only the given hook implementations (``@hookimpl`` functions)."""
    ns = types.SimpleNamespace(**hooks)

    @hookimpl
    def ggml_api_version() -> int:
        return API_VERSION

    @hookimpl
    def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
        pass

    ns.ggml_api_version = ggml_api_version
    ns.ggml_register_backends = ggml_register_backends
    return ns


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

    @hookimpl
    def ggml_register_buffer_types(device: Device, register: Callable[[BufferType], None]) -> None:
        if device.type == DeviceType.CPU:
            register(pinned)

    helper = hooks_plugin(ggml_register_buffer_types=ggml_register_buffer_types)
    r = registry([FakeEntryPoint("cpu", lambda: cpu), FakeEntryPoint("pinner", lambda: helper)])
    dev = r.get_device("CPU")
    assert pinned in dev.extra_buffer_types
    assert pinned in dev.all_buffer_types()
    assert dev.supports_buft(pinned)


def test_register_devices_hook_adds_to_another_registry() -> None:
    base = make_plugin("Remote", [])

    @hookimpl
    def ggml_register_devices(reg: BackendReg, register: Callable[[Device], None]) -> None:
        if reg.name == "Remote":
            register(FakeDevice("Remote0"))

    adder = hooks_plugin(ggml_register_devices=ggml_register_devices)
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


# ------------------------------------------------------------------------------------------------ the boundary


def _hooks(**fns: Callable[..., Any]) -> types.SimpleNamespace:
    """A plugin object from hook functions (ggml_api_version added)."""

    @hookimpl
    def ggml_api_version() -> int:
        return API_VERSION

    ns = types.SimpleNamespace(ggml_api_version=ggml_api_version)
    for name, fn in fns.items():
        setattr(ns, name, hookimpl(fn))
    return ns


def _cpu() -> types.SimpleNamespace:
    return make_plugin("CPU", [FakeDevice("CPU", DeviceType.CPU)])


def test_adding_to_another_registry_never_hides_its_own_devices() -> None:
    def add(reg: BackendReg, register: Callable[[Any], None]) -> None:
        if reg.name == "CPU":
            register(FakeDevice("Extra0"))
            register(None)  # refused, and empties nothing

    adder = _hooks(ggml_register_backends=lambda register: None, ggml_register_devices=add)
    r = registry([FakeEntryPoint("aaa", lambda: adder, "aaa-dist"), FakeEntryPoint("cpu", _cpu, "ggml-cpu")])
    assert [d.name for d in r.devices()] == ["Extra0", "CPU"]
    assert [d.name for d in r.get_reg("CPU").devices] == ["CPU", "Extra0"]
    (problem,) = r.problems()
    assert problem.plugin == "aaa" and "is None, not a ggml_core.Device" in str(problem)


def test_register_none_and_a_string_priority_are_refused_alone() -> None:
    def reg_bad(register: Callable[[Any], None]) -> None:
        register(None)
        register(BackendReg("Str", [FakeDevice("Str0")], priority="high"))  # type: ignore[arg-type]
        register(BackendReg("Good", [FakeDevice("Good0")]))

    r = registry(
        [
            FakeEntryPoint("bad", lambda: _hooks(ggml_register_backends=reg_bad), "bad"),
            FakeEntryPoint("cpu", _cpu, "ggml-cpu"),
        ]
    )
    assert [d.name for d in r.devices()] == ["Good0", "CPU"]
    texts = [str(p) for p in r.problems()]
    assert any("registered None" in t for t in texts) and any("priority is 'high'" in t for t in texts)
    assert {p.name: p.status for p in r.plugins}["bad"] == "loaded"


@pytest.mark.parametrize("reverse", [False, True])
def test_name_clash_rule_does_not_depend_on_entry_point_order(reverse: bool) -> None:
    first = make_plugin("A", [FakeDevice("Twin0")])
    second = make_plugin("B", [FakeDevice("twin0")])
    eps = [FakeEntryPoint("zzz", lambda: first, "dist-a"), FakeEntryPoint("aaa", lambda: second, "dist-b")]
    r = registry(eps[::-1] if reverse else eps)
    (dev,) = r.devices()
    assert dev.reg is r.get_reg("A")  # dist-a sorts first, whatever the entry-point names and order
    (problem,) = r.problems()
    assert problem.plugin == "aaa" and problem.kind == "refused" and "already used" in problem.message


def test_first_party_names_are_not_up_for_grabs() -> None:
    impostor = make_plugin("Evil", [FakeDevice("CPU", DeviceType.CPU), FakeDevice("CUDA0"), FakeDevice("Fine0")])
    cuda_reg = make_plugin("CUDA", [])
    eps = [
        FakeEntryPoint("aaa", lambda: impostor, "evil"),
        FakeEntryPoint("cpu", _cpu, "ggml-cpu"),
        FakeEntryPoint("aab", lambda: cuda_reg, "evil-two"),
    ]
    r = registry(eps)
    assert [d.name for d in r.devices()] == ["Fine0", "CPU"]
    assert r.get_device("CPU").reg is r.get_reg("CPU") and r.get_reg("CPU").plugin == "cpu"
    texts = [str(p) for p in r.problems()]
    assert any("'CPU': name: is reserved for the first-party distribution ggml-cpu" in t for t in texts)
    assert any("'CUDA0': name: is reserved for the first-party distribution ggml-cuda" in t for t in texts)
    assert {p.name: p for p in r.plugins}["aab"].status == "error"  # its only registry, named CUDA, refused


def test_same_hardware_through_two_plugins_is_listed_once() -> None:
    a = FakeDevice("Fast0")
    a.device_id = "0000:01:00.0"
    b = FakeDevice("Slow0")
    b.device_id = "0:1:0.0"  # the same PCI address, written differently
    unknown = [FakeDevice("NoId0"), FakeDevice("NoId1")]
    unknown[1].device_id = ""
    r = registry(
        [
            FakeEntryPoint("fast", lambda: make_plugin("Fast", [a], priority=5)),
            FakeEntryPoint("slow", lambda: make_plugin("Slow", [b, *unknown], priority=1)),
        ]
    )
    assert [d.name for d in r.devices()] == ["Fast0", "NoId0", "NoId1"]  # empty or unknown ids never merge
    assert r.same_hardware() == [(b, a)]
    assert r.get_device("slow0") is b  # still selectable by name
    assert r.problems() == []


class _Gate:
    """A plugin call that blocks until the test releases it (so no thread outlives the test)."""

    def __init__(self) -> None:
        import threading

        self.event = threading.Event()

    def wait(self, *_: Any) -> None:
        self.event.wait(30)


def test_a_hung_hook_is_recorded_and_the_host_goes_on() -> None:
    gate = _Gate()
    hung = _hooks(ggml_register_backends=lambda register: gate.wait())
    try:
        r = registry([FakeEntryPoint("hung", lambda: hung), FakeEntryPoint("cpu", _cpu)], GGML_PLUGIN_TIMEOUT="0.2")
        assert [d.name for d in r.devices()] == ["CPU"]
        info = {p.name: p for p in r.plugins}["hung"]
        assert info.status == "hung" and "did not finish within 0.2 s" in (info.error or "")
    finally:
        gate.event.set()


def test_a_hung_enumeration_leaves_out_only_that_registry() -> None:
    gate = _Gate()
    try:
        slow = make_plugin("Slow", lambda: gate.wait() or [])
        r = registry([FakeEntryPoint("slow", lambda: slow), FakeEntryPoint("cpu", _cpu)], GGML_PLUGIN_TIMEOUT="0.2")
        assert [d.name for d in r.devices()] == ["CPU"]
        (problem,) = r.problems()
        assert (problem.plugin, problem.obj, problem.kind) == ("slow", "registry 'Slow'", "hung")
    finally:
        gate.event.set()


def test_keyboard_interrupt_raised_by_a_plugin_is_its_failure() -> None:
    def interrupt() -> Any:
        raise KeyboardInterrupt

    r = registry([FakeEntryPoint("ki", interrupt), FakeEntryPoint("cpu", _cpu)])
    assert {p.name: p.status for p in r.plugins}["ki"] == "error"
    assert "KeyboardInterrupt" in (r.errors()["ki"])
    assert [d.name for d in r.devices()] == ["CPU"]


def test_a_bad_timeout_setting_is_recorded() -> None:
    r = registry([FakeEntryPoint("cpu", _cpu)], GGML_PLUGIN_TIMEOUT="soon")
    assert any("GGML_PLUGIN_TIMEOUT='soon'" in str(p) for p in r.problems())
    assert r.timeout == 10.0


def test_plugin_output_while_loading_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    def noisy() -> Any:
        print("hello from a plugin")
        return _cpu()

    r = registry([FakeEntryPoint("noisy", noisy)])
    assert [d.name for d in r.devices()] == ["CPU"]
    out = capsys.readouterr()
    assert out.out == "" and "hello from a plugin" in out.err


class _Moody(FakeDevice):
    """Well-behaved while the registry probes it, then wrong: raising supports_op, garbage memory."""

    moody = False

    def memory(self) -> tuple[int, int]:
        return ("lots", None) if self.moody else (1, 2)  # type: ignore[return-value]

    def supports_op(self, op: g.Tensor) -> bool:
        if self.moody:
            raise ValueError("which op?")
        return False


def test_bad_answers_after_acceptance_are_recorded_and_answered_safely() -> None:
    dev = _Moody("Moody0")
    r = registry([FakeEntryPoint("moody", lambda: make_plugin("Moody", [dev]))])
    assert r.devices() == [dev]
    dev.moody = True
    t = g.Context("t").new_tensor_1d("f32", 4)
    assert dev.supports_op(t) is False and dev.supports_op(t) is False
    assert dev.memory() == (0, 0)
    texts = [str(p) for p in r.problems()]
    assert len(texts) == 2  # each recorded once
    assert "device 'Moody0': supports_op(): raised ValueError: which op?" in texts[0]
    assert "device 'Moody0': memory(): returned ('lots', None)" in texts[1]


def test_strict_mode_raises_on_a_device_problem() -> None:
    class NoMemory(FakeDevice):
        def memory(self) -> tuple[int, int]:
            return -1, 5

    plugin = make_plugin("N", [NoMemory("N0")])
    with pytest.raises(g.PluginError, match=r"'n'.*device 'N0': memory\(\): returned \(-1, 5\)"):
        registry([FakeEntryPoint("n", lambda: plugin)], GGML_STRICT_PLUGINS="1").devices()


@pytest.mark.parametrize(
    ("alloc", "expected"),
    [
        ("raise", r"_alloc raised MemoryError: no room"),
        ("none", r"_alloc returned NoneType None"),
        ("small", r"_alloc returned a 3-byte buffer"),
    ],
)
def test_alloc_results_are_checked(alloc: str, expected: str) -> None:
    class Odd(BufferType):
        def _alloc(self, size: int) -> Buffer:
            if alloc == "raise":
                raise MemoryError("no room")
            return None if alloc == "none" else Buffer(self, 3)  # type: ignore[return-value]

    with pytest.raises(g.AllocationError, match=expected) as err:
        Odd("Odd", FakeDevice("Odd0")).alloc_buffer(64)
    assert "device Odd0" in str(err.value)


def test_keyboard_interrupt_from_a_device_hook_is_not_a_ctrl_c() -> None:
    class Rude(FakeDevice):
        rude = False

        def supports_op(self, op: g.Tensor) -> bool:
            if self.rude:
                raise KeyboardInterrupt
            return False

    dev = Rude("Rude0")
    r = registry([FakeEntryPoint("rude", lambda: make_plugin("Rude", [dev]))])
    assert r.devices() == [dev]
    dev.rude = True
    assert dev.supports_op(g.Context("t").new_tensor_1d("f32", 4)) is False
    (problem,) = r.problems()
    assert "supports_op(): raised KeyboardInterrupt (no Ctrl-C was pressed)" in str(problem)
