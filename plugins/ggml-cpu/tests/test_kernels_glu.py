"""GLU family (REGLU, GEGLU, SWIGLU, GEGLU_ERF, GEGLU_QUICK, SWIGLU_OAI): fused, swapped and split forms."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from kernel_harness import CpuGraph, gelu_tanh_f64, rng

from ggml_core import OpError, ops


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _f16_table(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """fn read from a table at f16(x), the table holding f16 results (ggml's GELU tables)."""
    return lambda x: fn(x.astype(np.float16).astype(np.float64)).astype(np.float16).astype(np.float64)


_ACT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "reglu": lambda x: np.maximum(x, 0),
    "geglu": lambda x: np.where(x <= -10, 0, np.where(x >= 10, x, _f16_table(gelu_tanh_f64)(x))),
    "swiglu": lambda x: x * _sigmoid(x),
    "geglu_erf": lambda x: (
        0.5 * x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x.reshape(-1)]).reshape(x.shape))
    ),
    "geglu_quick": _f16_table(lambda x: x * _sigmoid(1.702 * x)),
}
_TABLE_BASED = {"geglu", "geglu_quick"}


def _rows(seed: int) -> np.ndarray:
    x = rng(seed).standard_normal((2, 5, 64)).astype(np.float32) * 4
    x[0, 0, :6] = [-10.5, -10.0, 10.0, 12.0, 1e-30, -3.0]
    return x


def _check(name: str, got: np.ndarray, x: np.ndarray, gate: np.ndarray) -> None:
    ref = _ACT[name](x.astype(np.float64)) * gate.astype(np.float64)
    if name in _TABLE_BASED:  # one f16 step of the activation, times the gate
        tol = 2**-10 * np.abs(_ACT[name](x.astype(np.float64)) * gate) + 1e-6
        assert np.all(np.abs(got - ref) <= tol), np.abs(got - ref).max()
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(_ACT))
@pytest.mark.parametrize("form", ["fused", "swapped", "split"])
def test_glu_f32(name: str, form: str) -> None:
    x = _rows(70)
    g = CpuGraph()
    if form == "split":
        other = _rows(71)[..., :64]
        out = getattr(ops, f"{name}_split")(g.tensor(x), g.tensor(other))
        got = g.compute(out)[0]
        _check(name, got, x, other)
        return
    t = g.tensor(x)
    out = getattr(ops, f"{name}_swapped")(t) if form == "swapped" else getattr(ops, name)(t)
    assert out.ne[0] == 32
    got = g.compute(out)[0]
    first, second = x[..., :32], x[..., 32:]
    act, gate = (second, first) if form == "swapped" else (first, second)
    _check(name, got, act, gate)


@pytest.mark.parametrize("name", sorted(_ACT))
def test_glu_f16(name: str) -> None:
    x = _rows(72).astype(np.float16)
    g = CpuGraph()
    got = g.compute(getattr(ops, name)(g.tensor(x, "f16")))[0]
    assert got.dtype == np.float16
    act, gate = x[..., :32].astype(np.float64), x[..., 32:].astype(np.float64)
    # GEGLU on f16 reads the table for every value (no ±10 cut-off); the product is rounded to f16
    fn = _f16_table(gelu_tanh_f64) if name == "geglu" else _ACT[name]
    ref = fn(act) * gate
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-3, atol=1e-4)


def test_glu_fused_and_split_agree_and_old_style_call() -> None:
    x = _rows(73)
    g = CpuGraph()
    t = g.tensor(x)
    fused = ops.swiglu(t)
    split = ops.swiglu(ops.view_3d(t, 32, 5, 2, t.nb[1], t.nb[2], 0), ops.view_3d(t, 32, 5, 2, t.nb[1], t.nb[2], 128))
    got = g.compute(fused, split)
    np.testing.assert_array_equal(got, split.to_numpy())


def test_swiglu_oai() -> None:
    x, gate = _rows(74)[..., :32], _rows(75)[..., :32]
    alpha, limit = 1.702, 7.0
    g = CpuGraph()
    got = g.compute(ops.swiglu_oai(g.tensor(x), g.tensor(gate), alpha, limit))[0]
    xc = np.minimum(x.astype(np.float64), limit)
    gc = np.clip(gate.astype(np.float64), -limit, limit)
    np.testing.assert_allclose(got, xc * _sigmoid(alpha * xc) * (gc + 1), rtol=1e-6, atol=1e-6)


def test_glu_checks() -> None:
    g = CpuGraph()
    with pytest.raises(OpError, match=r"GLU.*even"):
        ops.geglu(g.tensor(np.zeros((2, 7), np.float32)))
    with pytest.raises(OpError, match=r"GLU.*same shape"):
        ops.geglu_split(g.tensor(np.zeros((2, 8), np.float32)), g.tensor(np.zeros((2, 4), np.float32)))
    with pytest.raises(OpError, match=r"GLU.*contiguous"):
        ops.reglu(ops.transpose(g.tensor(np.zeros((6, 8), np.float32))))
