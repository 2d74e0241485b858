"""A prompt's row kernels split across the spinning helpers (``ops/_row_parts.py``), and the compiled mask scan.

Each op is computed on one thread and on two, on shapes big enough to split (rows cut into parts that do not align
with the tensors' dims, so the row walk across ``i1 / i2 / i3`` is exercised), and must give the same bits: every
row is the same code either way. Each case also checks that the split really ran (a silent fallback to one thread
cannot pass), and the one-thread result against numpy written from the op's definition.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from kernel_harness import CpuGraph, _backend, count_row_jobs, restore_threads, rng  # noqa: F401 - the fixture

from ggml_core import ComputeError, Tensor, ops
from ggml_cpu.ops import _compiled, attention, matmul

pytest.importorskip("numba")

U = 2.0**-24


@pytest.fixture
def parts() -> object:
    mod = _compiled.row_split_parts()
    if mod is None:
        pytest.skip("the row split's kernels did not compile here (numba off, or not Linux x86-64)")
    from ggml_cpu.quant import _packed_split

    assert _packed_split.pool(1, batch=True) is not None  # as a quantized model's first prompt product starts it
    assert mod.helping(2)  # type: ignore[attr-defined]
    return mod


@pytest.fixture
def split_calls(parts: object, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the row jobs run (each a split across the helpers, or its own fallback on a stall)."""
    return count_row_jobs(monkeypatch)


def _threads(n: int) -> None:
    _backend().set_n_threads(n)


pytestmark = pytest.mark.usefixtures("restore_threads")


def _one_and_two(build: Callable[[CpuGraph], Tensor], calls: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """``build``'s graph on one thread, then the same plan on two (asserting the split ran)."""
    g = CpuGraph()
    out = build(g)
    _threads(1)
    one = g.compute(out).copy()
    assert not calls, "one thread must not split"
    _threads(2)
    two = g.compute(out).copy()
    assert calls, "two threads did not run the row split"
    return one, two


def test_swiglu_split_gives_the_one_thread_bits(split_calls: list[int]) -> None:
    r = rng(30)
    x = (r.standard_normal((2, 3, 37, 256)) * 5).astype(np.float32)  # 222 rows, cut into 8 parts
    gate = r.standard_normal((2, 3, 37, 256)).astype(np.float32)
    one, two = _one_and_two(lambda g: ops.swiglu_split(g.tensor(x), g.tensor(gate)), split_calls)
    np.testing.assert_array_equal(two, one)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(one, x64 / (1 + np.exp(-x64)) * gate, rtol=8 * U, atol=1e-30)


def test_rms_norm_and_mul_split_gives_the_one_thread_bits(split_calls: list[int]) -> None:
    r = rng(31)
    x = r.standard_normal((1, 5, 61, 96)).astype(np.float32)
    w = r.standard_normal(96).astype(np.float32)

    def build(g: CpuGraph) -> Tensor:
        return ops.mul(ops.rms_norm(g.tensor(x), 1e-6), g.tensor(w))

    one, two = _one_and_two(build, split_calls)
    np.testing.assert_array_equal(two, one)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(one, want, rtol=16 * U, atol=1e-6)


def test_rope_split_gives_the_one_thread_bits(split_calls: list[int]) -> None:
    r = rng(32)
    n_tok, heads, dims = 40, 7, 64  # above the in-kernel angle limit: the table path, split over (head, token)
    x = r.standard_normal((1, n_tok, heads, dims)).astype(np.float32)
    pos = np.arange(n_tok, dtype=np.int32) * 3

    def build(g: CpuGraph) -> Tensor:
        return ops.rope(g.tensor(x), g.tensor(pos, "i32"), dims)

    one, two = _one_and_two(build, split_calls)
    np.testing.assert_array_equal(two, one)
    theta = pos[:, None].astype(np.float64) * 10000.0 ** (-np.arange(0, dims, 2) / dims)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[0, ..., 0::2].astype(np.float64), x[0, ..., 1::2].astype(np.float64)
    np.testing.assert_allclose(one[0, ..., 0::2], x0 * c - x1 * s, atol=2e-4)
    np.testing.assert_allclose(one[0, ..., 1::2], x0 * s + x1 * c, atol=2e-4)


@pytest.mark.parametrize("dst_type", ["f32", "f16"])
def test_set_rows_split_gives_the_one_thread_bits(split_calls: list[int], dst_type: str) -> None:
    r = rng(33)
    dst = r.standard_normal((1, 1, 700, 128)).astype(np.float32)
    src = r.standard_normal((1, 1, 300, 128)).astype(np.float32)
    idx = r.permutation(700)[:300].reshape(1, 1, 300)

    def build(g: CpuGraph) -> Tensor:
        d = g.tensor(dst.astype(np.float16) if dst_type == "f16" else dst, dst_type)
        return ops.set_rows(d, g.tensor(src), g.tensor(idx, "i64"))

    one, two = _one_and_two(build, split_calls)
    np.testing.assert_array_equal(two, one)
    want = (dst.astype(np.float16) if dst_type == "f16" else dst).astype(np.float32)
    want[0, 0, idx[0, 0]] = src[0, 0].astype(np.float16) if dst_type == "f16" else src[0, 0]
    np.testing.assert_array_equal(one, want)


def test_set_rows_into_a_transposed_cache_split_by_channel_blocks(split_calls: list[int]) -> None:
    """A transposed V cache's store, its channel blocks split across threads: the one-thread bits, the definition."""
    r = rng(34)
    n_kv, n_tok, d = 300, 128, 200  # 13 blocks of 16 channels, the last one partial
    cache = r.standard_normal((1, 1, n_kv * d, 1)).astype(np.float16)
    v = r.standard_normal((1, 1, n_tok, d)).astype(np.float32)
    cells = r.permutation(n_kv)[:n_tok]
    idx = (np.arange(d)[None, :] * n_kv + cells[:, None]).reshape(1, 1, -1)

    def build(g: CpuGraph) -> Tensor:
        vt = ops.reshape_2d(g.tensor(v), 1, n_tok * d)
        return ops.set_rows(g.tensor(cache, "f16"), vt, g.tensor(idx, "i64"))

    one, two = _one_and_two(build, split_calls)
    np.testing.assert_array_equal(two, one)
    want = cache.reshape(d, n_kv).astype(np.float32)
    want[:, cells] = v[0, 0].T.astype(np.float16)
    np.testing.assert_array_equal(one.reshape(d, n_kv), want)


def test_set_rows_split_bad_index_is_an_error_naming_the_node(split_calls: list[int]) -> None:
    g = CpuGraph()
    idx = np.arange(300)
    idx[217] = 400  # one bad index in a later part
    out = ops.set_rows(g.tensor(np.zeros((400, 128), np.float32)), g.tensor(np.ones((300, 128), np.float32)),
                       g.tensor(idx, "i64"))  # fmt: skip
    _threads(2)
    with pytest.raises(ComputeError, match=r"destination row index 400 is outside 0\.\.399"):
        g.compute(out)
    assert split_calls


def test_batch_softmax_split_gives_the_serial_bits(parts: object) -> None:
    soft = attention.batch_soft_max_kernel()
    assert soft is not None
    r = rng(34)
    heads, n_tok, used, n_kv = 6, 45, 50, 64
    scores = (r.standard_normal((heads, n_tok, used)) * 4).astype(np.float32)
    mask = np.where(np.arange(n_kv)[None, :] <= np.arange(n_tok)[:, None] + 5, 0.0, -np.inf).astype(np.float32)
    one, two = np.full((heads, n_tok, n_kv), np.nan, np.float32), np.full((heads, n_tok, n_kv), np.nan, np.float32)
    s1, s2 = scores.copy(), scores.copy()
    soft(s1, mask, one, used, 0.125, 0, heads)
    shapes = np.array([heads, n_tok, used, n_kv, n_tok, used], np.int64)
    job = parts.RowJob(parts.SOFT_MAX, (s2, mask, two), shapes, (0.125,), heads * n_tok, 2,  # type: ignore[attr-defined]
                       lambda: pytest.fail("the helpers were expected to run"))  # fmt: skip
    assert job() == 0
    np.testing.assert_array_equal(two, one)
    w = scores.astype(np.float64) * 0.125 + mask[:, :used]
    e = np.exp(w - w.max(-1, keepdims=True))
    np.testing.assert_allclose(one[..., :used], e / e.sum(-1, keepdims=True), rtol=64 * U, atol=1e-12)
    assert not one[..., used:].any()


@pytest.mark.parametrize("case", ["causal", "random", "none", "nan", "all"])
def test_used_columns_kernel_equals_the_numpy_scan(case: str, monkeypatch: pytest.MonkeyPatch) -> None:

    fn = matmul.used_columns_kernel()
    if fn is None:
        pytest.skip("compiled kernels unavailable here")
    r = rng(35)
    m = np.where(np.arange(256)[None, :] <= np.arange(100)[:, None], 0.0, -np.inf).astype(np.float32)
    if case == "random":
        m = np.where(r.random((100, 256)) < 0.01, r.standard_normal((100, 256)), -np.inf).astype(np.float32)
    elif case == "none":
        m[:] = -np.inf
    elif case == "nan":
        m[:] = -np.inf
        m[7, 203] = np.nan  # not −inf: used
    elif case == "all":
        m[:] = 0.0
    got = matmul.used_columns(m)
    assert got == int(fn(m))
    monkeypatch.setattr(matmul, "used_columns_kernel", lambda: None)
    assert got == matmul.used_columns(m)
    cols = np.flatnonzero((m != -np.inf).any(axis=0))
    assert got == (int(cols[-1]) + 1 if cols.size else 0)
