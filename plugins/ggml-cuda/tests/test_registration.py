"""Registration and absence: without pycuda, without libcuda, without a GPU, without nvcc, and with GGML_BACKENDS.

The plugin must always import, register the CUDA backend with zero devices, and say exactly why. pycuda's own
error classes (``pycuda._driver.RuntimeError`` ...) are not the builtin ones; these tests fake them faithfully.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import sys
import types
from typing import Any

import pytest
from fake_driver import FakeDriver, fake_compiler, fake_info

import ggml_core as g
import ggml_cuda.plugin as cuda_plugin
from ggml_core.backend.registry import Registry
from ggml_core.testing.plugin_tests import run_python
from ggml_cuda._device import CUDADevice
from ggml_cuda._driver import load_driver
from ggml_cuda.plugin import CUDAReg

LIBCUDA_MISSING = "libcuda.so.1: cannot open shared object file: No such file or directory"

PYCUDA_ABSENT = importlib.util.find_spec("pycuda") is None


class _FailingDriverImport(importlib.abc.MetaPathFinder):
    """Makes ``import pycuda.driver`` fail as it does on a machine without the NVIDIA driver."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname in ("pycuda.driver", "pycuda._driver"):
            raise ImportError(LIBCUDA_MISSING)
        return None


def _fake_pycuda(monkeypatch: pytest.MonkeyPatch, driver_module: types.ModuleType | None) -> None:
    """Install a fake ``pycuda`` package (and ``pycuda.driver`` when given) in sys.modules."""
    pkg = types.ModuleType("pycuda")
    pkg.VERSION_TEXT = "2026.1-fake"  # type: ignore[attr-defined]
    pkg.__path__ = []  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pycuda", pkg)
    if driver_module is None:
        monkeypatch.delitem(sys.modules, "pycuda.driver", raising=False)
        monkeypatch.setattr(sys, "meta_path", [_FailingDriverImport(), *sys.meta_path])
    else:
        monkeypatch.setitem(sys.modules, "pycuda.driver", driver_module)
        pkg.driver = driver_module  # type: ignore[attr-defined]


def _fake_driver_module(init_error: str | None, count: int = 1) -> types.ModuleType:
    """A stand-in for ``pycuda.driver`` whose error classes mirror pycuda's (not the builtins)."""
    mod = types.ModuleType("pycuda.driver")

    class Error(Exception):  # pycuda._driver.Error
        pass

    class RuntimeError(Error):  # pycuda._driver.RuntimeError shadows the builtin name, as pycuda's does
        pass

    for cls in (Error, RuntimeError):
        cls.__module__, cls.__qualname__ = "pycuda._driver", cls.__name__
    mod.Error = Error  # type: ignore[attr-defined]
    mod.RuntimeError = RuntimeError  # type: ignore[attr-defined]

    def init() -> None:
        if init_error is not None:
            raise RuntimeError(init_error)

    mod.init = init  # type: ignore[attr-defined]
    mod.Device = types.SimpleNamespace(count=lambda: count)  # type: ignore[attr-defined]
    return mod


# ------------------------------------------------------------------------------------------------ load_driver


@pytest.mark.skipif(not PYCUDA_ABSENT, reason="pycuda is installed here")
def test_without_pycuda_the_reason_names_the_missing_module() -> None:
    driver, reason = load_driver()
    assert driver is None
    assert reason is not None and reason.startswith("pycuda is not installed (ModuleNotFoundError: No module named")


def test_without_libcuda_the_reason_is_the_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pycuda(monkeypatch, None)
    driver, reason = load_driver()
    assert driver is None
    assert reason == f"no CUDA driver: ImportError: {LIBCUDA_MISSING}"


def test_without_a_gpu_pycudas_own_runtime_error_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _fake_driver_module("cuInit failed: no CUDA-capable device is detected")
    assert not issubclass(mod.RuntimeError, RuntimeError)  # the point: not the builtin RuntimeError
    _fake_pycuda(monkeypatch, mod)
    driver, reason = load_driver()
    assert driver is None
    assert reason == (
        "CUDA driver present but unusable: pycuda._driver.RuntimeError: "
        "cuInit failed: no CUDA-capable device is detected"
    )


def test_a_driver_with_zero_devices_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pycuda(monkeypatch, _fake_driver_module(None, count=0))
    driver, reason = load_driver()
    assert driver is None
    assert reason is not None and "reports no devices" in reason


def test_a_working_driver_module_gives_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pycuda(monkeypatch, _fake_driver_module(None, count=2))
    driver, reason = load_driver()
    assert reason is None and driver is not None
    assert driver.name == "pycuda 2026.1-fake"


# ------------------------------------------------------------------------------------------------ CUDAReg


def test_registry_without_driver_has_no_devices_and_the_reason() -> None:
    reg = CUDAReg(loader=lambda: (None, "no CUDA driver: ImportError: " + LIBCUDA_MISSING))
    assert reg.devices == []
    assert reg.unavailable_reason == "no CUDA driver: ImportError: " + LIBCUDA_MISSING


def test_reading_the_reason_enumerates_once() -> None:
    calls = []

    def loader() -> tuple[None, str]:
        calls.append(1)
        return None, "because"

    reg = CUDAReg(loader=loader)
    assert reg.unavailable_reason == "because"
    assert reg.unavailable_reason == "because"
    assert reg.devices == []
    assert calls == [1]


def test_registry_with_a_fake_driver_names_devices_in_order() -> None:
    drv = FakeDriver(infos=[fake_info(0, (9, 0)), fake_info(1, (8, 6))])
    reg = CUDAReg(loader=lambda: (drv, None), compiler=fake_compiler())
    devs = reg.devices
    assert [d.name for d in devs] == ["CUDA0", "CUDA1"]
    assert [d.arch for d in devs if isinstance(d, CUDADevice)] == ["sm_90", "sm_86"]
    assert reg.unavailable_reason is None
    assert reg.features()["driver"] == "fake driver"


def test_without_nvcc_there_are_no_devices_and_the_reason_says_so() -> None:
    reg = CUDAReg(loader=lambda: (FakeDriver(), None), nvcc=lambda: None)
    assert reg.devices == []
    assert reg.unavailable_reason is not None and "nvcc not found" in reg.unavailable_reason


def test_a_driver_failing_while_listing_devices_is_a_reason_not_a_crash() -> None:
    class Broken(FakeDriver):
        def device_info(self, ordinal: int) -> Any:
            raise OSError("device fell off the bus")

    reg = CUDAReg(loader=lambda: (Broken(), None), compiler=fake_compiler())
    assert reg.devices == []
    assert reg.unavailable_reason == "reading the CUDA devices failed: OSError: device fell off the bus"


# ------------------------------------------------------------------------------------------------ through ggml-core


class _EntryPoint:
    def __init__(self, name: str, target: Any) -> None:
        self.name, self.value, self._target, self.loads = name, f"{name}-module", target, 0

    def load(self) -> Any:
        self.loads += 1
        if isinstance(self._target, BaseException):
            raise self._target
        return self._target


def test_the_real_plugin_module_loads_and_registers_cuda_with_a_reason() -> None:
    ep = _EntryPoint("cuda", cuda_plugin)
    reg = Registry(entry_points=lambda: [ep], environ={})
    info = {p.name: p for p in reg.plugins}["cuda"]
    assert info.status == "loaded", info.error
    cuda = reg.get_reg("CUDA")
    if not cuda.devices:  # no GPU here: the reason is there, and the CLI can show it
        assert cuda.unavailable_reason


def test_ggml_backends_without_cuda_never_loads_the_plugin() -> None:
    ep = _EntryPoint("cuda", RuntimeError("must not be imported"))
    reg = Registry(entry_points=lambda: [ep], environ={"GGML_BACKENDS": "cpu"})
    info = {p.name: p for p in reg.plugins}["cuda"]
    assert info.status == "disabled"
    assert ep.loads == 0
    assert reg.devices() == []


def test_ggml_backends_without_cuda_imports_neither_the_plugin_nor_pycuda() -> None:
    code = (
        "import sys, ggml_core\n"
        "names = [d.name for d in ggml_core.devices()]\n"
        "print(names, 'ggml_cuda' in sys.modules, 'pycuda' in sys.modules)\n"
    )
    res = run_python(code, {"GGML_BACKENDS": "cpu"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("False False"), res.stdout


@pytest.mark.skipif(not PYCUDA_ABSENT, reason="pycuda is installed here")
def test_cli_devices_and_plugins_show_the_reason() -> None:
    res = run_python("from ggml_core.cli import main; main(['devices', '--json'])", {"GGML_BACKENDS": "cuda,cpu"})
    assert res.returncode == 0, res.stderr
    backends = {b["name"]: b for b in json.loads(res.stdout)["backends"]}
    assert backends["CUDA"]["devices"] == []
    assert backends["CUDA"]["unavailable_reason"].startswith("pycuda is not installed")
    res = run_python("from ggml_core.cli import main; main(['plugins'])", {"GGML_BACKENDS": "cuda,cpu"})
    assert "backend CUDA: no devices (pycuda is not installed" in res.stdout, res.stdout


def test_the_cuda_device_is_found_by_name_through_the_registry() -> None:
    drv = FakeDriver()
    fake_reg = CUDAReg(loader=lambda: (drv, None), compiler=fake_compiler())

    class Plugin:
        @g.hookimpl
        def ggml_api_version(self) -> int:
            return g.API_VERSION

        @g.hookimpl
        def ggml_register_backends(self, register: Any) -> None:
            register(fake_reg)

    reg = Registry(entry_points=lambda: [], environ={})
    reg.register_plugin(Plugin(), "cuda-fake")
    dev = reg.get_device("cuda0")
    assert dev.name == "CUDA0" and dev.type == g.DeviceType.GPU
