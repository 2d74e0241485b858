"""Prompt batches bound once to their node's arrays (``qdot/prompt.py``).

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
from test_qdot_repack import _case, _ready

from ggml_core import GGMLType
from ggml_core.quants import dequantize
from ggml_cpu.kernels import qdot
from ggml_cpu.kernels.qdot import _jit, product

TYPES = [GGMLType.Q4_0, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K]


@contextlib.contextmanager
def _mapped(tmp_path: Path, data: np.ndarray) -> Iterator[np.ndarray]:
    """``data`` written to a file and mapped read-only, as the model loader maps a GGUF."""
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
    qdot.qmatmul(w, t, x, out)
    return out


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("threads", [1, 2])
def test_a_bound_prompt_product_gives_qmatmuls_bits(tmp_path: Path, t: GGMLType, threads: int) -> None:
    _ready(t)
    n, m = 40, 96
    w_data, x = _case(t, m, n, 512 // t.block_size, seed=5)
    with _mapped(tmp_path, w_data) as w, _threads(threads):
        assert qdot.splits_itself(t, n) or threads == 1 or pytest.skip("no repacked split here")
        out = np.full((n, m), np.nan, np.float32)
        bound = qdot.prompt_product(w, t, x, out)
        assert bound is not None
        for seed in (5, 6, 7):  # new values in the same input array: each call reads them
            x[...] = _case(t, m, n, 512 // t.block_size, seed=seed)[1]
            ref = _reference(w, t, x)
            out[...] = np.nan
            bound()
            np.testing.assert_array_equal(out.view(np.uint32), ref.view(np.uint32))
        assert bound._p not in (None, False)  # it ran on its own repack, not qmatmul's fallback
        acts = qdot.quantize_activations(x, qdot.DOT_TYPE[t])
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
        bound = qdot.prompt_product(w, t, x, out)
        assert bound is not None
        bound()
        ref = _reference(w, t, x)
        np.testing.assert_array_equal(out.view(np.uint32), ref.view(np.uint32))
        finite = np.isfinite(x).all(axis=1)
        assert np.isfinite(out[finite]).all()


def test_writable_weights_are_not_bound() -> None:
    """Weights in ordinary memory may change between calls: they keep ``qmatmul`` (checked on every call)."""
    t = GGMLType.Q4_K
    _ready(t)
    w, x = _case(t, 64, 40, 2, seed=12)
    assert qdot.prompt_product(w, t, x, np.empty((40, 64), np.float32)) is None
