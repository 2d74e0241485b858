"""Layout and fill ops: REPEAT(_BACK), CONCAT, PAD (ext, circular, reflect), ROLL, SET, ACC, DIAG, TRI, ARANGE,
FILL, TIMESTEP_EMBEDDING.

Op params follow ggml's layouts exactly (they travel over ggml's RPC protocol): SET and ACC keep
``[nb1, nb2, nb3, offset, inplace]`` as int32, PAD ``[lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3, circular]``.
"""

from __future__ import annotations

import math

import numpy as np

from ggml_core._context import Context
from ggml_core._tensor import MAX_DIMS, Tensor
from ggml_core._types import GGMLType
from ggml_core.ops._build import check, ctx_of, finish, new_result, same_or_dup
from ggml_core.ops._enum import GGMLOp, TriType

__all__ = [
    "acc",
    "arange",
    "concat",
    "diag",
    "fill",
    "pad",
    "pad_circular",
    "pad_ext",
    "pad_ext_circular",
    "pad_reflect_1d",
    "repeat",
    "repeat_4d",
    "repeat_back",
    "roll",
    "set",
    "set_1d",
    "set_2d",
    "timestep_embedding",
    "tri",
]


# ------------------------------------------------------------------------------------------------ repeat


def repeat(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_repeat``: a tiled to b's shape (b.ne[i] must be a multiple of a.ne[i])."""
    return repeat_4d(a, *b.ne)


def repeat_4d(a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
    """``ggml_repeat_4d``: a tiled to ``[ne0, ne1, ne2, ne3]``."""
    ne = (ne0, ne1, ne2, ne3)
    ok = a.is_empty or all(a.ne[i] > 0 and ne[i] % a.ne[i] == 0 for i in range(MAX_DIMS))
    check(ok, "REPEAT", f"a (ne={list(a.ne)}) does not tile ne={list(ne)} an integer number of times", a)
    return finish(new_result("REPEAT", a, a.type, ne), GGMLOp.REPEAT, [a])


def repeat_back(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_repeat_back``: the sum of a's tiles of b's shape (the gradient of repeat)."""
    check(b.can_repeat_to(a), "REPEAT_BACK", f"b (ne={list(b.ne)}) must tile a (ne={list(a.ne)})", a, b)
    return finish(new_result("REPEAT_BACK", a, a.type, b.ne), GGMLOp.REPEAT_BACK, [a])


# ------------------------------------------------------------------------------------------------ concat, pad, roll


def concat(a: Tensor, b: Tensor, dim: int) -> Tensor:
    """``ggml_concat``: a and b joined along ``dim`` (0..3); the other dimensions must agree."""
    op = "CONCAT"
    check(0 <= dim < MAX_DIMS, op, f"dim must be in 0..3, got {dim}", a, b)
    check(a.type == b.type, op, f"a and b must have one type, got {a.type.traits.name} and {b.type.traits.name}", a, b)
    for d in range(MAX_DIMS):
        if d != dim:
            check(a.ne[d] == b.ne[d], op, f"a.ne[{d}]={a.ne[d]} and b.ne[{d}]={b.ne[d]} differ", a, b)
    ne = list(a.ne)
    ne[dim] = a.ne[dim] + b.ne[dim]
    result = new_result(op, a, a.type, ne)
    result.set_op_param_i32(0, dim)
    return finish(result, GGMLOp.CONCAT, [a, b])


def pad(a: Tensor, p0: int, p1: int, p2: int = 0, p3: int = 0) -> Tensor:
    """``ggml_pad``: zeros appended at the end of each dimension."""
    return pad_ext(a, 0, p0, 0, p1, 0, p2, 0, p3)


def pad_circular(a: Tensor, p0: int, p1: int, p2: int = 0, p3: int = 0) -> Tensor:
    """``ggml_pad_circular``: appended cells wrap around (torus)."""
    return pad_ext_circular(a, 0, p0, 0, p1, 0, p2, 0, p3)


def pad_ext(
    a: Tensor, lp0: int, rp0: int, lp1: int = 0, rp1: int = 0, lp2: int = 0, rp2: int = 0, lp3: int = 0, rp3: int = 0
) -> Tensor:
    """``ggml_pad_ext``: ``lp_i`` zeros before and ``rp_i`` after dimension i."""
    return _pad(a, (lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3), circular=False)


def pad_ext_circular(
    a: Tensor, lp0: int, rp0: int, lp1: int = 0, rp1: int = 0, lp2: int = 0, rp2: int = 0, lp3: int = 0, rp3: int = 0
) -> Tensor:
    """``ggml_pad_ext_circular``: like pad_ext, the new cells taken circularly from a."""
    return _pad(a, (lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3), circular=True)


def _pad(a: Tensor, pads: tuple[int, ...], circular: bool) -> Tensor:
    op = "PAD"
    ne = [a.ne[i] + pads[2 * i] + pads[2 * i + 1] for i in range(MAX_DIMS)]
    check(all(n >= 0 for n in ne), op, f"padding {list(pads)} leaves a negative size {ne}", a)
    check(not circular or not a.is_empty, op, "circular padding needs a non-empty source", a)
    result = new_result(op, a, a.type, ne)
    result.set_op_params_i32([*pads, int(circular)])
    return finish(result, GGMLOp.PAD, [a])


def pad_reflect_1d(a: Tensor, p0: int, p1: int) -> Tensor:
    """``ggml_pad_reflect_1d``: dimension 0 padded by reflection (the edge value is not repeated)."""
    op = "PAD_REFLECT_1D"
    check(p0 >= 0 and p1 >= 0, op, f"paddings must be >= 0, got {p0}, {p1}", a)
    check(p0 < a.ne[0] and p1 < a.ne[0], op, f"paddings {p0}, {p1} must be smaller than ne[0]={a.ne[0]}", a)
    check(a.is_contiguous, op, "a must be contiguous", a)
    check(a.type == GGMLType.F32, op, f"a must be f32, got {a.type.traits.name}", a)
    result = new_result(op, a, a.type, (a.ne[0] + p0 + p1, a.ne[1], a.ne[2], a.ne[3]))
    result.set_op_params_i32([p0, p1])
    return finish(result, GGMLOp.PAD_REFLECT_1D, [a])


def roll(a: Tensor, shift0: int, shift1: int = 0, shift2: int = 0, shift3: int = 0) -> Tensor:
    """``ggml_roll``: elements shifted circularly by ``shift_i`` along each dimension (numpy's ``roll``)."""
    op = "ROLL"
    shifts = (shift0, shift1, shift2, shift3)
    check(a.nb[0] == a.type.type_size, op, "elements of a row must be contiguous", a)
    for i, s in enumerate(shifts):
        check(abs(s) < a.ne[i], op, f"|shift{i}|={abs(s)} must be smaller than ne[{i}]={a.ne[i]}", a)
    result = ctx_of(op, a).dup_tensor(a)
    result.set_op_params_i32(shifts)
    return finish(result, GGMLOp.ROLL, [a])


# ------------------------------------------------------------------------------------------------ set, acc


def _view_extent(a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int) -> int:
    """One past the last byte (from a's data) that a view of b's shape with these strides touches."""
    if b.is_empty:
        return offset
    es = a.type.type_size
    return offset + (b.ne[0] - 1) * es + (b.ne[1] - 1) * nb1 + (b.ne[2] - 1) * nb2 + (b.ne[3] - 1) * nb3 + es


def _set_like(op: GGMLOp, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int, inplace: bool) -> Tensor:
    name = op.name
    check(b.nelements <= a.nelements, name, f"b has more elements ({b.nelements}) than a ({a.nelements})", a, b)
    check(0 <= offset < 1 << 30, name, f"offset must be in [0, 2^30), got {offset}", a)
    check(min(nb1, nb2, nb3) >= 0, name, f"strides must be >= 0, got {[nb1, nb2, nb3]}", a)
    check(not a.type.is_quantized, name, f"a must not be quantized, got {a.type.traits.name}", a)
    # the view is relative to the result's memory: a itself (inplace) or a contiguous copy of it
    limit = a.nbytes if inplace else a.row_size * a.nrows
    end = _view_extent(a, b, nb1, nb2, nb3, offset)
    check(
        end <= limit,
        name,
        f"the view of b's shape at offset {offset} with strides {[nb1, nb2, nb3]} reaches byte {end}; "
        f"the result has {limit} bytes",
        a,
        b,
    )
    result = same_or_dup(name, a, inplace)
    result.set_op_params_i32([nb1, nb2, nb3, offset, int(inplace)])
    return finish(result, op, [a, b])


def set(  # ggml's name (shadows the builtin inside this module only)
    a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int, inplace: bool = False
) -> Tensor:
    """``ggml_set``: a copy of a whose view ``(b.ne, strides [elem, nb1, nb2, nb3], offset bytes)`` holds b."""
    return _set_like(GGMLOp.SET, a, b, nb1, nb2, nb3, offset, inplace)


def set_1d(a: Tensor, b: Tensor, offset: int, inplace: bool = False) -> Tensor:
    """``ggml_set_1d``: b written at byte ``offset`` of a, with a's strides."""
    return _set_like(GGMLOp.SET, a, b, a.nb[1], a.nb[2], a.nb[3], offset, inplace)


def set_2d(a: Tensor, b: Tensor, nb1: int, offset: int, inplace: bool = False) -> Tensor:
    """``ggml_set_2d``: b's rows written ``nb1`` bytes apart from byte ``offset`` of a."""
    return _set_like(GGMLOp.SET, a, b, nb1, a.nb[2], a.nb[3], offset, inplace)


def acc(a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int, inplace: bool = False) -> Tensor:
    """``ggml_acc``: a copy of a with b **added** into the view ``(b.ne, [elem, nb1, nb2, nb3], offset)``."""
    op = "ACC"
    check(a.is_contiguous, op, "a must be contiguous", a)
    check(a.type == GGMLType.F32 and b.type == GGMLType.F32, op, "a and b must be f32", a, b)
    return _set_like(GGMLOp.ACC, a, b, nb1, nb2, nb3, offset, inplace)


# ------------------------------------------------------------------------------------------------ generators


def diag(a: Tensor) -> Tensor:
    """``ggml_diag``: the row vector a (ne[1] == 1) as a diagonal matrix ``[ne0, ne0, ne2, ne3]``."""
    check(a.ne[1] == 1, "DIAG", f"a must be a row (ne[1] == 1), got ne[1]={a.ne[1]}", a)
    result = new_result("DIAG", a, a.type, (a.ne[0], a.ne[0], a.ne[2], a.ne[3]))
    return finish(result, GGMLOp.DIAG, [a])


def tri(a: Tensor, type: TriType) -> Tensor:
    """``ggml_tri``: keep the lower/upper triangle (with or without the diagonal) of square f32 matrices."""
    op = "TRI"
    check(a.type == GGMLType.F32, op, f"a must be f32, got {a.type.traits.name}", a)
    check(a.is_contiguous, op, "a must be contiguous", a)
    check(a.ne[0] == a.ne[1], op, f"a must be square, got ne[0]={a.ne[0]}, ne[1]={a.ne[1]}", a)
    result = ctx_of(op, a).dup_tensor(a)
    result.set_op_param_i32(0, int(TriType(type)))
    return finish(result, GGMLOp.TRI, [a])


def arange(ctx: Context, start: float, stop: float, step: float) -> Tensor:
    """``ggml_arange``: a new f32 tensor of ``ctx`` with ``start + i·step`` for ``i < ceil((stop - start) / step)``."""
    op = "ARANGE"
    check(stop > start, op, f"stop ({stop}) must be greater than start ({start})")
    check(step > 0, op, f"step must be positive, got {step}")
    steps = math.ceil(float((np.float32(stop) - np.float32(start)) / np.float32(step)))
    result = ctx.new_tensor(GGMLType.F32, (steps,))
    result.set_op_params_f32([start, stop, step])
    return finish(result, GGMLOp.ARANGE, [])


def fill(a: Tensor, c: float, inplace: bool = False) -> Tensor:
    """``ggml_fill``: a tensor of a's shape (f32 or f16, contiguous) with every element ``c``."""
    op = "FILL"
    check(a.type in (GGMLType.F32, GGMLType.F16), op, f"a must be f32 or f16, got {a.type.traits.name}", a)
    check(a.is_contiguous, op, "a must be contiguous", a)
    result = same_or_dup(op, a, inplace)
    result.set_op_param_f32(0, c)
    return finish(result, GGMLOp.FILL, [a])


def timestep_embedding(timesteps: Tensor, dim: int, max_period: int = 10000) -> Tensor:
    """``ggml_timestep_embedding``: f32 ``[dim, n]``, rows ``[cos(t·f_j), sin(t·f_j)]`` with ``f_j = P^(-j/half)``."""
    op = "TIMESTEP_EMBEDDING"
    check(dim > 0 and max_period > 0, op, f"dim and max_period must be positive, got {dim}, {max_period}", timesteps)
    result = new_result(op, timesteps, GGMLType.F32, (dim, timesteps.ne[0]))
    result.set_op_params_i32([dim, max_period])
    return finish(result, GGMLOp.TIMESTEP_EMBEDDING, [timesteps])
