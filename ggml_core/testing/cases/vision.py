"""Cases for vision ops: IM2COL (1-D and 2-D, f32/f16 output), CONV_2D (f32/f16 kernel, stride, padding,
dilation), CONV_TRANSPOSE_1D, POOL_2D (avg/max with padding), UPSCALE (nearest, bilinear)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ggml_core._context import Context
from ggml_core._types import GGMLType
from ggml_core.ops import PoolOp, ScaleMode
from ggml_core.testing._case import Built, Case, Check, builder
from ggml_core.testing.cases._util import leaf
from ggml_core.testing.reference import vision as ref

__all__ = ["cases"]

T = GGMLType
CONV_CHECK = Check.nmse(5e-4)


def _im2col(
    ne_in: Sequence[int],
    ne_k: Sequence[int],
    s0: int,
    s1: int,
    p0: int,
    p1: int,
    d0: int,
    d1: int,
    is_2d: bool,
    kernel_type: GGMLType = T.F32,
    dst: GGMLType = T.F32,
) -> Case:
    def build(ctx: Context) -> Built:
        img = leaf(ctx, T.F32, ne_in, "input")
        k = leaf(ctx, kernel_type, ne_k, "kernel")
        out = builder("im2col")(k, img, s0, s1, p0, p1, d0, d1, is_2d, dst)
        return Built(out, [k, img])

    params = {
        "type_input": T.F32,
        "type_kernel": kernel_type,
        "dst_type": dst,
        "ne_input": list(ne_in),
        "ne_kernel": list(ne_k),
        "s0": s0,
        "s1": s1,
        "p0": p0,
        "p1": p1,
        "d0": d0,
        "d1": d1,
        "is_2D": is_2d,
    }
    return Case("IM2COL", params, build, lambda k, x: ref.im2col(k, x, s0, s1, p0, p1, d0, d1, is_2d))


def _conv_2d(
    ne_in: Sequence[int],
    ne_k: Sequence[int],
    kernel_type: GGMLType,
    s0: int,
    s1: int,
    p0: int,
    p1: int,
    d0: int,
    d1: int,
) -> Case:
    w, h, ic, n = ne_in
    kw, kh, _, oc = ne_k
    ow, oh = ref.out_size(w, kw, s0, p0, d0), ref.out_size(h, kh, s1, p1, d1)

    def build(ctx: Context) -> Built:
        img = leaf(ctx, T.F32, ne_in, "input")
        k = leaf(ctx, kernel_type, ne_k, "kernel")
        return Built(builder("conv_2d")(k, img, s0, s1, p0, p1, d0, d1), [k, img])

    def reference(k: np.ndarray, x: np.ndarray) -> np.ndarray:
        if kernel_type == T.F16:  # im2col rounds the data to the kernel's type
            x = x.astype(np.float16)
        return ref.conv_2d(k, x, s0, s1, p0, p1, d0, d1)

    params = {
        "ne_input": list(ne_in),
        "ne_kernel": list(ne_k),
        "type_kernel": kernel_type,
        "stride0": s0,
        "stride1": s1,
        "padding0": p0,
        "padding1": p1,
        "dilation0": d0,
        "dilation1": d1,
    }
    flops = 2 * ow * oh * oc * n * ic * kh * kw
    return Case("CONV_2D", params, build, reference, CONV_CHECK, flops)


def _conv_transpose_1d(ne_in: Sequence[int], ne_k: Sequence[int], s0: int) -> Case:
    def build(ctx: Context) -> Built:
        x = leaf(ctx, T.F32, ne_in, "input")
        k = leaf(ctx, T.F32, ne_k, "kernel")
        return Built(builder("conv_transpose_1d")(k, x, s0, 0, 1), [k, x])

    params = {"ne_input": list(ne_in), "ne_kernel": list(ne_k), "s0": s0, "p0": 0, "d0": 1}
    return Case("CONV_TRANSPOSE_1D", params, build, lambda k, x: ref.conv_transpose_1d(k, x, s0, 0, 1), CONV_CHECK)


def _pool_2d(op: PoolOp, ne: Sequence[int], k0: int, k1: int, s0: int, s1: int, p0: int, p1: int) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, T.F32, ne, "input")
        return Built(builder("pool_2d")(a, op, k0, k1, s0, s1, p0, p1), [a])

    params = {
        "pool_type": op,
        "type_input": T.F32,
        "ne_input": list(ne),
        "k0": k0,
        "k1": k1,
        "s0": s0,
        "s1": s1,
        "p0": p0,
        "p1": p1,
    }
    return Case("POOL_2D", params, build, lambda a: ref.pool_2d(a, op == PoolOp.AVG, k0, k1, s0, s1, p0, p1))


def _upscale(ne: Sequence[int], factor: int, mode: ScaleMode) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, T.F32, ne, "a")
        return Built(builder("upscale")(a, factor, mode), [a])

    return Case(
        "UPSCALE",
        {"type": T.F32, "ne": list(ne), "scale_factor": factor, "mode": mode},
        build,
        lambda a: ref.upscale(a, factor, mode == ScaleMode.BILINEAR),
    )


def cases() -> list[Case]:
    """Every vision case."""
    out = []
    for dst in (T.F32, T.F16):
        for kt in (T.F32, T.F16):
            out.append(_im2col([10, 10, 3, 1], [3, 3, 3, 1], 1, 1, 1, 1, 1, 1, True, kt, dst))
    for s, p, d in ((1, 0, 1), (3, 3, 1), (1, 3, 3), (3, 0, 3)):
        out.append(_im2col([20, 20, 2, 2], [3, 3, 2, 2], s, s, p, p, d, d, True))
        out.append(_im2col([20, 2, 2, 1], [3, 2, 2, 1], s, 0, p, 0, d, 0, False))
    out.append(_im2col([5, 5, 1, 3], [3, 4, 1, 3], 1, 1, 0, 0, 1, 1, True, T.F16, T.F16))
    for kt in (T.F32, T.F16):
        out.append(_conv_2d([12, 10, 3, 2], [3, 3, 3, 4], kt, 1, 1, 0, 0, 1, 1))
        out.append(_conv_2d([12, 10, 3, 2], [3, 3, 3, 4], kt, 2, 1, 1, 2, 1, 2))
        out.append(_conv_2d([9, 13, 5, 1], [2, 3, 5, 6], kt, 3, 2, 2, 1, 2, 1))
        out.append(_conv_2d([8, 8, 1, 1], [1, 1, 1, 3], kt, 1, 1, 0, 0, 1, 1))
    for ne_in, ne_k, s0 in (
        ([3, 2, 1, 1], [2, 3, 2, 1], 3),
        ([3, 2, 1, 1], [3, 2, 2, 1], 1),
        ([13, 7, 1, 1], [3, 9, 7, 1], 2),
        ([2, 1, 1, 1], [3, 1, 1, 1], 1),
        ([197, 32, 1, 1], [16, 32, 32, 1], 1),
    ):
        out.append(_conv_transpose_1d(ne_in, ne_k, s0))
    for op in PoolOp:
        for k, s, p in ((1, 1, 0), (3, 1, 1), (3, 2, 0), (3, 2, 1), (2, 2, 1)):
            out.append(_pool_2d(op, [10, 10, 3, 1], k, k, s, s, p, p))
        out.append(_pool_2d(op, [9, 7, 2, 2], 3, 2, 2, 1, 1, 0))
    for mode in (ScaleMode.NEAREST, ScaleMode.BILINEAR):
        out.append(_upscale([10, 5, 4, 3], 2, mode))
        out.append(_upscale([7, 3, 2, 1], 3, mode))
    return out
