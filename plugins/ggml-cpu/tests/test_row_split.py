"""One-row (decode) block products split over threads (``threads.RowSplit``, ``jit/_spin``) against the float64
definition and bit for bit against one thread.

A split product cuts the weight rows into parts that the calling thread and spinning helper threads claim; every
part is the one-thread kernel on whole rows (multiples of 4), so the result must be the one-thread result exactly,
whoever ran which part, and both must agree with ggml's definition (activations rounded through the dot type, then
the product in float64) to float rounding.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from kernel_harness import rng

import ggml_core as gc
from ggml_core import GGMLType
from ggml_core.quants import dequantize, quantize
from ggml_cpu import quant, threads
from ggml_cpu.quant import product

TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k"]


def _reference(w: np.ndarray, t: GGMLType, x: np.ndarray) -> np.ndarray:
    """ggml's definition in float64: activations rounded through the dot type; Q4_1/Q5_1 add m·s (s in f16)."""
    dot = quant.DOT_TYPE[t]
    xq = quant.from_float(x, dot)
    xd = dequantize(xq, dot).astype(np.float64)
    wd = dequantize(w, t).astype(np.float64)
    if t not in (GGMLType.Q4_1, GGMLType.Q5_1):
        return xd @ wd.T
    m = np.ascontiguousarray(w.reshape(w.shape[0], -1, t.type_size)[..., 2:4]).view("<f2")[..., 0].astype(np.float64)
    s = np.ascontiguousarray(xq.reshape(x.shape[0], -1, 36)[..., 2:4]).view("<f2")[..., 0].astype(np.float64)
    return xd @ (wd - np.repeat(m, 32, axis=1)).T + s @ m.T


def _product(t: GGMLType, m: int, k: int, seed: int = 3) -> tuple[product.BlockProduct, np.ndarray, np.ndarray]:
    r = rng(seed)
    w = quantize(r.standard_normal((m, k)).astype(np.float32), t)
    x = (r.standard_normal((1, k)) * 4).astype(np.float32)
    out = np.full((1, m), np.nan, np.float32)
    bp = product.block_product(w, t, x, out)
    assert bp is not None
    return bp, w, out


def _need_kernels(t: GGMLType) -> None:
    if not quant.block_kernels_ready(t):
        pytest.skip(f"no compiled block kernels: {quant.disabled_reason()}")


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize(("m", "n_threads"), [(1, 2), (6, 2), (37, 2), (250, 3), (1027, 2)])
def test_split_equals_one_thread_and_the_definition(name: str, m: int, n_threads: int) -> None:
    """Row counts below, at and off multiples of 4 and of the part count; more parts than helpers (3 threads)."""
    t = gc.as_type(name)
    _need_kernels(t)
    k = 512
    bp, w, out = _product(t, m, k)
    serial = bp._serial
    assert serial(*bp._args) == 0
    one = out.copy()
    ref = _reference(w, t, bp._x)
    assert np.abs(one - ref).max() <= 2e-6 * np.abs(ref).max()
    split = bp._split_for(n_threads)
    for _ in range(40):  # both variants of the chooser, and the helpers awake and asleep
        out[...] = np.nan
        split(*bp._args)
        np.testing.assert_array_equal(out.view(np.uint32), one.view(np.uint32))
    parts = product._SplitProduct(serial, _jobs(t, serial), bp._args, n_threads)
    for _ in range(20):  # the split alone (never the one-thread variant)
        out[...] = np.nan
        assert parts(*bp._args) == 0
        np.testing.assert_array_equal(out.view(np.uint32), one.view(np.uint32))


def _jobs(t: GGMLType, serial: object) -> tuple[object, object]:
    from ggml_cpu.jit import _spin

    jobs = _spin.block_jobs(serial, t.name.lower())
    assert jobs is not None
    return jobs


def test_large_split_many_parts() -> None:
    """A product over 16 MB of weights is cut into 4 parts per thread: same bits."""
    t = GGMLType.Q8_0
    _need_kernels(t)
    bp, _, out = _product(t, 16 * 1024 + 5, 1024, seed=4)
    bp._serial(*bp._args)
    one = out.copy()
    parts = product._SplitProduct(bp._serial, _jobs(t, bp._serial), bp._args, 2)
    assert len(parts._rows._parts) == 1 + 8
    for _ in range(5):
        out[...] = np.nan
        parts(*bp._args)
        np.testing.assert_array_equal(out.view(np.uint32), one.view(np.uint32))


def test_split_non_finite_activations() -> None:
    """NaN / inf in the activations: quantized by the numpy reference, then split — the one-thread bits."""
    t = GGMLType.Q4_0
    _need_kernels(t)
    bp, _, out = _product(t, 300, 256)
    bp._x[0, 5] = np.inf
    bp._x[0, 200] = np.nan
    quant.set_threads(1)
    try:
        bp()
        one = out.copy()
        quant.set_threads(2)
        for _ in range(10):
            out[...] = 0.0
            bp()
            np.testing.assert_array_equal(out.view(np.uint32), one.view(np.uint32))
    finally:
        quant.set_threads(1)
    assert np.isnan(one[0, :32]).any()


def test_split_from_several_threads_at_once() -> None:
    """Callers on several Python threads share the helpers: whoever finds them busy runs its product alone."""
    t = GGMLType.Q8_0
    _need_kernels(t)
    products = [_product(t, 200 + 8 * i, 512, seed=10 + i) for i in range(4)]
    expected = []
    for bp, _, out in products:
        bp._serial(*bp._args)
        expected.append(out.copy())
    errors: list[str] = []

    def work(i: int) -> None:
        bp, _, out = products[i]
        parts = product._SplitProduct(bp._serial, _jobs(t, bp._serial), bp._args, 2)
        for _ in range(200):
            out[...] = np.nan
            parts(*bp._args)
            if not np.array_equal(out, expected[i]):
                errors.append(f"product {i} differs")
                return

    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert not any(w.is_alive() for w in workers), "a split product hung"
    assert not errors, errors


def test_row_split_without_helpers_runs_every_part() -> None:
    """One thread: the parts in turn; the first (the quantizer) only with ``quant``, and a non-zero result from it
    (non-finite activations) stops the rest."""
    calls: list[int] = []
    split = threads.RowSplit((None, None), None, [(calls.append, (i,)) for i in range(3)], 1)
    assert split(True) == 0 and calls == [0, 1, 2]
    assert split(False) == 0 and calls == [0, 1, 2, 1, 2]
    bad = threads.RowSplit((None, None), None, [(lambda: 3, ()), (calls.append, (9,))], 1)
    assert bad(True) != 0 and calls[-1] == 2


def test_split_backs_off_to_one_thread_after_a_stall() -> None:
    """While backing off (after a helper stalled), a split product runs the one-thread kernel: the same bits."""
    t = GGMLType.Q4_0
    _need_kernels(t)
    bp, _, out = _product(t, 96, 256)
    bp._serial(*bp._args)
    one = out.copy()
    parts = product._SplitProduct(bp._serial, _jobs(t, bp._serial), bp._args, 2)
    threads.RowSplit._backoff[0] = 3
    before = list(threads.RowSplit.counts)
    try:
        for left in (2, 1, 0):
            out[...] = np.nan
            assert parts(*bp._args) == 0
            assert threads.RowSplit._backoff[0] == left
            np.testing.assert_array_equal(out.view(np.uint32), one.view(np.uint32))
    finally:
        threads.RowSplit._backoff[0] = 0
    # the counters bench_e2e reports: three calls on one thread while backing off, none on the helpers
    assert threads.RowSplit.counts[2] - before[2] == 3 and threads.RowSplit.counts[0] == before[0]
    parts(*bp._args)  # no backoff left: the helpers take part (counted as run, stalled or not)
    assert threads.RowSplit.counts[0] - before[0] == 1


@pytest.mark.parametrize("on", [False, True])
def test_block_product_calls_with_and_without_the_split(on: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``BlockProduct.__call__`` at 2 threads, split on (``GGML_CPU_ROW_SPLIT=1``) or off (the default):
    the one-thread bits, and the split built only when on."""
    t = GGMLType.Q8_0
    _need_kernels(t)
    monkeypatch.setattr(product, "_ROW_SPLIT", on)
    bp, _, out = _product(t, 1024, 512, seed=7)
    bp._small = False
    bp._serial(*bp._args)
    one = out.copy()
    quant.set_threads(2)
    try:
        for _ in range(20):
            out[...] = np.nan
            bp()
            np.testing.assert_array_equal(out.view(np.uint32), one.view(np.uint32))
    finally:
        quant.set_threads(1)
    assert (bp._split is not None) == (on and quant.max_threads() > 1)
