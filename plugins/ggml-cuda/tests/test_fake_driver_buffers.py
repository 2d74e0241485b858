"""Host-side memory, streams and events against the fake driver (simulated memory; no GPU is involved).

Verified here: bounds checks before any driver call, allocation failures naming device/size/free memory, which
copy (HtoD, DtoH, DtoD, peer, memset) each operation issues and on which stream, events between streams, props,
buffer-type support and ggml's offload rule.
"""

from __future__ import annotations

import numpy as np
import pytest
from fake_driver import FakeDriver

import ggml_core as g
from ggml_core import ops
from ggml_cuda._buffers import ALIGNMENT, CUDABuffer, PinnedBuffer
from ggml_cuda._device import CUDABackend, CUDADevice, op_batch_size


def _tensor(ctx: g.Context, n: int = 64, name: str = "t") -> g.Tensor:
    return ctx.new_tensor_1d("f32", n, name)


# ------------------------------------------------------------------------------------------------ device


def test_props_name_memory_pci_id_compute_capability(device: CUDADevice, driver: FakeDriver) -> None:
    p = device.props()
    assert (p.name, p.type, p.device_id) == ("CUDA0", g.DeviceType.GPU, "0000:19:00.0")
    assert p.description == driver.infos[0].name
    assert (p.memory_free, p.memory_total) == (1 << 30, 1 << 30)
    assert p.caps.asynchronous and p.caps.events and p.caps.host_buffer and not p.caps.buffer_from_host_ptr
    assert p.extra["compute_capability"] == "9.0" and p.extra["arch"] == "sm_90"
    assert p.extra["multiprocessors"] == 132


def test_buffer_types(device: CUDADevice, two_devices: tuple[FakeDriver, CUDADevice, CUDADevice]) -> None:
    buft, host = device.buffer_type(), device.host_buffer_type()
    assert buft.name == "CUDA0" and not buft.is_host and buft.alignment == ALIGNMENT
    assert host.name == "CUDA_Host" and host.is_host
    assert device.all_buffer_types() == [buft, host]
    assert device.supports_buft(buft)
    assert not device.supports_buft(host)  # kernels never read host memory
    assert not device.supports_buft(two_devices[1].buffer_type())


# ------------------------------------------------------------------------------------------------ allocation


def test_alloc_uses_cumemalloc_and_free_releases(device: CUDADevice, driver: FakeDriver) -> None:
    buf = device.buffer_type().alloc_buffer(1000)
    assert isinstance(buf, CUDABuffer) and buf.ptr in driver.allocations
    assert ("alloc", 0, 1000) in driver.calls
    assert device.memory()[0] == (1 << 30) - 1000
    buf.free()
    assert buf.ptr == 0 and not driver.allocations
    with pytest.raises(g.TensorError, match="freed"):
        buf.read(0, 4)


def test_zero_size_buffer_allocates_nothing(device: CUDADevice, driver: FakeDriver) -> None:
    buf = device.buffer_type().alloc_buffer(0)
    assert buf.size == 0 and not driver.allocations
    buf.free()


def test_allocation_that_does_not_fit_names_device_size_and_free_memory(device: CUDADevice) -> None:
    keep = device.buffer_type().alloc_buffer(600 << 20)
    with pytest.raises(g.AllocationError) as info:
        device.buffer_type().alloc_buffer(500 << 20)
    msg = str(info.value)
    assert msg.startswith("device CUDA0: cannot allocate 500.00 MiB (424.00 MiB free): out of device memory")
    assert info.value.device == "CUDA0" and info.value.size == 500 << 20 and info.value.free == 424 << 20
    assert isinstance(info.value, MemoryError)
    keep.free()


def test_pinned_host_buffer_is_host_memory(device: CUDADevice, driver: FakeDriver) -> None:
    buf = device.host_buffer_type().alloc_buffer(256)
    assert isinstance(buf, PinnedBuffer) and buf.is_host
    assert ("alloc_host", 256) in driver.calls
    buf.write(8, b"\x01\x02")
    assert bytes(buf.host_array()[8:10]) == b"\x01\x02"


# ------------------------------------------------------------------------------------------------ copies


def test_set_get_memset_round_trip_through_device_memory(device: CUDADevice, driver: FakeDriver) -> None:
    ctx = g.Context()
    t = _tensor(ctx)
    buf = g.alloc_ctx_tensors(ctx, device.buffer_type())
    vals = np.arange(64, dtype=np.float32)
    t.set_data(vals)
    np.testing.assert_array_equal(t.to_numpy().reshape(-1), vals)
    assert driver.view(buf.ptr, 256).view(np.float32).tolist() == vals.tolist()  # type: ignore[attr-defined]
    buf.memset_tensor(t, 0, offset=16, size=8)
    got = t.to_numpy().reshape(-1)
    assert got[4] == 0 and got[5] == 0 and got[6] == 6
    kinds = [c[0] for c in driver.calls]
    assert {"copy_htod", "copy_dtoh", "memset"} <= set(kinds)


def test_out_of_bounds_access_is_refused_before_the_driver_is_called(device: CUDADevice, driver: FakeDriver) -> None:
    ctx = g.Context()
    t = _tensor(ctx, 16)
    buf = g.alloc_ctx_tensors(ctx, device.buffer_type())
    before = len(driver.calls)
    with pytest.raises(g.OutOfBoundsError):
        buf.set_tensor(t, memoryview(bytes(68)))
    with pytest.raises(g.OutOfBoundsError):
        buf.get_tensor(t, memoryview(bytearray(8)), offset=60)
    with pytest.raises(g.OutOfBoundsError):
        buf.write(buf.size - 2, b"abcd")
    with pytest.raises(g.OutOfBoundsError):
        buf.memset_tensor(t, 1, offset=8, size=64)
    assert len(driver.calls) == before


def test_tensor_copies_device_to_device_and_peer(two_devices: tuple[FakeDriver, CUDADevice, CUDADevice]) -> None:
    drv, d0, d1 = two_devices
    c0, c1, c2 = g.Context("a"), g.Context("b"), g.Context("c")
    a, b, c = _tensor(c0, name="a"), _tensor(c1, name="b"), _tensor(c2, name="c")
    g.alloc_ctx_tensors(c0, d0.buffer_type())
    bb = g.alloc_ctx_tensors(c1, d0.buffer_type())
    cb = g.alloc_ctx_tensors(c2, d1.buffer_type())
    a.set_data(np.arange(64, dtype=np.float32))
    assert bb.cpy_tensor(a, b) and cb.cpy_tensor(a, c)
    np.testing.assert_array_equal(b.to_numpy().reshape(-1), np.arange(64))
    np.testing.assert_array_equal(c.to_numpy().reshape(-1), np.arange(64))
    kinds = [k[0] for k in drv.calls]
    assert "copy_dtod" in kinds and "copy_peer" in kinds


def test_copy_from_host_buffers_uploads(device: CUDADevice, cpu: g.Device) -> None:
    ch, cd = g.Context("h"), g.Context("d")
    h, d = _tensor(ch, name="h"), _tensor(cd, name="d")
    g.alloc_ctx_tensors(ch, cpu.buffer_type())
    dbuf = g.alloc_ctx_tensors(cd, device.buffer_type())
    h.set_data(np.full(64, 3.5, np.float32))
    assert dbuf.cpy_tensor(h, d)
    assert (d.to_numpy() == 3.5).all()


# ------------------------------------------------------------------------------------------------ streams, events


def test_async_copies_go_on_the_backend_stream(backend: CUDABackend, device: CUDADevice, driver: FakeDriver) -> None:
    ctx = g.Context()
    t = _tensor(ctx)
    g.alloc_ctx_tensors(ctx, backend)
    data = np.arange(64, dtype=np.float32)
    backend.set_tensor_async(t, memoryview(data).cast("B"))
    out = np.zeros(64, np.float32)
    backend.get_tensor_async(t, memoryview(out).cast("B"))
    backend.synchronize()
    np.testing.assert_array_equal(out, data)
    async_calls = [c for c in driver.calls if c[0] in ("copy_htod", "copy_dtoh") and c[-1] is backend.stream]
    assert len(async_calls) == 2
    assert ("stream_synchronize", 0, backend.stream) in driver.calls
    with pytest.raises(g.OutOfBoundsError):
        backend.set_tensor_async(t, bytes(8), offset=252)


def test_cpy_tensor_async_orders_after_the_source_stream(
    two_devices: tuple[FakeDriver, CUDADevice, CUDADevice],
) -> None:
    drv, d0, d1 = two_devices
    b0, b1 = d0.init_backend(), d1.init_backend()
    assert isinstance(b0, CUDABackend) and isinstance(b1, CUDABackend)
    ca, cb = g.Context("a"), g.Context("b")
    a, b = _tensor(ca, name="a"), _tensor(cb, name="b")
    g.alloc_ctx_tensors(ca, b0)
    g.alloc_ctx_tensors(cb, b1)
    a.set_data(np.arange(64, dtype=np.float32))
    assert b1.cpy_tensor_async(b0, a, b)
    names = [c[0] for c in drv.calls]
    i_rec, i_wait, i_copy = names.index("event_record"), names.index("stream_wait_event"), names.index("copy_peer")
    assert i_rec < i_wait < i_copy
    assert drv.calls[i_rec][3] is b0.stream and drv.calls[i_wait][2] is b1.stream and drv.calls[i_copy][-1] is b1.stream
    np.testing.assert_array_equal(b.to_numpy().reshape(-1), np.arange(64))
    b0.free()
    b1.free()


def test_events_record_wait_and_synchronize(
    backend: CUDABackend, device: CUDADevice, driver: FakeDriver, cpu: g.Device
) -> None:
    ev = device.event_new()
    other = device.init_backend()
    assert isinstance(other, CUDABackend)
    backend.event_record(ev)
    other.event_wait(ev)
    ev.synchronize()
    cpu_backend = cpu.init_backend()
    cpu_backend.event_wait(ev)  # a non-CUDA backend waits on the host
    names = [c[0] for c in driver.calls]
    assert names.count("event_synchronize") == 2
    rec = next(c for c in driver.calls if c[0] == "event_record")
    wait = next(c for c in driver.calls if c[0] == "stream_wait_event")
    assert rec[3] is backend.stream and wait[2] is other.stream and wait[3] is ev.handle
    other.free()


def test_backend_free_releases_its_memory(device: CUDADevice, driver: FakeDriver) -> None:
    be = device.init_backend()
    assert driver.allocations  # the status word
    be.free()
    assert not driver.allocations


# ------------------------------------------------------------------------------------------------ offload rule


def test_offload_follows_ggmls_batch_rule(device: CUDADevice, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = g.Context()
    w = ctx.new_tensor_2d("q4_0", 64, 16, "w")
    for n, expected in ((1, False), (31, False), (32, True), (512, True)):
        x = ctx.new_tensor_2d("f32", 64, n, f"x{n}")
        node = ops.mul_mat(w, x)
        assert op_batch_size(node) == n
        assert device.offload_op(node) is expected
    rows = ops.get_rows(ctx.new_tensor_2d("f32", 8, 100, "e"), ctx.new_tensor_1d("i32", 64, "i"))
    assert op_batch_size(rows) == 0 and not device.offload_op(rows)
    q = ctx.new_tensor_3d("f32", 8, 4, 40, "q")
    rope = ops.rope(q, ctx.new_tensor_1d("i32", 40, "p"), 8)
    assert op_batch_size(rope) == 40 and device.offload_op(rope)
    add = ops.add(ctx.new_tensor_2d("f32", 8, 20, "a"), ctx.new_tensor_2d("f32", 8, 20, "b"))
    assert op_batch_size(add) == 20 and not device.offload_op(add)
    monkeypatch.setenv("GGML_OP_OFFLOAD_MIN_BATCH", "16")
    fresh = CUDADevice(device.driver, device.info, 0)
    assert fresh.offload_min_batch == 16 and fresh.offload_op(add)
