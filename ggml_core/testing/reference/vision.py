"""numpy references for vision ops: IM2COL, CONV_2D, CONV_TRANSPOSE_1D, POOL_2D, UPSCALE.

Shapes are numpy shapes of ggml tensors: an image ``[W, H, C, N]`` is the array (N, C, H, W); a 2-D kernel
``[KW, KH, IC, OC]`` is (OC, IC, KH, KW).
"""

from __future__ import annotations

import numpy as np

__all__ = ["conv_2d", "conv_transpose_1d", "im2col", "out_size", "pool_2d", "upscale"]


def out_size(n: int, k: int, s: int, p: int, d: int) -> int:
    """Output length of a convolution: (n + 2p − d(k − 1) − 1) / s + 1."""
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def _cols(img: np.ndarray, kh: int, kw: int, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> np.ndarray:
    """Patches (N, OH, OW, C, KH, KW) of img (N, C, H, W); zeros outside the image."""
    n, c, h, w = img.shape
    oh, ow = out_size(h, kh, s1, p1, d1), out_size(w, kw, s0, p0, d0)
    padded = np.zeros((n, c, h + 2 * p1 + d1 * kh, w + 2 * p0 + d0 * kw), dtype=np.float64)
    padded[:, :, p1 : p1 + h, p0 : p0 + w] = img
    out = np.empty((n, oh, ow, c, kh, kw), dtype=np.float64)
    for ky in range(kh):
        for kx in range(kw):
            ys = ky * d1 + s1 * np.arange(oh)
            xs = kx * d0 + s0 * np.arange(ow)
            out[:, :, :, :, ky, kx] = padded[:, :, ys][:, :, :, xs].transpose(0, 2, 3, 1)
    return out


def im2col(
    kernel: np.ndarray, img: np.ndarray, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int, is_2d: bool
) -> np.ndarray:
    """IM2COL: 2-D → (N, OH, OW, IC·KH·KW); 1-D (img (1, N, IC, L), kernel (1, OC, IC, K)) → (1, N, OL, IC·K)."""
    x = np.asarray(img, dtype=np.float64)
    if is_2d:
        kh, kw = kernel.shape[2], kernel.shape[3]
        cols = _cols(x, kh, kw, s0, s1, p0, p1, d0, d1)
        return cols.reshape(*cols.shape[:3], -1)
    k = kernel.shape[3]
    cols = _cols(x[0][:, :, None, :], 1, k, s0, 1, p0, 0, d0, 1)  # (N, 1, OL, IC, 1, K)
    return cols.reshape(1, cols.shape[0], cols.shape[2], -1)


def conv_2d(kernel: np.ndarray, img: np.ndarray, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> np.ndarray:
    """CONV_2D: kernel (OC, IC, KH, KW), img (N, IC, H, W) → (N, OC, OH, OW) (cross-correlation, as ggml)."""
    k = np.asarray(kernel, dtype=np.float64)
    cols = _cols(np.asarray(img, dtype=np.float64), k.shape[2], k.shape[3], s0, s1, p0, p1, d0, d1)
    out = np.einsum("nhwcyx,ocyx->nohw", cols, k)
    return out


def conv_transpose_1d(kernel: np.ndarray, x: np.ndarray, s0: int, p0: int, d0: int) -> np.ndarray:
    """CONV_TRANSPOSE_1D: kernel (1, IC, OC, K), x (1, 1, IC, L) → (1, 1, OC, (L − 1)·s0 − 2·p0 + d0·(K − 1) + 1)."""
    k = np.asarray(kernel, dtype=np.float64)[0]  # (IC, OC, K)
    v = np.asarray(x, dtype=np.float64)[0, 0]  # (IC, L)
    _, oc, kk = k.shape
    length = v.shape[1]
    full = (length - 1) * s0 + d0 * (kk - 1) + 1
    out = np.zeros((oc, full))
    for j in range(kk):
        contrib = np.einsum("io,il->ol", k[:, :, j], v)  # (OC, L)
        out[:, j * d0 + s0 * np.arange(length)] += contrib
    return out[:, p0 : full - p0].reshape(1, 1, oc, -1)


def pool_2d(x: np.ndarray, avg: bool, k0: int, k1: int, s0: int, s1: int, p0: int, p1: int) -> np.ndarray:
    """POOL_2D over (N, C, H, W): average divides by k0·k1 even where the window covers padding; max skips padding."""
    v = np.asarray(x, dtype=np.float64)
    n, c, h, w = v.shape
    oh = (h + 2 * p1 - k1) // s1 + 1
    ow = (w + 2 * p0 - k0) // s0 + 1
    out = np.zeros((n, c, oh, ow))
    for oy in range(oh):
        for ox in range(ow):
            y0, x0 = oy * s1 - p1, ox * s0 - p0
            win = v[:, :, max(y0, 0) : max(y0 + k1, 0), max(x0, 0) : max(x0 + k0, 0)]
            if avg:
                out[:, :, oy, ox] = win.sum(axis=(2, 3)) / (k0 * k1)
            else:
                out[:, :, oy, ox] = win.max(axis=(2, 3)) if win.size else -np.finfo(np.float32).max
    return out


def upscale(x: np.ndarray, factor: int, bilinear: bool) -> np.ndarray:
    """UPSCALE of dims 0 and 1 by ``factor``: nearest (source floor(i / factor)) or half-pixel bilinear, clamped."""
    v = np.asarray(x, dtype=np.float32)
    h, w = v.shape[2], v.shape[3]
    oh, ow = h * factor, w * factor
    if not bilinear:
        return v[:, :, (np.arange(oh) // factor)][:, :, :, (np.arange(ow) // factor)]

    def axis(n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) / np.float32(factor) - np.float32(0.5)
        i0 = np.floor(pos).astype(np.int64)
        lo = np.clip(i0, 0, n_in - 1)
        hi = np.clip(i0 + 1, 0, n_in - 1)
        frac = np.clip(pos - lo.astype(np.float32), 0.0, 1.0).astype(np.float32)
        return lo, hi, frac

    y0, y1, dy = axis(oh, h)
    x0, x1, dx = axis(ow, w)
    a = v[:, :, y0][:, :, :, x0]
    b = v[:, :, y0][:, :, :, x1]
    c = v[:, :, y1][:, :, :, x0]
    d = v[:, :, y1][:, :, :, x1]
    dy2, dx2 = dy[:, None], dx[None, :]
    return a * (1 - dx2) * (1 - dy2) + b * dx2 * (1 - dy2) + c * (1 - dx2) * dy2 + d * dx2 * dy2
