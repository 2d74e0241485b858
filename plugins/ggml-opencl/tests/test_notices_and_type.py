"""A CPU-type OpenCL device (PoCL) has the ACCEL type, is passed over by default and runs what it is given by name;
first tunings and slow kernel builds say so on stderr, and nothing is said when the results are cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ggml_core as g
from ggml_core import DeviceType, GGMLType
from ggml_core.models import Model, ModelParams, PlacementRequest
from ggml_core.models.default_model import write_default_model
from ggml_core.models.plan.placement import default_devices
from ggml_opencl import OpenCLDevice
from ggml_opencl import _notices as notices
from ggml_opencl import _tuning as tuning
from ggml_opencl import _tuning_configs as configs


def test_a_cpu_type_device_reports_accel(ocl: OpenCLDevice) -> None:
    """OpenCL's CL_DEVICE_TYPE_CPU (the device's own report, read through pyopencl here) gives ACCEL."""
    import pyopencl as cl

    is_cpu = bool(int(ocl.cl_device.type) & cl.device_type.CPU) and not int(ocl.cl_device.type) & cl.device_type.GPU
    if not is_cpu:
        pytest.skip(f"{ocl.name} is not a CPU-type OpenCL device")
    assert ocl.type == DeviceType.ACCEL and ocl.host_cpu
    assert ocl.props().type == DeviceType.ACCEL
    assert ocl not in default_devices() and g.get_device("CPU").type == DeviceType.CPU
    assert g.init_best().device.type != DeviceType.ACCEL  # as ggml_backend_init_best: GPU, then iGPU, then CPU


def test_named_cpu_type_device_still_takes_the_layers(ocl: OpenCLDevice, tmp_path: Path) -> None:
    path = write_default_model(tmp_path / "default.gguf")
    params = ModelParams(placement=PlacementRequest(devices=[ocl.name]), n_ctx=64, progress=False)
    _, _, placement = Model.plan(path, params)
    on = {slot: dev.name for slot, dev in placement.slot_device.items() if slot >= 0}
    assert on and set(on.values()) == {ocl.name}, on


@pytest.fixture()
def fresh_dir(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(configs.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(configs.ENV_MODE, "1")
    monkeypatch.setattr(tuning, "BUDGET_S", 0.05)
    monkeypatch.setattr(notices, "_TUNED_HERE", [])
    yield str(tmp_path)


def test_first_tuning_says_so_once_and_a_cached_one_says_nothing(
    ocl: OpenCLDevice, fresh_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    t = tuning.Tuner(ocl.context, ocl.cl_device, ocl.info)
    t.mv(GGMLType.Q8_0, 1)
    t.gemm(8)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("ggml-opencl: tuning")]
    assert len(lines) == 1, err  # one line for the device, however many shapes it tunes
    assert f"tuning {ocl.name}'s matrix kernels (once per kernel shape" in lines[0] and fresh_dir in lines[0]
    assert [shape for dev, shape, _ in notices._TUNED_HERE if shape] == ["mv/Q8_0/n=1", "gemm/n<=64"]
    # another process (a new tuner over the same cache) finds both results: silent
    notices._TUNED_HERE.clear()
    again = tuning.Tuner(ocl.context, ocl.cl_device, ocl.info)
    again.mv(GGMLType.Q8_0, 1)
    again.gemm(8)
    assert capsys.readouterr().err == "" and notices._TUNED_HERE == []


def test_a_slow_block_is_announced_and_a_quick_one_is_not(capsys: pytest.CaptureFixture[str]) -> None:
    with notices.announced_if_slow("building the kernels", after_s=3600):
        pass
    assert capsys.readouterr().err == ""
    with notices.announced_if_slow("building the kernels", after_s=0.0):
        time.sleep(2.0)  # generous: the timer thread needs only to be scheduled once
    assert capsys.readouterr().err == "building the kernels\n"


def test_the_exit_summary_lists_what_was_tuned(ocl: OpenCLDevice, tmp_path: Path) -> None:
    """A process that tunes prints the note when it starts and the shapes and seconds at exit."""
    script = textwrap.dedent(
        f"""
        import ggml_core as g
        from ggml_core import GGMLType
        from ggml_opencl import _tuning as tuning
        tuning.BUDGET_S = 0.05
        d = g.get_device({ocl.name!r})
        tuning.tuner_for(d.context, d.cl_device, d.info).mv(GGMLType.Q8_0, 1)
        """
    )
    env_over = {configs.ENV_DIR: str(tmp_path), configs.ENV_MODE: "1", "GGML_BACKENDS": "opencl,cpu"}
    env = dict(os.environ, **env_over)
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    lines = [ln for ln in first.stderr.splitlines() if ln.startswith("ggml-opencl: tun")]
    assert len(lines) == 2 and lines[0].startswith(f"ggml-opencl: tuning {ocl.name}'s"), first.stderr
    assert lines[1].startswith(f"ggml-opencl: tuned 1 kernel shapes on {ocl.name} in ") and "mv/Q8_0/n=1" in lines[1]
    (saved,) = Path(str(tmp_path)).glob("*.json")
    assert json.loads(saved.read_text())["entries"]
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0 and "ggml-opencl: tun" not in second.stderr, second.stderr
