"""Buffers and streams: bounds checks, set/get/memset/copy, async copies, events, splitting over max size."""

from __future__ import annotations

import numpy as np
import pytest

import ggml_core as g
from ggml_core import AllocationError, OutOfBoundsError, TensorError, ops
from ggml_core.testing.plugin_tests import check_host_tensor_refused, check_tensor_copies, tensor_on
from ggml_opencl import OpenCLBuffer, OpenCLBufferType, OpenCLDevice, OpenCLReg


def test_write_read_roundtrip_and_bounds(ocl: OpenCLDevice) -> None:
    buf = ocl.buffer_type().alloc_buffer(1000)
    assert isinstance(buf, OpenCLBuffer) and not buf.is_host and buf.host_array() is None
    data = np.arange(250, dtype=np.float32).tobytes()
    buf.write(0, data)
    assert buf.read(0, 1000) == data
    assert buf.read(996, 4) == data[996:]
    with pytest.raises(OutOfBoundsError):
        buf.write(997, b"abcd")
    with pytest.raises(OutOfBoundsError):
        buf.read(-1, 4)
    with pytest.raises(OutOfBoundsError):
        buf.read(0, 1001)
    buf.clear(7)
    assert buf.read(0, 1000) == bytes([7]) * 1000
    buf.free()
    with pytest.raises(TensorError):
        buf.read(0, 4)


def test_tensor_set_get_memset_with_offsets(ocl: OpenCLDevice) -> None:
    t, buf = tensor_on(ocl, 64)
    v = np.linspace(-1, 1, 64, dtype=np.float32)
    t.set_data(v)
    assert np.array_equal(t.to_numpy().reshape(-1), v)
    t.set_bytes(np.float32([5, 6]).tobytes(), offset=8)
    assert t.to_numpy().reshape(-1)[2:4].tolist() == [5.0, 6.0]
    buf.memset_tensor(t, 0, offset=16, size=16)
    got = t.to_numpy().reshape(-1)
    assert (got[4:8] == 0).all() and got[8] == v[8]
    with pytest.raises(OutOfBoundsError):
        t.set_bytes(b"\0" * 8, offset=252)
    with pytest.raises(OutOfBoundsError):
        t.get_bytes(offset=0, size=260)
    buf.free()


def test_views_are_addressed_by_offset(ocl: OpenCLDevice, backend: g.Backend) -> None:
    """A view at an odd element offset computes correctly: kernels get the byte offset, no sub-buffer."""
    ctx = g.Context("v")
    a = ctx.new_tensor_1d("f32", 103, "a")
    view = ops.view_1d(a, 50, offset=13 * 4)
    out = ops.scale(ops.cont(view), 2.0)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, ocl.buffer_type())
    a.set_data(np.arange(103, dtype=np.float32))
    backend.graph_compute(graph)
    assert np.array_equal(out.to_numpy().reshape(-1), 2 * np.arange(13, 63, dtype=np.float32))
    buf.free()


def test_copies_between_host_and_device_and_between_buffers(ocl: OpenCLDevice, cpu: g.Device) -> None:
    t_dev, bufs = check_tensor_copies(ocl, cpu, 300)
    with pytest.raises(TensorError):
        small, b4 = tensor_on(ocl, 10)
        small.buffer.cpy_tensor(t_dev, small)
    for b in (*bufs, b4):
        b.free()


def test_copy_between_contexts_goes_through_the_host(ocl: OpenCLDevice) -> None:
    """Two registries give the same device two contexts: buffers still copy (staged through host memory)."""
    other = OpenCLReg(environ={}).devices[0]
    assert isinstance(other, OpenCLDevice) and other.context != ocl.context
    t1, b1 = tensor_on(ocl, 100)
    t2, b2 = tensor_on(other, 100)
    v = np.arange(100, dtype=np.float32)
    t1.set_data(v)
    assert t2.buffer.cpy_tensor(t1, t2)
    assert np.array_equal(t2.to_numpy().reshape(-1), v)
    be = other.init_backend()
    assert not be.cpy_tensor_async(ocl.init_backend(), t1, t2)  # not on one device queue: the caller stages it
    b1.free()
    b2.free()


def test_allocation_over_the_maximum_is_reported(ocl: OpenCLDevice) -> None:
    with pytest.raises(AllocationError, match="maximum"):
        ocl.buffer_type().alloc_buffer(ocl.buffer_type().max_size + 1)


def test_context_larger_than_max_size_is_split(ocl: OpenCLDevice) -> None:
    small = OpenCLBufferType("OpenCL0-small", ocl, alignment=128, max_size=4096)
    ctx = g.Context("split")
    ts = [ctx.new_tensor_1d("f32", 600, f"t{i}") for i in range(5)]  # 5 × 2400 bytes > 4096
    buf = g.alloc_ctx_tensors(ctx, small)
    assert len({id(t.buffer) for t in ts}) > 1
    for i, t in enumerate(ts):
        t.set_data(np.full(600, i, np.float32))
    assert [float(t.to_numpy()[0, 0, 0, 0]) for t in ts] == [0, 1, 2, 3, 4]
    buf.free()
    ctx2 = g.Context("too-big")
    ctx2.new_tensor_1d("f32", 2000, "big")
    with pytest.raises(TensorError, match="maximum"):
        g.alloc_ctx_tensors(ctx2, small)


def test_memory_accounting(ocl: OpenCLDevice) -> None:
    free0, total = ocl.memory()
    buf = ocl.buffer_type().alloc_buffer(1 << 20)
    assert ocl.memory()[0] == free0 - (1 << 20)
    buf.free()
    assert ocl.memory() == (free0, total)


def test_async_set_compute_get_are_ordered_on_the_queue(ocl: OpenCLDevice, backend: g.Backend) -> None:
    ctx = g.Context("async")
    x = ctx.new_tensor_1d("f32", 4096, "x")
    y = ops.sqr(ops.add(x, x))
    graph = g.build_graph(y)
    buf = g.alloc_ctx_tensors(ctx, ocl.buffer_type())
    rng = np.random.default_rng(1)
    for _ in range(3):
        v = rng.standard_normal(4096).astype(np.float32)
        out = np.zeros(4096, np.float32)
        backend.set_tensor_async(x, memoryview(v))
        backend.graph_compute_async(graph)
        backend.get_tensor_async(y, memoryview(out))
        backend.synchronize()
        assert np.array_equal(out, (v + v) ** 2)
    buf.free()


def test_async_copy_bounds_are_checked(ocl: OpenCLDevice, backend: g.Backend) -> None:
    t, buf = tensor_on(ocl, 16)
    with pytest.raises(OutOfBoundsError):
        backend.set_tensor_async(t, memoryview(np.zeros(17, np.float32)))
    with pytest.raises(OutOfBoundsError):
        backend.get_tensor_async(t, memoryview(np.zeros(4, np.float32)), offset=60)
    buf.free()


def test_events_order_work_between_backends(ocl: OpenCLDevice) -> None:
    """Record an event after a compute on one backend; another backend waits on it before copying the result."""
    be1, be2 = ocl.init_backend(), ocl.init_backend()
    ctx = g.Context("ev")
    x = ctx.new_tensor_1d("f32", 1 << 16, "x")
    y = ops.scale(x, 3.0)
    z = ctx.new_tensor_1d("f32", 1 << 16, "z")
    graph = g.build_graph(y)
    buf = g.alloc_ctx_tensors(ctx, ocl.buffer_type())
    v = np.arange(1 << 16, dtype=np.float32)
    x.set_data(v)
    ev = ocl.event_new()
    ev.synchronize()  # never recorded: complete
    be1.graph_compute_async(graph)
    be1.event_record(ev)
    be2.event_wait(ev)
    assert be2.cpy_tensor_async(be1, y, z)
    be2.synchronize()
    ev.synchronize()
    assert np.array_equal(z.to_numpy().reshape(-1), 3 * v)
    buf.free()


def test_a_tensor_in_host_memory_is_rejected_with_its_name(
    ocl: OpenCLDevice, cpu: g.Device, backend: g.Backend
) -> None:
    check_host_tensor_refused(backend, cpu)


def test_bad_row_index_raises_and_writes_nothing_outside(ocl: OpenCLDevice, backend: g.Backend) -> None:
    ctx = g.Context("rows")
    a = ctx.new_tensor_2d("f32", 4, 3, "a")
    idx = ctx.new_tensor_1d("i32", 2, "idx")
    out = ops.get_rows(a, idx)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, ocl.buffer_type())
    a.set_data(np.arange(12, dtype=np.float32))
    idx.set_data(np.array([2, 7], np.int32))
    with pytest.raises(g.ComputeError, match="out of range"):
        backend.graph_compute(graph)
    got = out.to_numpy().reshape(2, 4)
    assert got[0].tolist() == [8, 9, 10, 11] and (got[1] == 0).all()
    idx.set_data(np.array([1, 0], np.int32))
    backend.graph_compute(graph)  # the error was reported once and cleared
    assert out.to_numpy().reshape(2, 4).tolist() == [[4, 5, 6, 7], [0, 1, 2, 3]]
    buf.free()


def test_an_unsupported_node_is_refused_by_name(ocl: OpenCLDevice, backend: g.Backend) -> None:
    """Computing a node the device does not support raises (naming op and types) instead of writing garbage."""
    ctx = g.Context("unsupported")
    rows = ctx.new_tensor_2d("f32", 256, 2, "rows")
    idx = ctx.new_tensor_1d("i32", 2, "idx")
    dst = ctx.new_tensor_2d("q4_K", 256, 4, "dst")
    out = ops.set_rows(dst, rows, idx)
    assert not ocl.supports_op(out)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, ocl.buffer_type())
    with pytest.raises(g.ComputeError, match=r"does not support SET_ROWS.*q4_K"):
        backend.graph_compute(graph)
    buf.free()
