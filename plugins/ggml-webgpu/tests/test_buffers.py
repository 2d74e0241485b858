"""Buffers and streams: bounds, unaligned set/get/memset, copies, events, bad indices, foreign memory."""

from __future__ import annotations

import numpy as np
import pytest

import ggml_core as g
from ggml_core import ComputeError, OutOfBoundsError, TensorError, ops
from ggml_core.testing.plugin_tests import check_host_tensor_refused, check_tensor_copies, tensor_on
from ggml_webgpu import WebGPUBuffer, WebGPUDevice


def test_write_read_roundtrip_at_any_byte_and_bounds(wdev: WebGPUDevice) -> None:
    """The queue moves whole words; writes of partial words merge with the bytes around them."""
    buf = wdev.buffer_type().alloc_buffer(1001)
    assert isinstance(buf, WebGPUBuffer) and not buf.is_host and buf.host_array() is None
    data = bytes(range(256)) * 3 + bytes(233)
    buf.write(0, data)
    assert buf.read(0, 1001) == data
    buf.write(5, b"xyz")  # inside one word, around other bytes
    buf.write(998, b"abc")  # the unaligned tail of the buffer
    want = bytearray(data)
    want[5:8], want[998:1001] = b"xyz", b"abc"
    assert buf.read(0, 1001) == bytes(want)
    assert buf.read(3, 6) == bytes(want[3:9])
    with pytest.raises(OutOfBoundsError):
        buf.write(999, b"abcd")
    with pytest.raises(OutOfBoundsError):
        buf.read(0, 1002)
    buf.clear(7)
    assert buf.read(0, 1001) == bytes([7]) * 1001
    buf.clear(0)
    assert buf.read(0, 1001) == bytes(1001)
    buf.free()
    with pytest.raises(TensorError):
        buf.read(0, 4)


def test_tensor_memset_and_f16_neighbours(wdev: WebGPUDevice) -> None:
    t, buf = tensor_on(wdev, 7, "f16")
    v = np.arange(7, dtype=np.float16)
    t.set_data(v)
    buf.memset_tensor(t, 0, offset=2, size=2)  # one f16 inside a word
    got = t.to_numpy().reshape(-1)
    assert got[1] == 0 and np.array_equal(np.delete(got, 1), np.delete(v, 1))
    buf.free()


def test_copies_between_host_and_device_and_between_buffers(wdev: WebGPUDevice, cpu: g.Device) -> None:
    _, bufs = check_tensor_copies(wdev, cpu, 301)
    for b in bufs:
        b.free()


def test_views_at_odd_offsets_compute_correctly(wdev: WebGPUDevice, backend: g.Backend) -> None:
    """A view starting inside a storage-alignment unit: the window starts earlier, the kernel gets the offset."""
    ctx = g.Context("v")
    a = ctx.new_tensor_1d("f32", 103, "a")
    out = ops.scale(ops.cont(ops.view_1d(a, 50, offset=13 * 4)), 2.0)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
    a.set_data(np.arange(103, dtype=np.float32))
    backend.graph_compute(graph)
    assert np.array_equal(out.to_numpy().reshape(-1), 2 * np.arange(13, 63, dtype=np.float32))
    buf.free()


def test_async_set_compute_get_and_events(wdev: WebGPUDevice) -> None:
    b1, b2 = wdev.init_backend(), wdev.init_backend()
    ctx = g.Context("e")
    a = ctx.new_tensor_1d("f32", 64, "a")
    out = ops.scale(a, 3.0)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
    v = np.arange(64, dtype=np.float32)
    b1.set_tensor_async(a, memoryview(v.tobytes()))
    b1.graph_compute_async(graph)
    ev = wdev.event_new()
    assert ev is not None
    ev.record(b1)
    ev.wait(b2)
    ev.synchronize()
    got = np.empty(64, np.float32)
    b2.get_tensor_async(out, memoryview(got).cast("B"))
    b2.synchronize()
    assert np.array_equal(got, 3 * v)
    buf.free()
    b1.free()
    b2.free()


def test_bad_row_index_raises_naming_the_node(wdev: WebGPUDevice, backend: g.Backend) -> None:
    ctx = g.Context("r")
    table = ctx.new_tensor_2d("f32", 8, 4, "table")
    ids = ctx.new_tensor_1d("i32", 3, "ids")
    out = ops.get_rows(table, ids)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
    table.set_data(np.arange(32, dtype=np.float32).reshape(4, 8))
    ids.set_data(np.array([1, 9, 2], np.int32))
    with pytest.raises(ComputeError, match="out of range"):
        backend.graph_compute(graph)
    got = out.to_numpy().reshape(3, 8)
    assert np.array_equal(got[0], np.arange(8, 16)) and not got[1].any() and np.array_equal(got[2], np.arange(16, 24))
    ids.set_data(np.array([3, 0, 2], np.int32))  # the error was consumed: the next run is clean
    backend.graph_compute(graph)
    assert np.array_equal(out.to_numpy().reshape(3, 8)[0], np.arange(24, 32))
    buf.free()


def test_a_tensor_in_host_memory_is_refused_by_name(wdev: WebGPUDevice, cpu: g.Device, backend: g.Backend) -> None:
    check_host_tensor_refused(backend, cpu)


def test_an_unsupported_node_is_refused_by_name(wdev: WebGPUDevice, backend: g.Backend) -> None:
    ctx = g.Context("u")
    a = ctx.new_tensor_2d("f32", 8, 3, "a")
    out = ops.count_equal(a, a)
    assert not wdev.supports_op(out)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
    with pytest.raises(ComputeError, match="COUNT_EQUAL"):
        backend.graph_compute(graph)
    buf.free()


def test_a_graph_recomputed_in_new_buffers_uses_them(wdev: WebGPUDevice, backend: g.Backend) -> None:
    """Recorded graphs are keyed by each buffer's allocation serial, not by ``id()``, which a freed buffer frees."""
    ctx = g.Context("again")
    a = ctx.new_tensor_1d("f32", 32, "a")
    out = ops.scale(a, 2.0)
    graph = g.build_graph(out)
    for k in range(3):
        buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
        a.set_data(np.full(32, k + 1, np.float32))
        backend.graph_compute(graph)
        assert np.array_equal(out.to_numpy().reshape(-1), np.full(32, 2 * (k + 1), np.float32))
        buf.free()
        for t in (a, out):
            t.buffer, t.data_offset = None, None


def test_bad_expert_index_raises_naming_the_node(wdev: WebGPUDevice, backend: g.Backend) -> None:
    ctx = g.Context("moe")
    experts = ctx.new_tensor_3d("f32", 32, 4, 3, "experts")
    x = ctx.new_tensor_3d("f32", 32, 1, 2, "x")
    ids = ctx.new_tensor_2d("i32", 1, 2, "ids")
    out = ops.mul_mat_id(experts, x, ids)
    assert wdev.supports_op(out)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
    experts.set_data(np.ones((3, 4, 32), np.float32))
    x.set_data(np.ones((2, 1, 32), np.float32))
    ids.set_data(np.array([[1], [3]], np.int32))  # expert 3 of 3
    with pytest.raises(ComputeError, match="out of range"):
        backend.graph_compute(graph)
    got = out.to_numpy().reshape(2, 1, 4)
    assert (got[0] == 32).all() and not got[1].any()
    buf.free()


def test_argsort_is_a_permutation_even_with_nan_and_ties(wdev: WebGPUDevice, backend: g.Backend) -> None:
    ctx = g.Context("sort")
    a = ctx.new_tensor_2d("f32", 9, 2, "a")
    out = ops.argsort(a, ops.SortOrder.DESC)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
    v = np.array([[3, 1, np.nan, 1, -0.0, 0.0, -np.inf, np.inf, 2], [5, 5, 5, 5, 1, 1, 1, 1, 0]], np.float32)
    a.set_data(v)
    backend.graph_compute(graph)
    got = out.to_numpy().reshape(2, 9)
    for row, idx in zip(v, got, strict=True):
        assert sorted(idx.tolist()) == list(range(9))  # every index once
        finite = [x for x in row[idx] if not np.isnan(x)]
        assert finite == sorted(finite, reverse=True)
    buf.free()
