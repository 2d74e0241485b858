"""Rebuild a received node through ggml-core's op builders, so that each op's shape rules run again.

A node arrives as (op, op_params, srcs, type, ne, nb, view). The server does not trust any of it: it decodes the
builder's arguments from ``op_params`` (ggml's layout), calls the builder on the already rebuilt operands, and
then requires the builder's result to be *exactly* the received node — type, ne, nb, all 64 bytes of op_params,
operands in the same slots, the same view source and offset. A builder that raises (:class:`OpError`,
:class:`TensorError`, ``ValueError`` for an unknown enum value) or a mismatch refuses the node. Kernels therefore
only ever see tensors that ggml-core's own builders produced.

Ops without a builder here are refused, and the custom ops (MAP_CUSTOM1-3, CUSTOM), whose op_params hold a
function pointer in ggml, are refused by name.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

import numpy as np

from ggml_core import Context, GGMLError, GGMLOp, GGMLType, GluOp, Tensor, UnaryOp, ops
from ggml_core.ops import PoolOp, Prec, SortOrder, TriType
from ggml_rpc.protocol import RpcTensor
from ggml_rpc.server._validate import Refused

__all__ = ["CUSTOM_OPS", "REBUILDERS", "rebuild_node"]

#: ops carrying a function pointer in ggml's op_params: refused outright
CUSTOM_OPS: Final = frozenset({GGMLOp.MAP_CUSTOM1, GGMLOp.MAP_CUSTOM2, GGMLOp.MAP_CUSTOM3, GGMLOp.CUSTOM})

Srcs = list[Tensor | None]
Rebuilder = Callable[[RpcTensor, Srcs, Context], Tensor]

_F32: Final = struct.Struct("<f")
_I32: Final = struct.Struct("<i")


def _f(rt: RpcTensor, i: int) -> float:
    """op_params[i] read as float32 (ggml stores floats bit-cast)."""
    return float(_F32.unpack(_I32.pack(rt.op_params[i]))[0])


def _ints(rt: RpcTensor) -> tuple[int, int, int, int, int, int]:
    """The first six op_params (convolution strides, paddings, dilations)."""
    p = rt.op_params
    return p[0], p[1], p[2], p[3], p[4], p[5]


def _u64(rt: RpcTensor, i: int) -> int:
    """op_params[i:i+2] as one size_t (VIEW's byte offset)."""
    return (rt.op_params[i] & 0xFFFFFFFF) | ((rt.op_params[i + 1] & 0xFFFFFFFF) << 32)


def _t(rt: RpcTensor, s: Srcs, i: int) -> Tensor:
    """Operand ``src[i]``, which this op requires."""
    t = s[i]
    if t is None:
        raise Refused(f"node {rt.name_str!r} ({GGMLOp(rt.op).name}): operand src[{i}] is missing")
    return t


def _inplace(rt: RpcTensor) -> bool:
    return rt.view_src != 0


# ------------------------------------------------------------------------------------------------ one per family


def _binary(fn: Callable[..., Tensor]) -> Rebuilder:
    return lambda rt, s, ctx: fn(_t(rt, s, 0), _t(rt, s, 1), inplace=_inplace(rt))


def _unary_like(fn: Callable[..., Tensor]) -> Rebuilder:
    return lambda rt, s, ctx: fn(_t(rt, s, 0), inplace=_inplace(rt))


def _plain1(fn: Callable[[Tensor], Tensor]) -> Rebuilder:
    return lambda rt, s, ctx: fn(_t(rt, s, 0))


def _eps(fn: Callable[..., Tensor]) -> Rebuilder:
    return lambda rt, s, ctx: fn(_t(rt, s, 0), _f(rt, 0), inplace=_inplace(rt))


def _set_like(fn: Callable[..., Tensor]) -> Rebuilder:
    def build(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
        p = rt.op_params
        return fn(_t(rt, s, 0), _t(rt, s, 1), p[0], p[1], p[2], p[3], inplace=bool(p[4]))

    return build


def _cpy(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    a = _t(rt, s, 0)
    if rt.src[1] == rt.id:  # ggml_cast: src[1] is the result itself
        return ops.cast(a, GGMLType(rt.type))
    return ops.cpy(a, _t(rt, s, 1))


def _repeat_back(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    a = _t(rt, s, 0)
    shape = ctx.new_tensor(a.type, rt.ne)  # carries only the target shape, as ggml's b does
    return ops.repeat_back(a, shape)


def _mul_mat(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    t = ops.mul_mat(_t(rt, s, 0), _t(rt, s, 1))
    if rt.op_params[0]:
        ops.mul_mat_set_prec(t, Prec(rt.op_params[0]))
    return t


def _view(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    a = _t(rt, s, 0)
    ne, nb = rt.ne, rt.nb
    return ops.view_4d(a, ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], _u64(rt, 0))


def _soft_max(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    a = _t(rt, s, 0)
    t = ops.soft_max_ext(a, s[1], _f(rt, 0), _f(rt, 1), inplace=_inplace(rt))
    return ops.soft_max_add_sinks(t, s[2]) if s[2] is not None else t


def _rope(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    a, pos = _t(rt, s, 0), _t(rt, s, 1)
    p = rt.op_params
    base, scale, ext, attn, fast, slow = (_f(rt, i) for i in range(5, 11))
    if p[2] & ops.ROPE_TYPE_MROPE:
        sections = (p[11], p[12], p[13], p[14])
        t = ops.rope_multi(
            a, pos, s[2], p[1], sections, p[2], p[4], base, scale, ext, attn, fast, slow, inplace=_inplace(rt)
        )
    else:
        t = ops.rope_ext(a, pos, s[2], p[1], p[2], p[4], base, scale, ext, attn, fast, slow, inplace=_inplace(rt))
    return ops.rope_set_offset(t, p[15]) if p[15] else t


def _flash_attn(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    q, k, v = _t(rt, s, 0), _t(rt, s, 1), _t(rt, s, 2)
    t = ops.flash_attn_ext(q, k, v, s[3], _f(rt, 0), _f(rt, 1), _f(rt, 2))
    if rt.op_params[3]:
        ops.flash_attn_ext_set_prec(t, Prec(rt.op_params[3]))
    return ops.flash_attn_ext_add_sinks(t, s[4]) if s[4] is not None else t


def _unary(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    a = _t(rt, s, 0)
    op = UnaryOp(rt.op_params[0])
    if op == UnaryOp.XIELU:
        # ggml stores derived parameters (softplus of the user's); the builder cannot be re-run from them,
        # so the shape rule is re-checked with the plain UNARY builder and the four floats are taken as sent
        t = ops.unary(a, UnaryOp.ABS)
        t.set_op_param_i32(0, int(op))
        t.op_params[1:5] = rt.op_params[1:5]
        return t
    return ops.unary(a, op, inplace=_inplace(rt))


def _glu(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    a = _t(rt, s, 0)
    op, swapped = GluOp(rt.op_params[0]), rt.op_params[1]
    if op == GluOp.SWIGLU_OAI:
        return ops.swiglu_oai(a, s[1], _f(rt, 2), _f(rt, 3))
    if s[1] is None:
        return ops.glu(a, op, bool(swapped))
    return ops.glu_split(a, s[1], op)


def _pad(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    a = _t(rt, s, 0)
    p = rt.op_params
    fn = ops.pad_ext_circular if p[8] else ops.pad_ext
    return fn(a, *p[:8])


def _ssm_scan(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    st, x, dt, a, b, c, ids = (_t(rt, s, i) for i in range(7))
    return ops.ssm_scan(st, x, dt, a, b, c, ids, K=rt.op_params[0])


def _gated_delta_net(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    q, k, v, g, beta, state = (_t(rt, s, i) for i in range(6))
    return ops.gated_delta_net(q, k, v, g, beta, state, K=rt.op_params[0])


def _rwkv_wkv7(rt: RpcTensor, s: Srcs, ctx: Context) -> Tensor:
    r, w, k, v, a, b, state = (_t(rt, s, i) for i in range(7))
    return ops.rwkv_wkv7(r, w, k, v, a, b, state)


REBUILDERS: Final[dict[GGMLOp, Rebuilder]] = {
    GGMLOp.DUP: _unary_like(ops.dup),
    GGMLOp.ADD: _binary(ops.add),
    GGMLOp.ADD_ID: lambda rt, s, ctx: ops.add_id(_t(rt, s, 0), _t(rt, s, 1), _t(rt, s, 2)),
    GGMLOp.ADD1: _binary(ops.add1),
    GGMLOp.ACC: _set_like(ops.acc),
    GGMLOp.SUB: _binary(ops.sub),
    GGMLOp.MUL: _binary(ops.mul),
    GGMLOp.DIV: _binary(ops.div),
    GGMLOp.SQR: _unary_like(ops.sqr),
    GGMLOp.SQRT: _unary_like(ops.sqrt),
    GGMLOp.LOG: _unary_like(ops.log),
    GGMLOp.SIN: _unary_like(ops.sin),
    GGMLOp.COS: _unary_like(ops.cos),
    GGMLOp.SUM: _plain1(ops.sum),
    GGMLOp.SUM_ROWS: _plain1(ops.sum_rows),
    GGMLOp.CUMSUM: _plain1(ops.cumsum),
    GGMLOp.MEAN: _plain1(ops.mean),
    GGMLOp.ARGMAX: _plain1(ops.argmax),
    GGMLOp.COUNT_EQUAL: lambda rt, s, ctx: ops.count_equal(_t(rt, s, 0), _t(rt, s, 1)),
    GGMLOp.REPEAT: lambda rt, s, ctx: ops.repeat_4d(_t(rt, s, 0), *rt.ne),
    GGMLOp.REPEAT_BACK: _repeat_back,
    GGMLOp.CONCAT: lambda rt, s, ctx: ops.concat(_t(rt, s, 0), _t(rt, s, 1), rt.op_params[0]),
    GGMLOp.NORM: _eps(ops.norm),
    GGMLOp.RMS_NORM: _eps(ops.rms_norm),
    GGMLOp.GROUP_NORM: lambda rt, s, ctx: ops.group_norm(
        _t(rt, s, 0), rt.op_params[0], _f(rt, 1), inplace=_inplace(rt)
    ),
    GGMLOp.L2_NORM: _eps(ops.l2_norm),
    GGMLOp.MUL_MAT: _mul_mat,
    GGMLOp.MUL_MAT_ID: lambda rt, s, ctx: ops.mul_mat_id(_t(rt, s, 0), _t(rt, s, 1), _t(rt, s, 2)),
    GGMLOp.OUT_PROD: lambda rt, s, ctx: ops.out_prod(_t(rt, s, 0), _t(rt, s, 1)),
    GGMLOp.SCALE: lambda rt, s, ctx: ops.scale_bias(_t(rt, s, 0), _f(rt, 0), _f(rt, 1), inplace=_inplace(rt)),
    GGMLOp.SET: _set_like(ops.set),
    GGMLOp.CPY: _cpy,
    GGMLOp.CONT: lambda rt, s, ctx: ops.cont_4d(_t(rt, s, 0), *rt.ne),
    GGMLOp.RESHAPE: lambda rt, s, ctx: ops.reshape_4d(_t(rt, s, 0), *rt.ne),
    GGMLOp.VIEW: _view,
    GGMLOp.PERMUTE: lambda rt, s, ctx: ops.permute(_t(rt, s, 0), *rt.op_params[:4]),
    GGMLOp.TRANSPOSE: _plain1(ops.transpose),
    GGMLOp.GET_ROWS: lambda rt, s, ctx: ops.get_rows(_t(rt, s, 0), _t(rt, s, 1)),
    # ggml's operand order: src0 = rows, src1 = indices, src2 = destination
    GGMLOp.SET_ROWS: lambda rt, s, ctx: ops.set_rows(_t(rt, s, 2), _t(rt, s, 0), _t(rt, s, 1)),
    GGMLOp.DIAG: _plain1(ops.diag),
    GGMLOp.DIAG_MASK_INF: lambda rt, s, ctx: ops.diag_mask_inf(_t(rt, s, 0), rt.op_params[0], _inplace(rt)),
    GGMLOp.DIAG_MASK_ZERO: lambda rt, s, ctx: ops.diag_mask_zero(_t(rt, s, 0), rt.op_params[0], _inplace(rt)),
    GGMLOp.SOFT_MAX: _soft_max,
    GGMLOp.ROPE: _rope,
    GGMLOp.CLAMP: lambda rt, s, ctx: ops.clamp(_t(rt, s, 0), _f(rt, 0), _f(rt, 1)),
    GGMLOp.CONV_TRANSPOSE_1D: lambda rt, s, ctx: ops.conv_transpose_1d(_t(rt, s, 0), _t(rt, s, 1), *rt.op_params[:3]),
    GGMLOp.IM2COL: lambda rt, s, ctx: ops.im2col(
        _t(rt, s, 0), _t(rt, s, 1), *_ints(rt), is_2d=bool(rt.op_params[6]), dst_type=GGMLType(rt.type)
    ),
    GGMLOp.CONV_2D: lambda rt, s, ctx: ops.conv_2d_direct(_t(rt, s, 0), _t(rt, s, 1), *_ints(rt)),
    GGMLOp.CONV_2D_DW: lambda rt, s, ctx: ops.conv_2d_dw_direct(_t(rt, s, 0), _t(rt, s, 1), *_ints(rt)),
    GGMLOp.CONV_TRANSPOSE_2D: lambda rt, s, ctx: ops.conv_transpose_2d_p0(_t(rt, s, 0), _t(rt, s, 1), rt.op_params[0]),
    GGMLOp.POOL_1D: lambda rt, s, ctx: ops.pool_1d(_t(rt, s, 0), PoolOp(rt.op_params[0]), *rt.op_params[1:4]),
    GGMLOp.POOL_2D: lambda rt, s, ctx: ops.pool_2d(_t(rt, s, 0), PoolOp(rt.op_params[0]), *rt.op_params[1:7]),
    GGMLOp.UPSCALE: lambda rt, s, ctx: ops.interpolate(_t(rt, s, 0), *rt.ne, rt.op_params[0]),
    GGMLOp.PAD: _pad,
    GGMLOp.PAD_REFLECT_1D: lambda rt, s, ctx: ops.pad_reflect_1d(_t(rt, s, 0), *rt.op_params[:2]),
    GGMLOp.ROLL: lambda rt, s, ctx: ops.roll(_t(rt, s, 0), *rt.op_params[:4]),
    GGMLOp.ARANGE: lambda rt, s, ctx: ops.arange(ctx, _f(rt, 0), _f(rt, 1), _f(rt, 2)),
    GGMLOp.TIMESTEP_EMBEDDING: lambda rt, s, ctx: ops.timestep_embedding(_t(rt, s, 0), *rt.op_params[:2]),
    GGMLOp.ARGSORT: lambda rt, s, ctx: ops.argsort(_t(rt, s, 0), SortOrder(rt.op_params[0])),
    GGMLOp.TOP_K: lambda rt, s, ctx: ops.top_k(_t(rt, s, 0), rt.ne[0]),
    GGMLOp.LEAKY_RELU: lambda rt, s, ctx: ops.leaky_relu(_t(rt, s, 0), _f(rt, 0), inplace=_inplace(rt)),
    GGMLOp.TRI: lambda rt, s, ctx: ops.tri(_t(rt, s, 0), TriType(rt.op_params[0])),
    GGMLOp.FILL: lambda rt, s, ctx: ops.fill(_t(rt, s, 0), _f(rt, 0), inplace=_inplace(rt)),
    GGMLOp.FLASH_ATTN_EXT: _flash_attn,
    GGMLOp.UNARY: _unary,
    GGMLOp.GLU: _glu,
    GGMLOp.SSM_CONV: lambda rt, s, ctx: ops.ssm_conv(_t(rt, s, 0), _t(rt, s, 1)),
    GGMLOp.SSM_SCAN: _ssm_scan,
    GGMLOp.GATED_DELTA_NET: _gated_delta_net,
    GGMLOp.RWKV_WKV7: _rwkv_wkv7,
}


def rebuild_node(rt: RpcTensor, srcs: Srcs, ctx: Context) -> Tensor:
    """The builder's version of node ``rt`` over ``srcs``; :class:`Refused` unless it matches ``rt`` exactly."""
    op = GGMLOp(rt.op)
    if op in CUSTOM_OPS:
        raise Refused(
            f"node {rt.name_str!r}: custom op {op.name} refused (its op_params would hold a function pointer)"
        )
    build = REBUILDERS.get(op)
    if build is None:
        raise Refused(f"node {rt.name_str!r}: op {op.name} is not supported by this server")
    try:
        with np.errstate(all="ignore"):  # hostile floats (ARANGE's bounds...) must not warn on the server's log
            t = build(rt, srcs, ctx)
    except (GGMLError, ValueError, IndexError, OverflowError) as exc:
        raise Refused(f"node {rt.name_str!r}: the {op.name} builder rejects it: {exc}") from exc
    _same(rt, t, srcs)
    return t


def _same(rt: RpcTensor, t: Tensor, srcs: Srcs) -> None:
    """Refuse unless the rebuilt ``t`` is exactly the received node."""
    name = f"node {rt.name_str!r} ({GGMLOp(rt.op).name})"
    if int(t.op) != rt.op:
        raise Refused(f"{name}: the builder made a {t.op.name} node")
    if int(t.type) != rt.type or t.ne != rt.ne or t.nb != rt.nb:
        raise Refused(
            f"{name}: sent as {GGMLType(rt.type).name} ne={list(rt.ne)} nb={list(rt.nb)}, but its operands give "
            f"{t.type.name} ne={list(t.ne)} nb={list(t.nb)}"
        )
    got = tuple(int(x) for x in t.op_params)
    if got != rt.op_params:
        i = next(i for i in range(16) if got[i] != rt.op_params[i])
        raise Refused(f"{name}: op_params[{i}] is {rt.op_params[i]}, the builder gives {got[i]} for these arguments")
    for i, s in enumerate(t.src):
        sent = srcs[i]
        if i == 1 and t.op == GGMLOp.CPY and s is t:  # ggml_cast's self reference
            continue
        if s is not sent:
            raise Refused(f"{name}: operand slot src[{i}] differs from what the builder uses")
