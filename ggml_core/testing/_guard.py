"""Guard bytes: every tensor of a case gets its own slot in one device buffer, surrounded by a sentinel pattern.

test-backend-ops puts 1024-float sentinel tensors between the tensors of a case. Here the whole buffer is filled
with a pseudo-random pattern before the inputs are written; after the compute, every byte that no graph node was
allowed to write (guard bytes, inputs, the gaps of strided views, alignment padding) must be unchanged. A node may
write exactly the bytes of its own elements.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from ggml_core._graph import Graph
from ggml_core._tensor import Tensor
from ggml_core.alloc import pad
from ggml_core.backend.interfaces import Buffer, BufferType
from ggml_core.ops import VIEW_OPS, GGMLOp

__all__ = ["GUARD_BYTES", "GuardedBuffer", "element_bytes"]

#: sentinel bytes before and after every tensor (test-backend-ops uses 1024 floats)
GUARD_BYTES: Final = 1024


def element_bytes(t: Tensor) -> np.ndarray:
    """Buffer offsets of every byte of ``t``'s elements (blocks for quantized types), following its strides."""
    assert t.data_offset is not None
    if t.is_empty:
        return np.zeros(0, np.int64)
    tt = t.type
    n0 = t.ne[0] // tt.block_size
    i0 = np.arange(n0, dtype=np.int64) * t.nb[0]
    i1 = np.arange(t.ne[1], dtype=np.int64) * t.nb[1]
    i2 = np.arange(t.ne[2], dtype=np.int64) * t.nb[2]
    i3 = np.arange(t.ne[3], dtype=np.int64) * t.nb[3]
    starts = (i3[:, None, None, None] + i2[None, :, None, None] + i1[None, None, :, None] + i0).reshape(-1)
    within = np.arange(tt.type_size, dtype=np.int64)
    return (t.data_offset + starts[:, None] + within[None, :]).reshape(-1)


@dataclass
class GuardedBuffer:
    """One buffer holding every tensor of a context, each between guard bytes; checks for stray writes.

    :param buffer: the device buffer
    :param slots: ``(tensor, offset, size)`` of every tensor that owns memory
    """

    buffer: Buffer
    slots: list[tuple[Tensor, int, int]] = field(default_factory=list)
    _before: np.ndarray | None = None
    _writable: np.ndarray | None = None

    @classmethod
    def allocate(
        cls, tensors: Iterable[Tensor], buft: BufferType, seed: int, guard: int = GUARD_BYTES
    ) -> GuardedBuffer:
        """Allocate ``tensors`` (views follow their sources) with ``guard`` bytes around each; fill with a pattern."""
        tensors = list(tensors)
        owned = [t for t in tensors if t.view_src is None]
        align = buft.alignment
        offsets: list[tuple[Tensor, int, int]] = []
        cursor = 0
        for t in owned:
            off = pad(cursor + guard, align)
            size = buft.alloc_size(t)
            offsets.append((t, off, size))
            cursor = off + size
        total = pad(cursor + guard, align)
        buf = buft.alloc_buffer(total)
        try:
            pattern = np.random.default_rng(seed ^ 0x5EED).integers(0, 256, total, dtype=np.uint8)
            buf.write(0, pattern.tobytes())
            for t, off, _ in offsets:
                buf.alloc_tensor(t, off)
            for t in tensors:
                if t.view_src is not None:
                    Buffer.view_init(t)
        except BaseException:
            buf.free()
            raise
        return cls(buf, offsets)

    def arm(self, graph: Graph) -> None:
        """Remember the buffer's bytes and which bytes the graph's nodes may write (call after writing inputs)."""
        size = self.buffer.size
        self._before = np.frombuffer(self.buffer.read(0, size), dtype=np.uint8).copy()
        writable = np.zeros(size, dtype=bool)
        for node in graph.nodes:
            if node.op == GGMLOp.NONE or node.op in VIEW_OPS:
                continue
            writable[element_bytes(node)] = True
        self._writable = writable

    def stray_writes(self) -> str | None:
        """None when no byte outside the nodes' elements changed; otherwise a description of the first one."""
        assert self._before is not None and self._writable is not None, "arm() first"
        after = np.frombuffer(self.buffer.read(0, self.buffer.size), dtype=np.uint8)
        bad = np.flatnonzero((after != self._before) & ~self._writable)
        if bad.size == 0:
            return None
        first = int(bad[0])
        return f"{bad.size} byte(s) outside the outputs changed, first at buffer offset {first} ({self._where(first)})"

    def _where(self, offset: int) -> str:
        for t, off, size in self.slots:
            if off <= offset < off + size:
                return f"inside tensor {t.name or t.id!r} ({t.type.traits.name}, ne={list(t.ne)}), byte {offset - off}"
        before = [(offset - (off + size), t) for t, off, size in self.slots if off + size <= offset]
        after = [(off - offset, t) for t, off, _ in self.slots if off > offset]
        parts = []
        if before:
            d, t = min(before, key=lambda x: x[0])
            parts.append(f"byte {d} after the end of {t.name or t.id!r}")
        if after:
            d, t = min(after, key=lambda x: x[0])
            parts.append(f"{d} byte(s) before the start of {t.name or t.id!r}")
        return "guard bytes: " + " / ".join(parts) if parts else "guard bytes"

    def free(self) -> None:
        """Release the buffer."""
        self.buffer.free()
