"""Enumeration and registration: names, descriptions, types, memory, caps, GGML_OPENCL_DEVICES, failures."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from ocl_helpers import opencl_devices

import ggml_core as g
from ggml_core import DeviceType
from ggml_core.testing.plugin_tests import run_python
from ggml_opencl import OpenCLDevice, OpenCLReg, _programs, discover


def test_devices_are_named_in_order_with_platform_and_device(ocl: OpenCLDevice) -> None:
    import pyopencl as cl

    all_devs = [(p, d) for p in cl.get_platforms() for d in p.get_devices()]
    devs = opencl_devices()
    assert [d.name for d in devs] == [f"OpenCL{i}" for i in range(len(devs))]
    assert len(devs) == len(all_devs)  # every device of every platform (no filter set)
    for dev, (p, d) in zip(devs, all_devs, strict=True):
        assert p.name.strip() in dev.description and d.name.strip() in dev.description
        assert dev.device_id is None or re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", dev.device_id)
        free, total = dev.memory()
        assert total == d.global_mem_size and 0 <= free <= total
        assert dev.buffer_type().max_size == d.max_mem_alloc_size
        assert dev.caps.asynchronous and dev.caps.events
        assert dev.supports_buft(dev.buffer_type())


def test_cpu_type_device_is_a_separate_memory_device_not_the_cpu(ocl: OpenCLDevice) -> None:
    """A CPU-type OpenCL device (PoCL) is an ACCEL device with memory of its own, never taken for the CPU plugin's."""
    if ocl.info.cl_type == "CPU":
        assert ocl.type == DeviceType.ACCEL
    # ...and flagged as the host CPU seen through OpenCL, so the default placement prefers the CPU plugin
    assert ocl.host_cpu == (ocl.info.cl_type == "CPU") == ocl.props().extra["host_cpu"]
    assert ocl.type in (DeviceType.GPU, DeviceType.IGPU, DeviceType.ACCEL)
    assert not ocl.buffer_type().is_host
    cpu = g.get_device("CPU")
    assert cpu is not ocl and cpu.type == DeviceType.CPU
    assert not ocl.supports_buft(cpu.buffer_type()) and not cpu.supports_buft(ocl.buffer_type())
    assert g.get_device("opencl0") is ocl


def test_props_show_fp16_path_and_tile(ocl: OpenCLDevice) -> None:
    import pyopencl as cl

    props = ocl.props()
    exts = ocl.cl_device.extensions.split()
    assert props.extra["cl_khr_fp16"] == ("cl_khr_fp16" in exts)
    assert props.extra["opencl_type"] in ("GPU", "CPU", "ACCELERATOR", "CUSTOM")
    assert props.extra["opencl_type"] in cl.device_type.to_string(ocl.cl_device.type).upper()
    tm = ocl.info.gemm_tm
    assert tm in (4, 8, 16) and props.extra["gemm_tile"].endswith(f"x{tm}")


def test_filter_by_index_and_name(ocl: OpenCLDevice) -> None:
    by_index = discover({"GGML_OPENCL_DEVICES": str(ocl.info.index)})
    assert [i.index for i, _ in by_index.devices] == [ocl.info.index]
    needle = ocl.info.name.split("-")[0].upper()  # case-insensitive substring of the description
    by_name = discover({"GGML_OPENCL_DEVICES": f"no-such-device,{needle}"})
    assert ocl.info.index in [i.index for i, _ in by_name.devices]
    reg = OpenCLReg(environ={"GGML_OPENCL_DEVICES": "no-such-device"})
    assert reg.devices == []
    assert "GGML_OPENCL_DEVICES" in (reg.unavailable_reason or "")
    assert any("not selected" in why for why in reg.skipped.values())


def test_a_device_that_fails_to_build_is_left_out_with_the_reason(
    ocl: OpenCLDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_programs, "kernel_source", lambda: "kernel void broken( { }")
    reg = OpenCLReg(environ={})
    assert reg.devices == []
    reason = reg.unavailable_reason or ""
    assert "cannot build the kernels" in reason and ocl.info.name in reason


def test_no_platform_gives_zero_devices_with_the_reason(tmp_path: Path) -> None:
    """OCL_ICD_VENDORS pointing at an empty folder: no platform; the CPU is unaffected; the CLI says why."""
    empty = tmp_path / "vendors"
    empty.mkdir()
    code = textwrap.dedent(
        """
        import json, sys
        from ggml_core.cli import main
        sys.exit(main(["devices", "--json"]))
        """
    )
    proc = run_python(code, {"OCL_ICD_VENDORS": str(empty), "GGML_BACKENDS": ""})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "CPU" in [d["name"] for d in out["devices"]]
    assert not [d for d in out["devices"] if d["name"].startswith("OpenCL")]
    ocl = next(b for b in out["backends"] if b["name"] == "OpenCL")
    assert ocl["devices"] == [] and "no OpenCL platform" in ocl["unavailable_reason"]
    plugins = run_python("from ggml_core.cli import main; main(['plugins'])", {"OCL_ICD_VENDORS": str(empty)})
    assert "backend OpenCL: no devices (no OpenCL platform" in plugins.stdout


def test_missing_pyopencl_is_reported_not_raised() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["pyopencl"] = None  # make "import pyopencl" fail
        import ggml_core as g
        reg = g.get_registry()
        names = [d.name for d in g.devices()]
        ocl = reg.get_reg("OpenCL")
        print(names)
        print(ocl.unavailable_reason)
        """
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    names, reason = proc.stdout.strip().splitlines()[-2:]
    assert "'CPU'" in names and "OpenCL" not in names
    assert reason.startswith("pyopencl is not importable")


def test_two_devices_on_one_platform() -> None:
    """PoCL can expose two devices (POCL_DEVICES): both become OpenCL0/OpenCL1 and copy between each other."""
    code = textwrap.dedent(
        """
        import numpy as np, ggml_core as g
        from ggml_opencl import OpenCLDevice
        devs = [d for d in g.devices() if isinstance(d, OpenCLDevice)]
        if len(devs) < 2:
            print("SKIP", [d.description for d in devs] or g.get_registry().get_reg("OpenCL").unavailable_reason)
            raise SystemExit
        a, b = devs[0], devs[1]
        assert a.context == b.context
        ctx = g.Context("x")
        t0 = ctx.new_tensor_1d("f32", 1000, "t0")
        ctx2 = g.Context("y")
        t1 = ctx2.new_tensor_1d("f32", 1000, "t1")
        g.alloc_ctx_tensors(ctx, a.buffer_type()); g.alloc_ctx_tensors(ctx2, b.buffer_type())
        v = np.arange(1000, dtype=np.float32)
        t0.set_data(v)
        assert t1.buffer.cpy_tensor(t0, t1)
        assert (t1.to_numpy().reshape(-1) == v).all()
        be_a, be_b = a.init_backend(), b.init_backend()
        t0.set_data(-v)
        assert be_b.cpy_tensor_async(be_a, t0, t1)
        ev = a.event_new(); ev.record(be_a); ev.wait(be_b); be_b.synchronize()
        assert (t1.to_numpy().reshape(-1) == -v).all()
        print("OK", a.name, b.name)
        """
    )
    env = {"POCL_DEVICES": "pthread pthread", "GGML_OPENCL_DEVICES": "portable computing language"}
    proc = run_python(code, env)
    assert proc.returncode == 0, proc.stderr
    if proc.stdout.startswith("SKIP"):
        pytest.skip(f"needs PoCL, which POCL_DEVICES can ask for two devices; found: {proc.stdout[5:].strip()}")
    assert proc.stdout.strip() == "OK OpenCL0 OpenCL1"
