"""IM2COL, CONV_2D, CONV_TRANSPOSE_1D/2D, POOL_1D/2D, UPSCALE against loop-by-loop numpy definitions."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import CpuGraph, rng

from ggml_core import OpError, ops
from ggml_core.ops import SCALE_FLAG_ALIGN_CORNERS, PoolOp, ScaleMode


def _conv2d_ref(img: np.ndarray, ker: np.ndarray, s: tuple[int, int], p: tuple[int, int], d: tuple[int, int]):
    """img (N, C, H, W), ker (OC, C, KH, KW); s/p/d given as (x, y). Zero padding, float64."""
    n, _, h, w = img.shape
    oc, _, kh, kw = ker.shape
    ow = (w + 2 * p[0] - d[0] * (kw - 1) - 1) // s[0] + 1
    oh = (h + 2 * p[1] - d[1] * (kh - 1) - 1) // s[1] + 1
    out = np.zeros((n, oc, oh, ow))
    for y in range(oh):
        for x in range(ow):
            for ky in range(kh):
                for kx in range(kw):
                    iy, ix = y * s[1] + ky * d[1] - p[1], x * s[0] + kx * d[0] - p[0]
                    if 0 <= iy < h and 0 <= ix < w:
                        out[:, :, y, x] += img[:, :, iy, ix].astype(np.float64) @ ker[:, :, ky, kx].T.astype(np.float64)
    return out


def _img(seed: int = 100) -> tuple[np.ndarray, np.ndarray]:
    r = rng(seed)
    return r.standard_normal((2, 3, 9, 11)).astype(np.float32), r.standard_normal((4, 3, 3, 2)).astype(np.float32)


def test_im2col_2d_and_1d() -> None:
    img, ker = _img()
    g = CpuGraph()
    out = ops.im2col(g.tensor(ker), g.tensor(img), 2, 1, 1, 0, 1, 2, True, "f32")
    oh, ow = 5, 6  # (9 - 2*2 - 1)/1 + 1 and (11 + 2 - 1 - 1)/2 + 1
    assert out.ne == (3 * 3 * 2, ow, oh, 2)
    got = g.compute(out)
    ref = np.zeros((2, oh, ow, 3, 3, 2), np.float32)
    for y in range(oh):
        for x in range(ow):
            for ky in range(3):
                for kx in range(2):
                    iy, ix = y * 1 + ky * 2 - 0, x * 2 + kx * 1 - 1
                    if 0 <= iy < 9 and 0 <= ix < 11:
                        ref[:, y, x, :, ky, kx] = img[:, :, iy, ix]
    np.testing.assert_array_equal(got, ref.reshape(2, oh, ow, -1))
    sig, k1 = rng(101).standard_normal((2, 3, 20)).astype(np.float32), np.zeros((4, 3, 5), np.float32)
    g2 = CpuGraph()
    got1 = g2.compute(ops.im2col(g2.tensor(k1), g2.tensor(sig), 3, 0, 2, 0, 1, 0, False, "f16"))
    ol = (20 + 4 - 4 - 1) // 3 + 1
    ref1 = np.zeros((2, ol, 3, 5), np.float32)
    for t in range(ol):
        for k in range(5):
            i = t * 3 + k - 2
            if 0 <= i < 20:
                ref1[:, t, :, k] = sig[:, :, i]
    assert got1.dtype == np.float16
    np.testing.assert_array_equal(got1[0], ref1.reshape(2, ol, 15).astype(np.float16))


@pytest.mark.parametrize("kernel_type", ["f32", "f16"])
def test_conv_2d_direct_and_composite(kernel_type: str) -> None:
    img, ker = _img(102)
    g = CpuGraph()
    tk, ti = g.tensor(ker, kernel_type), g.tensor(img)
    direct = ops.conv_2d_direct(tk, ti, 1, 2, 1, 1, 2, 1)
    composite = ops.conv_2d(tk, ti, 1, 2, 1, 1, 2, 1)
    got = g.compute(direct, composite)
    k = ker.astype(np.float16).astype(np.float32) if kernel_type == "f16" else ker
    x = img.astype(np.float16).astype(np.float32) if kernel_type == "f16" else img  # f16 kernels round the data
    ref = _conv2d_ref(x, k, (1, 2), (1, 1), (2, 1))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(composite.to_numpy(), ref, rtol=1e-5, atol=1e-5)


def test_conv_transpose_1d() -> None:
    r = rng(103)
    ker = r.standard_normal((3, 4, 5)).astype(np.float32)  # [K=5, OC=4, IC=3]
    sig = r.standard_normal((3, 7)).astype(np.float32)  # [L=7, IC=3]
    g = CpuGraph()
    got = g.compute(ops.conv_transpose_1d(g.tensor(ker), g.tensor(sig), 2, 0, 1))[0, 0]
    ref = np.zeros((4, (7 - 1) * 2 + 5))
    for t in range(7):
        for k in range(5):
            ref[:, t * 2 + k] += ker[:, :, k].T.astype(np.float64) @ sig[:, t]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(OpError, match="p0 = 0"):
        ops.conv_transpose_1d(g.tensor(ker), g.tensor(sig), 2, 1, 1)


def test_conv_transpose_2d_every_batch() -> None:
    r = rng(104)
    ker = r.standard_normal((3, 4, 3, 2)).astype(np.float32)  # [KW=2, KH=3, OC=4, IC=3]
    img = r.standard_normal((2, 3, 5, 6)).astype(np.float32)  # N=2 (ggml's own kernel only fills batch 0)
    g = CpuGraph()
    got = g.compute(ops.conv_transpose_2d_p0(g.tensor(ker), g.tensor(img), 2))
    ref = np.zeros((2, 4, (5 - 1) * 2 + 3, (6 - 1) * 2 + 2))
    for y in range(5):
        for x in range(6):
            for ky in range(3):
                for kx in range(2):
                    ref[:, :, y * 2 + ky, x * 2 + kx] += img[:, :, y, x].astype(np.float64) @ ker[:, :, ky, kx]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", [PoolOp.AVG, PoolOp.MAX])
@pytest.mark.parametrize("params", [(2, 2, 2, 2, 0, 0), (3, 3, 2, 2, 1, 1), (3, 2, 1, 2, 1, 0)])
def test_pool_2d(op: PoolOp, params: tuple[int, ...]) -> None:
    k0, k1, s0, s1, p0, p1 = params
    img, _ = _img(105)
    g = CpuGraph()
    got = g.compute(ops.pool_2d(g.tensor(img), op, k0, k1, s0, s1, p0, p1))
    ow, oh = (11 + 2 * p0 - k0) // s0 + 1, (9 + 2 * p1 - k1) // s1 + 1
    ref = np.zeros((2, 3, oh, ow))
    for y in range(oh):
        for x in range(ow):
            cells = [
                img[:, :, iy, ix]
                for iy in range(y * s1 - p1, y * s1 - p1 + k1)
                for ix in range(x * s0 - p0, x * s0 - p0 + k0)
                if 0 <= iy < 9 and 0 <= ix < 11
            ]
            stack = np.stack(cells)
            # AVG divides by the whole window k0*k1, padded cells included; MAX ignores padding
            ref[:, :, y, x] = stack.sum(axis=0) / (k0 * k1) if op == PoolOp.AVG else stack.max(axis=0)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_pool_1d_average_divides_by_cells_inside() -> None:
    x = np.arange(1, 7, dtype=np.float32).reshape(1, 6)
    g = CpuGraph()
    got = g.compute(ops.pool_1d(g.tensor(x), PoolOp.AVG, 3, 2, 1)).reshape(-1)
    np.testing.assert_allclose(got, [(1 + 2) / 2, (2 + 3 + 4) / 3, (4 + 5 + 6) / 3])
    g2 = CpuGraph()
    np.testing.assert_array_equal(g2.compute(ops.pool_1d(g2.tensor(x), PoolOp.MAX, 3, 2, 1)).reshape(-1), [2, 4, 6])


def _bilinear_ref(x: np.ndarray, oh: int, ow: int, align: bool) -> np.ndarray:
    h, w = x.shape[-2:]
    out = np.zeros((*x.shape[:-2], oh, ow))
    for i in range(oh):
        for j in range(ow):
            if align:
                fy = i * (h - 1) / (oh - 1) if oh > 1 else 0.0
                fx = j * (w - 1) / (ow - 1) if ow > 1 else 0.0
            else:
                fy, fx = (i + 0.5) * h / oh - 0.5, (j + 0.5) * w / ow - 0.5
            y0, x0 = int(np.floor(fy)), int(np.floor(fx))
            ya, yb = min(max(y0, 0), h - 1), min(max(y0 + 1, 0), h - 1)
            xa, xb = min(max(x0, 0), w - 1), min(max(x0 + 1, 0), w - 1)
            dy, dx = min(max(fy - ya, 0), 1), min(max(fx - xa, 0), 1)
            out[..., i, j] = (
                x[..., ya, xa] * (1 - dx) * (1 - dy)
                + x[..., ya, xb] * dx * (1 - dy)
                + x[..., yb, xa] * (1 - dx) * dy
                + x[..., yb, xb] * dx * dy
            )
    return out


def test_upscale_nearest_and_bilinear() -> None:
    x = rng(106).standard_normal((2, 3, 4, 5)).astype(np.float32)
    g = CpuGraph()
    got = g.compute(ops.upscale_ext(g.tensor(x), 13, 7, 3, 2, ScaleMode.NEAREST))
    iy, ix = (np.arange(7) * 4 / 7).astype(int), (np.arange(13) * 5 / 13).astype(int)  # floor(i / (out/in))
    np.testing.assert_array_equal(got, x[:, :, iy][:, :, :, ix])
    g2 = CpuGraph()
    np.testing.assert_array_equal(g2.compute(ops.upscale(g2.tensor(x), 2)), x.repeat(2, axis=2).repeat(2, axis=3))
    for align in (False, True):
        g3 = CpuGraph()
        mode = ScaleMode.BILINEAR | (SCALE_FLAG_ALIGN_CORNERS if align else 0)
        got3 = g3.compute(ops.upscale_ext(g3.tensor(x), 9, 6, 3, 2, mode))
        np.testing.assert_allclose(got3, _bilinear_ref(x, 6, 9, align), rtol=1e-5, atol=1e-6)


def _keys(t: np.ndarray, a: float = -0.75) -> np.ndarray:
    """Keys' cubic convolution kernel W(t)."""
    t = np.abs(t)
    near = (a + 2) * t**3 - (a + 3) * t**2 + 1
    far = a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def test_upscale_bicubic() -> None:
    x = rng(107).standard_normal((1, 2, 5, 6)).astype(np.float32)
    g = CpuGraph()
    got = g.compute(ops.upscale_ext(g.tensor(x), 11, 8, 2, 1, ScaleMode.BICUBIC))
    ref = np.zeros((1, 2, 8, 11))
    for i in range(8):
        fy = (i + 0.5) * 5 / 8 - 0.5
        y0 = int(np.floor(fy))
        for j in range(11):
            fx = (j + 0.5) * 6 / 11 - 0.5
            x0 = int(np.floor(fx))
            for m in range(-1, 3):
                for n in range(-1, 3):
                    yy, xx = min(max(y0 + m, 0), 4), min(max(x0 + n, 0), 5)  # border cells repeat
                    ref[..., i, j] += x[..., yy, xx] * _keys(fy - y0 - m) * _keys(fx - x0 - n)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    const = np.full((1, 1, 4, 4), 2.5, np.float32)
    g2 = CpuGraph()
    np.testing.assert_allclose(g2.compute(ops.upscale(g2.tensor(const), 3, ScaleMode.BICUBIC)), 2.5, rtol=1e-6)
    with pytest.raises(OpError, match="UPSCALE"):
        ops.upscale(g.tensor(x), 1)


def _depthwise_ref(img: np.ndarray, ker: np.ndarray, s: tuple[int, int], p: tuple[int, int], d: tuple[int, int]):
    """img (N, C, H, W), ker (C, KH, KW): one filter per channel, zero padding; s/p/d as (x, y)."""
    return np.stack([_conv2d_ref(img[:, c : c + 1], ker[c][None, None], s, p, d)[:, 0] for c in range(img.shape[1])], 1)


def test_conv_2d_dw_direct_composite_and_channels_first_layout() -> None:
    r = rng(108)
    img, ker = r.standard_normal((2, 3, 9, 11)).astype(np.float32), r.standard_normal((3, 1, 3, 2)).astype(np.float32)
    ref = _depthwise_ref(img, ker[:, 0], (2, 1), (1, 2), (1, 2))
    g = CpuGraph()
    tk, ti = g.tensor(ker), g.tensor(img)
    direct, composite = ops.conv_2d_dw_direct(tk, ti, 2, 1, 1, 2, 1, 2), ops.conv_2d_dw(tk, ti, 2, 1, 1, 2, 1, 2)
    g.compute(direct, composite)
    np.testing.assert_allclose(direct.to_numpy(), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(composite.to_numpy(), ref, rtol=1e-5, atol=1e-5)
    # channels innermost in memory (a permuted [C, W, H, N] tensor): the result keeps that layout
    g2 = CpuGraph()
    nhwc = g2.tensor(np.ascontiguousarray(img.transpose(0, 2, 3, 1)))
    out = ops.conv_2d_dw_direct(g2.tensor(ker), ops.permute(nhwc, 2, 0, 1, 3), 2, 1, 1, 2, 1, 2)
    assert out.nb[2] == 4 and out.nb[0] == 3 * 4
    np.testing.assert_allclose(g2.compute(out), ref, rtol=1e-5, atol=1e-5)


def test_wide_pooling_windows_cost_the_input_not_the_window() -> None:
    """A window far wider than the signal (all padding but one cell) neither materialises it nor loops over it."""
    import tracemalloc

    x = np.array([[3.5]], np.float32)
    k = 8193  # output (1 + 2*4096 - 8193) + 1 = 1 cell
    g = CpuGraph()
    avg, mx = ops.pool_1d(g.tensor(x), PoolOp.AVG, k, 1, 4096), ops.pool_1d(g.tensor(x), PoolOp.MAX, k, 1, 4096)
    img = np.full((1, 1, 1, 1), 2.0, np.float32)
    p2 = ops.pool_2d(g.tensor(img), PoolOp.AVG, 4097, 4097, 1, 1, 2048, 2048)  # 16.8M-cell window, 1 cell inside
    tracemalloc.start()
    g.compute(avg, mx, p2)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert avg.to_numpy().reshape(-1).tolist() == [3.5]  # POOL_1D averages over the cells inside
    assert mx.to_numpy().reshape(-1).tolist() == [3.5]
    np.testing.assert_array_equal(p2.to_numpy().reshape(-1), np.float32(2.0) / np.float32(4097 * 4097))
    assert peak < 8 << 20, f"pooling used {peak} bytes of scratch"  # patches would be 4·4097² = 67 MB


def test_convolutions_in_row_blocks_match_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """CONV_2D / CONV_2D_DW work through the output rows in blocks of bounded patches: same values as one block."""
    from ggml_cpu.ops import conv

    img, ker = _img(110)
    dw = rng(111).standard_normal((3, 1, 3, 2)).astype(np.float32)
    results = []
    for patch_bytes in (conv._PATCH_BYTES, 1):  # one block; one output row per block
        monkeypatch.setattr(conv, "_PATCH_BYTES", patch_bytes)
        g = CpuGraph()
        out = ops.conv_2d_direct(g.tensor(ker), g.tensor(img), 1, 2, 1, 1, 2, 1)
        out_dw = ops.conv_2d_dw_direct(g.tensor(dw), g.tensor(img), 2, 1, 1, 2, 1, 2)
        g.compute(out, out_dw)
        results.append((out.to_numpy(), out_dw.to_numpy()))
    np.testing.assert_allclose(results[0][0], _conv2d_ref(img, ker, (1, 2), (1, 1), (2, 1)), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(results[1][0], results[0][0])
    np.testing.assert_array_equal(results[1][1], results[0][1])


def test_conv_transpose_1d_kernel_longer_than_signal() -> None:
    """A kernel longer than the signal loops over the input positions; same definition as the tap loop."""
    r = rng(112)
    ker = r.standard_normal((2, 3, 40)).astype(np.float32)  # [K=40, OC=3, IC=2]
    sig = r.standard_normal((2, 4)).astype(np.float32)  # [L=4, IC=2]
    g = CpuGraph()
    got = g.compute(ops.conv_transpose_1d(g.tensor(ker), g.tensor(sig), 3, 0, 1))[0, 0]
    ref = np.zeros((3, (4 - 1) * 3 + 40))
    for t in range(4):
        for k in range(40):
            ref[:, t * 3 + k] += ker[:, :, k].T.astype(np.float64) @ sig[:, t]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
