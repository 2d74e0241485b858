"""Many-row products of f32 weights (a prompt batch's): the register tiles of ``quant/_gemm_kernels.py`` and their
split across the spinning helpers (``matmul.bind_f32_product`` above ``F32_ROWS_LIMIT`` rows).

Checked against the float64 definition on shapes that leave every remainder of the tiles (weight rows, activation
rows) and of the vector width in K; every output must have the same bits wherever it sits in a tile (so edge tiles
and any thread split cannot change a result); one thread against two must give the same bits with the split
really running; and a pool these products start takes the batch's row kernels too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from kernel_harness import _backend, count_row_jobs, f32_dot_bound, f32_mul_mat, restore_threads, rng  # noqa: F401 - the fixture

from ggml_cpu.ops import _compiled

pytest.importorskip("numba")


@pytest.fixture
def tiles() -> tuple[Any, Any]:
    """(the compiled kernel, its module)."""
    fn = _compiled.kernel("F32_GEMM_SPEC", module="ggml_cpu.quant._gemm_kernels")
    if fn is None:
        pytest.skip("compiled kernels are off here")
    from ggml_cpu.quant import _gemm_kernels

    return fn, _gemm_kernels


pytestmark = pytest.mark.usefixtures("restore_threads")


def _run(fn: Any, mod: Any, w: np.ndarray, x: np.ndarray, block: int | None = None) -> np.ndarray:
    (m, k), n = w.shape, x.shape[0]
    out = np.full((n, m), np.nan, np.float32)
    p = np.array([k, m, n, k, k, m, block or mod.block_tokens(k, n)], np.int64)
    fn(np.ascontiguousarray(w).ravel(), np.ascontiguousarray(x).ravel(), out.ravel(), p)
    return out


@pytest.mark.parametrize("k", [1, 7, 15, 16, 17, 33, 100, 512, 1000])
@pytest.mark.parametrize(("m", "n"), [(1, 5), (4, 6), (5, 7), (6, 11), (37, 13), (64, 128)])
def test_tiles_give_the_definition(tiles: tuple[Any, Any], k: int, m: int, n: int) -> None:
    fn, mod = tiles
    r = rng(k * 1000 + m * 10 + n)
    w = r.standard_normal((m, k)).astype(np.float32)
    x = r.standard_normal((n, k)).astype(np.float32)
    out = _run(fn, mod, w, x)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.all(np.abs(out - ref) <= f32_dot_bound(w, x))


def test_several_activation_blocks_give_the_definition(tiles: tuple[Any, Any]) -> None:
    """Blocks of activation rows narrower than the batch (each a pass over the weights), the last one short."""
    fn, mod = tiles
    r = rng(3)
    w = r.standard_normal((23, 300)).astype(np.float32)
    x = r.standard_normal((41, 300)).astype(np.float32)
    whole = _run(fn, mod, w, x, block=x.shape[0])
    for block in (mod.TILE_N, 2 * mod.TILE_N, 3 * mod.TILE_N):
        np.testing.assert_array_equal(_run(fn, mod, w, x, block=block), whole)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.all(np.abs(whole - ref) <= f32_dot_bound(w, x))


def test_an_outputs_bits_do_not_depend_on_its_place_in_a_tile(tiles: tuple[Any, Any]) -> None:
    """The same rows multiplied as parts of other tiles (shifted by one, or as a short edge tile) give the same bits:
    what makes any split of the tiles across threads give one thread's result."""
    fn, mod = tiles
    r = rng(4)
    k = 2 * mod.LANES + 3
    w = r.standard_normal((3 * mod.TILE_M + 2, k)).astype(np.float32)
    x = r.standard_normal((3 * mod.TILE_N + 1, k)).astype(np.float32)
    whole = _run(fn, mod, w, x)
    np.testing.assert_array_equal(_run(fn, mod, w[1:], x[1:]), whole[1:, 1:])
    np.testing.assert_array_equal(_run(fn, mod, w[:1], x[2:3]), whole[2:3, :1])
    np.testing.assert_array_equal(_run(fn, mod, w[2 : 2 + mod.TILE_M], x[:-1]), whole[:-1, 2 : 2 + mod.TILE_M])


def test_strided_rows_are_read_and_written_only_where_they_are(tiles: tuple[Any, Any]) -> None:
    """Row strides wider than K (views): the gap between rows is neither read into a sum nor written."""
    fn, mod = tiles
    r = rng(5)
    k, m, n, ws, xs, os_ = 70, 11, 9, 80, 75, 14
    wbuf = r.standard_normal(m * ws).astype(np.float32)
    xbuf = r.standard_normal(n * xs).astype(np.float32)
    for i in range(m):
        wbuf[i * ws + k : (i + 1) * ws] = np.nan  # a NaN read into any sum would show
    for j in range(n):
        xbuf[j * xs + k : (j + 1) * xs] = np.nan
    obuf = np.full(n * os_, -7.0, np.float32)
    fn(wbuf, xbuf, obuf, np.array([k, m, n, ws, xs, os_, mod.block_tokens(k, n)], np.int64))
    w = np.stack([wbuf[i * ws : i * ws + k] for i in range(m)])
    x = np.stack([xbuf[j * xs : j * xs + k] for j in range(n)])
    out = obuf.reshape(n, os_)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.all(np.abs(out[:, :m] - ref) <= f32_dot_bound(w, x))
    assert np.all(out[:, m:] == -7.0)


def test_non_finite_values_propagate_as_in_the_definition(tiles: tuple[Any, Any]) -> None:
    fn, mod = tiles
    r = rng(6)
    w = r.standard_normal((7, 40)).astype(np.float32)
    x = r.standard_normal((6, 40)).astype(np.float32)
    w[2, 5], x[3, 39], x[4, 0] = np.inf, np.nan, -np.inf
    with np.errstate(invalid="ignore"):
        ref = x.astype(np.float64) @ w.astype(np.float64).T
    out = _run(fn, mod, w, x)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(ref))
    finite = np.isfinite(ref)
    assert np.all(np.abs(out[finite] - ref[finite]) <= f32_dot_bound(np.nan_to_num(w), np.nan_to_num(x))[finite])


def test_the_tiles_use_the_cpus_widest_vectors(tiles: tuple[Any, Any]) -> None:
    """16 lanes where the CPU has AVX-512, 8 elsewhere; a tile's accumulators and operands fit the registers."""
    from ggml_cpu._cpu import cpuinfo as _cpuinfo

    _, mod = tiles
    flags = set(_cpuinfo("flags").split())
    import numba

    if getattr(numba.config, "CPU_NAME", None) is None and flags:
        assert (16 if "avx512f" in flags else 8) == mod.LANES
    registers = 32 if mod.LANES == 16 else 16
    assert registers >= mod.TILE_M * mod.TILE_N + mod.TILE_M + 1


def test_mul_mat_binds_the_tiles_and_two_threads_give_one_threads_bits(
    tiles: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fn, mod = tiles
    calls = count_row_jobs(monkeypatch)
    g, out, w, x = f32_mul_mat(1000, 128, 37, 11)
    _backend().set_n_threads(1)
    one = g.compute(out)[0, 0].copy()
    assert not calls
    _backend().set_n_threads(2)
    two = [g.compute(out)[0, 0].copy() for _ in range(5)]
    assert calls, "two threads did not run the split"
    for t in two:
        np.testing.assert_array_equal(t, one)
    np.testing.assert_array_equal(one, _run(fn, mod, w, x))  # the tiles' bits, not BLAS's
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    assert np.all(np.abs(one - ref) <= f32_dot_bound(w, x))


def test_a_pool_the_tiles_start_takes_the_batchs_row_kernels(tiles: tuple[Any, Any]) -> None:
    """An f32 prompt multiplies on the helpers (not OpenBLAS's threads), so its row kernels may use them too."""
    from ggml_cpu.quant import _packed_split

    if _compiled.row_split_parts() is None:
        pytest.skip("the row split's kernels did not compile here (not Linux x86-64)")
    pools = dict(_packed_split._pools)
    try:
        _packed_split._pools.clear()  # a fresh process's state (the helpers started before keep running)
        g, out, _, _ = f32_mul_mat(1024, 256, 16, 13)
        _backend().set_n_threads(2)
        assert not _packed_split.running(2)
        g.compute(out)
        assert _packed_split.running(2)
    finally:
        extra = _packed_split._pools.get(1)
        _packed_split._pools.clear()
        _packed_split._pools.update(pools)
        if extra is not None and pools.get(1) is not extra:
            extra.close()
