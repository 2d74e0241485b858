"""Repacked products split over spinning helper threads (``quant/_packed_split.py``).

The split must give the one-thread driver's bits for any number of activation rows, handle non-finite activations
as the one-thread path does, and its helpers must sleep on their futex when idle and wake for the next job (they
never take the GIL once started). Thread-count independence of whole products is also checked through
``test_repacked_products.py`` (``packed_product`` at 2 threads runs this split).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numpy as np
import pytest
from test_repacked_products import _case, _ready

from ggml_core import GGMLType
from ggml_cpu import quant, threads
from ggml_cpu.jit import _jit
from ggml_cpu.jit.halves import F16_VALUES
from ggml_cpu.quant import product, repack


def _split_module() -> object:
    from ggml_cpu.quant import _packed_split

    if _packed_split.jobs() is None or _packed_split.pool(1) is None:
        pytest.skip("the split's kernels did not compile here")
    return _packed_split


def _operands(t: GGMLType, m: int, n: int, blocks: int, seed: int) -> tuple:
    w, x = _case(t, m, n, blocks, seed=seed)
    p = repack.pack(w, t)
    fns = repack.decode_kernels(p) if p is not None else None
    assert p is not None and fns is not None
    k = x.shape[1]
    acts = quant.quantize_activations(x, quant.DOT_TYPE[t])
    xq, xd = np.empty((n, k), np.int8), np.empty_like(acts.d)
    xsum, xs = np.empty_like(acts.sums), np.zeros_like(acts.d)
    nsub = k // p.group
    dx, sx = np.empty((n, nsub), np.float32), np.empty((n, nsub), np.int32)
    out = np.full((n, m), np.nan, np.float32)
    return p, fns, (x, xq, xd, xsum, xs, dx, sx, out)


def _serial(p: repack.Packed, fns: tuple, arrays: tuple) -> np.ndarray:
    x, xq, xd, xsum, xs, dx, sx, out = arrays
    assert fns[1](x, True, p.q, p.s1, p.s2, xq, xd, xsum, xs, F16_VALUES, dx, sx, p.offset, out) == 0
    return out.copy()


@pytest.mark.parametrize("t", [GGMLType.Q4_0, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K], ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 5, 8])
def test_the_split_gives_the_one_thread_bits(t: GGMLType, n: int) -> None:
    _ready(t)
    ps = _split_module()
    p, fns, arrays = _operands(t, 160, n, 2, seed=70 + n)
    one = _serial(p, fns, arrays)
    split = ps.PackedSplit(p, arrays, F16_VALUES, repack.dot_code(p.group, p.has_min), 2, fns[1])
    out = arrays[-1]
    for _ in range(20):  # helpers spinning, and taking parts in varying order
        out[...] = np.nan
        assert split(True) == 0
        np.testing.assert_array_equal(out.view(np.uint32), one.view(np.uint32))


@pytest.mark.parametrize("t", [GGMLType.Q4_0, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K], ids=lambda t: t.name)
def test_a_prompt_batch_quantized_by_every_thread_gives_the_one_thread_bits(t: GGMLType) -> None:
    """40 rows of 512: enough values that the split quantizes them in parts of rows as its own job before the
    product (``SPLIT_QUANTIZE``); quants, sub-block sums and the product are the one-thread driver's bits."""
    _ready(t)
    ps = _split_module()
    n, k = 40, 512
    assert n * k >= ps.SPLIT_QUANTIZE  # this case takes the quantizing phase
    p, fns, arrays = _operands(t, 96, n, k // t.block_size, seed=60)
    one = _serial(p, fns, arrays)
    quants = [a.copy() for a in arrays[1:7]]
    split = ps.PackedSplit(p, arrays, F16_VALUES, repack.dot_code(p.group, p.has_min), 2, fns[1])
    for _ in range(10):
        for a in (*arrays[1:4], *arrays[5:7]):
            a[...] = 0 if a.dtype.kind in "iu" else np.nan
        arrays[-1][...] = np.nan
        assert split(True) == 0
        np.testing.assert_array_equal(arrays[-1].view(np.uint32), one.view(np.uint32))
        for got, ref in zip(arrays[1:7], quants, strict=True):
            np.testing.assert_array_equal(got, ref)
    arrays[0][n - 3, 100] = np.inf  # a non-finite value in a later part of rows: nothing computed, and said so
    arrays[-1][...] = 7.0
    assert split(True) != 0
    assert (arrays[-1] == 7.0).all()


def test_non_finite_activations_compute_nothing_and_say_so() -> None:
    t = GGMLType.Q4_0
    _ready(t)
    ps = _split_module()
    p, fns, arrays = _operands(t, 64, 1, 2, seed=81)
    arrays[0][0, 3] = np.inf
    split = ps.PackedSplit(p, arrays, F16_VALUES, repack.dot_code(p.group, p.has_min), 2, fns[1])
    out = arrays[-1]
    out[...] = 7.0
    assert split(True) != 0
    assert (out == 7.0).all()  # nothing written: the caller quantizes with numpy and runs one thread


def test_a_block_product_at_two_threads_gives_the_one_thread_bits(tmp_path, monkeypatch) -> None:
    """Through ``BlockProduct`` over file-mapped weights: once repacked, 2 threads (the split) and 1 thread agree."""
    import mmap

    t = GGMLType.Q4_K
    _ready(t)
    _split_module()
    w_data, x = _case(t, 320, 1, 2, seed=91)  # enough work to split (product._SPLIT_WORK)
    path = tmp_path / "w.bin"
    path.write_bytes(w_data.tobytes())
    with path.open("rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        w = np.frombuffer(mm, np.uint8).reshape(w_data.shape)
        out = np.empty((1, 320), np.float32)
        bp = quant.block_product(w, t, x, out)
        assert bp is not None
        results = {}
        old = _jit.current_threads()
        try:
            for threads in (1, 2, 2, 1, 2):
                _jit.set_threads(threads)
                for _ in range(product._PACK_AFTER + 1):
                    out[...] = np.nan
                    bp()
                results.setdefault(threads, []).append(out.copy())
        finally:
            _jit.set_threads(old)
        assert bp._repacked and bp._split is not None and bp._split[0] == 2
        for r in results[1] + results[2]:
            np.testing.assert_array_equal(r.view(np.uint32), results[1][-1].view(np.uint32))
        del w, bp
    finally:
        with contextlib.suppress(BufferError):
            mm.close()


def test_idle_helpers_sleep_on_their_futex_and_wake_for_the_next_job() -> None:
    t = GGMLType.Q8_0
    _ready(t)
    ps = _split_module()
    pool = ps.pool(1)
    p, fns, arrays = _operands(t, 128, 1, 2, seed=95)
    one = _serial(p, fns, arrays)
    split = ps.PackedSplit(p, arrays, F16_VALUES, repack.dot_code(p.group, p.has_min), 2, fns[1])
    from ggml_cpu.jit import _spin

    for _ in range(3):
        deadline = time.monotonic() + 5.0  # the spin window is ~0.4 ms of the time-stamp counter
        while pool.ctl[_spin.ASLEEP] != 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert pool.ctl[_spin.ASLEEP] == 1, "the idle helper did not go to sleep"
        arrays[-1][...] = np.nan
        assert split(True) == 0
        np.testing.assert_array_equal(arrays[-1].view(np.uint32), one.view(np.uint32))


def test_a_closed_pool_stops_its_helpers() -> None:
    ps = _split_module()
    fns = ps.jobs()
    pool = ps._Pool(1, fns)
    name = "ggml-cpu-packed-0"
    before = [th for th in threading.enumerate() if th.name == name]
    pool.close()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        alive = [th for th in threading.enumerate() if th.name == name and th.is_alive()]
        if len(alive) < len(before):
            break
        time.sleep(0.005)
    assert len(alive) < len(before), "the helper did not return after close()"


def _quantized_by_helpers(ps: Any, x: np.ndarray, dot: GGMLType) -> Any:
    """``quantize_rows`` until the helpers take the rows: a helper preempted on a loaded machine makes every split
    back off to one thread for a while (``RowSplit``'s stall rule, tested in test_row_split.py), which gives None."""
    for _ in range(50):
        threads.RowSplit._backoff[0] = 0
        got = ps.quantize_rows(x, dot, 2)
        if got is not None:
            return got
    pytest.fail("the helpers did not take the rows in 50 tries")


@pytest.mark.parametrize("dot", [GGMLType.Q8_0, GGMLType.Q8_1, GGMLType.Q8_K], ids=lambda t: t.name)
def test_rows_quantized_by_the_helpers_are_the_one_thread_bytes(dot: GGMLType) -> None:
    """A prompt batch's activations quantized in parts of rows (``quantize_rows``): the bytes, scales, sums and
    Q8_1's ``s`` of :func:`quantize_activations`, which the tests of ``activations`` check against ggml's x86
    ``from_float``; a row holding NaN or infinity gives None (the numpy quantizer defines those bytes)."""
    ps = _split_module()
    x = (np.random.default_rng(7).standard_normal((37, 512)) * 3).astype(np.float32)
    x[5, :256] = 0.0  # an all-zero block
    ref = quant.quantize_activations(x, dot)
    for _ in range(5):
        got = _quantized_by_helpers(ps, x, dot)
        for field in ("q", "d", "sums", "s"):
            np.testing.assert_array_equal(getattr(got, field), getattr(ref, field), err_msg=field)
    x[20, 100] = np.inf
    assert ps.quantize_rows(x, dot, 2) is None


def test_a_prompt_batch_at_two_threads_gives_the_one_thread_bits() -> None:
    """``qmatmul`` of a 40-row batch at 2 threads (activations quantized in parts, the repacked product split)
    gives the 1-thread bits."""
    t = GGMLType.Q4_K
    _ready(t)
    _split_module()
    w, x = _case(t, 64, 40, 2, seed=97)
    outs = []
    old = _jit.current_threads()
    try:
        for threads in (1, 2):
            _jit.set_threads(threads)
            product._last_acts.clear()  # quantize again: no reuse of the other thread count's rows
            out = np.full((40, 64), np.nan, np.float32)
            quant.qmatmul(w, t, x, out)
            outs.append(out)
    finally:
        _jit.set_threads(old)
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


def test_prompt_products_on_the_split_choose_their_threads_themselves() -> None:
    """A prompt product that runs on the split is not also wrapped in a threaded-or-one-thread probe: the probe
    compared different products of one shape (only Q and O quantize their activations) and picked one thread
    about half the time; the split backs off by itself when a helper stalls."""
    _ready(GGMLType.Q4_0)
    _split_module()
    assert quant.splits_itself(GGMLType.Q4_0, 128)
    assert not quant.splits_itself(GGMLType.Q4_0, quant.vec_rows_limit(GGMLType.Q4_0))  # decode rows: block kernels
