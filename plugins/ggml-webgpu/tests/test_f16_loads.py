"""f16 loads through the hardware conversion (``_f16``): chosen only when probed exact, and then the same bits as
the integer decoding in real kernels (every f16 bit pattern through CPY, an f16 matrix product)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import ggml_core as g
from ggml_core import ops
from ggml_core.testing.plugin_tests import compute_built
from ggml_webgpu import WebGPUDevice, WebGPUReg, _f16, _shaders


@pytest.fixture(scope="module")
def integer_dev(wdev: WebGPUDevice) -> Iterator[WebGPUDevice]:
    """A second device on WebGPU0's adapter, opened with GGML_WEBGPU_F16=0 (the integer decoding)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("GGML_WEBGPU_F16", "0")
    (dev,) = WebGPUReg({"GGML_WEBGPU_ADAPTERS": str(wdev.info.index)}).devices
    assert isinstance(dev, WebGPUDevice)
    dev.init_backend().free()  # opens it while the variable is set
    mp.undo()
    yield dev


def _cpy_all_patterns(dev: WebGPUDevice) -> np.ndarray:
    ctx = g.Context("c")
    x = ctx.new_tensor_1d("f16", 65536, "x")
    out = ops.cpy(x, ctx.new_tensor_1d("f32", 65536, "y"))
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, dev.buffer_type())
    x.set_bytes(np.arange(65536, dtype=np.uint16).tobytes())
    be = dev.init_backend()
    be.graph_compute(graph)
    got = np.frombuffer(buf.read(out.data_offset, 65536 * 4), np.uint32).copy()
    be.free()
    buf.free()
    return got


def _mul_mat_f16(ctx: g.Context) -> tuple[g.Tensor, dict[g.Tensor, bytes]]:
    rng = np.random.default_rng(5)
    a, b = ctx.new_tensor_2d("f16", 97, 33, "a"), ctx.new_tensor_2d("f32", 97, 3, "b")
    w = rng.standard_normal((33, 97)).astype(np.float16)
    w.flat[::7] = np.float16(3e-6)  # f16 subnormals among the weights
    return ops.mul_mat(a, b), {a: w.tobytes(), b: rng.standard_normal((3, 97)).astype(np.float32).tobytes()}


def test_the_probe_decides_and_props_say_so(wdev: WebGPUDevice, integer_dev: WebGPUDevice) -> None:
    assert integer_dev.f16_loads == "integer (GGML_WEBGPU_F16=0)" and not integer_dev.pipelines.native_f16
    wdev.init_backend().free()
    assert wdev.props().extra["f16 loads"] == wdev.f16_loads
    assert wdev.pipelines.native_f16 == wdev.f16_loads.startswith("unpack2x16float"), wdev.f16_loads


def test_native_loads_give_the_integer_bits(wdev: WebGPUDevice, integer_dev: WebGPUDevice) -> None:
    """WebGPU0 (native loads where probed exact) against the integer decoding, in real kernels."""
    if not wdev.pipelines.native_f16:
        pytest.skip(f"{wdev.name} keeps the integer f16 loads: {wdev.f16_loads}")
    native, integer = _cpy_all_patterns(wdev), _cpy_all_patterns(integer_dev)
    want = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(native[~nan], integer[~nan])
    assert np.array_equal(integer[~nan], want[~nan].view(np.uint32))  # both are numpy's (exact) widening
    assert np.isnan(native[nan].view(np.float32)).all() and np.isnan(integer[nan].view(np.float32)).all()
    got = compute_built(wdev, _mul_mat_f16).view(np.uint32)
    assert np.array_equal(got, compute_built(integer_dev, _mul_mat_f16).view(np.uint32))


def test_the_native_source_replaces_exactly_the_load() -> None:
    src = _shaders.family_source("matmul", True)
    assert _f16.NATIVE_F16_TO_F32 in src and src.count("fn f16_to_f32") == 1
    assert _shaders.family_source("matmul", False).count("unpack2x16float") == 0
    with pytest.raises(ValueError, match="f16_to_f32"):
        _f16.native_source("fn other() {}\n")
