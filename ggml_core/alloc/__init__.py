"""Memory planning: static allocation of context tensors, and the graph allocator for intermediate tensors."""

from ggml_core.alloc._dyn import MAX_CHUNKS, DynAllocator
from ggml_core.alloc._gallocr import GraphAllocator
from ggml_core.alloc._liveness import INPLACE_OPS, TensorAlloc, can_inplace, same_layout
from ggml_core.alloc._tallocr import MultiBuffer, TensorAllocator, alloc_ctx_tensors, pad

__all__ = [
    "INPLACE_OPS",
    "MAX_CHUNKS",
    "DynAllocator",
    "GraphAllocator",
    "MultiBuffer",
    "TensorAlloc",
    "TensorAllocator",
    "alloc_ctx_tensors",
    "can_inplace",
    "pad",
    "same_layout",
]
