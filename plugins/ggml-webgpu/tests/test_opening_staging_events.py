"""Lazy opening of adapters, the staging ring of uploads, the host buffer type, and work-done events."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

import ggml_core as g
from ggml_core import ops
from ggml_webgpu import DeviceOpenError, WebGPUDevice, WebGPUHostBuffer, WebGPUReg, _buffers


def test_listing_devices_opens_no_adapter(wdev: WebGPUDevice) -> None:
    """A fresh registry (as ``ggml-core devices`` builds) lists props, memory and buffer types without opening."""
    reg = WebGPUReg({"GGML_WEBGPU_ADAPTERS": str(wdev.info.index)})
    (dev,) = reg.devices
    assert isinstance(dev, WebGPUDevice)
    props = dev.props()
    assert props.extra["opened"] is False and props.caps.host_buffer
    assert [b.name for b in dev.all_buffer_types()] == [dev.name, f"{dev.name}_Host"]
    dev.memory()
    assert dev.supports_op(ops.add(*_two(g.Context("s"))))
    assert not dev.is_open
    # the limits answered before opening are the ones the opened device has
    be = dev.init_backend()
    assert dev.is_open and dev.props().extra["opened"] is True
    lim = dev.gpu.limits
    assert dev.limits.offset_alignment == int(lim["min-storage-buffer-offset-alignment"])
    assert dev.limits.max_groups == int(lim["max-compute-workgroups-per-dimension"])
    assert dev.buffer_type().max_size == int(lim["max-buffer-size"])
    be.free()


def _two(ctx: g.Context) -> tuple[g.Tensor, g.Tensor]:
    return ctx.new_tensor_1d("f32", 8, "a"), ctx.new_tensor_1d("f32", 8, "b")


def test_devices_command_does_not_open_the_adapter(wdev: WebGPUDevice) -> None:
    """``ggml-core devices --json`` in a fresh process: WebGPU0 is listed, its props say it was not opened."""
    code = textwrap.dedent(f"""
        import json, subprocess, sys
        out = subprocess.run([sys.executable, "-m", "ggml_core.cli", "devices", "--json"], capture_output=True,
                             text=True, check=True).stdout
        (w,) = [d for d in json.loads(out)["devices"] if d["name"] == {wdev.name!r}]
        print(w["extra"]["opened"], [b["name"] for b in w["buffer_types"]])
    """)
    env = {**os.environ, "GGML_BACKENDS": "CPU,WebGPU"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == f"False ['{wdev.name}', '{wdev.name}_Host']", run.stdout


def test_an_adapter_that_cannot_open_raises_naming_the_device(wdev: WebGPUDevice) -> None:
    class Broken:
        calls = 0

        def request_device_sync(self, **_: Any) -> Any:
            Broken.calls += 1
            raise RuntimeError("the driver said no")

    dev = WebGPUDevice("WebGPU9", wdev.info, Broken())
    assert dev.props().name == "WebGPU9"  # listing still works
    with pytest.raises(DeviceOpenError, match="WebGPU9: cannot be opened: RuntimeError: the driver said no"):
        dev.init_backend()
    with pytest.raises(DeviceOpenError, match="WebGPU9"):
        dev.buffer_type().alloc_buffer(64)
    assert Broken.calls == 1 and not dev.is_open  # the failure is remembered, the driver not asked again


@pytest.mark.parametrize("offset", [0, 4, 3])  # word-aligned, and a partial first word (merged, then staged)
def test_large_writes_go_through_the_staging_ring(wdev: WebGPUDevice, offset: int) -> None:
    """Several chunks (more than the ring's buffers, so each is re-mapped after its copy), read back exactly."""
    n = 2 * _buffers.STAGE_CHUNK * _buffers.STAGE_SLOTS + 12345
    buf = wdev.buffer_type().alloc_buffer(n + offset + 1)
    data = np.random.default_rng(offset).integers(0, 256, n, dtype=np.uint8)
    before = wdev.staging.bytes_staged
    buf.write(offset, data.tobytes())
    assert wdev.staging.bytes_staged - before >= n
    got = np.frombuffer(buf.read(offset, n), dtype=np.uint8)
    assert np.array_equal(got, data)
    small = wdev.staging.bytes_staged
    buf.write(offset, b"\x01\x02\x03")  # small writes take queue.write_buffer
    assert wdev.staging.bytes_staged == small and buf.read(offset, 4)[:3] == b"\x01\x02\x03"
    buf.free()


def test_staged_uploads_are_ordered_with_compute(wdev: WebGPUDevice) -> None:
    """Upload, compute, upload again, compute: each graph sees the data written before it."""
    n = _buffers.STAGE_MIN // 4 * 3  # f32 values: large enough to be staged
    ctx = g.Context("o")
    x, y = ctx.new_tensor_1d("f32", n, "x"), ctx.new_tensor_1d("f32", n, "y")
    out = ops.add(x, y)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
    be = wdev.init_backend()
    rng = np.random.default_rng(3)
    for _ in range(3):
        xv, yv = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        x.set_data(xv)
        y.set_data(yv)
        be.graph_compute(graph)
        assert np.array_equal(out.to_numpy().reshape(-1), xv + yv)
    be.free()
    buf.free()


def test_host_buffer_type_is_host_memory_and_uploads_from_it(wdev: WebGPUDevice, cpu: g.Device) -> None:
    host_bt = wdev.host_buffer_type()
    assert host_bt.is_host and host_bt.name == f"{wdev.name}_Host"
    n = _buffers.STAGE_MIN  # f32 values: 4x the staging threshold
    hctx, dctx = g.Context("h"), g.Context("d")
    th, td = hctx.new_tensor_1d("f32", n, "h"), dctx.new_tensor_1d("f32", n, "d")
    hb = g.alloc_ctx_tensors(hctx, host_bt)
    db = g.alloc_ctx_tensors(dctx, wdev.buffer_type())
    assert isinstance(hb, WebGPUHostBuffer) and hb.host_array() is not None
    v = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    th.set_data(v)
    assert np.array_equal(hb.host_array()[th.data_offset : th.data_offset + v.nbytes].view(np.float32), v)
    before = wdev.staging.bytes_staged
    assert db.cpy_tensor(th, td)  # host buffer -> device: through the ring
    assert wdev.staging.bytes_staged - before >= v.nbytes
    assert np.array_equal(td.to_numpy().reshape(-1), v)
    th.set_data(np.zeros(n, np.float32))
    assert hb.cpy_tensor(td, th)  # and back into host memory
    assert np.array_equal(th.to_numpy().reshape(-1), v)
    # the CPU computes in it directly
    assert cpu.supports_buft(host_bt)
    hb.free()
    db.free()


def test_an_event_waits_for_the_work_recorded_before_it(wdev: WebGPUDevice) -> None:
    n = 1 << 16
    ctx = g.Context("e")
    x = ctx.new_tensor_1d("f32", n, "x")
    out = ops.scale(ops.add(x, x), 0.5)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
    be = wdev.init_backend()
    v = np.arange(n, dtype=np.float32)
    x.set_data(v)
    ev = wdev.event_new()
    assert ev.query()  # never recorded: complete
    be.graph_compute_async(graph)
    ev.record(be)
    ev.synchronize()
    assert ev.query()
    host = np.frombuffer(buf.read(out.data_offset, v.nbytes), np.float32)
    assert np.array_equal(host, v)
    for _ in range(5):  # re-recorded before its callback came: the earlier callbacks stay alive until they run
        be.graph_compute_async(graph)
        ev.record(be)
    ev.synchronize()
    wdev.wait_idle()
    assert not wdev.work_done._pending
    if wdev.work_done.native:  # the callback path: a recorded point becomes done by polling alone
        be.graph_compute_async(graph)
        ev.record(be)
        for _ in range(100000):
            if ev.query():
                break
        else:
            pytest.fail("the work-done callback never came")
    be.free()
    buf.free()


def test_events_without_the_native_callback_wait_by_mapping(
    wdev: WebGPUDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another wgpu-py without the binding: ``mark`` gives no token and waiting maps a word (after everything)."""
    from ggml_webgpu import _sync

    wd = _sync.WorkDone(wdev.gpu, wdev.gpu.create_buffer(size=4, usage=_buffers.storage_usage()))
    monkeypatch.setattr(wd, "_native", None)
    assert not wd.native and wd.mark() is None
    monkeypatch.setattr(wdev, "_opened", dataclasses.replace(wdev._open(), work_done=wd))
    n = 1 << 12
    ctx = g.Context("f")
    x = ctx.new_tensor_1d("f32", n, "x")
    out = ops.add(x, x)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
    be = wdev.init_backend()
    x.set_data(np.ones(n, np.float32))
    ev = wdev.event_new()
    be.graph_compute_async(graph)
    ev.record(be)
    assert ev.query()  # the fallback cannot ask without waiting: it waits
    assert np.array_equal(np.frombuffer(buf.read(out.data_offset, 4 * n), np.float32), np.full(n, 2, np.float32))
    be.free()
    buf.free()
