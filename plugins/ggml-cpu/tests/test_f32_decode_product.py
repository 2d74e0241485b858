"""Few-row products of f32 weights (a decode step's): the compiled kernel of ``ops/_matmul_kernels.py`` and its split
across the spinning helpers (``matmul.bind_f32_product``).

Checked against the float64 definition on shapes whose K leaves every remainder of the kernel's 64- and 16-value
steps; one thread against two must give the same bits (the split really runs: a silent fallback cannot pass);
MUL_MAT binds the kernel for up to ``F32_ROWS_LIMIT`` rows and the tiles of ``test_f32_tiles.py`` above; and a
pool started by these products alone does not take a prompt's row kernels (the prompt's products may run on
OpenBLAS's threads, which spin after each product).
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import _backend, count_row_jobs, f32_dot_bound, f32_mul_mat, restore_threads, rng  # noqa: F401 - the fixture

from ggml_cpu.ops import _compiled, matmul

pytest.importorskip("numba")


@pytest.fixture
def f32_dot() -> object:
    fn = _compiled.kernel("F32_DOT_SPEC", module="_matmul_kernels")
    if fn is None:
        pytest.skip("compiled kernels are off here")
    return fn


pytestmark = pytest.mark.usefixtures("restore_threads")


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
    assert np.all(np.abs(out - ref) <= f32_dot_bound(w, x))


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
    assert np.all(np.abs(out[:, :m] - ref) <= f32_dot_bound(w, x))
    assert np.all(out[:, m:] == -7.0)


def test_mul_mat_binds_the_kernel_and_two_threads_give_one_threads_bits(
    f32_dot: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_row_jobs(monkeypatch)
    g, out, w, x = f32_mul_mat(1536, 512, 1, 11)  # 786,432 weights: split at two threads
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
    assert np.all(np.abs(one - ref) <= f32_dot_bound(w, x))


def test_more_rows_than_the_limit_use_the_tiles() -> None:
    fn = _compiled.kernel("F32_GEMM_SPEC", module="ggml_cpu.quant._gemm_kernels")
    if fn is None:
        pytest.skip("compiled kernels are off here")
    from ggml_cpu.quant._gemm_kernels import block_tokens

    n = matmul.F32_ROWS_LIMIT + 1
    g, out, w, x = f32_mul_mat(64, 96, n, 12)
    direct = np.empty((n, 64), np.float32)
    fn(w.ravel(), x.ravel(), direct.ravel(), np.array([96, 64, n, 96, 96, 64, block_tokens(96, n)], np.int64))
    np.testing.assert_array_equal(g.compute(out)[0, 0], direct)


def test_a_pool_of_f32_products_alone_leaves_prompt_rows_on_this_thread(f32_dot: object) -> None:
    """``_packed_split.running`` says whether row kernels may use the helpers: not after f32 products alone."""
    from ggml_cpu.quant import _packed_split

    if _compiled.row_split_parts() is None:
        pytest.skip("the row split's kernels did not compile here (not Linux x86-64)")
    pools = dict(_packed_split._pools)
    try:
        _packed_split._pools.clear()  # a fresh process's state (the helpers started before keep running)
        g, out, _, _ = f32_mul_mat(1024, 256, 1, 13)
        _backend().set_n_threads(2)
        g.compute(out)  # starts a pool (one helper) of its own
        assert 1 in _packed_split._pools
        assert not _packed_split.running(2)
        assert _packed_split.pool(1, batch=True) is not None
        assert _packed_split.running(2)
    finally:
        extra = _packed_split._pools.get(1)
        _packed_split._pools.clear()
        _packed_split._pools.update(pools)
        if extra is not None and pools.get(1) is not extra:
            extra.close()
