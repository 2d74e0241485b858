"""Host memory as numpy: a buffer is one aligned ``uint8`` array, tensors are strided views of it."""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core import AllocationError, Buffer, BufferType, HostBuffer
from ggml_cpu._cpu import host_memory

__all__ = ["ALIGNMENT", "CPUBuffer", "CPUBufferType", "CPUMappedBufferType"]


#: ggml's CPU buffers align to 32 bytes (TENSOR_ALIGNMENT); 64 keeps rows on cache lines
ALIGNMENT: Final = 64


class CPUBuffer(HostBuffer):
    """Host memory as one numpy ``uint8`` array (owned, or wrapping caller memory such as an mmap), with the numpy
    views the kernels made of its tensors."""

    def __init__(self, buffer_type: BufferType, mem: np.ndarray) -> None:
        super().__init__(buffer_type, mem)
        #: numpy views of tensors in this buffer, made by the kernels (see ``ggml_cpu.ops._base.arr``)
        self.view_cache: dict[int, tuple[object, ...]] = {}

    def _free(self) -> None:
        self.view_cache.clear()
        super()._free()


def _aligned_bytes(size: int, alignment: int) -> np.ndarray:
    raw = np.zeros(size + alignment, dtype=np.uint8)
    shift = (-raw.ctypes.data) % alignment
    return raw[shift : shift + size]


class CPUBufferType(BufferType):
    """``CPU``: aligned host memory."""

    def _alloc(self, size: int) -> Buffer:
        try:
            mem = _aligned_bytes(size, self.alignment)
        except MemoryError as exc:
            raise AllocationError("CPU", size, host_memory()[0], "out of host memory") from exc
        return CPUBuffer(self, mem)


class CPUMappedBufferType(BufferType):
    """``CPU_Mapped``: caller-owned host memory (e.g. an mmap'd GGUF), wrapped without copying."""

    def _alloc(self, size: int) -> Buffer:
        raise NotImplementedError("CPU_Mapped buffers come from Device.buffer_from_host_ptr, not alloc_buffer")
