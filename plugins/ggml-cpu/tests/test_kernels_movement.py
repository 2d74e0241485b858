"""CPY/DUP/CONT, GET_ROWS and SET_ROWS on the CPU plugin against numpy (and gguf-py for block formats)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GQ
from gguf import quants as gquants
from kernel_harness import CpuGraph, rng

import ggml_core as gc
from ggml_core import ComputeError, ops


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """f32 → bf16 as ggml does it: round to nearest even; a NaN keeps its top bits with the quiet bit set."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def _gguf_bytes(x: np.ndarray, type_name: str) -> np.ndarray:
    return gquants.quantize(np.ascontiguousarray(x, dtype=np.float32), GQ[type_name.upper()])


def _gguf_values(x: np.ndarray, type_name: str) -> np.ndarray:
    t = GQ[type_name.upper()]
    return gquants.dequantize(gquants.quantize(np.ascontiguousarray(x, dtype=np.float32), t), t)


# ================================================================================================ CPY / DUP / CONT


def _cpy(x: np.ndarray, src_type: str, dst_type: str, raw: bool = True) -> np.ndarray:
    g = CpuGraph()
    a = g.tensor(x, src_type)
    dst = g.ctx.new_tensor(dst_type, x.shape[::-1])
    return g.compute(ops.cpy(a, dst), raw=raw)


def test_cpy_f32_to_f16_rounds_to_nearest_even() -> None:
    x = np.array([1.0, 1 + 2**-11, 1 + 3 * 2**-11, 65504.0, 65520.0, 1e6, -1e6, 6e-8, np.nan], np.float32)
    got = _cpy(x, "f32", "f16").reshape(-1)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(
        got[:8], np.array([1.0, 1.0, 1 + 2**-9, 65504.0, np.inf, np.inf, -np.inf, 5.96e-8], np.float16)
    )
    assert np.isnan(got[8])


def test_cpy_f32_to_bf16_rounding_and_nan() -> None:
    r = rng(30)
    x = np.concatenate([r.standard_normal(64).astype(np.float32) * 100, np.array([3.4e38, -3.4e38, np.inf])]).astype(
        np.float32
    )
    x = np.concatenate([x, np.array([0x7FC00001, 0x7F800001], np.uint32).view(np.float32)])
    got = _cpy(x, "f32", "bf16").reshape(-1)
    np.testing.assert_array_equal(got, _bf16_bits(x))
    assert got[-2] == 0x7FC0  # quiet NaN keeps its top bits


@pytest.mark.parametrize("q", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"])
def test_cpy_f32_to_quantized_gives_reference_bytes(q: str) -> None:
    x = (rng(31).standard_normal((3, 4, 64)) * 4).astype(np.float32)
    got = _cpy(x, "f32", q)
    np.testing.assert_array_equal(got.reshape(-1), _gguf_bytes(x.reshape(-1, 64), q).reshape(-1))


def test_cpy_from_f16_source_into_quantized() -> None:
    x = (rng(32).standard_normal((2, 64)) * 3).astype(np.float16)
    got = _cpy(x, "f16", "q8_0")
    np.testing.assert_array_equal(got.reshape(-1), _gguf_bytes(x.astype(np.float32), "q8_0").reshape(-1))


@pytest.mark.parametrize("q", ["q4_0", "q8_0", "q4_k", "q6_k"])
def test_cpy_quantized_to_f32_dequantizes(q: str) -> None:
    x = rng(33).standard_normal((2, 256)).astype(np.float32)
    g = CpuGraph()
    t = g.tensor(x, q)
    got = g.compute(ops.cpy(t, g.ctx.new_tensor("f32", (256, 2))))
    raw = t.to_numpy(dequantize=False).reshape(2, -1)  # the stored blocks, decoded by gguf-py
    np.testing.assert_array_equal(got.reshape(2, 256), gquants.dequantize(raw, GQ[q.upper()]))


def test_cpy_f32_i32_truncates_toward_zero() -> None:
    x = np.array([1.9, -1.9, 0.5, -0.5, 1e6, -7.0], np.float32)
    np.testing.assert_array_equal(_cpy(x, "f32", "i32").reshape(-1), np.array([1, -1, 0, 0, 1000000, -7], np.int32))
    back = _cpy(np.array([3, -4, 2**24 + 1], np.int32), "i32", "f32").reshape(-1)
    np.testing.assert_array_equal(back, np.array([3, -4, 2**24 + 1], np.float32))


def test_cont_and_dup_of_permuted_and_transposed_views() -> None:
    x = rng(34).standard_normal((2, 3, 4, 5)).astype(np.float32)
    g = CpuGraph()
    t = g.tensor(x)
    p = ops.permute(t, 2, 0, 3, 1)  # source dim i → result dim p_i
    got = g.compute(ops.cont(p))
    # numpy axes (3,2,1,0 ↔ ne3..ne0): result ne = [ne1, ne3, ne0, ne2]
    np.testing.assert_array_equal(got, _perm(x))
    g2 = CpuGraph()
    got2 = g2.compute(ops.dup(ops.transpose(g2.tensor(x, "f16"))))
    np.testing.assert_array_equal(got2, x.astype(np.float16).swapaxes(-1, -2))


def _perm(x: np.ndarray) -> np.ndarray:
    """ggml permute(2, 0, 3, 1) of a numpy (ne3, ne2, ne1, ne0) array, element by element."""
    ne = x.shape[::-1]
    out_ne = [0, 0, 0, 0]
    for src, dst in enumerate((2, 0, 3, 1)):
        out_ne[dst] = ne[src]
    out = np.empty(out_ne[::-1], x.dtype)
    for idx in np.ndindex(*ne):  # idx = (i0, i1, i2, i3)
        o = [0, 0, 0, 0]
        for src, dst in enumerate((2, 0, 3, 1)):
            o[dst] = idx[src]
        out[o[3], o[2], o[1], o[0]] = x[idx[3], idx[2], idx[1], idx[0]]
    return out


def test_cont_4d_reshapes_quantized_rows() -> None:
    x = rng(35).standard_normal((4, 64)).astype(np.float32)
    g = CpuGraph()
    got = g.compute(ops.cont_2d(g.tensor(x, "q8_0"), 128, 2), raw=True)
    np.testing.assert_array_equal(got.reshape(-1), _gguf_bytes(x, "q8_0").reshape(-1))


def test_cpy_into_a_strided_view_leaves_the_rest() -> None:
    g = CpuGraph()
    big = g.tensor(np.zeros((4, 6), np.float32))
    src = g.tensor(np.arange(8, dtype=np.float32).reshape(4, 2))
    view = ops.view_2d(big, 2, 4, big.nb[1], 3 * 4)  # columns 3..4 of every row
    g.compute(ops.cpy(src, view))
    expect = np.zeros((4, 6), np.float32)
    expect[:, 3:5] = np.arange(8).reshape(4, 2)
    np.testing.assert_array_equal(big.to_numpy()[0, 0], expect)


def test_cpy_to_a_type_without_quantizer_is_unsupported() -> None:
    g = CpuGraph()
    a = g.tensor(np.zeros((2, 256), np.float32))
    node = ops.cpy(a, g.ctx.new_tensor("iq2_xxs", (256, 2)))
    assert not gc.get_device("CPU").supports_op(node)
    assert gc.get_device("CPU").supports_op(ops.cpy(a, g.ctx.new_tensor("q4_k", (256, 2))))


# ================================================================================================ GET_ROWS


@pytest.mark.parametrize("a_type", ["f32", "f16", "bf16", "q8_0", "q4_0", "q5_1", "q4_k"])
def test_get_rows(a_type: str) -> None:
    r = rng(36)
    a = r.standard_normal((2, 3, 10, 256)).astype(np.float32)
    idx = r.integers(0, 10, (2, 3, 5)).astype(np.int32)  # b [5, 3, 2]: rows of a[:, :, i2, i3]
    g = CpuGraph()
    ta = g.tensor(a, a_type)
    out = ops.get_rows(ta, g.tensor(idx, "i32"))
    assert out.ne == (256, 5, 3, 2)
    got = g.compute(out)
    values = ta.to_numpy()  # the stored values (f16/bf16 rounding or dequantized blocks)
    if a_type in ("q8_0", "q4_0", "q5_1"):
        values = _gguf_values(a.reshape(-1, 256), a_type).reshape(a.shape)
    ref = np.stack([np.stack([values[i3, i2, idx[i3, i2]] for i2 in range(3)]) for i3 in range(2)])
    np.testing.assert_array_equal(got, ref)


def test_get_rows_i32_and_strided_operands() -> None:
    g = CpuGraph()
    table = g.tensor(np.arange(40, dtype=np.int32).reshape(8, 5), "i32")
    got = g.compute(ops.get_rows(table, g.tensor(np.array([7, 0, 7], np.int32), "i32")))
    np.testing.assert_array_equal(got[0, 0], np.arange(40).reshape(8, 5)[[7, 0, 7]])
    # transposed source and an index view taking every other element
    x = rng(37).standard_normal((6, 4)).astype(np.float32)
    g2 = CpuGraph()
    src = ops.transpose(g2.tensor(x))  # ne [6, 4]: rows are x's columns
    raw_idx = g2.tensor(np.array([3, 9, 1, 9, 0, 9], np.int32), "i32")
    idx = ops.view_2d(raw_idx, 1, 3, 8, 0)  # ne [1, 3]: elements 0, 2, 4 as three 1-element columns
    idx = ops.reshape_1d(ops.cont(idx), 3)
    got2 = g2.compute(ops.get_rows(src, idx))
    np.testing.assert_array_equal(got2[0, 0], x.T[[3, 1, 0]])


@pytest.mark.parametrize("bad", [10, -1])
def test_get_rows_index_out_of_range(bad: int) -> None:
    g = CpuGraph()
    out = ops.get_rows(g.tensor(np.zeros((10, 4), np.float32)), g.tensor(np.array([0, bad], np.int32), "i32"))
    with pytest.raises(ComputeError, match=rf"row index {bad} is outside 0\.\.9"):
        g.compute(out)


# ================================================================================================ SET_ROWS


@pytest.mark.parametrize("dst_type", ["f32", "f16", "bf16", "q8_0", "q4_0"])
@pytest.mark.parametrize("idx_type", ["i32", "i64"])
def test_set_rows(dst_type: str, idx_type: str) -> None:
    r = rng(38)
    dst = r.standard_normal((2, 4, 10, 64)).astype(np.float32)
    src = r.standard_normal((2, 4, 3, 64)).astype(np.float32)
    idx = np.stack([r.permutation(10)[:3] for _ in range(2)]).reshape(1, 2, 3)  # c [3, 2, 1]: tiles over dims 2, 3
    g = CpuGraph()
    td = g.tensor(dst, dst_type)
    before = td  # the tensor whose rows change
    out = ops.set_rows(
        before, g.tensor(src), g.tensor(idx.astype(np.int32 if idx_type == "i32" else np.int64), idx_type)
    )
    got = g.compute(out, raw=True)
    if dst_type in ("q8_0", "q4_0"):
        expect = _gguf_bytes(dst.reshape(-1, 64), dst_type).reshape(2, 4, 10, -1)
        new_rows = _gguf_bytes(src.reshape(-1, 64), dst_type).reshape(2, 4, 3, -1)
    elif dst_type == "bf16":
        expect, new_rows = _bf16_bits(dst), _bf16_bits(src)
    else:
        dt = np.float16 if dst_type == "f16" else np.float32
        expect, new_rows = dst.astype(dt), src.astype(dt)
    expect = expect.copy()
    for i3 in range(2):
        for i2 in range(4):
            expect[i3, i2, idx[0, i2 % 2]] = new_rows[i3, i2]
    np.testing.assert_array_equal(got, expect)


def test_set_rows_from_f16_rows() -> None:
    src = rng(39).standard_normal((2, 8)).astype(np.float16)
    g = CpuGraph()
    out = ops.set_rows(
        g.tensor(np.zeros((5, 8), np.float16), "f16"), g.tensor(src, "f16"), g.tensor(np.array([4, 1], np.int64), "i64")
    )
    got = g.compute(out)
    np.testing.assert_array_equal(got[0, 0, [4, 1]], src)
    np.testing.assert_array_equal(got[0, 0, [0, 2, 3]], 0)


@pytest.mark.parametrize("bad", [5, -2])
def test_set_rows_index_out_of_range(bad: int) -> None:
    g = CpuGraph()
    out = ops.set_rows(
        g.tensor(np.zeros((5, 8), np.float32)),
        g.tensor(np.ones((2, 8), np.float32)),
        g.tensor(np.array([0, bad], np.int32), "i32"),
    )
    with pytest.raises(ComputeError, match=rf"destination row index {bad} is outside 0\.\.4"):
        g.compute(out)
