"""Buffers: one ``cl.Buffer`` per ggml buffer (``OpenCL<i>``); tensors are addressed by byte offset inside it, so
views need no sub-buffers. Reads and writes go through the device's in-order queue, so they are ordered after the
kernels queued before them."""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from ggml_core import AllocationError, Buffer, BufferType, Device
from ggml_opencl._opencl import cl

__all__ = ["ALIGNMENT", "OpenCLBuffer", "OpenCLBufferDevice", "OpenCLBufferType"]

#: alignment of tensors inside a buffer (ggml's OpenCL backend uses 128; kernels need only element alignment)
ALIGNMENT: Final = 128


class OpenCLBufferDevice(Device):
    """An OpenCL device as its buffers see it: its context and in-order queue, and the bytes allocated in its
    buffers. :class:`ggml_opencl._device.OpenCLDevice` is the one implementation."""

    #: the OpenCL context (shared by the devices of one platform)
    context: Any
    #: the device's in-order command queue
    queue: Any
    #: bytes allocated in this device's buffers (OpenCL has no free-memory query)
    allocated = 0


class OpenCLBufferType(BufferType):
    """``OpenCL<i>``: memory of one OpenCL device, at most the device's largest single allocation per buffer."""

    device: OpenCLBufferDevice

    def _alloc(self, size: int) -> Buffer:
        dev = self.device
        try:
            mem = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, max(size, 1))
        except cl.Error as exc:
            free, _ = dev.memory()
            raise AllocationError(dev.name, size, free, f"clCreateBuffer failed: {exc}") from exc
        return OpenCLBuffer(self, size, mem)


class OpenCLBuffer(Buffer):
    """One ``cl.Buffer``; reads and writes go through the device's in-order queue and block until done."""

    buffer_type: OpenCLBufferType

    def __init__(self, buffer_type: OpenCLBufferType, size: int, mem: Any) -> None:
        super().__init__(buffer_type, size)
        #: the OpenCL memory object (kernels receive it together with each tensor's byte offset)
        self.cl_mem = mem
        self.device = buffer_type.device
        self.device.allocated += size

    @property
    def context(self) -> Any:
        """The OpenCL context the memory belongs to."""
        return self.device.context

    def _write(self, offset: int, data: memoryview) -> None:
        host = np.frombuffer(data, dtype=np.uint8)
        cl.enqueue_copy(self.device.queue, self.cl_mem, host, dst_offset=offset, is_blocking=True)

    def _read(self, offset: int, out: memoryview) -> None:
        host = np.frombuffer(out, dtype=np.uint8)
        cl.enqueue_copy(self.device.queue, host, self.cl_mem, src_offset=offset, is_blocking=True)

    def _fill(self, offset: int, size: int, value: int) -> None:
        cl.enqueue_fill_buffer(self.device.queue, self.cl_mem, np.uint8(value), offset, size).wait()

    def _copy_from(self, src: Buffer, src_offset: int, dst_offset: int, size: int) -> bool:
        if isinstance(src, OpenCLBuffer):
            if src.context == self.context:
                if src.device.queue != self.device.queue:
                    src.device.queue.finish()
                cl.enqueue_copy(
                    self.device.queue,
                    self.cl_mem,
                    src.cl_mem,
                    byte_count=size,
                    src_offset=src_offset,
                    dst_offset=dst_offset,
                ).wait()
                return True
            staged = np.empty(size, dtype=np.uint8)  # another platform: through host memory
            src._read(src_offset, staged.data)
            self._write(dst_offset, staged.data)
            return True
        host = src.host_array()
        if host is None:
            return False
        self._write(dst_offset, np.ascontiguousarray(host[src_offset : src_offset + size]).data)
        return True

    def _free(self) -> None:
        self.device.queue.finish()
        self.cl_mem.release()
        self.device.allocated -= self.size
