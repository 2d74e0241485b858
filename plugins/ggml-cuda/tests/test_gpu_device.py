"""On a real CUDA GPU: the device, memory, copies, streams, events, errors, and MUL_MAT on every kernel path
against the CPU plugin. Every test here skips, with the plugin's exact reason, where there is no CUDA device
(``no CUDA device: no CUDA driver: ImportError: libcuda.so.1 ...``).
"""

from __future__ import annotations

import numpy as np
import pytest

import ggml_core as g
from ggml_core import ops
from ggml_cuda._buffers import CUDABuffer
from ggml_cuda._compile import cache_dir
from ggml_cuda._device import CUDABackend, CUDADevice
from ggml_cuda.ops.matmul import matmul_path

pytestmark = pytest.mark.gpu


def test_device_props(gpu: CUDADevice) -> None:
    p = gpu.props()
    major, minor = gpu.info.compute_capability
    assert p.name == "CUDA0" and p.type == g.DeviceType.GPU
    assert p.extra["arch"] == f"sm_{major}{minor}" == gpu.arch
    assert p.device_id and p.device_id == p.device_id.lower() and p.device_id.count(":") == 2
    assert 0 < p.memory_free <= p.memory_total
    print(f"\n{p.name}: {p.description}, cc {major}.{minor}, {p.memory_total / 2**30:.1f} GiB, bus {p.device_id}")


def test_kernels_are_compiled_natively_for_the_device(gpu: CUDADevice) -> None:
    gpu.programs.function("norm", "k_norm_rows")
    assert list(cache_dir().glob(f"norm-{gpu.arch}-*.cubin")), f"no {gpu.arch} cubin in {cache_dir()}"


def test_buffer_round_trip_memset_and_device_copy(gpu: CUDADevice) -> None:
    rng = np.random.default_rng(0)
    ctx = g.Context()
    a = ctx.new_tensor_1d("f32", 1 << 18, "a")
    b = ctx.new_tensor_1d("f32", 1 << 18, "b")
    buf = g.alloc_ctx_tensors(ctx, gpu.buffer_type())
    assert isinstance(buf, CUDABuffer)
    vals = rng.standard_normal(1 << 18).astype(np.float32)
    a.set_data(vals)
    np.testing.assert_array_equal(a.to_numpy().reshape(-1), vals)
    assert buf.cpy_tensor(a, b)
    np.testing.assert_array_equal(b.to_numpy().reshape(-1), vals)
    buf.memset_tensor(b, 0, offset=4, size=8)
    got = b.to_numpy().reshape(-1)
    assert got[1] == 0 and got[2] == 0 and got[3] == vals[3]
    with pytest.raises(g.OutOfBoundsError):
        buf.write(buf.size - 1, b"xx")
    buf.free()


def test_pinned_upload_async_copies_and_events(gpu: CUDADevice, cpu: g.Device) -> None:
    n = 1 << 16
    hctx, dctx = g.Context("h"), g.Context("d")
    h = hctx.new_tensor_1d("f32", n, "h")
    d = dctx.new_tensor_1d("f32", n, "d")
    pinned = g.alloc_ctx_tensors(hctx, gpu.host_buffer_type())
    dev_buf = g.alloc_ctx_tensors(dctx, gpu.buffer_type())
    vals = np.arange(n, dtype=np.float32)
    h.set_data(vals)
    assert dev_buf.cpy_tensor(h, d)
    b1, b2 = gpu.init_backend(), gpu.init_backend()
    assert isinstance(b1, CUDABackend) and isinstance(b2, CUDABackend)
    b1.set_tensor_async(d, memoryview(vals[::-1].copy()).cast("B"))
    ev = gpu.event_new()
    b1.event_record(ev)
    b2.event_wait(ev)
    out = np.zeros(n, np.float32)
    b2.get_tensor_async(d, memoryview(out).cast("B"))
    b2.synchronize()
    np.testing.assert_array_equal(out, vals[::-1])
    ev.synchronize()
    b1.free()
    b2.free()
    pinned.free()
    dev_buf.free()


def test_allocation_larger_than_the_device_names_it(gpu: CUDADevice) -> None:
    total = gpu.memory()[1]
    with pytest.raises(g.AllocationError, match=r"device CUDA0: cannot allocate .* free\): out of device memory"):
        gpu.buffer_type().alloc_buffer(total + (1 << 30))


def test_bad_row_index_is_reported_at_synchronize(gpu: CUDADevice) -> None:
    ctx = g.Context()
    table = ctx.new_tensor_2d("f32", 16, 4, "table")
    idx = ctx.new_tensor_1d("i32", 2, "idx")
    out = ops.get_rows(table, idx)
    graph = g.build_graph(out)
    be = gpu.init_backend()
    buf = g.alloc_ctx_tensors(ctx, be)
    table.set_data(np.zeros((4, 16), np.float32))
    idx.set_data(np.array([1, 9], np.int32))
    with pytest.raises(g.ComputeError, match="row index was outside its tensor"):
        be.graph_compute(graph)
    idx.set_data(np.array([1, 3], np.int32))
    be.graph_compute(graph)  # the status word was reset
    be.free()
    buf.free()


# ------------------------------------------------------------------------------------------------ MUL_MAT paths


def _nmse(got: np.ndarray, ref: np.ndarray) -> float:
    return float(((got.astype(np.float64) - ref) ** 2).sum() / max((ref.astype(np.float64) ** 2).sum(), 1e-30))


def _mul_mat_on(dev: g.Device, wtype: str, m: int, n: int, k: int, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    ctx = g.Context()
    a = ctx.new_tensor_2d(wtype, k, m, "w")
    b = ctx.new_tensor_2d("f32", k, n, "x")
    out = ops.mul_mat(a, b)
    graph = g.build_graph(out)
    be = dev.init_backend()
    buf = g.alloc_ctx_tensors(ctx, be)
    a.set_data(w)
    b.set_data(x)
    be.graph_compute(graph)
    res = out.to_numpy().reshape(n, m)
    be.free()
    buf.free()
    return res


@pytest.mark.parametrize("n", [1, 3, 8, 9, 64, 130])
@pytest.mark.parametrize(
    "wtype", ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"]
)
def test_mul_mat_paths_match_the_cpu(gpu: CUDADevice, cpu: g.Device, wtype: str, n: int) -> None:
    m, k = 136, 512
    rng = np.random.default_rng(n)
    w = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    x = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    got = _mul_mat_on(gpu, wtype, m, n, k, w, x)
    ref = _mul_mat_on(cpu, wtype, m, n, k, w, x)
    path = matmul_path(g.as_type(wtype), n, gpu.info.compute_capability)
    assert np.isfinite(got).all(), path
    assert _nmse(got, ref) < 5e-4, (path, _nmse(got, ref))
