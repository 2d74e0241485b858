"""The GLU op (op_params = [GluOp, swapped]): fused ``[x | g]`` rows or two split tensors.

``ggml_reglu(a)`` etc. are the fused forms, ``*_swapped`` take the gate from the first half, ``*_split(a, b)``
compute activation(a) · b. For convenience ``reglu(a, b)`` with a second tensor is the split form.
"""

from __future__ import annotations

from ggml_core._tensor import Tensor
from ggml_core.ops._build import check, finish, new_result
from ggml_core.ops._enum import GGMLOp, GluOp

__all__ = [
    "geglu",
    "geglu_erf",
    "geglu_erf_split",
    "geglu_erf_swapped",
    "geglu_quick",
    "geglu_quick_split",
    "geglu_quick_swapped",
    "geglu_split",
    "geglu_swapped",
    "glu",
    "glu_split",
    "reglu",
    "reglu_split",
    "reglu_swapped",
    "swiglu",
    "swiglu_oai",
    "swiglu_split",
    "swiglu_swapped",
]


def glu(a: Tensor, op: GluOp, swapped: bool = False) -> Tensor:
    """``ggml_glu`` (fused): the first half of each row of a is the activation input, the second the gate.

    With ``swapped`` the halves change roles. The result has ne[0] = a.ne[0] / 2.
    """
    check(a.is_contiguous_1, "GLU", f"{op.name} needs a tensor contiguous from dim 1 on", a)
    check(a.ne[0] % 2 == 0, "GLU", f"{op.name} (fused) needs an even ne[0], got {a.ne[0]}", a)
    result = new_result("GLU", a, a.type, (a.ne[0] // 2, a.ne[1], a.ne[2], a.ne[3]))
    result.set_op_params_i32([int(op), int(swapped)])
    return finish(result, GGMLOp.GLU, [a, None])


def glu_split(a: Tensor, b: Tensor, op: GluOp) -> Tensor:
    """``ggml_glu_split``: activation(a) * b for two tensors of the same shape and type."""
    check(a.is_contiguous_1 and b.is_contiguous_1, "GLU", f"{op.name} needs operands contiguous from dim 1 on", a, b)
    check(a.ne == b.ne, "GLU", f"{op.name} needs a and b of the same shape", a, b)
    check(a.type == b.type, "GLU", f"{op.name} needs a and b of the same type", a, b)
    result = new_result("GLU", a, a.type, a.ne)
    result.set_op_params_i32([int(op), 0])
    return finish(result, GGMLOp.GLU, [a, b])


def _glu_either(op: GluOp, a: Tensor, b: Tensor | None, swapped: bool) -> Tensor:
    return glu(a, op, swapped) if b is None else glu_split(a, b, op)


def reglu(a: Tensor, b: Tensor | None = None, swapped: bool = False) -> Tensor:
    """relu(x) * g (fused when b is None, else split)."""
    return _glu_either(GluOp.REGLU, a, b, swapped)


def geglu(a: Tensor, b: Tensor | None = None, swapped: bool = False) -> Tensor:
    """gelu(x) * g."""
    return _glu_either(GluOp.GEGLU, a, b, swapped)


def swiglu(a: Tensor, b: Tensor | None = None, swapped: bool = False) -> Tensor:
    """silu(x) * g."""
    return _glu_either(GluOp.SWIGLU, a, b, swapped)


def geglu_erf(a: Tensor, b: Tensor | None = None, swapped: bool = False) -> Tensor:
    """gelu_erf(x) * g."""
    return _glu_either(GluOp.GEGLU_ERF, a, b, swapped)


def geglu_quick(a: Tensor, b: Tensor | None = None, swapped: bool = False) -> Tensor:
    """gelu_quick(x) * g."""
    return _glu_either(GluOp.GEGLU_QUICK, a, b, swapped)


def reglu_swapped(a: Tensor) -> Tensor:
    """``ggml_reglu_swapped``: fused, the gate in the first half of each row."""
    return glu(a, GluOp.REGLU, swapped=True)


def reglu_split(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_reglu_split``: activation(a) · b."""
    return glu_split(a, b, GluOp.REGLU)


def geglu_swapped(a: Tensor) -> Tensor:
    """``ggml_geglu_swapped``: fused, the gate in the first half of each row."""
    return glu(a, GluOp.GEGLU, swapped=True)


def geglu_split(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_geglu_split``: activation(a) · b."""
    return glu_split(a, b, GluOp.GEGLU)


def swiglu_swapped(a: Tensor) -> Tensor:
    """``ggml_swiglu_swapped``: fused, the gate in the first half of each row."""
    return glu(a, GluOp.SWIGLU, swapped=True)


def swiglu_split(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_swiglu_split``: activation(a) · b."""
    return glu_split(a, b, GluOp.SWIGLU)


def geglu_erf_swapped(a: Tensor) -> Tensor:
    """``ggml_geglu_erf_swapped``: fused, the gate in the first half of each row."""
    return glu(a, GluOp.GEGLU_ERF, swapped=True)


def geglu_erf_split(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_geglu_erf_split``: activation(a) · b."""
    return glu_split(a, b, GluOp.GEGLU_ERF)


def geglu_quick_swapped(a: Tensor) -> Tensor:
    """``ggml_geglu_quick_swapped``: fused, the gate in the first half of each row."""
    return glu(a, GluOp.GEGLU_QUICK, swapped=True)


def geglu_quick_split(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_geglu_quick_split``: activation(a) · b."""
    return glu_split(a, b, GluOp.GEGLU_QUICK)


def swiglu_oai(a: Tensor, b: Tensor | None, alpha: float, limit: float) -> Tensor:
    """``ggml_swiglu_oai`` (gpt-oss): ``x·sigmoid(α·x)·(g + 1)`` with x ≤ limit and g clamped to ±limit.

    op_params: ``[SWIGLU_OAI, swapped=0, alpha, limit]``; with ``b`` None a is fused ``[x | g]``.
    """
    result = glu(a, GluOp.SWIGLU_OAI) if b is None else glu_split(a, b, GluOp.SWIGLU_OAI)
    result.set_op_params_f32([alpha, limit], start=2)
    return result
