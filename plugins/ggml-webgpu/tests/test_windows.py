"""Tensors larger than the storage binding: weights of MUL_MAT and tables of GET_ROWS are bound in row windows.

A second registry lowers the binding window to 64 KiB (GGML_WEBGPU_MAX_BINDING), so small tensors take the paths
that real ones (a 262,144-token embedding table) take on a 128 MiB binding. Results are compared with the CPU.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from wgpu_helpers import no_device_reason, webgpu_devices

import ggml_core as g
from ggml_core import ops
from ggml_core.quants import quantize
from ggml_core.testing.plugin_tests import compute_built
from ggml_webgpu import WebGPUDevice, WebGPUReg

WINDOW = 65536


@pytest.fixture(scope="module")
def small() -> Iterator[WebGPUDevice]:
    if not webgpu_devices():
        pytest.skip(no_device_reason())
    reg = WebGPUReg({"GGML_WEBGPU_MAX_BINDING": str(WINDOW)})
    devs = reg.devices
    assert devs, reg.unavailable_reason
    dev = devs[0]
    assert isinstance(dev, WebGPUDevice) and dev.limits.max_binding == WINDOW
    yield dev


@pytest.mark.parametrize("wtype", ["f32", "q8_0", "q4_K"])
def test_mul_mat_with_weights_over_the_window(small: WebGPUDevice, cpu: g.Device, wtype: str) -> None:
    k, m, n = 512, 600, 3
    rng = np.random.default_rng(1)
    w = rng.standard_normal((m, k)).astype(np.float32)
    raw_w = w.tobytes() if wtype == "f32" else quantize(w, wtype).tobytes()
    x = rng.standard_normal((n, k)).astype(np.float32)

    def build(ctx: g.Context) -> tuple[g.Tensor, dict[g.Tensor, bytes]]:
        a = ctx.new_tensor_2d(wtype, k, m, "w")
        b = ctx.new_tensor_2d("f32", k, n, "x")
        return ops.mul_mat(a, b), {a: raw_w, b: x.tobytes()}

    assert len(raw_w) > WINDOW  # really windowed
    got, want = compute_built(small, build), compute_built(cpu, build)
    assert float(((got - want) ** 2).sum() / (want**2).sum()) < 1e-10


def test_get_rows_from_a_table_over_the_window(small: WebGPUDevice, cpu: g.Device) -> None:
    rows, width = 200, 128  # 100 KiB of f32 rows
    table = np.arange(rows * width, dtype=np.float32).reshape(rows, width)
    ids = np.array([0, 199, 57, 128, 127, 3], np.int32)

    def build(ctx: g.Context) -> tuple[g.Tensor, dict[g.Tensor, bytes]]:
        t = ctx.new_tensor_2d("f32", width, rows, "table")
        i = ctx.new_tensor_1d("i32", len(ids), "ids")
        return ops.get_rows(t, i), {t: table.tobytes(), i: ids.tobytes()}

    got = compute_built(small, build)
    assert np.array_equal(got.reshape(len(ids), width), table[ids])
    assert np.array_equal(got, compute_built(cpu, build))


def test_other_ops_over_the_window_are_left_to_other_devices(small: WebGPUDevice) -> None:
    ctx = g.Context("big")
    a = ctx.new_tensor_1d("f32", WINDOW, "a")  # 256 KiB
    assert not small.supports_op(ops.scale(a, 2.0))
    assert small.supports_op(ops.scale(ops.view_1d(a, 1024), 2.0))
