"""Convolution family: IM2COL, CONV_2D, CONV_TRANSPOSE_1D/2D, POOL_1D/2D, UPSCALE (nearest, bilinear, bicubic).

Numerics follow ggml's CPU: an f16 kernel rounds the input (patches or signal) to f16 before the products, which
are accumulated in float32; POOL_2D's average divides by ``k0·k1`` even where the window covers padding while
POOL_1D's divides by the cells inside; MAX pools start from ``-FLT_MAX``. UPSCALE's source coordinate is
``(i + 0.5) / sf - 0.5`` (``i / sf`` for nearest) with ``sf = ne_out / ne_in`` in float32.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.ops import SCALE_FLAG_ALIGN_CORNERS, SCALE_FLAG_ANTIALIAS, PoolOp, ScaleMode
from ggml_cpu.ops._base import FLOAT_TYPES, KERNELS, Thunk, f32, store

__all__ = ["patches"]

_F32 = np.float32
_FLT_MAX = np.finfo(np.float32).max
#: bytes of input patches a convolution materialises at once (it works through the output rows in blocks)
_PATCH_BYTES = 32 << 20


def _window_index(
    n_out: int, n_in: int, k: int, stride: int, pad: int, dilation: int, first: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Input index (clipped) and validity of every (output position, kernel tap) pair along one axis.

    Output positions are ``first .. first + n_out - 1``.
    """
    idx = (first + np.arange(n_out))[:, None] * stride + np.arange(k)[None, :] * dilation - pad
    valid = (idx >= 0) & (idx < n_in)
    return np.clip(idx, 0, max(n_in - 1, 0)), valid


def patches(
    x: np.ndarray,
    kh: int,
    kw: int,
    oh: int,
    ow: int,
    stride: tuple[int, int],
    pad: tuple[int, int],
    dilation: tuple[int, int],
    fill: float = 0.0,
    first_row: int = 0,
) -> np.ndarray:
    """x (N, C, H, W) → (N, OH, OW, C, KH, KW): the input cell under every kernel tap, ``fill`` outside.

    ``stride``, ``pad`` and ``dilation`` are (along H, along W); the rows are output rows ``first_row`` on.
    """
    iy, vy = _window_index(oh, x.shape[2], kh, stride[0], pad[0], dilation[0], first_row)  # (OH, KH)
    ix, vx = _window_index(ow, x.shape[3], kw, stride[1], pad[1], dilation[1])  # (OW, KW)
    g = x[:, :, iy[:, None, :, None], ix[None, :, None, :]]  # (N, C, OH, OW, KH, KW)
    valid = vy[:, None, :, None] & vx[None, :, None, :]
    g = np.where(valid, g, _F32(fill))
    return g.transpose(0, 2, 3, 1, 4, 5)


def _conv_params(node: Tensor, two_d: bool) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    s0, s1, p0, p1, d0, d1 = (node.op_param_i32(i) for i in range(6))
    if not two_d:
        return (1, s0), (0, p0), (1, d0)
    return (s1, s0), (p1, p0), (d1, d0)


# ------------------------------------------------------------------------------------------------ IM2COL


def _im2col_ok(node: Tensor) -> bool:
    b = node.src[1]
    assert b is not None
    return b.type in FLOAT_TYPES and node.type in (GGMLType.F32, GGMLType.F16)


@KERNELS.kernel(GGMLOp.IM2COL, supports=_im2col_ok)
def _bind_im2col(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    two_d = bool(node.op_param_i32(6))
    stride, pad, dilation = _conv_params(node, two_d)
    kh, kw = (a.ne[1], a.ne[0]) if two_d else (1, a.ne[0])
    oh, ow = (node.ne[2], node.ne[1]) if two_d else (1, node.ne[1])

    def run() -> None:
        x = f32(b)  # 2-d: (N, IC, IH, IW); 1-d: (1, N, IC, IW)
        x4 = x if two_d else x[0][:, :, None, :]  # 1-d as images of height 1
        cols = patches(x4, kh, kw, oh, ow, stride, pad, dilation)  # (N, OH, OW, IC, KH, KW)
        n = cols.shape[0]
        flat = cols.reshape(n, oh, ow, -1)
        store(node, flat if two_d else flat.reshape(1, n, ow, -1))

    return run


# ------------------------------------------------------------------------------------------------ CONV_2D


def _conv2d_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    kernel_types = (GGMLType.F32, GGMLType.F16) if node.op == GGMLOp.CONV_2D else (GGMLType.F32,)
    return a.type in kernel_types and b.type == GGMLType.F32 and node.type == GGMLType.F32


def _row_blocks(node: Tensor) -> Callable[[], Iterator[tuple[int, int, np.ndarray]]]:
    """For CONV_2D / CONV_2D_DW: blocks of output rows (y0, y1, input patches (N, y1-y0, OW, C, KH, KW)).

    Each block's patches hold at most about ``_PATCH_BYTES``, so the scratch does not grow with output × kernel.
    """
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    stride, pad, dilation = _conv_params(node, True)
    oh, ow, kh, kw = node.ne[1], node.ne[0], a.ne[1], a.ne[0]
    row_bytes = 4 * b.ne[3] * ow * b.ne[2] * kh * kw
    rows = max(1, _PATCH_BYTES // max(1, row_bytes))

    def blocks() -> Iterator[tuple[int, int, np.ndarray]]:
        x = f32(b)
        for y0 in range(0, oh, rows):
            y1 = min(oh, y0 + rows)
            yield y0, y1, patches(x, kh, kw, y1 - y0, ow, stride, pad, dilation, first_row=y0)

    return blocks


@KERNELS.kernel(GGMLOp.CONV_2D, supports=_conv2d_ok)
def _bind_conv_2d(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    blocks = _row_blocks(node)

    def run() -> None:
        w = f32(a).reshape(a.ne[3], -1)  # (OC, IC*KH*KW)
        out = np.empty((node.ne[3], a.ne[3], node.ne[1], node.ne[0]), np.float32)  # (N, OC, OH, OW)
        for y0, y1, cols in blocks():
            n, rh, ow = cols.shape[:3]
            cols = cols.reshape(n * rh * ow, -1)
            if a.type == GGMLType.F16:  # ggml writes the patches in the kernel's type
                cols = cols.astype(np.float16).astype(np.float32)
            out[:, :, y0:y1] = (cols @ w.T).reshape(n, rh, ow, a.ne[3]).transpose(0, 3, 1, 2)
        store(node, out)

    return run


@KERNELS.kernel(GGMLOp.CONV_2D_DW, supports=_conv2d_ok)
def _bind_conv_2d_dw(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    blocks = _row_blocks(node)

    def run() -> None:
        w = f32(a)[:, 0]  # (C, KH, KW): one filter per channel
        out = np.empty((node.ne[3], node.ne[2], node.ne[1], node.ne[0]), np.float32)  # (N, C, OH, OW)
        for y0, y1, cols in blocks():
            out[:, :, y0:y1] = np.einsum("nyxckl,ckl->ncyx", cols, w, dtype=np.float32)
        store(node, out)  # any result strides

    return run


# ------------------------------------------------------------------------------------------------ transposed


def _transpose_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    return a.type in (GGMLType.F32, GGMLType.F16) and b.type == GGMLType.F32 and node.type == GGMLType.F32


def _kernel_rounded(a: Tensor, x: np.ndarray) -> np.ndarray:
    """The input as the kernel's type sees it (f16 kernels round it to f16)."""
    return x.astype(np.float16).astype(np.float32) if a.type == GGMLType.F16 else x


@KERNELS.kernel(GGMLOp.CONV_TRANSPOSE_1D, supports=_transpose_ok)
def _bind_conv_transpose_1d(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    s0 = node.op_param_i32(0)
    k, length = a.ne[0], b.ne[0]

    def run() -> None:
        w = f32(a)[0]  # (IC, OC, K)
        x = _kernel_rounded(a, f32(b)[0, 0])  # (IC, L)
        out = np.zeros((a.ne[1], node.ne[0]), np.float32)
        if k <= length:  # output t = l·s0 + tap; loop over whichever is shorter, kernel taps or input positions
            for tap in range(k):
                out[:, tap : tap + s0 * (length - 1) + 1 : s0] += w[:, :, tap].T @ x
        else:
            for pos in range(length):
                out[:, pos * s0 : pos * s0 + k] += np.einsum("i,iok->ok", x[:, pos], w, dtype=np.float32)
        store(node, out[None, None])

    return run


@KERNELS.kernel(GGMLOp.CONV_TRANSPOSE_2D, supports=_transpose_ok)
def _bind_conv_transpose_2d(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    s = node.op_param_i32(0)
    kw, kh = a.ne[0], a.ne[1]
    w_in, h_in = b.ne[0], b.ne[1]

    def run() -> None:
        w = f32(a)  # (IC, OC, KH, KW)
        x = _kernel_rounded(a, f32(b))  # (N, IC, H, W)
        out = np.zeros((b.ne[3], a.ne[2], node.ne[1], node.ne[0]), np.float32)
        for ky in range(kh):  # one kernel tap at a time: scratch is one (N, OC, H, W) product
            for kx in range(kw):
                prod = np.einsum("nihw,io->nohw", x, w[:, :, ky, kx], dtype=np.float32)
                out[:, :, ky : ky + s * (h_in - 1) + 1 : s, kx : kx + s * (w_in - 1) + 1 : s] += prod
        store(node, out)

    return run


# ------------------------------------------------------------------------------------------------ pooling


def _pool_ok(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return a.type in (GGMLType.F32, GGMLType.F16) and node.type == GGMLType.F32


def _taps(n_in: int, n_out: int, k: int, s: int, p: int) -> list[tuple[int, int, slice]]:
    """Along one axis, per kernel tap that reaches the input: (first output, end output, input slice).

    Output ``o`` reads input ``o·s + tap - p``; a tap is kept only for the outputs where that lies in the input,
    so taps over padding alone are never visited.
    """
    out = []
    for tap in range(max(0, p - s * (n_out - 1)), min(k, p + n_in)):
        lo = max(0, -(-(p - tap) // s))  # the first output whose input index is >= 0
        hi = min(n_out, (n_in - 1 - tap + p) // s + 1)  # one past the last whose index is < n_in
        if lo < hi:
            first = lo * s + tap - p
            out.append((lo, hi, slice(first, first + (hi - lo - 1) * s + 1, s)))
    return out


def _pool(x: np.ndarray, op: PoolOp, taps_y: list[tuple[int, int, slice]], taps_x: list[tuple[int, int, slice]],
          oh: int, ow: int) -> np.ndarray:  # fmt: skip
    """Pool the windows of x (..., H, W) without materialising them: one strided view per kernel tap.

    ggml's order and rounding: taps row by row, each added to (AVG) or compared with (MAX, from ``-FLT_MAX``;
    NaN never wins, as with ggml's ``>``) the float32 output. Scratch is the output's size.
    """
    shape = (*x.shape[:-2], oh, ow)
    acc = np.zeros(shape, np.float32) if op == PoolOp.AVG else np.full(shape, -_FLT_MAX, np.float32)
    for y0, y1, ys in taps_y:
        for x0, x1, xs in taps_x:
            dst, src = acc[..., y0:y1, x0:x1], x[..., ys, xs]
            if op == PoolOp.AVG:
                dst += src
            else:
                np.fmax(dst, src, out=dst)
    return acc


@KERNELS.kernel(GGMLOp.POOL_2D, supports=_pool_ok)
def _bind_pool_2d(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    op = PoolOp(node.op_param_i32(0))
    k0, k1, s0, s1, p0, p1 = (node.op_param_i32(i) for i in range(1, 7))
    oh, ow = node.ne[1], node.ne[0]
    taps_y, taps_x = _taps(a.ne[1], oh, k1, s1, p1), _taps(a.ne[0], ow, k0, s0, p0)

    def run() -> None:
        res = _pool(f32(a), op, taps_y, taps_x, oh, ow)  # (ne3, ne2, OH, OW): every plane pooled alone
        if op == PoolOp.AVG:
            res /= _F32(k0 * k1)  # padding counts in the divisor
        store(node, res)

    return run


@KERNELS.kernel(GGMLOp.POOL_1D, supports=_pool_ok)
def _bind_pool_1d(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    op = PoolOp(node.op_param_i32(0))
    k0, s0, p0 = node.op_param_i32(1), node.op_param_i32(2), node.op_param_i32(3)
    ow = node.ne[0]
    taps = _taps(a.ne[0], ow, k0, s0, p0)
    count = np.zeros(ow, np.int64)
    for lo, hi, _ in taps:
        count[lo:hi] += 1

    def run() -> None:
        x = f32(a)  # (ne3, ne2, ne1, W)
        res = _pool(x[..., None, :], op, [(0, 1, slice(0, 1))], taps, 1, ow)[..., 0, :]
        if op == PoolOp.AVG:  # divided by the cells inside the signal
            res = np.where(count > 0, res / np.maximum(count, 1).astype(np.float32), _F32(0.0))
        store(node, res)

    return run


# ------------------------------------------------------------------------------------------------ UPSCALE


def _upscale_ok(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    mode = node.op_param_i32(0)
    return a.type == GGMLType.F32 and node.type == GGMLType.F32 and not mode & SCALE_FLAG_ANTIALIAS


def _axis_coords(n_out: int, n_in: int, sf: np.float32, offset: np.float32) -> np.ndarray:
    """Source coordinate of each output index: ``(i + offset) / sf - offset`` in float32."""
    return (np.arange(n_out, dtype=np.float32) + offset) / sf - offset


def _bicubic_weights(t: np.ndarray) -> np.ndarray:
    """The four cubic-convolution weights (a = -0.75) for fractional offsets t, shape (..., 4)."""
    a = _F32(-0.75)

    def w1(v: np.ndarray) -> np.ndarray:
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def w2(v: np.ndarray) -> np.ndarray:
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    one = _F32(1.0)
    return np.stack([w2(t + one), w1(t), w1(one - t), w2(_F32(2.0) - t)], axis=-1).astype(np.float32)


@KERNELS.kernel(GGMLOp.UPSCALE, supports=_upscale_ok)
def _bind_upscale(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    flags = node.op_param_i32(0)
    mode = ScaleMode(flags & 0xFF)
    sf = [_F32(node.ne[i]) / _F32(a.ne[i]) for i in range(4)]
    offset = _F32(0.5)
    if flags & SCALE_FLAG_ALIGN_CORNERS:
        offset = _F32(0.0)
        for i in (0, 1):
            if node.ne[i] > 1 and a.ne[i] > 1:
                sf[i] = _F32(node.ne[i] - 1) / _F32(a.ne[i] - 1)
    # dims 2 and 3 always use nearest: i / sf
    i2 = (np.arange(node.ne[2], dtype=np.float32) / sf[2]).astype(np.int64)
    i3 = (np.arange(node.ne[3], dtype=np.float32) / sf[3]).astype(np.int64)

    def run() -> None:
        x = f32(a)[i3][:, i2]  # (ne3, ne2, H_in, W_in)
        if mode == ScaleMode.NEAREST:
            iy = (np.arange(node.ne[1], dtype=np.float32) / sf[1]).astype(np.int64)
            ix = (np.arange(node.ne[0], dtype=np.float32) / sf[0]).astype(np.int64)
            store(node, x[:, :, iy][:, :, :, ix])
            return
        y = _axis_coords(node.ne[1], a.ne[1], sf[1], offset)
        xs = _axis_coords(node.ne[0], a.ne[0], sf[0], offset)
        y0, x0 = np.floor(y).astype(np.int64), np.floor(xs).astype(np.int64)
        if mode == ScaleMode.BILINEAR:
            ya, yb = np.clip(y0, 0, a.ne[1] - 1), np.clip(y0 + 1, 0, a.ne[1] - 1)
            xa, xb = np.clip(x0, 0, a.ne[0] - 1), np.clip(x0 + 1, 0, a.ne[0] - 1)
            dy = np.clip(y - ya.astype(np.float32), 0, 1)[:, None]
            dx = np.clip(xs - xa.astype(np.float32), 0, 1)[None, :]
            p00, p01 = x[:, :, ya][:, :, :, xa], x[:, :, ya][:, :, :, xb]
            p10, p11 = x[:, :, yb][:, :, :, xa], x[:, :, yb][:, :, :, xb]
            one = _F32(1.0)
            val = p00 * (one - dx) * (one - dy) + p01 * dx * (one - dy) + p10 * (one - dx) * dy + p11 * dx * dy
            store(node, val)
            return
        wy = _bicubic_weights(y - y0.astype(np.float32))  # (OH, 4)
        wx = _bicubic_weights(xs - x0.astype(np.float32))  # (OW, 4)
        ty = np.clip(y0[:, None] + np.arange(-1, 3), 0, a.ne[1] - 1)  # (OH, 4)
        tx = np.clip(x0[:, None] + np.arange(-1, 3), 0, a.ne[0] - 1)  # (OW, 4)
        rows = np.einsum("...hwj,wj->...hw", x[:, :, :, tx], wx)  # interpolate along x first, per source row
        store(node, np.einsum("...yjw,yj->...yw", rows[:, :, ty], wy))

    return run
