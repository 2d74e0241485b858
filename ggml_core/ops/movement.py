"""Data movement: views, reshape, permute, transpose, cont, cpy, dup, cast, get_rows, set_rows."""

from __future__ import annotations

import numpy as np

from ggml_core._tensor import MAX_DIMS, Tensor
from ggml_core._types import GGMLType, as_type
from ggml_core.ops._build import check, ctx_of, finish, new_result, view_of
from ggml_core.ops._enum import GGMLOp

__all__ = [
    "cast",
    "cont",
    "cont_1d",
    "cont_2d",
    "cont_3d",
    "cont_4d",
    "cpy",
    "dup",
    "get_rows",
    "permute",
    "reshape",
    "reshape_1d",
    "reshape_2d",
    "reshape_3d",
    "reshape_4d",
    "set_rows",
    "transpose",
    "view_1d",
    "view_2d",
    "view_3d",
    "view_4d",
]


# ------------------------------------------------------------------------------------------------------ views


def _view(a: Tensor, ne: tuple[int, ...], nb: tuple[int, ...] | None, offset: int) -> Tensor:
    check(offset >= 0, "VIEW", f"negative offset {offset}", a)
    result = ctx_of("VIEW", a).new_view(a, ne, nb, offset, name=f"{a.name} (view)")
    # ggml stores the byte offset as a size_t in op_params[0:2]
    result.op_params[0:2].view(np.uint64)[0] = offset
    return finish(result, GGMLOp.VIEW, [a])


def _full_nb(a: Tensor, ne: tuple[int, ...], given: tuple[int, ...]) -> tuple[int, ...]:
    # ggml_view_Nd: nb[0] is the type size, given strides for the next dims, packed strides above them
    nb = [a.type.type_size, *given]
    while len(nb) < MAX_DIMS:
        i = len(nb)
        nb.append(nb[i - 1] * (ne[i - 1] if i - 1 < len(ne) else 1))
    return tuple(nb)


def view_1d(a: Tensor, ne0: int, offset: int = 0) -> Tensor:
    """``ggml_view_1d``: ne0 elements from byte ``offset`` of a."""
    return _view(a, (ne0,), None, offset)


def view_2d(a: Tensor, ne0: int, ne1: int, nb1: int, offset: int = 0) -> Tensor:
    """``ggml_view_2d``: rows of ne0 elements, nb1 bytes apart."""
    ne = (ne0, ne1)
    return _view(a, ne, _full_nb(a, ne, (nb1,)), offset)


def view_3d(a: Tensor, ne0: int, ne1: int, ne2: int, nb1: int, nb2: int, offset: int = 0) -> Tensor:
    """``ggml_view_3d``."""
    ne = (ne0, ne1, ne2)
    return _view(a, ne, _full_nb(a, ne, (nb1, nb2)), offset)


def view_4d(a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, nb1: int, nb2: int, nb3: int, offset: int = 0) -> Tensor:
    """``ggml_view_4d``."""
    ne = (ne0, ne1, ne2, ne3)
    return _view(a, ne, _full_nb(a, ne, (nb1, nb2, nb3)), offset)


def reshape(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_reshape``: a contiguous a viewed with b's shape."""
    return _reshape(a, b.ne)


def reshape_1d(a: Tensor, ne0: int) -> Tensor:
    """``ggml_reshape_1d``."""
    return _reshape(a, (ne0,))


def reshape_2d(a: Tensor, ne0: int, ne1: int) -> Tensor:
    """``ggml_reshape_2d``."""
    return _reshape(a, (ne0, ne1))


def reshape_3d(a: Tensor, ne0: int, ne1: int, ne2: int) -> Tensor:
    """``ggml_reshape_3d``."""
    return _reshape(a, (ne0, ne1, ne2))


def reshape_4d(a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
    """``ggml_reshape_4d``."""
    return _reshape(a, (ne0, ne1, ne2, ne3))


def _reshape(a: Tensor, ne: tuple[int, ...]) -> Tensor:
    check(a.is_contiguous, "RESHAPE", "source must be contiguous (use cont first)", a)
    n = int(np.prod(ne))
    check(n == a.nelements, "RESHAPE", f"new shape {list(ne)} has {n} elements, source has {a.nelements}", a)
    result = ctx_of("RESHAPE", a).new_view(a, ne, None, 0, name=f"{a.name} (reshaped)")
    return finish(result, GGMLOp.RESHAPE, [a])


def permute(a: Tensor, axis0: int, axis1: int, axis2: int, axis3: int) -> Tensor:
    """``ggml_permute``: source dimension i goes to result dimension ``axis_i``."""
    axes = (axis0, axis1, axis2, axis3)
    check(sorted(axes) == [0, 1, 2, 3], "PERMUTE", f"axes must be a permutation of 0..3, got {list(axes)}", a)
    ne = [0] * 4
    nb = [0] * 4
    for i, ax in enumerate(axes):
        ne[ax] = a.ne[i]
        nb[ax] = a.nb[i]
    result = ctx_of("PERMUTE", a).new_view(a, ne, nb, 0, name=f"{a.name} (permuted)")
    result.set_op_params_i32(axes)
    return finish(result, GGMLOp.PERMUTE, [a])


def transpose(a: Tensor) -> Tensor:
    """``ggml_transpose``: swap dimensions 0 and 1."""
    ne = (a.ne[1], a.ne[0], a.ne[2], a.ne[3])
    nb = (a.nb[1], a.nb[0], a.nb[2], a.nb[3])
    result = ctx_of("TRANSPOSE", a).new_view(a, ne, nb, 0, name=f"{a.name} (transposed)")
    return finish(result, GGMLOp.TRANSPOSE, [a])


# ------------------------------------------------------------------------------------------------ copies


def cont(a: Tensor) -> Tensor:
    """``ggml_cont``: a contiguous copy of a (same shape)."""
    result = ctx_of("CONT", a).dup_tensor(a)
    result.name = f"{a.name} (cont)"
    return finish(result, GGMLOp.CONT, [a])


def cont_4d(a: Tensor, ne0: int, ne1: int = 1, ne2: int = 1, ne3: int = 1) -> Tensor:
    """``ggml_cont_4d``: a contiguous copy of a with a new shape of as many elements."""
    n = ne0 * ne1 * ne2 * ne3
    check(n == a.nelements, "CONT", f"new shape {[ne0, ne1, ne2, ne3]} has {n} elements, source has {a.nelements}", a)
    result = new_result("CONT", a, a.type, (ne0, ne1, ne2, ne3))
    result.name = f"{a.name} (cont)"
    return finish(result, GGMLOp.CONT, [a])


def cont_1d(a: Tensor, ne0: int) -> Tensor:
    """``ggml_cont_1d``."""
    return cont_4d(a, ne0)


def cont_2d(a: Tensor, ne0: int, ne1: int) -> Tensor:
    """``ggml_cont_2d``."""
    return cont_4d(a, ne0, ne1)


def cont_3d(a: Tensor, ne0: int, ne1: int, ne2: int) -> Tensor:
    """``ggml_cont_3d``."""
    return cont_4d(a, ne0, ne1, ne2)


def cpy(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_cpy``: copy a's values into b (converting types, quantizing); the result is a view of b.

    Like ggml's builder this only checks the element counts; which type pairs a device can convert is its
    ``supports_op`` answer (the CPU converts between f32/f16/bf16, into every quantized type it can quantize,
    from quantized types to floats, and between f32 and i32).
    """
    check(a.nelements == b.nelements, "CPY", f"element counts differ: {a.nelements} vs {b.nelements}", a, b)
    result = view_of("CPY", b)
    result.name = f"{b.name} (copy of {a.name})" if b.name else f"{a.name} (copy)"
    return finish(result, GGMLOp.CPY, [a, b])


def cast(a: Tensor, type: GGMLType | str) -> Tensor:
    """``ggml_cast``: a new tensor of ``type`` holding a's values (a CPY whose src[1] is the result itself)."""
    t = as_type(type)
    result = new_result("CPY", a, t, a.ne)
    result.name = f"{a.name} (copy)"
    return finish(result, GGMLOp.CPY, [a, result])


def dup(a: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_dup``: a copy of a with its layout made contiguous."""
    result = view_of("DUP", a) if inplace else ctx_of("DUP", a).dup_tensor(a)
    return finish(result, GGMLOp.DUP, [a])


# -------------------------------------------------------------------------------------------------- rows


def get_rows(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_get_rows``: rows of a picked by the int32 indices b; result is f32 (i32 when a is i32)."""
    check(b.type == GGMLType.I32, "GET_ROWS", f"indices must be i32, got {b.type.traits.name}", a, b)
    check(a.ne[2] == b.ne[1], "GET_ROWS", f"a.ne[2]={a.ne[2]} must equal b.ne[1]={b.ne[1]}", a, b)
    check(a.ne[3] == b.ne[2], "GET_ROWS", f"a.ne[3]={a.ne[3]} must equal b.ne[2]={b.ne[2]}", a, b)
    check(b.ne[3] == 1, "GET_ROWS", "indices must have at most 3 dimensions", a, b)
    out_type = GGMLType.I32 if a.type == GGMLType.I32 else GGMLType.F32
    result = new_result("GET_ROWS", a, out_type, (a.ne[0], b.ne[0], b.ne[1], b.ne[2]))
    return finish(result, GGMLOp.GET_ROWS, [a, b])


def set_rows(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """``ggml_set_rows``: write rows of b into a at the row indices c (i32 or i64); the result is a view of a."""
    op = "SET_ROWS"
    check(a.ne[0] == b.ne[0], op, f"row lengths differ: a.ne[0]={a.ne[0]}, b.ne[0]={b.ne[0]}", a, b)
    check(a.ne[2] == b.ne[2] and a.ne[3] == b.ne[3], op, "a and b must agree in ne[2] and ne[3]", a, b)
    check(b.ne[1] == c.ne[0], op, f"b has {b.ne[1]} rows but c has {c.ne[0]} indices", b, c)
    check(
        c.ne[1] > 0 and c.ne[2] > 0 and b.ne[2] % c.ne[1] == 0 and b.ne[3] % c.ne[2] == 0,
        op,
        "c must broadcast over b's ne[2], ne[3]",
        b,
        c,
    )
    check(c.ne[3] == 1, op, "indices must have at most 3 dimensions", c)
    check(b.type in (GGMLType.F32, GGMLType.F16), op, f"source rows must be f32 or f16, got {b.type.traits.name}", b)
    check(c.type in (GGMLType.I32, GGMLType.I64), op, f"indices must be i32 or i64, got {c.type.traits.name}", c)
    check(a.is_contiguous_rows and b.is_contiguous_rows, op, "rows of a and b must be contiguous", a, b)
    result = view_of(op, a)
    # ggml's legacy operand order: src0 = rows, src1 = indices, src2 = destination
    return finish(result, GGMLOp.SET_ROWS, [b, c, a])
