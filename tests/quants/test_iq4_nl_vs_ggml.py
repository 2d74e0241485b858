"""IQ4_NL's quantizer (ggml's ``quantize_row_iq4_nl_ref``, which ggml-cpu's ``from_float`` calls: what SET_ROWS
writes into an iq4_nl KV cache) against the real ggml (ggml-python, ``import ggml``), byte for byte, and against
its definition where ggml is not installed."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from ggml_core import GGMLType
from ggml_core.quants import dequantize, quantize

GRID = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def _rows() -> np.ndarray:
    rng = np.random.default_rng(7)
    scaled = [rng.standard_normal((200, 128)) * s for s in (1e-3, 1.0, 1e4)]
    ties = rng.integers(-3, 4, (200, 128))  # many equal magnitudes and grid midpoints
    return np.concatenate([*scaled, ties]).astype(np.float32)


def test_iq4_nl_bytes_match_ggml() -> None:
    ggml = pytest.importorskip("ggml", reason="ggml-python (the real ggml through ctypes) is not installed")
    x = _rows()
    traits = ggml.ggml_get_type_traits_cpu(int(GGMLType.IQ4_NL)).contents
    out = (ctypes.c_uint8 * (x.size // 32 * GGMLType.IQ4_NL.type_size))()
    traits.from_float(x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), ctypes.cast(out, ctypes.c_void_p), x.size)
    want = np.frombuffer(bytes(out), np.uint8).reshape(x.shape[0], -1)
    got = quantize(x, GGMLType.IQ4_NL)
    assert (got == want).all(), f"{int((got != want).any(axis=1).sum())} rows differ"


def test_iq4_nl_is_the_least_squares_scale_of_the_nearest_grid_points() -> None:
    """The definition: indices of x on the grid scaled by max/-127 (nearest point), then the scale minimising
    Σ x²·(x − d·q)², rounded to f16; a zero block is zeros."""
    x = _rows()[:200]
    blocks = x.reshape(-1, 32).astype(np.float64)
    first = np.argmax(np.abs(blocks), axis=1)
    d0 = blocks[np.arange(len(blocks)), first] / -127.0
    idx = np.abs(blocks[..., None] / d0[:, None, None] - GRID).argmin(axis=-1)
    q, w = GRID[idx].astype(np.float64), blocks**2
    d = np.float16((w * q * blocks).sum(1) / (w * q * q).sum(1)).astype(np.float32)
    want = (d[:, None] * GRID[idx]).reshape(x.shape)
    got = dequantize(quantize(x, GGMLType.IQ4_NL), GGMLType.IQ4_NL)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(x).max()
    assert not dequantize(quantize(np.zeros((1, 32), np.float32), "iq4_nl"), "iq4_nl").any()
