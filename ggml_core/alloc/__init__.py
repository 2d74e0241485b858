"""Memory planning: static allocation of context tensors, and (later) the graph allocator."""

from ggml_core.alloc._tallocr import MultiBuffer, TensorAllocator, alloc_ctx_tensors, pad

__all__ = ["MultiBuffer", "TensorAllocator", "alloc_ctx_tensors", "pad"]
