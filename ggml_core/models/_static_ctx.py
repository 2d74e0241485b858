"""A context for long-lived tensors (weights, KV cache) that does not collect the results of ops built on them.

Op builders put their result in the first operand's context, so ``mul_mat(weight, x)`` lands in the weights'
context. A model builds a graph per batch; without this, the weights' context would grow by every graph's
intermediates. Once :meth:`StaticContext.freeze` is called, tensors created through the context (op results, views)
are still made, but not kept in its list.
"""

from __future__ import annotations

from ggml_core._context import Context
from ggml_core._tensor import Tensor

__all__ = ["StaticContext"]


class StaticContext(Context):
    """A context whose tensor list is fixed after :meth:`freeze`."""

    def __init__(self, name: str = "static") -> None:
        super().__init__(name)
        self._frozen = False

    def freeze(self) -> StaticContext:
        """Stop collecting tensors; returns self."""
        self._frozen = True
        return self

    def _add(self, t: Tensor) -> Tensor:
        if self._frozen:
            return t
        return super()._add(t)
