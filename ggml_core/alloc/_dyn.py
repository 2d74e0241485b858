"""The dynamic allocator behind the graph allocator (ggml's ``ggml_dyn_tallocr``): offsets only, no memory.

Addresses are ``(chunk, offset)``. A buffer type's compute memory may be cut into up to 16 chunks, each at most the
buffer type's ``max_size`` (the last one unbounded, and a single tensor larger than the maximum gets a chunk of its
own size). Each chunk keeps a free list sorted by offset that merges neighbours on free; an allocation takes the
best-fitting free block that is not the chunk's tail, else the tail block that grows its chunk the least.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ggml_core._tensor import Tensor

__all__ = ["MAX_CHUNKS", "Chunk", "DynAllocator", "pad"]

#: at most this many chunks per buffer type (``GGML_VBUFFER_MAX_CHUNKS``)
MAX_CHUNKS: Final = 16

#: the size of a chunk nothing bounds (ggml: SIZE_MAX / 2)
_UNBOUNDED: Final = 2**62


def pad(n: int, align: int) -> int:
    """Round ``n`` up to a multiple of ``align`` (a power of two)."""
    return (n + align - 1) & ~(align - 1)


@dataclass
class Chunk:
    """One chunk: its free blocks ``[offset, size]`` sorted by offset, and its high-water mark."""

    free: list[list[int]]
    #: bytes this chunk needs (the highest end of any allocation)
    max_size: int = 0
    #: the tensor whose allocation set ``max_size`` (named in allocation errors)
    peak_tensor: Tensor | None = field(default=None, repr=False)


class DynAllocator:
    """Plans offsets inside the chunks of one buffer type.

    :param alignment: every allocation is padded to this power of two
    :param max_chunk_size: the buffer type's maximum buffer size
    """

    def __init__(self, alignment: int, max_chunk_size: int) -> None:
        self.alignment = alignment
        self.max_chunk_size = min(max_chunk_size, _UNBOUNDED)
        self.chunks: list[Chunk] = []

    def reset(self) -> None:
        """Forget every allocation."""
        self.chunks = []

    def chunk_max_size(self, chunk: int) -> int:
        """Bytes chunk ``chunk`` needs (0 for a chunk that does not exist)."""
        return self.chunks[chunk].max_size if chunk < len(self.chunks) else 0

    @property
    def total_size(self) -> int:
        """Bytes all chunks need together."""
        return sum(c.max_size for c in self.chunks)

    def _new_chunk(self, min_size: int) -> int:
        if len(self.chunks) >= MAX_CHUNKS:
            return -1
        size = max(min_size, self.max_chunk_size)
        if len(self.chunks) == MAX_CHUNKS - 1:
            size = _UNBOUNDED  # the last chunk takes whatever is left
        self.chunks.append(Chunk([[0, size]]))
        return len(self.chunks) - 1

    def alloc(self, size: int, tensor: Tensor | None = None) -> tuple[int, int]:
        """Reserve ``size`` bytes (padded to the alignment); returns ``(chunk, offset)``."""
        size = pad(size, self.alignment)
        best_chunk = best_block = -1
        # best fit among the blocks that are not a chunk's tail (ties go to the later block, as ggml)
        best_size = _UNBOUNDED * 2
        for c, chunk in enumerate(self.chunks):
            free = chunk.free
            for i in range(len(free) - 1):
                bsize = free[i][1]
                if size <= bsize <= best_size:
                    best_chunk, best_block, best_size = c, i, bsize
        if best_block == -1:
            # a tail block: prefer the one that needs the least growth, then the one that wastes the least
            best_reuse: int | None = None
            for c, chunk in enumerate(self.chunks):
                if not chunk.free:
                    continue
                tail = chunk.free[-1]
                reuse = chunk.max_size - tail[0] - size
                if tail[1] < size:
                    continue
                better_reuse = best_reuse is None or (best_reuse < 0 and reuse > best_reuse)
                better_fit = best_reuse is not None and 0 <= reuse < best_reuse
                if better_reuse or better_fit:
                    best_chunk, best_block, best_reuse = c, len(chunk.free) - 1, reuse
        if best_block == -1:
            best_chunk = self._new_chunk(size)
            best_block = 0
        if best_chunk == -1:  # pragma: no cover - the last chunk is unbounded
            raise MemoryError(f"graph allocator: no chunk can hold {size} bytes")
        chunk = self.chunks[best_chunk]
        block = chunk.free[best_block]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del chunk.free[best_block]
        if offset + size > chunk.max_size:
            chunk.max_size = offset + size
            chunk.peak_tensor = tensor
        return best_chunk, offset

    def free(self, chunk_id: int, offset: int, size: int) -> None:
        """Return ``size`` bytes at ``(chunk_id, offset)``, merging with neighbouring free blocks."""
        size = pad(size, self.alignment)
        free = self.chunks[chunk_id].free
        for i, block in enumerate(free):
            if block[0] + block[1] == offset:
                # the freed range follows this block: grow it, then maybe swallow the next one
                block[1] += size
                if i + 1 < len(free) and block[0] + block[1] == free[i + 1][0]:
                    block[1] += free[i + 1][1]
                    del free[i + 1]
                return
            if offset + size == block[0]:
                # the freed range precedes this block: grow it backwards, then maybe join the previous one
                block[0] = offset
                block[1] += size
                if i > 0 and free[i - 1][0] + free[i - 1][1] == block[0]:
                    free[i - 1][1] += block[1]
                    del free[i]
                return
        pos = 0
        while pos < len(free) and free[pos][0] < offset:
            pos += 1
        free.insert(pos, [offset, size])
