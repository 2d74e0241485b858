"""Context: where tensors are described (ggml's ``no_alloc`` context: tensors get memory later, from a buffer)."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Sequence
from types import TracebackType

from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType, as_type

__all__ = ["Context", "current_context"]

_current: contextvars.ContextVar[Context | None] = contextvars.ContextVar("ggml_core_build_context", default=None)


def current_context() -> Context | None:
    """The context op results go to inside ``with ctx:``, or None outside any."""
    return _current.get()


class Context:
    """Creates and owns tensor descriptions; never memory.

    ggml's contexts always own a memory pool; here every context behaves like ``no_alloc=True``: weights are
    bound to buffers with :func:`ggml_core.alloc_ctx_tensors`, intermediates by a graph allocator or scheduler.

    Op builders put their result in the first operand's context, or, inside ``with ctx:``, in ``ctx``. A model keeps
    its weights in one long-lived context and builds each batch's graph inside ``with Context("batch"):``, so the
    intermediates of every graph do not pile up in the weights' context::

        with g.Context("batch") as ctx:
            x = ctx.new_tensor_2d("f32", n_embd, n_tokens, "x")
            y = ops.mul_mat(weights["w"], x)     # y lives in ctx, not in the weights' context

    :param name: a label used in messages
    :param max_tensors: optional cap on the number of tensors (an error names the context when it is reached)
    """

    def __init__(self, name: str = "ctx", max_tensors: int | None = None) -> None:
        self.name = name
        self.max_tensors = max_tensors
        self._tensors: list[Tensor] = []
        self._tokens: list[contextvars.Token[Context | None]] = []

    def __enter__(self) -> Context:
        self._tokens.append(_current.set(self))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _current.reset(self._tokens.pop())

    def __repr__(self) -> str:
        return f"Context({self.name!r}, {len(self._tensors)} tensors)"

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    @property
    def tensors(self) -> list[Tensor]:
        """Every tensor created in this context, in creation order."""
        return list(self._tensors)

    def get_tensor(self, name: str) -> Tensor | None:
        """The first tensor with this name (``ggml_get_tensor``), or None."""
        for t in self._tensors:
            if t.name == name:
                return t
        return None

    def _add(self, t: Tensor) -> Tensor:
        if self.max_tensors is not None and len(self._tensors) >= self.max_tensors:
            from ggml_core._errors import GraphError

            raise GraphError(f"context {self.name!r} is full: it holds at most {self.max_tensors} tensors")
        self._tensors.append(t)
        return t

    def new_tensor(self, type: GGMLType | str | int, ne: Sequence[int], name: str = "") -> Tensor:
        """A new tensor of ``type`` with ``ne`` (1 to 4 dims, ne[0] fastest), contiguous strides, no memory."""
        return self._add(Tensor(self, as_type(type), ne, name=name))

    def new_tensor_1d(self, type: GGMLType | str | int, ne0: int, name: str = "") -> Tensor:
        """``ggml_new_tensor_1d``."""
        return self.new_tensor(type, (ne0,), name)

    def new_tensor_2d(self, type: GGMLType | str | int, ne0: int, ne1: int, name: str = "") -> Tensor:
        """``ggml_new_tensor_2d``."""
        return self.new_tensor(type, (ne0, ne1), name)

    def new_tensor_3d(self, type: GGMLType | str | int, ne0: int, ne1: int, ne2: int, name: str = "") -> Tensor:
        """``ggml_new_tensor_3d``."""
        return self.new_tensor(type, (ne0, ne1, ne2), name)

    def new_tensor_4d(
        self, type: GGMLType | str | int, ne0: int, ne1: int, ne2: int, ne3: int, name: str = ""
    ) -> Tensor:
        """``ggml_new_tensor_4d``."""
        return self.new_tensor(type, (ne0, ne1, ne2, ne3), name)

    def dup_tensor(self, a: Tensor) -> Tensor:
        """``ggml_dup_tensor``: a new tensor with a's type and shape (contiguous, no data)."""
        return self._add(Tensor(self, a.type, a.ne))

    def view_tensor(self, a: Tensor) -> Tensor:
        """``ggml_view_tensor``: a view of all of ``a`` with its strides (no op set)."""
        t = Tensor(self, a.type, a.ne, nb=a.nb, view_src=a, view_offs=0, name=f"{a.name} (view)")
        return self._add(t)

    def new_view(self, a: Tensor, ne: Sequence[int], nb: Sequence[int] | None, offset: int, name: str = "") -> Tensor:
        """A view of ``a`` with the given shape, strides and byte offset (bounds-checked against a's source)."""
        if nb is None:
            t = Tensor(self, a.type, ne, view_src=a, view_offs=offset, name=name)
        else:
            t = Tensor(self, a.type, ne, nb=nb, view_src=a, view_offs=offset, name=name)
        return self._add(t)
