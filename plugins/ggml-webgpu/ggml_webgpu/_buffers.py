"""Buffers: device storage buffers (``WebGPU<i>``), host buffers for uploads (``WebGPU<i>_Host``), and the staging
ring every large upload goes through.

``queue.write_buffer`` copies the data into a staging buffer that wgpu allocates for each call; on lavapipe that
moves about 1 GiB/s. The ring keeps a few ``MAP_WRITE | COPY_SRC`` buffers of ``STAGE_CHUNK`` bytes and reuses
them (the pinned host memory of ggml's CUDA backend, in WebGPU's terms): a chunk is written into a mapped buffer,
which is unmapped and copied to its destination on the queue, while the next chunk is written into the other
buffer; a buffer is mapped again (waiting for its copy) when its turn comes back. Measured 4.6-7.3 GiB/s for 64 MiB
against 0.8-1.3 GiB/s for ``write_buffer`` (``benchmarks/bench_webgpu.py``). Uploads are ordered like every queue
operation: after the work submitted before them, before the work submitted after them.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Final

import numpy as np

from ggml_core import AllocationError, Buffer, BufferType, Device, HostBuffer

__all__ = [
    "ALIGNMENT",
    "STAGE_CHUNK",
    "STAGE_MIN",
    "StagingRing",
    "WebGPUBuffer",
    "WebGPUBufferDevice",
    "WebGPUBufferType",
    "WebGPUHostBuffer",
    "WebGPUHostBufferType",
    "usage",
]

#: alignment of tensors inside a buffer (ggml-webgpu uses the storage offset alignment; 256 covers every adapter)
ALIGNMENT: Final = 256
#: bytes of one staging buffer (the ring holds STAGE_SLOTS of them, created on first use)
STAGE_CHUNK: Final = 8 * 2**20
STAGE_SLOTS: Final = 2
#: uploads of at least this many bytes go through the ring; smaller ones through ``queue.write_buffer``
STAGE_MIN: Final = 256 * 2**10
_STORAGE_USAGE: Final = ("STORAGE", "COPY_SRC", "COPY_DST")
_SERIALS: Final = itertools.count(1)


def usage(*names: str) -> int:
    """``wgpu.BufferUsage`` flags by name."""
    import wgpu

    u = 0
    for n in names:
        u |= int(getattr(wgpu.BufferUsage, n))
    return u


def storage_usage() -> int:
    """The usage of every device buffer: storage, copy source and destination."""
    return usage(*_STORAGE_USAGE)


class StagingRing:
    """Reused mapped upload buffers of one GPU device (see the module's docstring)."""

    def __init__(self, gpu: Any) -> None:
        self._gpu = gpu
        self._lock = threading.Lock()
        self._slots: list[Any] = []
        self._mapped: list[bool] = []
        self._turn = 0
        #: bytes uploaded through the ring (for tests and reports)
        self.bytes_staged = 0

    def upload(self, dst: Any, offset: int, host: np.ndarray) -> None:
        """Copy the uint8 array ``host`` to ``dst`` at ``offset`` (both multiples of 4) in chunks."""
        import wgpu

        with self._lock:
            for lo in range(0, host.nbytes, STAGE_CHUNK):
                n = min(STAGE_CHUNK, host.nbytes - lo)
                i = self._turn
                self._turn = (self._turn + 1) % STAGE_SLOTS
                slot = self._slot(i, wgpu)
                slot.write_mapped(host[lo : lo + n], 0)
                slot.unmap()
                self._mapped[i] = False
                enc = self._gpu.create_command_encoder()
                enc.copy_buffer_to_buffer(slot, 0, dst, offset + lo, n)
                self._gpu.queue.submit([enc.finish()])
            self.bytes_staged += host.nbytes

    def _slot(self, i: int, wgpu: Any) -> Any:
        """Staging buffer ``i``, mapped for writing (created mapped; re-mapped after its last copy finished)."""
        if i == len(self._slots):
            self._slots.append(
                self._gpu.create_buffer(
                    size=STAGE_CHUNK, usage=usage("MAP_WRITE", "COPY_SRC"), mapped_at_creation=True, label="staging"
                )
            )
            self._mapped.append(True)
        if not self._mapped[i]:
            self._slots[i].map_sync(wgpu.MapMode.WRITE)
            self._mapped[i] = True
        return self._slots[i]

    def release(self) -> None:
        """Destroy the staging buffers."""
        with self._lock:
            for s in self._slots:
                s.destroy()
            self._slots, self._mapped = [], []


class WebGPUBufferDevice(Device):
    """A WebGPU device as its buffers see it: the GPU device, its queue and staging ring (the device opens on first
    use of any of them), and the bytes allocated in its buffers. :class:`ggml_webgpu._device.WebGPUDevice` is the
    one implementation."""

    #: bytes allocated in this device's buffers (wgpu has no free-memory query)
    allocated = 0

    @property
    def gpu(self) -> Any:
        """The wgpu ``GPUDevice``."""
        raise NotImplementedError("a WebGPU device provides its GPUDevice")

    @property
    def queue(self) -> Any:
        """The device's queue."""
        raise NotImplementedError("a WebGPU device provides its queue")

    @property
    def staging(self) -> StagingRing:
        """The mapped upload buffers every large write goes through."""
        raise NotImplementedError("a WebGPU device provides its staging ring")


class WebGPUBufferType(BufferType):
    """``WebGPU<i>``: storage buffers of one device, at most the adapter's largest buffer each."""

    device: WebGPUBufferDevice

    def _alloc(self, size: int) -> Buffer:
        dev = self.device
        gpu_device = dev.gpu  # opens the device on first use (DeviceOpenError names it and why)
        try:
            gpu = gpu_device.create_buffer(size=max(4, -(-size // 4) * 4), usage=storage_usage())
        except Exception as exc:
            free, _ = dev.memory()
            raise AllocationError(dev.name, size, free, f"createBuffer failed: {exc}") from exc
        return WebGPUBuffer(self, size, gpu)


class WebGPUBuffer(Buffer):
    """One GPU storage buffer; reads and writes go through the device's queue (writes of partial words merge),
    large writes through the staging ring."""

    buffer_type: WebGPUBufferType

    def __init__(self, buffer_type: WebGPUBufferType, size: int, gpu: Any) -> None:
        super().__init__(buffer_type, size)
        #: the ``GPUBuffer`` (its size is ``size`` rounded up to 4 bytes)
        self.gpu = gpu
        #: unique per allocation (``id()`` may be reused after a free): recorded graphs are keyed by it
        self.serial = next(_SERIALS)
        self.device = buffer_type.device
        self.device.allocated += size

    def _read_words(self, lo: int, hi: int) -> np.ndarray:
        """Bytes [lo, hi) widened to whole words, as a uint8 array starting at lo rounded down."""
        start, stop = lo - lo % 4, -(-hi // 4) * 4
        return np.frombuffer(self.device.queue.read_buffer(self.gpu, start, stop - start), dtype=np.uint8).copy()

    def _write(self, offset: int, data: memoryview) -> None:
        host = np.frombuffer(data, dtype=np.uint8)
        end = offset + host.nbytes
        if offset % 4 or end % 4:  # the queue writes whole words: merge the partial ones with what is there
            start = offset - offset % 4
            words = self._read_words(offset, end)
            words[offset - start : end - start] = host
            host, offset = words, start
        if host.nbytes >= STAGE_MIN:
            self.device.staging.upload(self.gpu, offset, host)
        else:
            self.device.queue.write_buffer(self.gpu, offset, host)

    def _read(self, offset: int, out: memoryview) -> None:
        dst = np.frombuffer(out, dtype=np.uint8)
        words = self._read_words(offset, offset + dst.nbytes)
        skip = offset % 4
        dst[:] = words[skip : skip + dst.nbytes]

    def _fill(self, offset: int, size: int, value: int) -> None:
        if value == 0 and offset % 4 == 0 and size % 4 == 0:
            enc = self.device.gpu.create_command_encoder()
            enc.clear_buffer(self.gpu, offset, size)
            self.device.queue.submit([enc.finish()])
            return
        step = 1 << 24
        for o in range(offset, offset + size, step):
            n = min(step, offset + size - o)
            self._write(o, np.full(n, value, dtype=np.uint8).data)

    def _copy_from(self, src: Buffer, src_offset: int, dst_offset: int, size: int) -> bool:
        aligned = not (src_offset | dst_offset | size) % 4
        if isinstance(src, WebGPUBuffer) and src.device.gpu is self.device.gpu and aligned:
            enc = self.device.gpu.create_command_encoder()
            enc.copy_buffer_to_buffer(src.gpu, src_offset, self.gpu, dst_offset, size)
            self.device.queue.submit([enc.finish()])
            return True
        if isinstance(src, WebGPUBuffer):  # another device or unaligned: through host memory
            staged = np.empty(size, dtype=np.uint8)
            src._read(src_offset, staged.data)
            self._write(dst_offset, staged.data)
            return True
        host = src.host_array()
        if host is None:
            return False
        self._write(dst_offset, np.ascontiguousarray(host[src_offset : src_offset + size]).data)
        return True

    def _free(self) -> None:
        self.gpu.destroy()
        self.device.allocated -= self.size


class WebGPUHostBuffer(HostBuffer):
    """Host memory the CPU backend computes in directly; copies from it to a device buffer are uploads through the
    device's staging ring, copies into it downloads."""

    def _copy_from(self, src: Buffer, src_offset: int, dst_offset: int, size: int) -> bool:
        if isinstance(src, WebGPUBuffer):
            src._read(src_offset, memoryview(self.mem[dst_offset : dst_offset + size].data))
            return True
        return super()._copy_from(src, src_offset, dst_offset, size)


class WebGPUHostBufferType(BufferType):
    """``WebGPU<i>_Host``: host memory for tensors that are uploaded to the device (``host_buffer_type``)."""

    def __init__(self, device: Device) -> None:
        super().__init__(f"{device.name}_Host", device, alignment=64, is_host=True)

    def _alloc(self, size: int) -> Buffer:
        try:
            return WebGPUHostBuffer.zeros(self, size)
        except MemoryError as exc:
            raise AllocationError(self.name, size, None, f"cannot allocate host memory ({exc})") from exc
