"""Kernel paths the conformance cases do not reach, compared with the CPU plugin on the same bytes: the tiled
SGEMM (16+ activation rows) with broadcasting over dims 2-3, permuted activations and weights in row windows;
circular padding.

Tolerance: both sides multiply the same f32 values (weights decoded with ggml's arithmetic, activations rounded
to the weight type's dot type); only the summation order differs, so NMSE stays at float32 rounding (< 1e-10).
"""

from __future__ import annotations

import numpy as np
import pytest

import ggml_core as g
from ggml_core import ops
from ggml_core.quants import quantize
from ggml_core.testing.plugin_tests import Build, compute_built
from ggml_webgpu import WebGPUDevice, WebGPUReg
from ggml_webgpu.ops.matmul import SGEMM_MIN_COLUMNS


def _case(wtype: str, m: int, n: int, k: int, bs: tuple[int, int], nr: tuple[int, int], perm_b: bool) -> Build:
    rng = np.random.default_rng(m * n + k)
    wa = rng.standard_normal((bs[1], bs[0], m, k)).astype(np.float32)
    raw_a = wa.tobytes() if wtype == "f32" else quantize(wa.reshape(-1, k), wtype).tobytes()
    nb2, nb3 = bs[0] * nr[0], bs[1] * nr[1]
    xb = rng.standard_normal((nb3, nb2, n, k)).astype(np.float32)

    def build(ctx: g.Context) -> tuple[g.Tensor, dict[g.Tensor, bytes]]:
        a = ctx.new_tensor_4d(wtype, k, m, bs[0], bs[1], "a")
        if perm_b:  # stored [k, nb2, n, nb3], viewed as [k, n, nb2, nb3]
            raw = ctx.new_tensor_4d("f32", k, nb2, n, nb3, "b")
            b = ops.permute(raw, 0, 2, 1, 3)
            data = np.ascontiguousarray(xb.transpose(0, 2, 1, 3)).tobytes()
        else:
            raw = b = ctx.new_tensor_4d("f32", k, n, nb2, nb3, "b")
            data = xb.tobytes()
        return ops.mul_mat(a, b), {a: raw_a, raw: data}

    return build


@pytest.mark.parametrize(
    ("wtype", "m", "n", "k", "bs", "nr", "perm_b"),
    [
        ("f32", 70, 67, 40, (1, 1), (1, 1), False),  # no multiple of the 64 tile or the 16-step K
        ("f16", 33, 20, 64, (2, 3), (2, 2), False),  # broadcast over dims 2 and 3
        ("q4_0", 16, 17, 64, (2, 1), (3, 1), True),  # permuted activations
        ("q8_0", 65, 16, 96, (1, 1), (1, 1), False),
        ("q4_K", 20, 24, 256, (1, 2), (1, 1), False),
        ("q6_K", 8, 31, 512, (1, 1), (1, 1), False),
    ],
)
def test_tiled_sgemm_matches_the_cpu(
    wdev: WebGPUDevice,
    cpu: g.Device,
    wtype: str,
    m: int,
    n: int,
    k: int,
    bs: tuple[int, int],
    nr: tuple[int, int],
    perm_b: bool,
) -> None:
    assert n >= SGEMM_MIN_COLUMNS
    build = _case(wtype, m, n, k, bs, nr, perm_b)
    got, want = compute_built(wdev, build), compute_built(cpu, build)
    assert float(((got - want) ** 2).sum() / (want**2).sum()) < 1e-10


def test_tiled_sgemm_over_weight_windows(wdev: WebGPUDevice, cpu: g.Device) -> None:
    """64 KiB windows: the f32 copy of the weights is packed and multiplied in several row windows."""
    small = WebGPUReg({"GGML_WEBGPU_MAX_BINDING": "65536"}).devices[0]
    build = _case("q8_0", 300, 20, 256, (1, 1), (1, 1), False)  # 300 x 256 f32 = 300 KiB packed
    got, want = compute_built(small, build), compute_built(cpu, build)
    assert float(((got - want) ** 2).sum() / (want**2).sum()) < 1e-10


def test_circular_padding_matches_the_cpu(wdev: WebGPUDevice, cpu: g.Device) -> None:
    """PAD's wrap-around mode (no conformance case yet): left and right pads on every dimension."""
    v = np.arange(5 * 4 * 3 * 2, dtype=np.float32).reshape(2, 3, 4, 5)

    def build(ctx: g.Context) -> tuple[g.Tensor, dict[g.Tensor, bytes]]:
        a = ctx.new_tensor_4d("f32", 5, 4, 3, 2, "a")
        return ops.pad_ext_circular(a, 2, 3, 1, 0, 0, 2, 1, 1), {a: v.tobytes()}

    got, want = compute_built(wdev, build), compute_built(cpu, build)
    assert np.array_equal(got, want)
    assert np.array_equal(got, np.pad(v, ((1, 1), (0, 2), (1, 0), (2, 3)), mode="wrap"))
