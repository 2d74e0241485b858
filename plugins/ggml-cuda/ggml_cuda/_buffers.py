"""Memory: the device buffer type (cuMemAlloc), the pinned host buffer type and their buffers.

A buffer type knows its device as a :class:`ggml_core.Device` and reaches the GPU through the driver layer and the
device's ordinal, so this module sits below :mod:`ggml_cuda._device`, which makes the buffer types.

The public :class:`ggml_core.Buffer` methods check every offset and size before these hooks run, so a hook only
ever sees ranges inside its buffer. An allocation that does not fit raises :class:`ggml_core.AllocationError`
naming the device, the size asked and the free memory.
"""

from __future__ import annotations

from typing import Any, Final

from ggml_core import AllocationError, Buffer, BufferType, Device, HostBuffer, TensorError
from ggml_cuda._driver import Driver, DriverCallError

__all__ = ["ALIGNMENT", "CUDABuffer", "CUDABufferType", "CUDAHostBufferType", "PinnedBuffer"]

#: tensor alignment inside device buffers (ggml uses 128; 256 keeps every row start 16-byte aligned for wide loads)
ALIGNMENT: Final = 256


# ================================================================================================ device memory


class CUDABuffer(Buffer):
    """A block of device memory from cuMemAlloc; ``ptr`` is its device address."""

    def __init__(self, buffer_type: CUDABufferType, handle: Any, size: int) -> None:
        super().__init__(buffer_type, size)
        self.device: Device = buffer_type.cuda_device
        #: the driver layer and the device's ordinal, through which the memory is reached
        self.driver, self.ordinal = buffer_type.driver, buffer_type.ordinal
        self.handle = handle
        self.ptr = int(handle) if handle is not None else 0

    def _driver_call(self, what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except DriverCallError as exc:
            raise TensorError(self.name, f"{what} failed: {exc}") from exc

    def _write(self, offset: int, data: memoryview) -> None:
        self._driver_call("host-to-device copy", self.driver.copy_htod, self.ordinal, self.ptr + offset, data, None)

    def _read(self, offset: int, out: memoryview) -> None:
        self._driver_call("device-to-host copy", self.driver.copy_dtoh, self.ordinal, out, self.ptr + offset, None)

    def _fill(self, offset: int, size: int, value: int) -> None:
        self._driver_call("memset", self.driver.memset, self.ordinal, self.ptr + offset, value, size, None)

    def _copy_from(self, src: Buffer, src_offset: int, dst_offset: int, size: int) -> bool:
        if isinstance(src, CUDABuffer):
            if src.device is self.device:
                self._driver_call(
                    "device-to-device copy",
                    self.driver.copy_dtod,
                    self.ordinal,
                    self.ptr + dst_offset,
                    src.ptr + src_offset,
                    size,
                    None,
                )
            else:
                self._driver_call(
                    "peer copy",
                    self.driver.copy_peer,
                    self.ordinal,
                    self.ptr + dst_offset,
                    src.ordinal,
                    src.ptr + src_offset,
                    size,
                    None,
                )
            return True
        host = src.host_array()
        if host is None:
            return False
        self._write(dst_offset, memoryview(host[src_offset : src_offset + size].data))
        return True

    def _free(self) -> None:
        if self.handle is not None:
            self._driver_call("cuMemFree", self.driver.free, self.ordinal, self.handle)
            self.handle = None
            self.ptr = 0

    def device_ptr(self, offset: int = 0) -> int:
        """The device address of byte ``offset``."""
        self._check_live()
        return self.ptr + offset


class CUDABufferType(BufferType):
    """``CUDA<n>``: device memory of one GPU (plain cuMemAlloc, never managed memory).

    :param device: the GPU's device
    :param driver: the driver layer
    :param ordinal: the GPU's driver ordinal
    """

    def __init__(self, device: Device, driver: Driver, ordinal: int) -> None:
        super().__init__(device.name, device, alignment=ALIGNMENT, is_host=False)
        self.cuda_device = device
        self.driver = driver
        self.ordinal = ordinal

    def _alloc(self, size: int) -> Buffer:
        d = self.cuda_device
        if size == 0:
            return CUDABuffer(self, None, 0)
        try:
            handle = self.driver.alloc(self.ordinal, size)
        except DriverCallError as exc:
            free = _free_memory(d)
            if exc.out_of_memory:
                raise AllocationError(d.name, size, free, f"out of device memory ({exc})") from exc
            raise AllocationError(d.name, size, free, str(exc)) from exc
        return CUDABuffer(self, handle, size)


def _free_memory(d: Device) -> int | None:
    try:
        return d.memory()[0]
    except Exception:  # noqa: BLE001 - the allocation error is what matters; free memory is a detail
        return None


# ================================================================================================ pinned host memory


class PinnedBuffer(HostBuffer):
    """Page-locked host memory: readable by the CPU backend, and the fastest source for uploads."""

    def _copy_from(self, src: Buffer, src_offset: int, dst_offset: int, size: int) -> bool:
        if isinstance(src, CUDABuffer):
            src._read(src_offset, memoryview(self.mem[dst_offset : dst_offset + size].data))
            return True
        return super()._copy_from(src, src_offset, dst_offset, size)


class CUDAHostBufferType(BufferType):
    """``CUDA_Host``: pinned (page-locked, portable) host memory for fast uploads to any CUDA device."""

    def __init__(self, device: Device, driver: Driver) -> None:
        super().__init__("CUDA_Host", device, alignment=64, is_host=True)
        self.driver = driver

    def _alloc(self, size: int) -> Buffer:
        try:
            mem = self.driver.alloc_host(size)
        except DriverCallError as exc:
            raise AllocationError("CUDA_Host", size, None, f"cannot pin host memory ({exc})") from exc
        return PinnedBuffer(self, mem)
