"""Host memory as a buffer: the one implementation every plugin's host buffer type builds on.

A CPU device's memory, a GPU plugin's pinned or staging host buffer type (``CUDA_Host``, ``WebGPU0_Host``) and a test
device all hold their bytes the same way: one numpy ``uint8`` array that the CPU backend computes in directly
(:meth:`HostBuffer.host_array`). :class:`HostBuffer` implements every buffer hook over that array once. A plugin
that can also copy between its device memory and host memory directly overrides :meth:`HostBuffer._copy_from`,
handles its own buffers and returns ``super()._copy_from(...)`` for the rest.
"""

from __future__ import annotations

import numpy as np

from ggml_core._errors import TensorError
from ggml_core.backend.interfaces import Buffer, BufferType

__all__ = ["HostBuffer"]


class HostBuffer(Buffer):
    """Host memory held in one 1-d numpy ``uint8`` array ``mem``: owned, or wrapping memory the caller owns (an
    mmap'd file, page-locked memory from a driver).

    A read-only ``mem`` (a file mapped read-only) can be read, and copied from; writing, filling or copying into it
    raises :class:`~ggml_core.TensorError` naming the buffer. :meth:`free` drops the reference to ``mem`` (the
    memory itself is released when nothing else holds it).
    """

    def __init__(self, buffer_type: BufferType, mem: np.ndarray) -> None:
        if mem.dtype != np.uint8 or mem.ndim != 1:
            raise TypeError(f"HostBuffer needs a 1-d uint8 array, got {mem.dtype} with shape {mem.shape}")
        super().__init__(buffer_type, int(mem.size))
        self.mem = mem

    @classmethod
    def zeros(cls, buffer_type: BufferType, size: int) -> HostBuffer:
        """A buffer of ``size`` zeroed bytes of new host memory (``MemoryError`` when there is none)."""
        return cls(buffer_type, np.zeros(size, dtype=np.uint8))

    def _writable(self) -> np.ndarray:
        if not self.mem.flags.writeable:
            raise TensorError(self.name, "this buffer wraps read-only memory (a file mapped read-only)")
        return self.mem

    def _write(self, offset: int, data: memoryview) -> None:
        self._writable()[offset : offset + data.nbytes] = np.frombuffer(data, dtype=np.uint8)

    def _read(self, offset: int, out: memoryview) -> None:
        np.frombuffer(out, dtype=np.uint8)[:] = self.mem[offset : offset + out.nbytes]

    def _fill(self, offset: int, size: int, value: int) -> None:
        self._writable()[offset : offset + size] = value

    def _copy_from(self, src: Buffer, src_offset: int, dst_offset: int, size: int) -> bool:
        """Copy from any buffer that exposes host memory; False for device memory (a staged copy follows)."""
        host = src.host_array()
        if host is None:
            return False
        self._writable()[dst_offset : dst_offset + size] = host[src_offset : src_offset + size]
        return True

    def _free(self) -> None:
        self.mem = np.zeros(0, np.uint8)

    def host_array(self) -> np.ndarray:
        """The whole buffer as a uint8 array (writable unless it wraps read-only memory)."""
        return self.mem
