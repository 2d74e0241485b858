"""The compiled f16 → f32 conversion gives numpy's bits for every half, any layout, with or without numba."""

from __future__ import annotations

import numpy as np
import pytest

from ggml_cpu.jit import _jit
from ggml_cpu.jit.halves import f16_to_f32


def test_every_bit_pattern_converts_exactly() -> None:
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = f16_to_f32(bits)
    ref = bits.view(np.float16).astype(np.float32)
    nan = np.isnan(ref)
    assert got.dtype == np.float32 and got.shape == (65536,)
    assert np.array_equal(got.view(np.uint32)[~nan], ref.view(np.uint32)[~nan])
    assert np.isnan(got[nan]).all() and np.array_equal(np.signbit(got[nan]), np.signbit(ref[nan]))


def test_strided_views_keep_their_shape() -> None:
    a = (np.random.default_rng(0).standard_normal((256, 8, 64)) * 50).astype(np.float16)
    view = a.transpose(1, 0, 2)[:, ::2]  # permuted and strided, as a KV-cache view is
    got = f16_to_f32(view)
    assert got.shape == view.shape and np.array_equal(got, view.astype(np.float32))


def test_numpy_path_when_compiled_kernels_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jit, "enabled", lambda: False)
    a = np.linspace(-3, 3, 10000).astype(np.float16)
    assert np.array_equal(f16_to_f32(a), a.astype(np.float32))
