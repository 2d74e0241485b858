"""numpy references for every conformance case, one module per op family, written from the ops' definitions and
ggml's measured CPU numerics (docs: ``ggml-semantics.md``)."""

from ggml_core.testing.reference import attention, elementwise, matmul, movement, norm, reduce, vision

__all__ = ["attention", "elementwise", "matmul", "movement", "norm", "reduce", "vision"]
