"""NORM/RMS_NORM/L2_NORM + MUL fusion: one dispatch instead of two, the same bits as the two dispatches, and no
fusion where the norm's result is needed (another use, a graph output)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ggml_core as g
from ggml_core import ops
from ggml_webgpu import WebGPUBackend, WebGPUDevice

NORMS: dict[str, Callable[[g.Tensor], g.Tensor]] = {
    "rms_norm": lambda x: ops.rms_norm(x, 1e-6),
    "norm": lambda x: ops.norm(x, 1e-5),
    "l2_norm": lambda x: ops.l2_norm(x, 1e-12),
}


def _run(
    wdev: WebGPUDevice, build: Callable[[g.Context], tuple[list[g.Tensor], list[g.Tensor]]], fusion: bool, seed: int = 0
) -> tuple[list[np.ndarray], int, int]:
    """(outputs, fused pairs, dispatches) of the graph ``build`` makes, on a backend with fusion on or off."""
    ctx = g.Context("f")
    inputs, outs = build(ctx)
    graph = g.build_graph(outs)
    buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
    be = wdev.init_backend()
    assert isinstance(be, WebGPUBackend)
    be.fusion = fusion
    rng = np.random.default_rng(seed)
    for t in inputs:
        t.set_data(rng.standard_normal(t.nelements).astype(np.float32).reshape(tuple(reversed(t.ne))))
    be.graph_compute(graph)
    got = [o.to_numpy().copy() for o in outs]
    steps = len(be._plans[graph.uid].steps)
    fused = be.fused
    be.free()
    buf.free()
    return got, fused, steps


@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("w_ne", [[301, 1, 1, 1], [301, 5, 1, 1], [301, 1, 2, 1]])  # repeated over rows / planes
def test_fused_norm_mul_gives_the_bits_of_the_two_dispatches(
    wdev: WebGPUDevice, cpu: g.Device, norm: str, w_ne: list[int]
) -> None:
    def build(ctx: g.Context) -> tuple[list[g.Tensor], list[g.Tensor]]:
        x = ctx.new_tensor("f32", [301, 5, 2, 1], "x")  # rows of an odd length (not a multiple of 64)
        w = ctx.new_tensor("f32", w_ne, "w")
        return [x, w], [ops.mul(NORMS[norm](x), w)]

    (fused,), n_fused, steps_fused = _run(wdev, build, True)
    (plain,), n_plain, steps_plain = _run(wdev, build, False)
    assert (n_fused, n_plain) == (1, 0) and steps_fused == steps_plain - 1
    assert np.array_equal(fused.view(np.uint32), plain.view(np.uint32))
    # and both are the product the CPU plugin computes (to float rounding of the row sums)
    ctx = g.Context("c")
    xs, (out,) = build(ctx)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, cpu.buffer_type())
    rng = np.random.default_rng(0)
    for t in xs:
        t.set_data(rng.standard_normal(t.nelements).astype(np.float32).reshape(tuple(reversed(t.ne))))
    cpu.init_backend().graph_compute(graph)
    np.testing.assert_allclose(fused, out.to_numpy(), rtol=1e-5, atol=1e-6)
    buf.free()


def test_no_fusion_when_the_norm_has_another_use_or_is_an_output(wdev: WebGPUDevice) -> None:
    def shared(ctx: g.Context) -> tuple[list[g.Tensor], list[g.Tensor]]:
        x, w = ctx.new_tensor("f32", [64, 3], "x"), ctx.new_tensor("f32", [64], "w")
        n = ops.rms_norm(x, 1e-6)
        return [x, w], [ops.add(ops.mul(n, w), n)]  # the norm is read again by the ADD

    def output(ctx: g.Context) -> tuple[list[g.Tensor], list[g.Tensor]]:
        x, w = ctx.new_tensor("f32", [64, 3], "x"), ctx.new_tensor("f32", [64], "w")
        n = ops.rms_norm(x, 1e-6).set_output()
        return [x, w], [ops.mul(n, w), n]

    for build in (shared, output):
        on, n_on, _ = _run(wdev, build, True)
        off, _, _ = _run(wdev, build, False)
        assert n_on == 0
        for a, b in zip(on, off, strict=True):
            assert np.array_equal(a, b)


def test_a_mul_by_the_norm_as_second_operand_is_not_fused(wdev: WebGPUDevice) -> None:
    def build(ctx: g.Context) -> tuple[list[g.Tensor], list[g.Tensor]]:
        x, w = ctx.new_tensor("f32", [64, 3], "x"), ctx.new_tensor("f32", [64, 3], "w")
        return [x, w], [ops.mul(w, ops.rms_norm(x, 1e-6))]

    (on,), n_on, _ = _run(wdev, build, True)
    (off,), _, _ = _run(wdev, build, False)
    assert n_on == 0 and np.array_equal(on, off)
