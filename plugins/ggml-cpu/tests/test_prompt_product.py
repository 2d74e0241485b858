"""Prompt batches bound once to their node's arrays (``quant/prompt.py``).

A :class:`PromptProduct` must give :func:`qmatmul`'s bits (the same quantizer and lane tiles on the same rows) at
one and two threads, see the activations' current values on every call (it reads its input in place), quantize
non-finite rows with the numpy reference as ``qmatmul`` does, and decline weights that are not mapped read-only
from a file (their repack could go stale). The float64 check ties the bits to the product's definition.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_repacked_products import _case, _ready

from ggml_core import GGMLType
from ggml_core.quants import dequantize
from ggml_cpu import quant
from ggml_cpu.jit import _jit
from ggml_cpu.quant import product

TYPES = [GGMLType.Q4_0, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K]


@contextlib.contextmanager
def _mapped(tmp_path: Path, data: np.ndarray) -> Iterator[np.ndarray]:
    """``data`` written to a file and mapped read-only, as the model loader maps a GGUF."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "w.bin"
    path.write_bytes(data.tobytes())
    with path.open("rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    w = np.frombuffer(mm, np.uint8).reshape(data.shape)
    try:
        yield w
    finally:
        del w
        with contextlib.suppress(BufferError):
            mm.close()


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    old = _jit.current_threads()
    _jit.set_threads(n)
    try:
        yield
    finally:
        _jit.set_threads(old)


def _reference(w: np.ndarray, t: GGMLType, x: np.ndarray) -> np.ndarray:
    """``qmatmul``'s route for a batch: quantize (no reuse of an earlier batch's rows), then the repacked product."""
    product._last_acts.clear()
    out = np.full((x.shape[0], w.shape[0]), np.nan, np.float32)
    quant.qmatmul(w, t, x, out)
    return out


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("threads", [1, 2])
def test_a_bound_prompt_product_gives_qmatmuls_bits(tmp_path: Path, t: GGMLType, threads: int) -> None:
    _ready(t)
    n, m = 40, 96
    w_data, x = _case(t, m, n, 512 // t.block_size, seed=5)
    with _mapped(tmp_path, w_data) as w, _threads(threads):
        assert quant.splits_itself(t, n) or threads == 1 or pytest.skip("no repacked split here")
        out = np.full((n, m), np.nan, np.float32)
        bound = quant.prompt_product(w, t, x, out)
        assert bound is not None
        for seed in (5, 6, 7):  # new values in the same input array: each call reads them
            x[...] = _case(t, m, n, 512 // t.block_size, seed=seed)[1]
            ref = _reference(w, t, x)
            out[...] = np.nan
            bound()
            np.testing.assert_array_equal(out.view(np.uint32), ref.view(np.uint32))
        assert bound._p not in (None, False)  # it ran on its own repack, not qmatmul's fallback
        acts = quant.quantize_activations(x, quant.DOT_TYPE[t])
        exact = acts.dequantized().astype(np.float64) @ dequantize(w_data, t).astype(np.float64).T
        np.testing.assert_allclose(out, exact, rtol=2e-5, atol=2e-5 * np.abs(exact).max())


@pytest.mark.parametrize("threads", [1, 2])
def test_non_finite_activations_take_the_numpy_quantizer(tmp_path: Path, threads: int) -> None:
    t = GGMLType.Q4_K
    _ready(t)
    n, m = 40, 64
    w_data, x = _case(t, m, n, 2, seed=11)
    x[n - 2, 300] = np.inf  # a row in a later part of the split
    x[3, 17] = np.nan
    with _mapped(tmp_path, w_data) as w, _threads(threads):
        out = np.zeros((n, m), np.float32)
        bound = quant.prompt_product(w, t, x, out)
        assert bound is not None
        bound()
        ref = _reference(w, t, x)
        np.testing.assert_array_equal(out.view(np.uint32), ref.view(np.uint32))
        finite = np.isfinite(x).all(axis=1)
        assert np.isfinite(out[finite]).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_products_reading_one_activation_array_share_buffers_and_stay_exact(tmp_path: Path, threads: int) -> None:
    """A layer's Q, K, V read the same activations: their products share the quantization buffers (one set per
    activation array, dot type and sub-block count), and each call still gives ``qmatmul``'s bits, in any order."""
    n = 40
    types = [GGMLType.Q4_K, GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q8_0]  # Q6_K: other sub-blocks; Q8_0: dot
    for t in types:
        _ready(t)
    x = _case(GGMLType.Q4_K, 16, n, 2, seed=20)[1]
    products, refs = [], []
    with contextlib.ExitStack() as stack, _threads(threads):
        for i, t in enumerate(types):
            w_data = _case(t, 48 + 16 * i, n, 512 // t.block_size, seed=30 + i)[0]
            w = stack.enter_context(_mapped(tmp_path / str(i), w_data))
            out = np.full((n, w.shape[0]), np.nan, np.float32)
            bound = quant.prompt_product(w, t, x, out)
            assert bound is not None
            products.append((bound, out))
            refs.append(_reference(w, t, x))
        for i in (0, 1, 2, 3, 1, 0, 3, 2):
            products[i][1][...] = np.nan
            products[i][0]()
            np.testing.assert_array_equal(products[i][1].view(np.uint32), refs[i].view(np.uint32))
        acts = [p._acts for p, _ in products]
        assert acts[0][0] is acts[1][0]  # the same type: one set
        assert acts[0][4] is not acts[2][4]  # Q6_K's sub-blocks are its own
        assert acts[0][0] is not acts[3][0]  # Q8_0 quantizes to another dot type


def test_writable_weights_are_not_bound() -> None:
    """Weights in ordinary memory may change between calls: they keep ``qmatmul`` (checked on every call)."""
    t = GGMLType.Q4_K
    _ready(t)
    w, x = _case(t, 64, 40, 2, seed=12)
    assert quant.prompt_product(w, t, x, np.empty((40, 64), np.float32)) is None
