"""Shared helpers for op builders: result creation and ggml-style checks with clear errors."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Final, TypeVar

from ggml_core._context import Context, current_context
from ggml_core._errors import OpError
from ggml_core._tensor import MAX_SRC, Tensor
from ggml_core._types import GGMLType
from ggml_core.ops._enum import GGMLOp

__all__ = ["broadcasts", "check", "check_operand_types", "ctx_of", "finish", "new_result", "same_or_dup", "view_of"]


def ctx_of(op: str, t: Tensor) -> Context:
    """The context a result is created in: the one of an enclosing ``with ctx:``, else the first operand's."""
    current = current_context()
    if current is not None:
        return current
    if not isinstance(t.ctx, Context):  # None, or a tensor made outside any Context
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


F = TypeVar("F", bound=Callable[..., Any])
#: the annotations that mark an operand: a tensor, or an optional one
_OPERAND: Final = {"Tensor": False, "Tensor | None": True}


def _typed(fn: F) -> F:
    """``fn`` with its tensor operands type-checked first: OpError naming the builder and the argument."""
    sig = inspect.signature(fn)
    slots: list[tuple[int | None, str, bool]] = []  # (position, None for keyword-only; name; None allowed)
    for i, p in enumerate(sig.parameters.values()):
        optional = _OPERAND.get(str(p.annotation).strip())
        if optional is not None:
            pos = None if p.kind == p.KEYWORD_ONLY else i
            slots.append((pos, p.name, optional))
    if not slots:
        return fn
    op = f"ops.{fn.__name__}"

    def refuse(name: str, optional: bool, value: Any) -> None:
        if isinstance(value, Tensor) or (optional and value is None):
            return
        want = "a Tensor or None" if optional else "a Tensor"
        text = repr(value)
        text = text if len(text) <= 40 else text[:37] + "..."
        raise OpError(op, f"argument {name!r} must be {want}, got {type(value).__name__} {text}")

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        n = len(args)
        for pos, name, optional in slots:
            if pos is not None and pos < n:
                value = args[pos]
            elif name in kwargs:
                value = kwargs[name]
            else:
                continue
            if value.__class__ is not Tensor:  # the fast path: an exact Tensor
                refuse(name, optional, value)
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def check_operand_types(module: ModuleType, namespace: dict[str, Any]) -> None:
    """Make every public builder of ``module`` check that its tensor operands are tensors (``Tensor`` and
    ``Tensor | None`` annotations), in the module and in ``namespace`` (the package's)."""
    for name in module.__all__:
        fn = getattr(module, name)
        if inspect.isfunction(fn):
            wrapped = _typed(fn)
            setattr(module, name, wrapped)
            namespace[name] = wrapped
