"""Few-row products (decode) reading the repacked weights (``BlockProduct._repack``, ``repack.decode_kernels``).

A block product over weights mapped read-only from a file switches, after its first calls, to the repacked form
that prompt batches use (4-bit types at half a byte a weight). Checked here against the float64 definition (the
bound of ``test_repacked_products.py``), against the prompt route's bits (the same lane tiles on the same quantized
activations), across thread counts (bit for bit), for rows holding NaN (the numpy quantizer's bytes, as the block
kernels do), and that weights in writable memory never switch (their bytes may change under a cached repack).
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_repacked_products import TYPES, _case, _packed, _ready, _reference

from ggml_core import GGMLType
from ggml_cpu import quant
from ggml_cpu.jit import _jit
from ggml_cpu.jit.halves import F16_VALUES
from ggml_cpu.quant import product, repack


@pytest.fixture
def mapped(tmp_path: Path) -> Iterator[list[mmap.mmap]]:
    """Read-only file mappings made by :func:`_map`, closed at the end."""
    maps: list[mmap.mmap] = []
    yield maps
    for mm in maps:
        with contextlib.suppress(BufferError):  # a view still alive (a failed assertion's frame): unmapped later
            mm.close()


def _map(maps: list[mmap.mmap], tmp_path: Path, w: np.ndarray, name: str) -> np.ndarray:
    """``w``'s bytes viewed from a read-only mapping of a file (the model loader's way)."""
    path = tmp_path / name
    path.write_bytes(w.tobytes())
    with path.open("rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    maps.append(mm)
    return np.frombuffer(mm, np.uint8).reshape(w.shape)


def _calls(bp: product.BlockProduct, out: np.ndarray, n: int) -> list[np.ndarray]:
    results = []
    for _ in range(n):
        out[...] = np.nan
        bp()
        results.append(out.copy())
    return results


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 3, 8])
def test_file_mapped_weights_switch_to_the_repack(t: GGMLType, n: int, tmp_path: Path, mapped: list[mmap.mmap]) -> None:
    _ready(t)
    w_data, x = _case(t, 48, n, 3, seed=20 + n)
    w = _map(mapped, tmp_path, w_data, f"{t.name}-{n}.bin")
    out = np.empty((n, 48), np.float32)
    bp = quant.block_product(w, t, x, out)
    assert bp is not None
    results = _calls(bp, out, product._PACK_AFTER + 2)
    assert bp._repacked, "the product did not switch to the repacked weights"
    ref, bound = _reference(w_data, t, x)
    for r in results:  # the block kernels' calls and the repacked ones
        err = np.abs(r - ref)
        assert (err <= bound).all(), f"{t.name}: error {err.max():.3g} above the bound"
    # the same lane tiles on the same activation bits as a prompt batch's repacked product
    np.testing.assert_array_equal(results[-1].view(np.uint32), _packed(w_data, t, x, 1).view(np.uint32))


@pytest.mark.parametrize("t", [GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q6_K], ids=lambda t: t.name)
def test_threads_give_the_same_bits(t: GGMLType, tmp_path: Path, mapped: list[mmap.mmap]) -> None:
    _ready(t)
    w_data, x = _case(t, 96, 5, 2, seed=31)
    p = repack.pack(w_data, t)
    fns = repack.decode_kernels(p) if p is not None else None
    assert p is not None and fns is not None
    k, nsub = x.shape[1], p.k // p.group
    outs = []
    for fn in fns:  # threads over the row groups, one thread
        acts = quant.quantize_activations(x, quant.DOT_TYPE[t])
        xd = np.empty_like(acts.d)
        xq, xsum, xs = np.empty((5, k), np.int8), np.empty_like(acts.sums), np.zeros_like(xd)
        dx, sx = np.empty((5, nsub), np.float32), np.empty((5, nsub), np.int32)
        out = np.full((5, 96), np.nan, np.float32)
        with _threads(2):
            assert fn(x, True, p.q, p.s1, p.s2, xq, xd, xsum, xs, F16_VALUES, dx, sx, p.offset, out) == 0
        np.testing.assert_array_equal(xq, acts.q)  # the fused quantizer's bytes are the reference quantizer's
        outs.append(out)
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


class _threads:
    def __init__(self, n: int) -> None:
        self.n, self.old = n, _jit.current_threads()

    def __enter__(self) -> None:
        _jit.set_threads(self.n)

    def __exit__(self, *exc: object) -> None:
        _jit.set_threads(self.old)


def test_a_row_with_nan_gets_the_block_kernels_bytes(tmp_path: Path, mapped: list[mmap.mmap]) -> None:
    """Non-finite activations go through the numpy quantizer (x86's bytes for NaN) on either route: the same NaN
    pattern, the finite rows within the bound."""
    t = GGMLType.Q4_0
    _ready(t)
    w_data, x = _case(t, 32, 3, 2, seed=41)
    x[1, 5] = np.nan
    w = _map(mapped, tmp_path, w_data, "nan.bin")
    out = np.empty((3, 32), np.float32)
    bp = quant.block_product(w, t, x, out)
    assert bp is not None
    with np.errstate(invalid="ignore"):
        results = _calls(bp, out, product._PACK_AFTER + 2)
    assert bp._repacked
    ref, bound = _reference(w_data, t, np.where(np.isnan(x), 0.0, x).astype(np.float32))
    for r in results:
        np.testing.assert_array_equal(np.isnan(r), np.isnan(results[0]))
        for row in (0, 2):
            assert (np.abs(r[row] - ref[row]) <= bound[row]).all()


def test_writable_weights_keep_the_block_kernels() -> None:
    """Weights in writable memory may change between calls; they never switch (and a change is always seen)."""
    t = GGMLType.Q8_0
    _ready(t)
    w, x = _case(t, 32, 1, 2, seed=51)
    out = np.empty((1, 32), np.float32)
    bp = quant.block_product(w, t, x, out)
    assert bp is not None
    _calls(bp, out, product._PACK_AFTER + 2)
    assert not bp._repacked
    w[:] = _case(t, 32, 1, 2, seed=52)[0]
    bp()
    ref, bound = _reference(w, t, x)
    assert (np.abs(out - ref) <= bound).all()


def test_rows_not_filling_16_row_groups_keep_the_block_kernels(tmp_path: Path, mapped: list[mmap.mmap]) -> None:
    t = GGMLType.Q4_K
    _ready(t)
    w_data, x = _case(t, 40, 1, 1, seed=61)
    w = _map(mapped, tmp_path, w_data, "odd.bin")
    out = np.empty((1, 40), np.float32)
    bp = quant.block_product(w, t, x, out)
    assert bp is not None
    _calls(bp, out, product._PACK_AFTER + 2)
    assert not bp._repacked
    ref, bound = _reference(w_data, t, x)
    assert (np.abs(out - ref) <= bound).all()


def test_released_file_pages_read_back_the_same(tmp_path: Path, mapped: list[mmap.mmap]) -> None:
    """Once repacked, the file's pages of the weights are released (``MADV_DONTNEED``); reading them again (a
    new product's first calls use the blocks) faults the same bytes back in, and that product is right."""
    t = GGMLType.Q4_0
    _ready(t)
    w_data, x = _case(t, 64 * 16, 1, 8, seed=71)  # several pages of weights
    w = _map(mapped, tmp_path, w_data, "released.bin")
    out = np.empty((1, w.shape[0]), np.float32)
    bp = quant.block_product(w, t, x, out)
    assert bp is not None
    _calls(bp, out, product._PACK_AFTER + 2)
    assert bp._repacked
    np.testing.assert_array_equal(w, w_data)
    fresh_out = np.full_like(out, np.nan)
    fresh = quant.block_product(w, t, x, fresh_out)
    assert fresh is not None
    fresh()  # the block kernels on the released pages
    ref, bound = _reference(w_data, t, x)
    assert (np.abs(fresh_out - ref) <= bound).all()
