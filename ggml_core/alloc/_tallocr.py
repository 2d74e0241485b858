"""Static allocation of a context's tensors (``ggml_tallocr`` and ``ggml_backend_alloc_ctx_tensors``)."""

from __future__ import annotations

from collections.abc import Iterable

from ggml_core._context import Context
from ggml_core._errors import AllocationError, TensorError
from ggml_core._tensor import Tensor
from ggml_core.backend.interfaces import Backend, Buffer, BufferType, BufferUsage

__all__ = ["MultiBuffer", "TensorAllocator", "alloc_ctx_tensors", "pad"]


def pad(n: int, align: int) -> int:
    """Round ``n`` up to a multiple of ``align`` (a power of two)."""
    return (n + align - 1) & ~(align - 1)


class TensorAllocator:
    """A bump allocator inside one buffer (``ggml_tallocr``): tensors placed one after another, aligned."""

    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer
        self.alignment = buffer.buffer_type.alignment
        self.offset = 0

    def alloc(self, t: Tensor) -> None:
        """Bind ``t`` at the next aligned offset; views are bound to their source instead."""
        if t.view_src is not None:
            Buffer.view_init(t)
            return
        size = self.buffer.buffer_type.alloc_size(t)
        if self.offset + size > self.buffer.size:
            raise AllocationError(
                self.buffer.name,
                size,
                self.buffer.size - self.offset,
                f"tensor {t.describe()} does not fit in the buffer",
            )
        self.buffer.alloc_tensor(t, self.offset)
        self.offset = pad(self.offset + size, self.alignment)


class MultiBuffer(Buffer):
    """Several buffers acting as one for usage, clear and free (a context larger than the buffer type's maximum)."""

    def __init__(self, buffer_type: BufferType, parts: list[Buffer]) -> None:
        super().__init__(buffer_type, sum(p.size for p in parts))
        self.parts = parts

    def set_usage(self, usage: BufferUsage) -> None:
        """Apply to every part."""
        super().set_usage(usage)
        for p in self.parts:
            p.set_usage(usage)

    def clear(self, value: int = 0) -> None:
        """Clear every part."""
        for p in self.parts:
            p.clear(value)

    def free(self) -> None:
        """Free every part."""
        for p in self.parts:
            p.free()
        self.freed = True


def alloc_ctx_tensors(ctx: Context | Iterable[Tensor], target: BufferType | Backend) -> Buffer:
    """Allocate every not-yet-allocated tensor of ``ctx`` in new buffer(s) of ``target``'s buffer type.

    Views are bound to their sources. When the total exceeds the buffer type's ``max_size``, several buffers are
    made and returned together as a :class:`MultiBuffer`.
    """
    buft = target.default_buffer_type if isinstance(target, Backend) else target
    tensors = [t for t in ctx if t.buffer is None]
    owned = [t for t in tensors if t.view_src is None]
    align = buft.alignment
    groups: list[list[Tensor]] = [[]]
    sizes = [0]
    for t in owned:
        size = pad(buft.alloc_size(t), align)
        if size > buft.max_size:
            raise TensorError(t, f"needs {size} bytes, over {buft.name}'s maximum buffer size of {buft.max_size}")
        if sizes[-1] + size > buft.max_size:
            groups.append([])
            sizes.append(0)
        groups[-1].append(t)
        sizes[-1] += size
    parts: list[Buffer] = []
    for group, size in zip(groups, sizes, strict=True):
        buf = buft.alloc_buffer(size)
        talloc = TensorAllocator(buf)
        for t in group:
            talloc.alloc(t)
        parts.append(buf)
    for t in tensors:
        if t.view_src is not None and t.buffer is None:
            Buffer.view_init(t)
    return parts[0] if len(parts) == 1 else MultiBuffer(buft, parts)
