"""NORM, RMS_NORM, L2_NORM, GROUP_NORM against float64 numpy from the definitions."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import CpuGraph, rng

from ggml_core import OpError, ops

EPS = 1e-5


def _x(shape: tuple[int, ...] = (2, 3, 5, 37), seed: int = 90) -> np.ndarray:
    return (rng(seed).standard_normal(shape) * 3 + 0.5).astype(np.float32)


def _norm(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    c = x - x.mean(axis=-1, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + EPS)  # biased variance


def _rms(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + EPS)


def _l2(x: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.maximum(np.sqrt((x * x).sum(axis=-1, keepdims=True)), eps)


@pytest.mark.parametrize("name", ["norm", "rms_norm", "l2_norm"])
def test_row_norms(name: str) -> None:
    x = _x()
    g = CpuGraph()
    got = g.compute(getattr(ops, name)(g.tensor(x), EPS))
    ref = {"norm": _norm, "rms_norm": _rms, "l2_norm": lambda v: _l2(v, EPS)}[name](x)
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", ["norm", "rms_norm", "l2_norm"])
def test_row_norms_on_permuted_input(name: str) -> None:
    x = _x((1, 2, 6, 8), 91)
    g = CpuGraph()
    got = g.compute(getattr(ops, name)(ops.permute(g.tensor(x), 1, 0, 2, 3), EPS))  # rows are x's columns
    ref = {"norm": _norm, "rms_norm": _rms, "l2_norm": lambda v: _l2(v, EPS)}[name](x.swapaxes(-1, -2))
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=2e-6)


def test_l2_norm_eps_floor() -> None:
    x = np.zeros((2, 4), np.float32)
    x[1] = [1e-9, 0, 0, 0]
    g = CpuGraph()
    got = g.compute(ops.l2_norm(g.tensor(x), 1e-3))[0, 0]
    np.testing.assert_array_equal(got[0], 0)
    np.testing.assert_allclose(got[1], x[1] / 1e-3, rtol=1e-6)  # divided by eps, not by the tiny norm


def _group_norm(x: np.ndarray, n_groups: int, eps: float) -> np.ndarray:
    """x (n, C, h, w); ceil(C / G) channels per group, the last group takes what is left."""
    out = np.empty(x.shape)
    per = -(-x.shape[1] // n_groups)
    for start in range(0, x.shape[1], per):
        blk = x[:, start : start + per].astype(np.float64)
        mu = blk.mean(axis=(1, 2, 3), keepdims=True)
        var = ((blk - mu) ** 2).mean(axis=(1, 2, 3), keepdims=True)
        out[:, start : start + per] = (blk - mu) / np.sqrt(var + eps)
    return out


@pytest.mark.parametrize("n_groups", [1, 3, 4, 7])
def test_group_norm_group_sizes(n_groups: int) -> None:
    x = _x((2, 7, 3, 5), 92)
    g = CpuGraph()
    got = g.compute(ops.group_norm(g.tensor(x), n_groups, 1e-6))
    np.testing.assert_allclose(got, _group_norm(x, n_groups, 1e-6), rtol=2e-5, atol=2e-5)


def test_group_norm_seven_channels_three_groups_is_3_3_1() -> None:
    """C=7, G=3 → groups {0-2}, {3-5}, {6}: channel 6 alone normalises to mean 0, variance 1."""
    x = _x((1, 7, 2, 4), 93)
    x[:, 6] = x[:, 6] * 100 + 1000  # would dominate any group it shared
    g = CpuGraph()
    got = g.compute(ops.group_norm(g.tensor(x), 3, 1e-6))[0]
    np.testing.assert_allclose(got[6].mean(), 0, atol=1e-5)
    np.testing.assert_allclose(got[6].var(), 1, rtol=1e-4)
    np.testing.assert_allclose(got[3:6].mean(), 0, atol=1e-5)
    with pytest.raises(OpError, match="GROUP_NORM"):
        ops.group_norm(g.tensor(x), 0, 1e-6)
