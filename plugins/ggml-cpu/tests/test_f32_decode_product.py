"""Few-row products of f32 weights (a decode step's): the compiled kernel of ``qdot/_row_kernels.py`` and its split
across the spinning helpers (``compiled.bind_f32_product``).

Checked against the float64 definition on shapes whose K leaves every remainder of the kernel's 64- and 16-value
steps; one thread against two must give the same bits (the split really runs: a silent fallback cannot pass);
MUL_MAT binds the kernel for up to ``F32_ROWS_LIMIT`` rows and BLAS above; and a pool started by these products
alone does not take an f32 model's prompt row kernels (they stay beside OpenBLAS's threads on one core).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from kernel_harness import CpuGraph, _backend, rng

from ggml_core import ops
from ggml_cpu.kernels import compiled

pytest.importorskip("numba")

U = 2.0**-24


@pytest.fixture
def f32_dot() -> object:
    fn = compiled.kernel("F32_DOT_SPEC")
    if fn is None:
        pytest.skip("compiled kernels are off here")
    return fn


@pytest.fixture(autouse=True)
def _restore_threads() -> Iterator[None]:
    before = _backend().n_threads
    yield
    _backend().set_n_threads(before)


def _bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A float32 error bound for each ``b · aᵀ`` output: K roundings of the largest term sums."""
    return a.shape[1] * U * (np.abs(b).astype(np.float64) @ np.abs(a).astype(np.float64).T) + 1e-30


@pytest.mark.parametrize("k", [1, 15, 16, 17, 63, 64, 65, 100, 512, 1000])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_kernel_gives_the_definition(f32_dot: object, k: int, n: int) -> None:
    r = rng(k * 10 + n)
    m = 37
    w = r.standard_normal((m, k)).astype(np.float32)
    x = r.standard_normal((n, k)).astype(np.float32)
    out = np.full((n, m), np.nan, np.float32)
    p = np.array([k, m, n, k, k, m], np.int64)
    f32_dot(w.ravel(), x.ravel(), out.ravel(), p)  # type: ignore[operator]
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.all(np.abs(out - ref) <= _bound(w, x))


def test_kernel_reads_strided_rows_and_writes_only_its_outputs(f32_dot: object) -> None:
    """Row strides wider than K (views): the gap between rows is neither read into a sum nor written."""
    r = rng(5)
    k, m, n, ws, xs, os_ = 70, 9, 3, 80, 75, 12
    wbuf = r.standard_normal(m * ws).astype(np.float32)
    xbuf = r.standard_normal(n * xs).astype(np.float32)
    for i in range(m):
        wbuf[i * ws + k : (i + 1) * ws] = np.nan  # a NaN read into any sum would show
    obuf = np.full(n * os_, -7.0, np.float32)
    f32_dot(wbuf, xbuf, obuf, np.array([k, m, n, ws, xs, os_], np.int64))  # type: ignore[operator]
    w = np.stack([wbuf[i * ws : i * ws + k] for i in range(m)])
    x = np.stack([xbuf[j * xs : j * xs + k] for j in range(n)])
    out = obuf.reshape(n, os_)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.all(np.abs(out[:, :m] - ref) <= _bound(w, x))
    assert np.all(out[:, m:] == -7.0)


def _mul_mat(m: int, k: int, n: int, seed: int) -> tuple[CpuGraph, object, np.ndarray, np.ndarray]:
    r = rng(seed)
    w = r.standard_normal((m, k)).astype(np.float32)
    x = r.standard_normal((n, k)).astype(np.float32)
    g = CpuGraph()
    return g, ops.mul_mat(g.tensor(w), g.tensor(x)), w, x


def test_mul_mat_binds_the_kernel_and_two_threads_give_one_threads_bits(
    f32_dot: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = compiled.row_split_parts()
    if parts is None:
        pytest.skip("the row split's kernels did not compile here (not Linux x86-64)")
    calls: list[int] = []
    original = parts.RowJob.__call__

    def counted(self: object) -> int:
        calls.append(1)
        return int(original(self))

    monkeypatch.setattr(parts.RowJob, "__call__", counted)
    g, out, w, x = _mul_mat(1536, 512, 1, 11)  # 786,432 weights: split at two threads
    _backend().set_n_threads(1)
    one = g.compute(out)[0, 0].copy()
    assert not calls
    _backend().set_n_threads(2)
    two = [g.compute(out)[0, 0].copy() for _ in range(5)]
    assert calls, "two threads did not run the split"
    for t in two:
        np.testing.assert_array_equal(t, one)
    # the kernel's bits, not BLAS's: the same as calling it directly
    direct = np.empty((1, 1536), np.float32)
    f32_dot(w.ravel(), x.ravel(), direct.ravel(), np.array([512, 1536, 1, 512, 512, 1536], np.int64))  # type: ignore[operator]
    np.testing.assert_array_equal(one, direct)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.all(np.abs(one - ref) <= _bound(w, x))


def test_more_rows_than_the_limit_use_blas() -> None:
    n = compiled.F32_ROWS_LIMIT + 1
    g, out, w, x = _mul_mat(64, 96, n, 12)
    np.testing.assert_array_equal(g.compute(out)[0, 0], np.matmul(x, w.T))


def test_a_pool_of_f32_products_alone_leaves_prompt_rows_on_this_thread(f32_dot: object) -> None:
    """``_packed_split.running`` says whether row kernels may use the helpers: not after f32 products alone."""
    from ggml_cpu.kernels.qdot import _packed_split

    if compiled.row_split_parts() is None:
        pytest.skip("the row split's kernels did not compile here (not Linux x86-64)")
    pools = dict(_packed_split._pools)
    try:
        _packed_split._pools.clear()  # a fresh process's state (the helpers started before keep running)
        g, out, _, _ = _mul_mat(1024, 256, 1, 13)
        _backend().set_n_threads(2)
        g.compute(out)  # starts a pool (one helper) of its own
        assert 1 in _packed_split._pools
        assert not _packed_split.running(2)
        assert _packed_split.pool(1, quantized=True) is not None
        assert _packed_split.running(2)
    finally:
        extra = _packed_split._pools.get(1)
        _packed_split._pools.clear()
        _packed_split._pools.update(pools)
        if extra is not None and pools.get(1) is not extra:
            extra.close()
