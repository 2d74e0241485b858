"""SILU on contiguous float32 as one compiled call (:mod:`ggml_cpu.ops._unary_kernels`): ggml's
``x / (1 + expf(-x))`` in float32 steps, the same bits as the numpy path, and the numpy path for other layouts."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from kernel_harness import CpuGraph, rng

from ggml_core import UnaryOp, ops
from ggml_cpu.jit import _jit
from ggml_cpu.ops import unary

pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _compiled() -> None:
    if not _jit.enabled():
        pytest.skip("compiled kernels unavailable here (numba off or failed to build)")


def _silu_f32_steps(x: np.ndarray) -> np.ndarray:
    """``x / (1 + exp(-x))``: exp in float64 rounded once to float32 (libm's ``expf``), then float32 steps."""
    with np.errstate(all="ignore"):
        e = np.exp(-x.astype(np.float64)).astype(np.float32)
        return (x / (np.float32(1.0) + e)).astype(np.float32)


def _inputs(n: int, seed: int) -> np.ndarray:
    x = (rng(seed).standard_normal(n) * 12).astype(np.float32)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, -88.0, -89.0, -104.0, -105.0, 88.7, 89.0, 1e-30, -1e-30, 3e38]
    x[: len(edges)] = edges
    return x


def _no_numpy_silu(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the numpy path's SILU count its calls (it still computes)."""
    calls: list[int] = []
    numpy_silu: Callable[[np.ndarray], np.ndarray] = unary.UNARY_FUNCS[UnaryOp.SILU]

    def counted(x: np.ndarray) -> np.ndarray:
        calls.append(x.size)
        return numpy_silu(x)

    monkeypatch.setitem(unary.UNARY_FUNCS, UnaryOp.SILU, counted)
    return calls


def test_contiguous_silu_is_one_compiled_call_with_ggml_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _no_numpy_silu(monkeypatch)
    x = _inputs(3 * 5 * 1000, 70).reshape(3, 5, 1000)
    g = CpuGraph()
    got = g.compute(ops.silu(g.tensor(x)))[0]
    assert calls == []  # the compiled kernel ran, not the numpy path
    np.testing.assert_array_equal(got, _silu_f32_steps(x))  # NaN in the same places, every other bit equal
    assert got.dtype == np.float32


def test_inplace_silu_runs_the_in_place_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _no_numpy_silu(monkeypatch)
    x = _inputs(2 * 3000, 72).reshape(2, 3000)
    g = CpuGraph()
    t = g.tensor(x)
    got = g.compute(ops.silu(ops.scale(t, 1.0), inplace=True))[0, 0]  # SILU writes over SCALE's output
    assert calls == []
    np.testing.assert_array_equal(got, _silu_f32_steps(x))


def test_silu_of_padded_rows_takes_the_numpy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _no_numpy_silu(monkeypatch)
    x = _inputs(4 * 40, 71).reshape(4, 40)
    g = CpuGraph()
    t = g.tensor(x)
    view = ops.view_2d(t, 30, 4, t.nb[1], 20)  # columns 5..34 of each row: contiguous rows, not packed
    got = g.compute(ops.silu(view))[0, 0]
    assert calls == [120]
    np.testing.assert_array_equal(got, _silu_f32_steps(x[:, 5:35]))


def test_compiled_silu_equals_the_numpy_path_over_the_float32_range() -> None:
    from ggml_cpu.ops._unary_kernels import SILU_SPEC

    fn = _jit.get(SILU_SPEC)
    assert fn is not None
    # every 509th float32 bit pattern: all exponents, both signs, NaNs and infinities
    x = np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32).view(np.float32)
    out = np.empty_like(x)
    fn(x, out)
    with np.errstate(all="ignore"):
        ref = unary.silu(x)
    same = (out.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(out) & np.isnan(ref))
    assert same.all(), x[~same][:8]
    np.testing.assert_array_equal(out, _silu_f32_steps(x))
