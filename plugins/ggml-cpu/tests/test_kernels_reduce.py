"""SUM, SUM_ROWS, MEAN, CUMSUM, ARGMAX, COUNT_EQUAL, ARGSORT, TOP_K against numpy from the definitions."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import CpuGraph, rng

from ggml_core import OpError, ops
from ggml_core.ops import SortOrder


def _x(shape: tuple[int, ...] = (2, 3, 5, 37), seed: int = 80) -> np.ndarray:
    return (rng(seed).standard_normal(shape) * 3).astype(np.float32)


def test_sum_sum_rows_mean() -> None:
    x = _x()
    g = CpuGraph()
    t = g.tensor(x)
    s, sr, m = ops.sum(t), ops.sum_rows(t), ops.mean(t)
    assert s.ne == (1, 1, 1, 1) and sr.ne == (1, 5, 3, 2) and m.ne == (1, 5, 3, 2)
    got_s = g.compute(s, sr, m)
    np.testing.assert_allclose(got_s.reshape(-1), x.astype(np.float64).sum(), rtol=1e-6)
    np.testing.assert_allclose(sr.to_numpy(), x.astype(np.float64).sum(axis=-1, keepdims=True), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(m.to_numpy(), x.astype(np.float64).mean(axis=-1, keepdims=True), rtol=1e-6, atol=1e-7)


def test_sums_of_permuted_views_and_f16() -> None:
    x = _x((1, 2, 6, 8))
    g = CpuGraph()
    got = g.compute(ops.sum_rows(ops.permute(g.tensor(x), 1, 0, 2, 3)))  # rows are x's columns
    np.testing.assert_allclose(got[0, :, :, 0], x[0].sum(axis=1), rtol=1e-6, atol=1e-6)
    g16 = CpuGraph()
    t16 = g16.tensor(x.astype(np.float16), "f16")
    out = ops.sum(t16)
    assert out.type.name == "F16"
    got16 = g16.compute(out)
    np.testing.assert_allclose(float(got16.reshape(-1)[0]), x.astype(np.float16).astype(np.float64).sum(), rtol=1e-3)


def test_cumsum_runs_in_float32() -> None:
    x = _x((1, 2, 3, 50))
    g = CpuGraph()
    got = g.compute(ops.cumsum(g.tensor(x)))
    expect = np.empty_like(x)
    acc = np.zeros(x.shape[:-1], np.float32)
    for i in range(x.shape[-1]):  # y[i] = y[i-1] + x[i], one float32 addition at a time
        acc = (acc + x[..., i]).astype(np.float32)
        expect[..., i] = acc
    np.testing.assert_array_equal(got, expect)


def test_argmax_takes_the_last_of_equal_maxima() -> None:
    m = np.array(
        [[1, 5, 5, 2], [7, 7, 7, 7], [-1, -3, -1, -2], [0, 2, 1, 2]],
        np.float32,
    )
    g = CpuGraph()
    got = g.compute(ops.argmax(g.tensor(m))).reshape(-1)
    np.testing.assert_array_equal(got, [2, 3, 2, 3])  # numpy's argmax would say [1, 0, 0, 1]
    r = rng(81)
    big = np.round(r.standard_normal((20, 30)) * 2).astype(np.float32)
    g2 = CpuGraph()
    got2 = g2.compute(ops.argmax(g2.tensor(big))).reshape(-1)
    np.testing.assert_array_equal(got2, [max(np.nonzero(row == row.max())[0]) for row in big])


def test_argmax_nan_follows_the_c_loop() -> None:
    # MAX(max, NaN) is NaN (no index update), then MAX(NaN, next) takes the next value: the NaN row restarts
    row = np.array([[3.0, 9.0, np.nan, 1.0, 2.0]], np.float32)
    g = CpuGraph()
    assert g.compute(ops.argmax(g.tensor(row))).reshape(-1)[0] == 4
    with pytest.raises(OpError, match=r"ARGMAX.*matrix"):
        ops.argmax(g.tensor(np.zeros((2, 3, 4), np.float32)))


def test_count_equal_counts_every_element() -> None:
    r = rng(82)
    a = r.integers(0, 3, (2, 4, 3, 9)).astype(np.int32)
    b = r.integers(0, 3, (2, 4, 3, 9)).astype(np.int32)
    g = CpuGraph()
    out = ops.count_equal(g.tensor(a, "i32"), g.tensor(b, "i32"))
    assert out.type.name == "I64"
    assert int(g.compute(out).reshape(-1)[0]) == int((a == b).sum())


@pytest.mark.parametrize("order", [SortOrder.ASC, SortOrder.DESC])
def test_argsort(order: SortOrder) -> None:
    x = _x((2, 3, 4, 33), 83)
    g = CpuGraph()
    got = g.compute(ops.argsort(g.tensor(x), order))
    assert got.dtype == np.int32
    sorted_vals = np.take_along_axis(x, got.astype(np.int64), axis=-1)
    expect = np.sort(x, axis=-1)
    np.testing.assert_array_equal(sorted_vals, expect if order == SortOrder.ASC else expect[..., ::-1])
    assert np.all(np.sort(got, axis=-1) == np.arange(33))  # a permutation of each row


def test_top_k_is_the_set_of_the_k_largest() -> None:
    x = _x((2, 3, 4, 40), 84)
    g = CpuGraph()
    out = ops.top_k(g.tensor(x), 6)
    assert out.ne == (6, 4, 3, 2)
    got = g.compute(out)
    expect = np.argsort(-x, axis=-1)[..., :6]
    np.testing.assert_array_equal(np.sort(got, axis=-1), np.sort(expect, axis=-1))  # compare as sets
    # ggml's CPU order: descending with the first two swapped
    np.testing.assert_array_equal(got[..., 2:], expect[..., 2:])
    np.testing.assert_array_equal(got[..., :2], expect[..., 1::-1])
    g2 = CpuGraph()
    view = ops.argsort_top_k(g2.tensor(x), 3)
    np.testing.assert_array_equal(g2.compute(view), expect[..., :3])
    with pytest.raises(OpError, match="TOP_K"):
        ops.top_k(g2.tensor(x), 41)
