"""A placement naming its devices enumerates only the registries that can provide them (``enumerating_only``).

Unit cases with faked entry points (which registries enumerate, that the answers equal the full listing's, that an
enumerated misbehaving plugin is still recorded), then fresh processes: ``--device CPU`` and the named-device load
import neither pyopencl nor wgpu, and a named non-CPU device still loads and runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_registry import FakeDevice, FakeEntryPoint, make_plugin, registry

from ggml_core._errors import DeviceNotFoundError
from ggml_core.backend import Device, DeviceType, Registry

REPO = Path(__file__).resolve().parents[2]


class _Counted:
    """Device lists that count how often their registry enumerated."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def __call__(self, name: str, devices: list[Device]) -> object:
        def enumerate_() -> list[Device]:
            self.calls[name] = self.calls.get(name, 0) + 1
            return devices

        return enumerate_


def _fixture() -> tuple[Registry, _Counted]:
    count = _Counted()
    cpu = make_plugin("CPU", count("CPU", [FakeDevice("CPU", DeviceType.CPU)]))
    ocl = make_plugin("OpenCL", count("OpenCL", [FakeDevice("OpenCL0")]))
    acme = make_plugin("Acme", count("Acme", [FakeDevice("Acme0")]))
    eps = [
        FakeEntryPoint("cpu", lambda: cpu, "ggml-cpu"),
        FakeEntryPoint("opencl", lambda: ocl, "ggml-opencl"),
        FakeEntryPoint("acme", lambda: acme, "acme-gpu"),
    ]
    return registry(eps), count


def test_named_cpu_enumerates_only_the_cpu_registry() -> None:
    r, count = _fixture()
    with r.enumerating_only(["CPU"]) as scoped:
        assert scoped
        cpu = r.get_device("cpu")
        assert [d.name for d in r.devices()] == ["CPU"]
        assert r.devices_by_type(DeviceType.CPU) == [cpu]
    assert count.calls == {"CPU": 1}
    assert [d.name for d in r.devices()] == ["OpenCL0", "Acme0", "CPU"]  # outside the block: everything, as before
    assert r.get_device("CPU") is cpu  # the same device the full listing gives
    assert count.calls == {"CPU": 1, "OpenCL": 1, "Acme": 1}  # each registry enumerated once in all


def test_named_first_party_device_adds_its_owner_only() -> None:
    r, count = _fixture()
    with r.enumerating_only(["OpenCL0", "CPU"]):
        assert [d.name for d in r.devices()] == ["OpenCL0", "CPU"]
        ocl = r.get_device("OpenCL0")
    assert count.calls == {"CPU": 1, "OpenCL": 1}
    assert r.get_device("OpenCL0") is ocl
    with r.enumerating_only(["none"]):  # --device none: the CPU only
        assert [d.name for d in r.devices()] == ["OpenCL0", "Acme0", "CPU"]  # already fully listed: kept


def test_third_party_names_and_no_names_enumerate_everything() -> None:
    for names in (None, ["Acme0"], ["CPU", "Acme0"]):
        r, count = _fixture()
        with r.enumerating_only(names) as scoped:
            assert not scoped
            assert [d.name for d in r.devices()] == ["OpenCL0", "Acme0", "CPU"]
        assert count.calls == {"CPU": 1, "OpenCL": 1, "Acme": 1}


def test_a_name_missing_from_the_scope_is_an_error_naming_every_device() -> None:
    r, _count = _fixture()
    with r.enumerating_only(["OpenCL7"]), pytest.raises(DeviceNotFoundError) as err:
        r.get_device("OpenCL7")
    assert "Acme0" in str(err.value) and "OpenCL0" in str(err.value)  # the full listing, with suggestions


def test_in_process_plugins_are_always_in_the_scope() -> None:
    r, count = _fixture()
    r.register_plugin(make_plugin("Mine", [FakeDevice("Mine0")]), "mine")
    with r.enumerating_only(["CPU"]):
        assert [d.name for d in r.devices()] == ["Mine0", "CPU"]
    assert "OpenCL" not in count.calls and "Acme" not in count.calls


def test_an_enumerated_misbehaving_plugin_is_still_recorded() -> None:
    def boom() -> list[Device]:
        raise RuntimeError("driver exploded")

    cpu = make_plugin("CPU", [FakeDevice("CPU", DeviceType.CPU)])
    ocl = make_plugin("OpenCL", boom)
    r = registry([FakeEntryPoint("cpu", lambda: cpu, "ggml-cpu"), FakeEntryPoint("opencl", lambda: ocl, "ggml-opencl")])
    with r.enumerating_only(["CPU"]):
        r.devices()
    assert not r.problems()  # not enumerated: nothing to say about it
    with r.enumerating_only(["OpenCL0"]), pytest.raises(DeviceNotFoundError):
        r.get_device("OpenCL0")
    (problem,) = r.problems()
    assert problem.plugin == "opencl" and "driver exploded" in problem.message


# ------------------------------------------------------------------------------------------------ fresh processes


def _fresh(code: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_BACKENDS", "GGML_STRICT_PLUGINS")}
    probe = (
        "import contextlib, io, json, sys\n"
        "out = io.StringIO()\n"
        f"with contextlib.redirect_stdout(out):\n    {code}\n"
        "drivers = sorted(m for m in ('pyopencl', 'wgpu', 'pycuda') if m in sys.modules)\n"
        "print(json.dumps({'drivers': drivers, 'out': out.getvalue()}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return result


def test_run_on_the_cpu_imports_no_driver() -> None:
    args = ["run", "--device", "CPU", "-n", "2", "--temp", "0", "--no-warmup", "--tokens", "1,2,3", "--json"]
    res = _fresh(f"from ggml_core.cli import main; rc = main({args!r}); assert rc in (0, None), rc")
    assert res["drivers"] == []
    out = json.loads(str(res["out"]))
    assert [d["name"] for d in out["devices"]] == ["CPU"] and len(out["tokens"]) == 2


def test_named_device_load_imports_no_driver() -> None:
    code = (
        "from ggml_core.models import Model, ModelParams, PlacementRequest\n"
        "    from ggml_core.models.default_model import default_model_path\n"
        "    m = Model.load(default_model_path(), ModelParams(placement=PlacementRequest(devices=['CPU']), "
        "n_ctx=64, progress=False))\n"
        "    logits = m.process_prompt([1, 2, 3])\n"
        "    print(logits.shape[-1] == m.n_vocab and bool(__import__('numpy').isfinite(logits).all()))"
    )
    res = _fresh(code)
    assert res["drivers"] == [] and str(res["out"]).strip() == "True"


def _has_device(name: str) -> bool:
    from ggml_core.backend.registry import get_registry

    return any(d.name == name for d in get_registry().devices())


@pytest.mark.skipif(importlib.util.find_spec("pyopencl") is None, reason="pyopencl is not installed")
def test_a_named_opencl_device_still_works_and_matches_the_cpu() -> None:
    if not _has_device("OpenCL0"):
        pytest.skip("no OpenCL device here")
    base = ["run", "-n", "3", "--temp", "0", "--no-warmup", "--tokens", "1,2,3", "--json", "--kv-type", "f32"]
    cpu = _fresh(f"from ggml_core.cli import main; main({[*base, '--device', 'CPU']!r})")
    ocl = _fresh(f"from ggml_core.cli import main; main({[*base, '--device', 'OpenCL0']!r})")
    assert "pyopencl" in ocl["drivers"] and "wgpu" not in ocl["drivers"]  # its own driver, and only that
    got, ref = json.loads(str(ocl["out"])), json.loads(str(cpu["out"]))
    assert "OpenCL0" in [d["name"] for d in got["devices"]]
    assert got["tokens"] == ref["tokens"]  # greedy on the default model: the same continuation
