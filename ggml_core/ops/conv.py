"""Convolution family: IM2COL, CONV_2D (direct), CONV_TRANSPOSE_1D/2D, POOL_1D/2D, UPSCALE (+ ggml's composites).

Layouts are ggml's (``ne[0]`` fastest): images ``[W, H, C, N]``, 2-d kernels ``[KW, KH, IC, OC]``, 1-d signals
``[L, C, N]`` and kernels ``[K, IC, OC]``. ``conv_1d``/``conv_2d`` are ggml's composites: IM2COL (columns of
the kernel's type, f32 for bf16 kernels) followed by MUL_MAT; ``conv_2d_direct`` is the single CONV_2D op.
"""

from __future__ import annotations

from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType, as_type
from ggml_core.ops._build import check, ctx_of, finish, new_result
from ggml_core.ops._enum import GGMLOp, PoolOp, ScaleMode
from ggml_core.ops.matmul import mul_mat
from ggml_core.ops.movement import cont, permute, reshape_2d, reshape_3d, reshape_4d

__all__ = [
    "SCALE_FLAG_ALIGN_CORNERS",
    "SCALE_FLAG_ANTIALIAS",
    "conv_1d",
    "conv_1d_ph",
    "conv_2d",
    "conv_2d_direct",
    "conv_2d_dw",
    "conv_2d_dw_direct",
    "conv_2d_s1_ph",
    "conv_2d_sk_p0",
    "conv_transpose_1d",
    "conv_transpose_2d_p0",
    "im2col",
    "interpolate",
    "pool_1d",
    "pool_2d",
    "upscale",
    "upscale_ext",
]

#: UPSCALE mode flags (high bits of op_params[0])
SCALE_FLAG_ALIGN_CORNERS = 1 << 8
SCALE_FLAG_ANTIALIAS = 1 << 9


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """``ggml_calc_conv_output_size`` (C integer division, truncating toward zero)."""
    num = size + 2 * pad - dilation * (kernel - 1) - 1
    return (abs(num) // stride) * (1 if num >= 0 else -1) + 1


def _positive(op: str, t: Tensor, **values: int) -> None:
    for name, v in values.items():
        check(v > 0, op, f"{name} must be positive, got {v}", t)


# ------------------------------------------------------------------------------------------------ im2col


def im2col(
    a: Tensor,
    b: Tensor,
    s0: int,
    s1: int,
    p0: int,
    p1: int,
    d0: int,
    d1: int,
    is_2d: bool,
    dst_type: GGMLType | str,
) -> Tensor:
    """``ggml_im2col``: the patches of b that kernel a sees, one row per output position.

    2-d: a ``[KW, KH, IC, OC]``, b ``[W, H, IC, N]`` → ``[IC·KH·KW, OW, OH, N]``;
    1-d: a ``[KW, IC, OC]``, b ``[W, IC, N]`` → ``[IC·KW, OW, N, 1]``. Padded cells are zeros.
    """
    op = "IM2COL"
    _positive(op, a, s0=s0, d0=d0, **({"s1": s1, "d1": d1} if is_2d else {}))
    if is_2d:
        check(a.ne[2] == b.ne[2], op, f"kernel channels a.ne[2]={a.ne[2]} must equal b.ne[2]={b.ne[2]}", a, b)
    else:
        check(b.ne[1] == a.ne[1], op, f"kernel channels a.ne[1]={a.ne[1]} must equal b.ne[1]={b.ne[1]}", a, b)
        check(b.ne[3] == 1, op, "1-d input must be 3-d", b)
    oh = _conv_out(b.ne[1], a.ne[1], s1, p1, d1) if is_2d else 0
    ow = _conv_out(b.ne[0], a.ne[0], s0, p0, d0)
    check((not is_2d or oh > 0) and ow > 0, op, f"input too small for the kernel (output {ow}x{oh})", a, b)
    ne = (a.ne[2] * a.ne[1] * a.ne[0], ow, oh, b.ne[3]) if is_2d else (a.ne[1] * a.ne[0], ow, b.ne[2], 1)
    result = new_result(op, a, as_type(dst_type), ne)
    result.set_op_params_i32([s0, s1, p0, p1, d0, d1, int(is_2d)])
    return finish(result, GGMLOp.IM2COL, [a, b])


def _col_type(a: Tensor) -> GGMLType:
    """The column type of the composites: the kernel's type (f16 columns for f16 kernels, f32 otherwise).

    Newer ggml builds f16 columns for f32 kernels too (rounding f32 convolutions to f16); this follows the
    measured ggml CPU behaviour of ggml-semantics.md instead (see docs/ops-semantics.md).
    """
    return GGMLType.F16 if a.type == GGMLType.F16 else GGMLType.F32


def conv_1d(a: Tensor, b: Tensor, s0: int, p0: int, d0: int) -> Tensor:
    """``ggml_conv_1d``: IM2COL then MUL_MAT; a ``[K, IC, OC]``, b ``[L, IC, N]`` → ``[OL, OC, N]``."""
    cols = im2col(a, b, s0, 0, p0, 0, d0, 0, False, _col_type(a))  # [IC*K, OL, N]
    result = mul_mat(reshape_2d(cols, cols.ne[0], cols.ne[2] * cols.ne[1]), reshape_2d(a, a.ne[0] * a.ne[1], a.ne[2]))
    return reshape_3d(result, cols.ne[1], a.ne[2], cols.ne[2])


def conv_1d_ph(a: Tensor, b: Tensor, s: int, d: int) -> Tensor:
    """``ggml_conv_1d_ph``: half padding (``K / 2``)."""
    return conv_1d(a, b, s, a.ne[0] // 2, d)


def conv_2d(a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> Tensor:
    """``ggml_conv_2d``: IM2COL then MUL_MAT; a ``[KW, KH, IC, OC]``, b ``[W, H, IC, N]`` → ``[OW, OH, OC, N]``."""
    cols = im2col(a, b, s0, s1, p0, p1, d0, d1, True, _col_type(a))  # [IC*KH*KW, OW, OH, N]
    result = mul_mat(
        reshape_2d(cols, cols.ne[0], cols.ne[3] * cols.ne[2] * cols.ne[1]),
        reshape_2d(a, a.ne[0] * a.ne[1] * a.ne[2], a.ne[3]),
    )
    result = reshape_4d(result, cols.ne[1], cols.ne[2], cols.ne[3], a.ne[3])  # [OW, OH, N, OC]
    return cont(permute(result, 0, 1, 3, 2))


def conv_2d_sk_p0(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_conv_2d_sk_p0``: stride = kernel size, no padding."""
    return conv_2d(a, b, a.ne[0], a.ne[1], 0, 0, 1, 1)


def conv_2d_s1_ph(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_conv_2d_s1_ph``: stride 1, half padding."""
    return conv_2d(a, b, 1, 1, a.ne[0] // 2, a.ne[1] // 2, 1, 1)


def conv_2d_direct(a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> Tensor:
    """``ggml_conv_2d_direct`` (CONV_2D): a ``[KW, KH, IC, OC]``, b ``[W, H, IC, N]`` → ``[OW, OH, OC, N]``.

    The result has b's type; an f16 kernel rounds the input patches to f16 first.
    """
    op = "CONV_2D"
    _positive(op, a, s0=s0, s1=s1, d0=d0, d1=d1)
    check(a.ne[2] == b.ne[2], op, f"kernel channels a.ne[2]={a.ne[2]} must equal b.ne[2]={b.ne[2]}", a, b)
    ow, oh = _conv_out(b.ne[0], a.ne[0], s0, p0, d0), _conv_out(b.ne[1], a.ne[1], s1, p1, d1)
    check(ow > 0 and oh > 0, op, f"input too small for the kernel (output {ow}x{oh})", a, b)
    result = new_result(op, b, b.type, (ow, oh, a.ne[3], b.ne[3]))
    result.set_op_params_i32([s0, s1, p0, p1, d0, d1])
    return finish(result, GGMLOp.CONV_2D, [a, b])


def conv_2d_dw(a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> Tensor:
    """``ggml_conv_2d_dw``: depthwise convolution as IM2COL + MUL_MAT; a ``[KW, KH, 1, C]``, b ``[W, H, C, N]``."""
    new_a = reshape_4d(a, a.ne[0], a.ne[1], 1, a.ne[2] * a.ne[3])
    cols = im2col(
        new_a, reshape_4d(b, b.ne[0], b.ne[1], 1, b.ne[2] * b.ne[3]), s0, s1, p0, p1, d0, d1, True, _col_type(a)
    )  # [KH*KW, OW, OH, N*C]
    new_b = reshape_4d(cols, cols.ne[0], cols.ne[2] * cols.ne[1], b.ne[2], b.ne[3])  # [KH*KW, OH*OW, C, N]
    new_a = reshape_4d(new_a, new_a.ne[0] * new_a.ne[1], new_a.ne[2], new_a.ne[3], 1)  # [KH*KW, 1, C, 1]
    result = mul_mat(new_a, new_b)  # [1, OH*OW, C, N]
    return reshape_4d(result, cols.ne[1], cols.ne[2], b.ne[2], b.ne[3])


def conv_2d_dw_direct(a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int) -> Tensor:
    """``ggml_conv_2d_dw_direct`` (CONV_2D_DW): one ``[KW, KH]`` filter per channel; a ``[KW, KH, 1, C]``,
    b ``[W, H, C, N]`` → ``[OW, OH, C, N]`` of b's type. When b is stored channels-first in memory
    (``ggml_is_contiguous_channels``) the result gets the same layout, as in ggml.
    """
    op = "CONV_2D_DW"
    _positive(op, a, s0=s0, s1=s1, d0=d0, d1=d1)
    check(a.ne[2] == 1, op, f"a.ne[2] must be 1 (one filter per channel), got {a.ne[2]}", a)
    check(a.ne[3] == b.ne[2], op, f"a.ne[3]={a.ne[3]} must equal the channels b.ne[2]={b.ne[2]}", a, b)
    check(not b.type.is_quantized, op, f"b must not be quantized, got {b.type.traits.name}", b)
    ne = (_conv_out(b.ne[0], a.ne[0], s0, p0, d0), _conv_out(b.ne[1], a.ne[1], s1, p1, d1), b.ne[2], b.ne[3])
    check(ne[0] > 0 and ne[1] > 0, op, f"input too small for the kernel (output {ne[0]}x{ne[1]})", a, b)
    ts = b.type.type_size
    channels_first = b.nb[0] > b.nb[2] and b.nb[1] > b.nb[0] and b.nb[2] == ts
    ctx = ctx_of(op, b)
    if channels_first:
        nb = (ne[2] * ts, ne[0] * ne[2] * ts, ts, ne[0] * ne[1] * ne[2] * ts)
        result = ctx._add(Tensor(ctx, b.type, ne, nb=nb))
    else:
        result = ctx.new_tensor(b.type, ne)
    result.set_op_params_i32([s0, s1, p0, p1, d0, d1])
    return finish(result, GGMLOp.CONV_2D_DW, [a, b])


def conv_transpose_1d(a: Tensor, b: Tensor, s0: int, p0: int, d0: int) -> Tensor:
    """``ggml_conv_transpose_1d``: a ``[K, OC, IC]``, b (matrix) ``[L, IC]`` → f32 ``[(L-1)·s0 + K, OC]``.

    Like ggml, only ``p0 = 0`` and ``d0 = 1`` are accepted.
    """
    op = "CONV_TRANSPOSE_1D"
    check(b.ne[2] == 1 and b.ne[3] == 1, op, f"b must be a matrix, got ne={list(b.ne)}", b)
    check(a.ne[2] == b.ne[1], op, f"a.ne[2]={a.ne[2]} (input channels) must equal b.ne[1]={b.ne[1]}", a, b)
    check(a.ne[3] == 1, op, "a must be 3-d", a)
    check(p0 == 0, op, f"only p0 = 0 is supported, got {p0}", a)
    check(d0 == 1, op, f"only d0 = 1 is supported, got {d0}", a)
    _positive(op, a, s0=s0)
    result = new_result(op, a, GGMLType.F32, ((b.ne[0] - 1) * s0 + a.ne[0], a.ne[1], b.ne[2], 1))
    result.set_op_params_i32([s0, p0, d0])
    return finish(result, GGMLOp.CONV_TRANSPOSE_1D, [a, b])


def conv_transpose_2d_p0(a: Tensor, b: Tensor, stride: int) -> Tensor:
    """``ggml_conv_transpose_2d_p0``: a ``[KW, KH, OC, IC]``, b ``[W, H, IC, N]`` → f32 ``[OW, OH, OC, N]``.

    ``OW = (W - 1)·stride + KW`` and ``OH = (H - 1)·stride + KH``; no padding.
    """
    op = "CONV_TRANSPOSE_2D"
    check(a.ne[3] == b.ne[2], op, f"a.ne[3]={a.ne[3]} (input channels) must equal b.ne[2]={b.ne[2]}", a, b)
    _positive(op, a, stride=stride)
    ne = ((b.ne[0] - 1) * stride + a.ne[0], (b.ne[1] - 1) * stride + a.ne[1], a.ne[2], b.ne[3])
    result = new_result(op, a, GGMLType.F32, ne)
    result.set_op_param_i32(0, stride)
    return finish(result, GGMLOp.CONV_TRANSPOSE_2D, [a, b])


# ------------------------------------------------------------------------------------------------ pooling


def _pool_out(size: int, k: int, s: int, p: float) -> int:
    """``ggml_calc_pool_output_size``: ``(size + 2p - k) / s + 1`` in float, truncated."""
    return int((size + 2 * p - k) / s) + 1


def pool_1d(a: Tensor, op: PoolOp, k0: int, s0: int, p0: int) -> Tensor:
    """``ggml_pool_1d``: max or average over windows of ``k0`` along dim 0 (average over the cells inside)."""
    name = "POOL_1D"
    _positive(name, a, k0=k0, s0=s0)
    ow = _pool_out(a.ne[0], k0, s0, p0)
    check(ow > 0, name, f"window {k0} does not fit ne[0]={a.ne[0]} with padding {p0}", a)
    result = new_result(name, a, GGMLType.F32, (ow, a.ne[1], a.ne[2], a.ne[3]))
    result.set_op_params_i32([int(PoolOp(op)), k0, s0, p0])
    return finish(result, GGMLOp.POOL_1D, [a])


def pool_2d(a: Tensor, op: PoolOp, k0: int, k1: int, s0: int, s1: int, p0: float, p1: float) -> Tensor:
    """``ggml_pool_2d``: max or average over ``k0 × k1`` windows (the average always divides by ``k0·k1``)."""
    name = "POOL_2D"
    _positive(name, a, k0=k0, k1=k1, s0=s0, s1=s1)
    ow, oh = _pool_out(a.ne[0], k0, s0, p0), _pool_out(a.ne[1], k1, s1, p1)
    check(ow > 0 and oh > 0, name, f"window {k0}x{k1} does not fit {a.ne[0]}x{a.ne[1]} (output {ow}x{oh})", a)
    result = new_result(name, a, GGMLType.F32, (ow, oh, a.ne[2], a.ne[3]))
    result.set_op_params_i32([int(PoolOp(op)), k0, k1, s0, s1, int(p0), int(p1)])
    return finish(result, GGMLOp.POOL_2D, [a])


# ------------------------------------------------------------------------------------------------ upscale


def interpolate(a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, mode: int) -> Tensor:
    """``ggml_interpolate``: a resized to ``[ne0, ne1, ne2, ne3]`` (mode: ScaleMode | SCALE_FLAG_*)."""
    op = "UPSCALE"
    check((mode & 0xFF) < len(ScaleMode), op, f"unknown scale mode {mode & 0xFF}", a)
    check(
        not mode & SCALE_FLAG_ANTIALIAS or (mode & 0xFF) == ScaleMode.BILINEAR,
        op,
        "antialiasing needs the bilinear mode",
        a,
    )
    check(a.type == GGMLType.F32, op, f"a must be f32, got {a.type.traits.name}", a)
    check(min(ne0, ne1, ne2, ne3) > 0, op, f"sizes must be positive, got {[ne0, ne1, ne2, ne3]}", a)
    result = new_result(op, a, a.type, (ne0, ne1, ne2, ne3))
    result.set_op_param_i32(0, mode)
    return finish(result, GGMLOp.UPSCALE, [a])


def upscale(a: Tensor, scale_factor: int, mode: int = ScaleMode.NEAREST) -> Tensor:
    """``ggml_upscale``: dims 0 and 1 multiplied by ``scale_factor`` (> 1)."""
    check(scale_factor > 1, "UPSCALE", f"scale_factor must be > 1, got {scale_factor}", a)
    return interpolate(a, a.ne[0] * scale_factor, a.ne[1] * scale_factor, a.ne[2], a.ne[3], mode)


def upscale_ext(a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, mode: int = ScaleMode.NEAREST) -> Tensor:
    """``ggml_upscale_ext``: a resized to the given sizes."""
    return interpolate(a, ne0, ne1, ne2, ne3, mode)
