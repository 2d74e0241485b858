"""UNARY sub-ops on the CPU plugin against float64 numpy written from each definition, plus ggml's quirks:
the GELU f16 table with its ±10 cut-off, GELU_QUICK's table without one, C-style NaN handling, roundf."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from kernel_harness import CpuGraph, gelu_tanh_f64, rng

from ggml_core import OpError, ops
from ggml_cpu.ops.unary import erf


def _erf64(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.reshape(-1)]).reshape(x.shape)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


_REF: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": np.abs,
    "neg": np.negative,
    "tanh": np.tanh,
    "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "sigmoid": _sigmoid,
    "gelu_erf": lambda x: 0.5 * x * (1 + _erf64(x / math.sqrt(2))),
    "silu": lambda x: x * _sigmoid(x),
    "hardswish": lambda x: x * np.clip((x + 3) / 6, 0, 1),
    "hardsigmoid": lambda x: np.clip((x + 3) / 6, 0, 1),
    "exp": np.exp,
    "expm1": np.expm1,
    "softplus": lambda x: np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))),
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
}


@pytest.mark.parametrize("name", sorted(_REF))
def test_unary_matches_float64_definition(name: str) -> None:
    x = np.concatenate([rng(60).standard_normal(500) * 4, np.linspace(-30, 30, 60)]).astype(np.float32)
    g = CpuGraph()
    got = g.compute(getattr(ops, name)(g.tensor(x.reshape(7, -1)))).reshape(-1)
    ref = _REF[name](x.astype(np.float64))
    # float32 rounding of each step; expm1 is computed as exp(x) - 1 by ggml (cancellation near 0)
    atol = 1e-6 if name == "expm1" else 1e-7
    np.testing.assert_allclose(got, ref, rtol=4e-7, atol=atol)


def test_unary_sign_step_relu_and_nan() -> None:
    x = np.array([-2.0, -0.0, 0.0, 3.0, np.nan, -np.inf], np.float32)
    for name, expect in {
        "sgn": [-1, 0, 0, 1, 0, -1],
        "step": [0, 0, 0, 1, 0, 0],
        "relu": [0, 0, 0, 3, 0, 0],
    }.items():
        g = CpuGraph()
        np.testing.assert_array_equal(g.compute(getattr(ops, name)(g.tensor(x))).reshape(-1), expect, err_msg=name)


def test_round_is_half_away_from_zero() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -1.4999999, 1e7 + 1], np.float32)
    g = CpuGraph()
    got = g.compute(ops.round(g.tensor(x))).reshape(-1)
    np.testing.assert_array_equal(got, np.array([1, 2, 3, -1, -3, 0, -1, 1e7 + 1], np.float32))


def test_gelu_uses_an_f16_table_inside_plus_minus_ten() -> None:
    r = rng(61)
    x = np.concatenate([r.uniform(-9.9, 9.9, 2000), [-10.0, -10.5, -1e4, 10.0, 11.5, 1e4]]).astype(np.float32)
    g = CpuGraph()
    got = g.compute(ops.gelu(g.tensor(x))).reshape(-1)
    inside = np.abs(x) < 10
    # the value only depends on f16(x), and it is f16(gelu(f16(x))) to within one f16 step
    xh = x[inside].astype(np.float16).astype(np.float64)
    table = gelu_tanh_f64(xh).astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(got[inside], table, rtol=2**-10, atol=2**-22)
    np.testing.assert_array_equal(got[inside], got[inside].astype(np.float16).astype(np.float32))  # f16 values
    assert np.abs(got[inside] - gelu_tanh_f64(x[inside])).max() > 1e-4  # visibly the table, not the formula
    np.testing.assert_array_equal(got[~inside], np.where(x[~inside] >= 10, x[~inside], 0))  # cut-offs are exact
    # the same f16 bucket gives the same value
    g2 = CpuGraph()
    pair = np.array([1.0, 1.0 + 2.0**-12], np.float32)  # one f16 value
    out = g2.compute(ops.gelu(g2.tensor(pair))).reshape(-1)
    assert out[0] == out[1]


def test_gelu_quick_table_has_no_cutoff() -> None:
    x = np.array([-12.0, -10.0, 1e-31, 12.0, 0.3], np.float32)
    g = CpuGraph()
    got = g.compute(ops.gelu_quick(g.tensor(x))).reshape(-1)
    xh = x.astype(np.float16).astype(np.float64)
    ref = (xh * _sigmoid(1.702 * xh)).astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=2**-10, atol=0)
    assert got[2] == 0.0  # 1e-31 rounds to f16 zero before the lookup
    assert got[3] == np.float32(np.float16(12.0 * _sigmoid(1.702 * 12.0)))


def test_gelu_on_f16_input_reads_the_table_directly() -> None:
    x = np.array([-11.0, -3.0, 0.5, 2.0, 11.0], np.float16)
    g = CpuGraph()
    got = g.compute(ops.gelu(g.tensor(x, "f16"))).reshape(-1)
    assert got.dtype == np.float16
    ref = gelu_tanh_f64(x.astype(np.float64)).astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=2**-10, atol=2**-24)


def test_vectorised_erf_is_accurate() -> None:
    x = np.concatenate([np.linspace(-7, 7, 20001), [0.0, 1e-30, 2.5, -2.5, 40.0]])
    np.testing.assert_allclose(erf(x), _erf64(x), rtol=0, atol=1e-13)


def test_unary_f16_in_f16_out_and_padded_rows() -> None:
    x = rng(62).standard_normal((4, 10)).astype(np.float32)
    g = CpuGraph()
    t = g.tensor(x)
    view = ops.view_2d(t, 6, 4, t.nb[1], 8)  # columns 2..7 of each row: rows are contiguous, not packed
    got = g.compute(ops.silu(view))[0, 0]
    np.testing.assert_allclose(got, x[:, 2:8] * _sigmoid(x[:, 2:8].astype(np.float64)), rtol=4e-7, atol=1e-7)
    g16 = CpuGraph()
    x16 = x.astype(np.float16)
    got16 = g16.compute(ops.tanh(g16.tensor(x16, "f16")))
    assert got16.dtype == np.float16
    np.testing.assert_array_equal(got16[0, 0], np.tanh(x16.astype(np.float64)).astype(np.float16))
    with pytest.raises(OpError, match=r"UNARY.*contiguous rows"):
        ops.exp(ops.transpose(g.tensor(x)))


def test_xielu() -> None:
    x = np.linspace(-5, 5, 41).astype(np.float32)
    alpha_n, alpha_p, beta, eps = 0.8, 0.8, 0.5, -1e-6
    g = CpuGraph()
    got = g.compute(ops.xielu(g.tensor(x), alpha_n, alpha_p, beta, eps)).reshape(-1)
    a_n, a_p = beta + np.log1p(np.exp(alpha_n)), np.log1p(np.exp(alpha_p))
    xd = x.astype(np.float64)
    ref = np.where(xd > 0, a_p * xd * xd + beta * xd, (np.expm1(np.minimum(xd, eps)) - xd) * a_n + beta * xd)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
