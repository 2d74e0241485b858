"""Float32 → Q8_0 conversion by the CPU plugin's CPY and SET_ROWS (a q8_0 KV cache's writes) against the real
ggml's CPU ``from_float`` (ggml-python, ``import ggml``), which both of ggml-cpu's ops call: on x86 ``127/amax``
and round half to even (``_mm256_round_ps``), with the scale rounded to f16 half to even; not the reference
quantizer's ``roundf`` (half away from zero).

The rows put values exactly on .5 ties of both parities and signs (amax 127: the multiplier is exactly 1) and a
scale ``amax/127`` exactly halfway between two f16 values. Skipped where ggml-python is not installed.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import ggml_core as gc
from ggml_core import GGMLType, ops

#: halfway between the two f16 values either side of 0.5 + 2⁻¹¹
F16_TIE = np.float32(np.float16(0.5)) + np.float32(2.0**-12)


def tie_rows() -> np.ndarray:
    """Three rows of one Q8_0 block: ties at ±odd.5 and ±even.5 (amax 127), and a scale on an f16 tie."""
    x = np.zeros((3, 32), np.float32)
    x[0, :12] = [127.0, -69.5, -66.5, 101.5, 42.5, -0.5, 0.5, 1.5, -1.5, 2.5, -126.5, 126.5]
    x[1, :6] = [-127.0, 69.5, 66.5, -101.5, -42.5, 3.5]
    x[2, 0] = F16_TIE * np.float32(127.0)
    x[2, 1:6] = x[2, 0] * np.array([0.5, -0.25, 0.125, 0.75, -0.375], np.float32)
    return x


def ggml_from_float(x: np.ndarray) -> np.ndarray:
    """The real ggml's CPU ``from_float`` of Q8_0: one row of block bytes per row of ``x``."""
    ggml = pytest.importorskip("ggml", reason="ggml-python (the real ggml through ctypes) is not installed")
    traits = ggml.ggml_get_type_traits_cpu(int(GGMLType.Q8_0)).contents
    xc = np.ascontiguousarray(x, dtype=np.float32)
    out = (ctypes.c_uint8 * (xc.size // 32 * GGMLType.Q8_0.type_size))()
    traits.from_float(xc.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), ctypes.cast(out, ctypes.c_void_p), xc.size)
    return np.frombuffer(bytes(out), np.uint8).reshape(x.shape[0], -1)


def _compute(ctx: gc.Context, node: gc.Tensor, inputs: list[tuple[gc.Tensor, np.ndarray]]) -> None:
    backend = gc.init_backend("CPU")
    gc.alloc_ctx_tensors(ctx, backend)
    for t, v in inputs:
        t.set_data(v)
    backend.graph_compute(gc.build_graph([node]))


def test_the_rows_hold_the_ties() -> None:
    x = tie_rows()
    assert np.float32(x[2, 0]) / np.float32(127.0) == F16_TIE  # d lands on the f16 tie itself
    q = ggml_from_float(x)[:, 2:].view(np.int8)
    assert list(q[0, 1:5]) == [-70, -66, 102, 42]  # half to even, where roundf gives -70, -67, 102, 43


def test_cpy_f32_to_q8_0_rounds_as_ggml_cpu() -> None:
    x = tie_rows()
    ctx = gc.Context("cpy-q8_0")
    src, dst = ctx.new_tensor("f32", [32, 3]), ctx.new_tensor("q8_0", [32, 3])
    node = ops.cpy(src, dst)
    _compute(ctx, node, [(src, x)])
    got = dst.to_numpy(dequantize=False).reshape(3, -1)
    np.testing.assert_array_equal(got, ggml_from_float(x))


def test_set_rows_into_a_q8_0_cache_rounds_as_ggml_cpu() -> None:
    """A q8_0 KV cache's write: SET_ROWS of f32 rows into q8_0 rows (rows 4, 0, 2 of 5)."""
    x = tie_rows()
    ctx = gc.Context("set-rows-q8_0")
    cache, src = ctx.new_tensor("q8_0", [32, 5]), ctx.new_tensor("f32", [32, 3])
    idx = ctx.new_tensor("i64", [3])
    node = ops.set_rows(cache, src, idx)
    _compute(ctx, node, [(cache, np.zeros((5, 32), np.float32)), (src, x), (idx, np.array([4, 0, 2], np.int64))])
    got = node.to_numpy(dequantize=False).reshape(5, -1)[[4, 0, 2]]
    np.testing.assert_array_equal(got, ggml_from_float(x))
