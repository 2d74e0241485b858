"""Binary ops with ggml's repeat-broadcasting, ADD1, ADD_ID, SCALE, CLAMP, LEAKY_RELU, SQR/SQRT/LOG/SIN/COS."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import CpuGraph, rng

from ggml_core import ComputeError, OpError, ops

_NP = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def _tile_to(b: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """ggml's broadcasting: b repeated (not stretched) until it has ``shape``."""
    return np.tile(b, tuple(s // n for s, n in zip(shape, b.shape, strict=True)))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize(
    "b_shape",
    [(3, 4, 6, 8), (1, 1, 1, 8), (1, 2, 3, 8), (3, 1, 2, 4), (1, 1, 1, 1)],
    ids=lambda s: "x".join(map(str, s)),
)
def test_binary_repeats_b_over_a(op: str, b_shape: tuple[int, ...]) -> None:
    r = rng(50)
    a = r.standard_normal((3, 4, 6, 8)).astype(np.float32)
    b = (r.standard_normal(b_shape) + 3).astype(np.float32)
    g = CpuGraph()
    got = g.compute(getattr(ops, op)(g.tensor(a), g.tensor(b)))
    np.testing.assert_array_equal(got, _NP[op](a, _tile_to(b, a.shape)))


@pytest.mark.parametrize("a_type,b_type", [("f16", "f32"), ("f16", "f16"), ("bf16", "bf16"), ("f32", "f16")])
def test_binary_mixed_types_round_to_the_result_type(a_type: str, b_type: str) -> None:
    r = rng(51)
    a = r.standard_normal((2, 5, 16)).astype(np.float32)
    b = r.standard_normal((1, 1, 16)).astype(np.float32)
    g = CpuGraph()
    ta, tb = g.tensor(a, a_type), g.tensor(b, b_type)
    out = ops.mul(ta, tb)
    assert out.type == ta.type
    got = g.compute(out)
    av, bv = ta.to_numpy().astype(np.float32), tb.to_numpy().astype(np.float32)  # the stored (rounded) inputs
    prod = (av * bv).astype(np.float32)
    expect = prod.astype(np.float16) if a_type == "f16" else prod
    if a_type == "bf16":  # round to nearest even on the top 16 bits
        bits = prod.view(np.uint32).astype(np.uint64)
        expect = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    np.testing.assert_array_equal(got, expect)


def test_binary_non_contiguous_operands_and_inplace() -> None:
    r = rng(52)
    a = r.standard_normal((4, 6)).astype(np.float32)
    b = r.standard_normal((2, 3)).astype(np.float32)
    g = CpuGraph()
    ta = ops.transpose(g.tensor(a))  # ne [4, 6]: a's transpose, not contiguous
    tb = ops.transpose(g.tensor(b))  # ne [2, 3] repeats 2x2 over [4, 6]
    got = g.compute(ops.sub(ta, tb))
    np.testing.assert_array_equal(got[0, 0], a.T - np.tile(b.T, (2, 2)))
    g2 = CpuGraph()
    t = g2.tensor(a)
    out = ops.add(t, g2.tensor(np.ones((1, 6), np.float32)), inplace=True)
    assert out.view_src is t
    got2 = g2.compute(out)
    np.testing.assert_array_equal(got2[0, 0], a + 1)
    np.testing.assert_array_equal(t.to_numpy()[0, 0], a + 1)


def test_binary_rejects_b_that_does_not_tile_a() -> None:
    g = CpuGraph()
    with pytest.raises(OpError, match=r"ADD.*repeat"):
        ops.add(g.tensor(np.zeros((4, 6), np.float32)), g.tensor(np.zeros((3, 4), np.float32)))


def test_add1_and_add_id() -> None:
    r = rng(53)
    a = r.standard_normal((2, 3, 5)).astype(np.float32)
    g = CpuGraph()
    got = g.compute(ops.add1(g.tensor(a), g.tensor(np.array([1.25], np.float32))))
    np.testing.assert_array_equal(got[0], a + np.float32(1.25))
    # add_id: a [n, n_used, n_tokens], b [n, n_expert], ids [n_used, n_tokens]
    x = r.standard_normal((4, 2, 8)).astype(np.float32)
    bias = r.standard_normal((5, 8)).astype(np.float32)
    ids = np.array([[0, 4], [2, 2], [1, 3], [4, 0]], np.int32)
    g2 = CpuGraph()
    got2 = g2.compute(ops.add_id(g2.tensor(x), g2.tensor(bias), g2.tensor(ids, "i32")))
    np.testing.assert_array_equal(got2[0], x + bias[ids])
    g3 = CpuGraph()
    bad = np.array([[0, 5], [2, 2], [1, 3], [4, 0]], np.int32)
    out = ops.add_id(g3.tensor(x), g3.tensor(bias), g3.tensor(bad, "i32"))
    with pytest.raises(ComputeError, match=r"index 5 is outside 0\.\.4"):
        g3.compute(out)


def test_scale_and_scale_bias() -> None:
    x = rng(54).standard_normal((3, 33)).astype(np.float32) * 10
    g = CpuGraph()
    np.testing.assert_array_equal(g.compute(ops.scale(g.tensor(x), 0.37))[0, 0], x * np.float32(0.37))
    g2 = CpuGraph()
    got = g2.compute(ops.scale_bias(g2.tensor(x), 0.37, -1.3))[0, 0]
    # ggml fuses x*s + b into one multiply-add: one rounding of the exact result
    exact = (x.astype(np.float64) * np.float64(np.float32(0.37)) + np.float64(np.float32(-1.3))).astype(np.float32)
    np.testing.assert_array_equal(got, exact)


def test_clamp_and_leaky_relu_follow_c_ternaries() -> None:
    x = np.array([-3.0, -1.0, 0.0, 0.5, 2.0, 7.0, np.nan, -np.inf, np.inf], np.float32)
    g = CpuGraph()
    got = g.compute(ops.clamp(g.tensor(x), -1.5, 2.0)).reshape(-1)
    # MAX(MIN(x, max), min): a NaN fails both comparisons and becomes max
    np.testing.assert_array_equal(got, np.array([-1.5, -1.0, 0.0, 0.5, 2.0, 2.0, 2.0, -1.5, 2.0], np.float32))
    g2 = CpuGraph()
    got2 = g2.compute(ops.leaky_relu(g2.tensor(x), 0.1)).reshape(-1)
    expect = np.array([-0.3, -0.1, 0.0, 0.5, 2.0, 7.0, 0.0, -np.inf, np.inf], np.float32)
    np.testing.assert_allclose(got2, expect, rtol=1e-7)


@pytest.mark.parametrize("op", ["sqr", "sqrt", "log", "sin", "cos"])
def test_simple_math(op: str) -> None:
    x = rng(55).uniform(0.01, 20, (2, 3, 17)).astype(np.float32)
    ref = {"sqr": np.square, "sqrt": np.sqrt, "log": np.log, "sin": np.sin, "cos": np.cos}[op](x.astype(np.float64))
    g = CpuGraph()
    got = g.compute(getattr(ops, op)(g.tensor(x)))
    np.testing.assert_allclose(got[0], ref, rtol=2e-7, atol=1e-7)
    g16 = CpuGraph()
    got16 = g16.compute(getattr(ops, op)(g16.tensor(x.astype(np.float16), "f16")))
    assert got16.dtype == np.float16
