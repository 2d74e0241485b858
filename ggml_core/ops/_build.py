"""Shared helpers for op builders: result creation and ggml-style checks with clear errors."""

from __future__ import annotations

from collections.abc import Sequence

from ggml_core._context import Context, current_context
from ggml_core._errors import OpError
from ggml_core._tensor import MAX_SRC, Tensor
from ggml_core._types import GGMLType
from ggml_core.ops._enum import GGMLOp

__all__ = ["broadcasts", "check", "ctx_of", "finish", "new_result", "same_or_dup", "view_of"]


def ctx_of(op: str, t: Tensor) -> Context:
    """The context a result is created in: the one of an enclosing ``with ctx:``, else the first operand's."""
    current = current_context()
    if current is not None:
        return current
    if t.ctx is None:
        raise OpError(op, "operand belongs to no context; create tensors with Context.new_tensor", [t])
    return t.ctx


def check(cond: bool, op: str, message: str, *operands: Tensor | None) -> None:
    """Raise :class:`OpError` naming the op and operands unless ``cond`` holds."""
    if not cond:
        raise OpError(op, message, [t for t in operands if t is not None])


def broadcasts(small: Tensor, big: Tensor, dims: Sequence[int] = (2, 3)) -> bool:
    """True when ``small`` repeats a whole number of times over ``big`` along ``dims`` (ggml's ``%`` checks).

    A zero-sized dimension of ``small`` cannot be repeated: ggml divides by it; here it is simply not a broadcast.
    """
    return all(small.ne[i] > 0 and big.ne[i] % small.ne[i] == 0 for i in dims)


def new_result(op: str, a: Tensor, type: GGMLType, ne: Sequence[int]) -> Tensor:
    """A new contiguous tensor in a's context."""
    return ctx_of(op, a).new_tensor(type, ne)


def view_of(op: str, a: Tensor) -> Tensor:
    """``ggml_view_tensor(a)`` in a's context (result of in-place ops, CPY, SET_ROWS)."""
    return ctx_of(op, a).view_tensor(a)


def finish(result: Tensor, op: GGMLOp, srcs: Sequence[Tensor | None]) -> Tensor:
    """Set op and srcs on a freshly created result."""
    if len(srcs) > MAX_SRC:
        raise OpError(op.name, f"at most {MAX_SRC} operands, got {len(srcs)}")
    result.op = op
    for i, s in enumerate(srcs):
        result.src[i] = s
    return result


def same_or_dup(op: str, a: Tensor, inplace: bool) -> Tensor:
    """ggml's ``inplace ? ggml_view_tensor(a) : ggml_dup_tensor(a)``."""
    return view_of(op, a) if inplace else ctx_of(op, a).dup_tensor(a)
