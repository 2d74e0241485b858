"""The convolution family (kernels in ``conv.cl``): IM2COL, CONV_2D, CONV_2D_DW, CONV_TRANSPOSE_1D/2D,
POOL_1D/2D, UPSCALE (nearest, bilinear, bicubic; align-corners)."""

from __future__ import annotations

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.ops import SCALE_FLAG_ALIGN_CORNERS, SCALE_FLAG_ANTIALIAS, ScaleMode
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl.ops._dispatch import FLOAT_TYPES, KERNELS, Launcher, Thunk, enqueue, float4, int8, targs

__all__: list[str] = []

T = GGMLType


def _srcs(node: Tensor) -> tuple[Tensor, Tensor]:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None, f"{node.op_desc}: operands missing"
    return a, b


def _params(node: Tensor, n: int) -> np.ndarray:
    return int8([node.op_param_i32(i) for i in range(n)])


def _im2col_ok(info: DeviceInfo, node: Tensor) -> bool:
    b = node.src[1]
    return b is not None and b.type in FLOAT_TYPES and node.type in (T.F32, T.F16)


@KERNELS.kernel(GGMLOp.IM2COL, supports=_im2col_ok)
def _bind_im2col(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = _srcs(node)
    args = [
        _params(node, 7),
        *targs(launcher, a),
        *targs(launcher, b),
        np.int32(b.type),
        *targs(launcher, node),
        np.int32(node.type),
    ]
    return enqueue(launcher, "k_im2col", node.nelements, args)


def _conv_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    return a is not None and b is not None and a.type in (T.F32, T.F16) and b.type == T.F32 and node.type == T.F32


@KERNELS.kernel(GGMLOp.CONV_2D, supports=_conv_ok)
def _bind_conv_2d(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = _srcs(node)
    args = [
        _params(node, 6),
        *targs(launcher, a),
        np.int32(a.type),
        *targs(launcher, b),
        np.int32(b.type),
        *targs(launcher, node),
    ]
    return enqueue(launcher, "k_conv_2d", node.nelements, args)


def _conv_dw_ok(info: DeviceInfo, node: Tensor) -> bool:
    a = node.src[0]
    return _conv_ok(info, node) and a is not None and a.type == T.F32


@KERNELS.kernel(GGMLOp.CONV_2D_DW, supports=_conv_dw_ok)
def _bind_conv_2d_dw(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = _srcs(node)
    args = [_params(node, 6), *targs(launcher, a), *targs(launcher, b), *targs(launcher, node)]
    return enqueue(launcher, "k_conv_2d_dw", node.nelements, args)


@KERNELS.kernel(GGMLOp.CONV_TRANSPOSE_1D, supports=_conv_ok)
def _bind_conv_transpose_1d(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = _srcs(node)
    args = [
        np.int32(node.op_param_i32(0)),
        *targs(launcher, a),
        np.int32(a.type),
        *targs(launcher, b),
        *targs(launcher, node),
    ]
    return enqueue(launcher, "k_conv_transpose_1d", node.nelements, args)


@KERNELS.kernel(GGMLOp.CONV_TRANSPOSE_2D, supports=_conv_ok)
def _bind_conv_transpose_2d(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = _srcs(node)
    args = [
        np.int32(node.op_param_i32(0)),
        *targs(launcher, a),
        np.int32(a.type),
        *targs(launcher, b),
        *targs(launcher, node),
    ]
    return enqueue(launcher, "k_conv_transpose_2d", node.nelements, args)


def _pool_ok(info: DeviceInfo, node: Tensor) -> bool:
    a = node.src[0]
    return a is not None and a.type in (T.F32, T.F16) and node.type == T.F32


@KERNELS.kernel(GGMLOp.POOL_1D, GGMLOp.POOL_2D, supports=_pool_ok)
def _bind_pool(launcher: Launcher, node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    two_d = node.op == GGMLOp.POOL_2D
    args = [
        np.int32(two_d),
        _params(node, 7 if two_d else 4),
        *targs(launcher, a),
        np.int32(a.type),
        *targs(launcher, node),
    ]
    return enqueue(launcher, "k_pool", node.nelements, args)


def _upscale_ok(info: DeviceInfo, node: Tensor) -> bool:
    a = node.src[0]
    flags = node.op_param_i32(0)
    return (
        a is not None
        and a.type == T.F32
        and node.type == T.F32
        and not flags & SCALE_FLAG_ANTIALIAS
        and (flags & 0xFF) in (ScaleMode.NEAREST, ScaleMode.BILINEAR, ScaleMode.BICUBIC)
    )


@KERNELS.kernel(GGMLOp.UPSCALE, supports=_upscale_ok)
def _bind_upscale(launcher: Launcher, node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    flags = node.op_param_i32(0)
    sf = [np.float32(node.ne[i]) / np.float32(a.ne[i]) for i in range(4)]
    offset = np.float32(0.5)
    if flags & SCALE_FLAG_ALIGN_CORNERS:
        offset = np.float32(0.0)
        for i in (0, 1):
            if node.ne[i] > 1 and a.ne[i] > 1:
                sf[i] = np.float32(node.ne[i] - 1) / np.float32(a.ne[i] - 1)
    args = [np.int32(flags & 0xFF), float4([float(s) for s in sf]), offset, *targs(launcher, a), *targs(launcher, node)]
    return enqueue(launcher, "k_upscale", node.nelements, args)
