"""REPEAT(_BACK), CONCAT, PAD, ROLL, SET, ACC, DIAG, TRI, ARANGE, FILL, TIMESTEP_EMBEDDING against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import CpuGraph, rng

from ggml_core import OpError, ops
from ggml_core.ops import TriType


def _x(shape: tuple[int, ...] = (2, 3, 4, 5), seed: int = 40) -> np.ndarray:
    return rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("type_name", ["f32", "f16", "i32"])
def test_repeat_tiles(type_name: str) -> None:
    x = (_x((1, 2, 3, 4)) * 10).astype({"f32": np.float32, "f16": np.float16, "i32": np.int32}[type_name])
    g = CpuGraph()
    got = g.compute(ops.repeat_4d(g.tensor(x, type_name), 8, 6, 4, 3))
    np.testing.assert_array_equal(got, np.tile(x, (3, 2, 2, 2)))
    g2 = CpuGraph()
    like = g2.tensor(np.zeros((3, 4, 6, 8), np.float32))
    assert ops.repeat(g2.tensor(x, type_name), like).ne == (8, 6, 4, 3)


def test_repeat_of_a_permuted_view_and_checks() -> None:
    x = _x((1, 1, 3, 2))
    g = CpuGraph()
    got = g.compute(ops.repeat_4d(ops.transpose(g.tensor(x)), 6, 2, 1, 1))  # [3, 2] tiled to [6, 2]
    np.testing.assert_array_equal(got[0, 0], np.tile(x[0, 0].T, (1, 2)))
    with pytest.raises(OpError, match="REPEAT"):
        ops.repeat_4d(g.tensor(x), 3, 4, 1, 1)


def test_repeat_back_sums_tiles() -> None:
    x = _x((2, 3, 4, 6))
    g = CpuGraph()
    got = g.compute(ops.repeat_back(g.tensor(x), g.tensor(np.zeros((1, 3, 2, 3), np.float32))))
    # per axis, x's index = tile · target + inner: sum over the tile axes
    ref = x.reshape(2, 1, 1, 3, 2, 2, 2, 3).sum(axis=(0, 2, 4, 6))
    np.testing.assert_allclose(got, ref, rtol=1e-6)


@pytest.mark.parametrize("dim", [0, 1, 2, 3])
def test_concat(dim: int) -> None:
    x = _x()
    shape = list(x.shape)
    shape[3 - dim] = 2
    y = _x(tuple(shape), 41)
    g = CpuGraph()
    got = g.compute(ops.concat(g.tensor(x), g.tensor(y), dim))
    np.testing.assert_array_equal(got, np.concatenate([x, y], axis=3 - dim))


def test_concat_of_a_state_view_and_a_transposed_column() -> None:
    """Mamba's conv window: the cached state (a view into a larger cache) joined along dim 0 with the new token's
    values transposed to one column per channel."""
    cache, x = _x((1, 2, 40, 3)), _x((1, 1, 1, 40), 44)  # state: 3 steps × 40 channels × 2 sequences
    g = CpuGraph()
    tc = g.tensor(cache)
    state = ops.view_3d(tc, 3, 40, 1, tc.nb[1], tc.nb[2], tc.nb[2])  # the second sequence's state
    got = g.compute(ops.concat(state, ops.transpose(g.tensor(x[0, 0])), 0))
    np.testing.assert_array_equal(got[0, 0], np.concatenate([cache[0, 1], x[0, 0, 0][:, None]], axis=1))


def test_concat_quantized_rows_and_views() -> None:
    x, y = _x((1, 1, 2, 64)), _x((1, 1, 2, 32), 42)
    g = CpuGraph()
    tx = g.tensor(x, "q8_0")
    got = g.compute(ops.concat(tx, g.tensor(y, "q8_0"), 0), raw=True)
    g2 = CpuGraph()
    bx, by = g2.tensor(x, "q8_0"), g2.tensor(y, "q8_0")
    g2.compute(ops.cont(bx), ops.cont(by))
    expect = np.concatenate([bx.to_numpy(dequantize=False), by.to_numpy(dequantize=False)], axis=-1)
    np.testing.assert_array_equal(got, expect)
    # a transposed operand
    a, b = _x((1, 1, 3, 4)), _x((1, 1, 3, 2), 43)
    g3 = CpuGraph()
    got3 = g3.compute(ops.concat(ops.transpose(g3.tensor(a)), ops.transpose(g3.tensor(b)), 1))
    np.testing.assert_array_equal(got3[0, 0], np.concatenate([a[0, 0].T, b[0, 0].T], axis=0))
    with pytest.raises(OpError, match=r"CONCAT.*ne\[1\]"):
        ops.concat(g3.tensor(a), g3.tensor(_x((1, 1, 4, 2))), 0)


def _pad_ref(x: np.ndarray, pads: list[int], circular: bool) -> np.ndarray:
    """pads = [lp0, rp0, lp1, rp1, ...] in ggml's dimension order; wrap for circular, zeros otherwise."""
    width = [(pads[2 * d], pads[2 * d + 1]) for d in (3, 2, 1, 0)]
    return np.pad(x, width, mode="wrap" if circular else "constant")


@pytest.mark.parametrize("circular", [False, True])
def test_pad_ext(circular: bool) -> None:
    x = _x()
    pads = [1, 2, 3, 0, 1, 1, 0, 2]
    g = CpuGraph()
    build = ops.pad_ext_circular if circular else ops.pad_ext
    got = g.compute(build(g.tensor(x), *pads))
    np.testing.assert_array_equal(got, _pad_ref(x, pads, circular))
    g2 = CpuGraph()
    got2 = g2.compute(ops.pad(ops.permute(g2.tensor(x), 1, 0, 2, 3), 2, 1))
    np.testing.assert_array_equal(got2, np.pad(x.swapaxes(2, 3), [(0, 0), (0, 0), (0, 1), (0, 2)]))


def test_pad_reflect_and_roll() -> None:
    x = _x()
    g = CpuGraph()
    got = g.compute(ops.pad_reflect_1d(g.tensor(x), 2, 3))
    np.testing.assert_array_equal(got, np.pad(x, [(0, 0), (0, 0), (0, 0), (2, 3)], mode="reflect"))
    g2 = CpuGraph()
    got2 = g2.compute(ops.roll(g2.tensor(x), 2, -1, 1, 1))
    np.testing.assert_array_equal(got2, np.roll(x, (1, 1, -1, 2), axis=(0, 1, 2, 3)))
    with pytest.raises(OpError, match="ROLL"):
        ops.roll(g2.tensor(x), 5)
    with pytest.raises(OpError, match="PAD_REFLECT_1D"):
        ops.pad_reflect_1d(g2.tensor(x), 5, 0)


def _strided_write(base: np.ndarray, b: np.ndarray, nb: tuple[int, int, int], offset: int, add: bool) -> np.ndarray:
    """The result of ggml_set / ggml_acc written out element by element (byte strides of a float32 array)."""
    out = base.copy().reshape(-1)
    for i3, i2, i1, i0 in np.ndindex(*b.shape):
        pos = (offset + i0 * 4 + i1 * nb[0] + i2 * nb[1] + i3 * nb[2]) // 4
        out[pos] = out[pos] + b[i3, i2, i1, i0] if add else b[i3, i2, i1, i0]
    return out.reshape(base.shape)


@pytest.mark.parametrize("op", ["set", "acc"])
@pytest.mark.parametrize("inplace", [False, True])
def test_set_and_acc(op: str, inplace: bool) -> None:
    x, b = _x(), _x((1, 2, 2, 3), 44)
    nb = (20, 80, 240)
    offset = 4 * 21
    g = CpuGraph()
    ta = g.tensor(x)
    build = ops.set if op == "set" else ops.acc
    got = g.compute(build(ta, g.tensor(b), *nb, offset, inplace))
    np.testing.assert_allclose(got, _strided_write(x, b, nb, offset, op == "acc"), rtol=1e-6)


def test_set_1d_2d_and_bounds() -> None:
    x = _x((1, 1, 4, 6))
    b = _x((1, 1, 2, 3), 45)
    g = CpuGraph()
    t = g.tensor(x)
    got = g.compute(ops.set_2d(t, g.tensor(b), 24, 8))
    np.testing.assert_array_equal(got, _strided_write(x, b, (24, 96, 96), 8, False))
    g2 = CpuGraph()
    got1 = g2.compute(ops.set_1d(g2.tensor(x), g2.tensor(b.reshape(1, 1, 1, 6)), 4 * 17))
    ref = x.reshape(-1).copy()
    ref[17:23] = b.reshape(-1)
    np.testing.assert_array_equal(got1.reshape(-1), ref)
    with pytest.raises(OpError, match=r"SET.*reaches byte"):
        ops.set_1d(g2.tensor(x), g2.tensor(b.reshape(1, 1, 1, 6)), 4 * 20)
    padded = ops.view_2d(g2.tensor(np.zeros((4, 8), np.float32)), 6, 4, 32, 0)  # rows of 6 in rows of 8
    assert padded.nbytes > 4 * 6 * 4
    with pytest.raises(OpError, match=r"SET.*the result has 96 bytes"):  # its contiguous copy holds 96 bytes
        ops.set_1d(padded, g2.tensor(np.zeros(4, np.float32)), 4 * 22)
    with pytest.raises(OpError, match="ACC"):
        ops.acc(ops.transpose(g2.tensor(x)), g2.tensor(b), 24, 96, 96, 0)


def test_diag_and_tri() -> None:
    v = _x((2, 1, 1, 5))
    g = CpuGraph()
    got = g.compute(ops.diag(g.tensor(v)))
    np.testing.assert_array_equal(got, np.stack([np.diag(v[i, 0, 0])[None] for i in range(2)]))
    m = _x((1, 2, 5, 5))
    rows, cols = np.arange(5)[:, None], np.arange(5)[None, :]
    keep = {
        TriType.LOWER: cols < rows,
        TriType.LOWER_DIAG: cols <= rows,
        TriType.UPPER: cols > rows,
        TriType.UPPER_DIAG: cols >= rows,
    }
    for tri_type, mask in keep.items():
        g2 = CpuGraph()
        np.testing.assert_array_equal(g2.compute(ops.tri(g2.tensor(m), tri_type)), np.where(mask, m, 0))


def test_arange_fill_timestep_embedding() -> None:
    g = CpuGraph()
    t = ops.arange(g.ctx, 0.5, 7.0, 1.5)
    assert t.ne[0] == 5
    np.testing.assert_array_equal(g.compute(t).reshape(-1), np.float32(0.5) + np.float32(1.5) * np.arange(5))
    g2 = CpuGraph()
    got = g2.compute(ops.fill(g2.tensor(np.zeros((3, 4), np.float16), "f16"), 0.1))
    assert got.dtype == np.float16 and np.all(got == np.float16(0.1))
    ts = np.array([0.0, 1.0, 7.5, 100.0], np.float32)
    for dim in (8, 9):
        g3 = CpuGraph()
        got3 = g3.compute(ops.timestep_embedding(g3.tensor(ts), dim, 10000))[0, 0]
        half = dim // 2
        freqs = np.exp(-np.log(10000.0) * np.arange(half) / half)
        ref = np.zeros((4, dim))
        ref[:, :half] = np.cos(ts[:, None] * freqs)
        ref[:, half : 2 * half] = np.sin(ts[:, None] * freqs)
        np.testing.assert_allclose(got3, ref, atol=2e-5)
    with pytest.raises(OpError, match="ARANGE"):
        ops.arange(g.ctx, 3.0, 1.0, 1.0)
