"""What the server checks about every received tensor, and the per-connection table of buffer handles.

A tensor is accepted only when its type id is a ggml type, ``ne[0]`` is a multiple of the block size, a quantized
tensor's blocks are packed (``nb[0]`` is the block size in bytes), no two elements overlap (each dimension, by
increasing stride, steps past all the smaller ones: strides cannot make a small buffer look like a huge tensor),
its buffer handle was handed out *to this connection*, and every byte it spans — from ``data`` to
``data + nbytes`` with its own strides — lies inside that buffer. Handles and base addresses are per-connection
numbers, not pointers: nothing a client sends is ever
dereferenced.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from ggml_core import Buffer, GGMLType
from ggml_rpc.protocol import RpcTensor

__all__ = ["BASE_ALIGN", "BufferTable", "Refused", "Remote", "check_layout", "extent", "overlaps"]

#: remote base addresses are multiples of this (larger than any device's alignment)
BASE_ALIGN: Final = 1 << 20
#: the first base address handed out (never 0: a zero ``data`` means "no memory")
_FIRST_BASE: Final = 1 << 44
#: a gap left between consecutive buffers' address ranges
_GAP: Final = 1 << 20
#: tensor flags ggml defines (INPUT, OUTPUT, PARAM, LOSS, COMPUTE)
KNOWN_FLAGS: Final = 0x1F
_TYPES: Final = {int(t): t for t in GGMLType}


class Refused(Exception):
    """A message this server refuses; the connection is closed and the reason logged."""


def check_layout(rt: RpcTensor, what: str = "tensor") -> GGMLType:
    """The tensor's type after the type and layout checks (:class:`Refused` otherwise)."""
    t = _TYPES.get(rt.type)
    label = f"{what} {rt.name_str!r}"
    if t is None:
        raise Refused(f"{label}: type id {rt.type} is not a ggml type")
    if rt.ne[0] % t.block_size:
        raise Refused(f"{label}: ne[0]={rt.ne[0]} is not a multiple of {t.traits.name}'s block size {t.block_size}")
    if t.block_size > 1 and rt.nb[0] != t.type_size and min(rt.ne) > 0:
        raise Refused(f"{label}: {t.traits.name} blocks must be packed (nb[0]={rt.nb[0]}, block bytes {t.type_size})")
    if rt.flags & ~KNOWN_FLAGS:
        raise Refused(f"{label}: unknown flag bits {rt.flags & ~KNOWN_FLAGS:#x}")
    if overlaps(t, rt.ne, rt.nb):
        # ggml never aliases elements (broadcasting happens in kernels, not strides); refusing it bounds the work
        # a kernel can be made to do per byte of memory
        raise Refused(f"{label}: ne={list(rt.ne)}, nb={list(rt.nb)} make elements overlap")
    return t


def overlaps(t: GGMLType, ne: tuple[int, ...], nb: tuple[int, ...]) -> bool:
    """True unless each dimension, taken by increasing stride, steps past everything the smaller ones span.

    That is the layout of every tensor ggml makes (contiguous, permuted, transposed, a view of part of one); it
    rules out any two elements sharing a byte. Dimensions of one element have no stride to check.
    """
    n0, unit = ne[0] // t.block_size, t.type_size
    if nb[0] == unit and nb[1] == unit * n0 and nb[2] == nb[1] * ne[1] and nb[3] == nb[2] * ne[2]:
        return False  # contiguous: the common case, decided without sorting
    if min(ne) <= 0:
        return False
    counts = (n0, ne[1], ne[2], ne[3])
    span = unit  # bytes covered by one element (block), then by the dimensions checked so far
    for stride, n in sorted((nb[i], counts[i]) for i in range(4) if counts[i] > 1):
        if stride < span:
            return True
        span += stride * (n - 1)
    return False


def extent(t: GGMLType, ne: tuple[int, ...], nb: tuple[int, ...]) -> int:
    """Bytes from ``data`` to one past the last byte the tensor spans (``ggml_nbytes``; 0 when empty)."""
    if min(ne) <= 0:
        return 0
    bs = t.block_size
    size = t.type_size + (ne[0] - 1) * nb[0] if bs == 1 else ne[0] // bs * nb[0]
    for i in range(1, 4):
        size += (ne[i] - 1) * nb[i]
    return size


@dataclass
class Remote:
    """One buffer this connection allocated: its handle, remote base address, memory and device."""

    handle: int
    base: int
    buffer: Buffer
    device: int

    @property
    def size(self) -> int:
        """The buffer's size in bytes."""
        return self.buffer.size


class BufferTable:
    """The handles one connection owns. Another connection's handle is as unknown as a made-up one.

    :param max_buffers: the most buffers alive at once
    :param max_bytes: the most bytes alive at once
    """

    def __init__(self, max_buffers: int, max_bytes: int) -> None:
        self.max_buffers = max_buffers
        self.max_bytes = max_bytes
        self._by_handle: dict[int, Remote] = {}
        self._next_handle = 1
        self._next_base = _FIRST_BASE
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._by_handle)

    def __iter__(self) -> Iterator[Remote]:
        return iter(list(self._by_handle.values()))

    def room_for(self, size: int) -> str | None:
        """Why a new buffer of ``size`` bytes is not allowed, or None."""
        if len(self._by_handle) >= self.max_buffers:
            return f"this connection already holds {len(self._by_handle)} buffers (limit {self.max_buffers})"
        if self.bytes + size > self.max_bytes:
            return f"this connection would hold {self.bytes + size} bytes (limit {self.max_bytes})"
        return None

    def add(self, buffer: Buffer, device: int) -> Remote:
        """Register a new buffer: a fresh handle and an address range of its own."""
        # handles look like pointers to clients; they are counters tagged so that a stale or foreign one is unlikely
        handle = 0x5250_0000_0000_0000 | (self._next_handle << 4)
        self._next_handle += 1
        base = self._next_base
        self._next_base += (buffer.size + _GAP + BASE_ALIGN - 1) // BASE_ALIGN * BASE_ALIGN
        rec = Remote(handle, base, buffer, device)
        self._by_handle[handle] = rec
        self.bytes += buffer.size
        return rec

    def get(self, handle: int, what: str) -> Remote:
        """The buffer of ``handle`` (:class:`Refused` when this connection did not allocate it)."""
        rec = self._by_handle.get(handle)
        if rec is None:
            raise Refused(f"{what}: buffer handle {handle:#x} does not belong to this connection")
        return rec

    def remove(self, handle: int) -> Remote:
        """Forget a buffer (the caller frees it)."""
        rec = self.get(handle, "FREE_BUFFER")
        del self._by_handle[handle]
        self.bytes -= rec.buffer.size
        return rec

    def locate(self, rt: RpcTensor, what: str, *, need: bool = True) -> tuple[GGMLType, Remote | None, int, int]:
        """(type, buffer, byte offset in it, extent) of a tensor whose bytes were checked to lie in its buffer.

        ``need=False`` accepts a tensor without memory (buffer 0 and data 0), returned with buffer None.
        """
        t = check_layout(rt, what)
        n = extent(t, rt.ne, rt.nb)
        label = f"{what} {rt.name_str!r}"
        if rt.buffer == 0:
            if need:
                raise Refused(f"{label}: has no buffer")
            if rt.data != 0:
                raise Refused(f"{label}: has a data address but no buffer")
            return t, None, 0, n
        rec = self.get(rt.buffer, label)
        off = rt.data - rec.base
        if off < 0 or off + n > rec.size:
            raise Refused(
                f"{label}: spans [{rt.data:#x}, {rt.data + n:#x}), outside its buffer "
                f"[{rec.base:#x}, {rec.base + rec.size:#x})"
            )
        return t, rec, off, n
