"""The device: CUDA<n> with its properties, memory, buffer types, kernels, op support and offload rule."""

from __future__ import annotations

import os
from typing import Final

from ggml_core import Backend, BufferType, Device, DeviceCaps, DeviceProps, DeviceType, GGMLOp, Tensor
from ggml_cuda import ops
from ggml_cuda._compile import arch_flag
from ggml_cuda._driver import DeviceInfo, Driver
from ggml_cuda._memory import CUDABufferType, CUDAEvent, CUDAHostBufferType
from ggml_cuda._programs import Compiler, Programs
from ggml_cuda._stream import CUDABackend

__all__ = ["DEFAULT_OFFLOAD_MIN_BATCH", "CUDADevice", "op_batch_size"]

#: ggml's default for GGML_OP_OFFLOAD_MIN_BATCH
DEFAULT_OFFLOAD_MIN_BATCH: Final = 32


def op_batch_size(op: Tensor) -> int:
    """ggml's ``get_op_batch_size``: the batch a node processes, for the offload decision."""
    if op.op == GGMLOp.GET_ROWS:
        return 0
    if op.op == GGMLOp.MUL_MAT:
        return op.ne[1]
    if op.op in (GGMLOp.MUL_MAT_ID, GGMLOp.ROPE, GGMLOp.ROPE_BACK):
        return op.ne[2]
    return op.nrows


def _min_batch_from_env() -> int:
    raw = os.environ.get("GGML_OP_OFFLOAD_MIN_BATCH", "")
    try:
        return int(raw) if raw.strip() else DEFAULT_OFFLOAD_MIN_BATCH
    except ValueError:
        return DEFAULT_OFFLOAD_MIN_BATCH


class CUDADevice(Device):
    """One NVIDIA GPU, ``CUDA<index>``.

    :param driver: the driver layer
    :param info: what the driver reported about the device
    :param index: position among the CUDA devices (the name's number; equal to the driver ordinal)
    :param compiler: optional (module, arch) → image, for tests
    """

    type = DeviceType.GPU
    caps = DeviceCaps(asynchronous=True, host_buffer=True, buffer_from_host_ptr=False, events=True)

    def __init__(self, driver: Driver, info: DeviceInfo, index: int, compiler: Compiler | None = None) -> None:
        super().__init__(f"CUDA{index}", info.name, device_id=info.pci_bus_id)
        self.driver = driver
        self.info = info
        self.ordinal = info.ordinal
        self.arch = arch_flag(info.compute_capability)
        self.programs = Programs(driver, self.ordinal, self.arch, compiler)
        #: GGML_OP_OFFLOAD_MIN_BATCH (default 32): the batch from which ops on host weights are offloaded here
        self.offload_min_batch = _min_batch_from_env()
        self._buft = CUDABufferType(self)
        self._host_buft = CUDAHostBufferType(self)

    def memory(self) -> tuple[int, int]:
        """Free and total device memory (cuMemGetInfo)."""
        return self.driver.mem_info(self.ordinal)

    def props(self) -> DeviceProps:
        """Props with the compute capability, architecture, multiprocessors and PCI bus id as extras."""
        free, total = self.memory()
        major, minor = self.info.compute_capability
        extra = {
            "compute_capability": f"{major}.{minor}",
            "arch": self.arch,
            "multiprocessors": self.info.multiprocessors,
            "pci_bus_id": self.info.pci_bus_id,
            "driver": self.driver.name,
        }
        return DeviceProps(self.name, self.description, free, total, self.type, self.device_id, self.caps, extra)

    def buffer_type(self) -> BufferType:
        """Device memory."""
        return self._buft

    def host_buffer_type(self) -> BufferType:
        """Pinned host memory for fast uploads."""
        return self._host_buft

    def init_backend(self, params: str | None = None) -> Backend:
        """A new stream on this device."""
        return CUDABackend(self)

    def supports_op(self, op: Tensor) -> bool:
        """True when a kernel of this plugin computes ``op`` with its operand types and layouts."""
        return ops.supports(op)

    def supports_buft(self, buft: BufferType) -> bool:
        """Only this device's own memory: kernels do not read host or other devices' memory."""
        return buft is self._buft

    def offload_op(self, op: Tensor) -> bool:
        """ggml's rule: worth running here with host weights when the batch is at least the offload minimum."""
        return op_batch_size(op) >= self.offload_min_batch

    def event_new(self) -> CUDAEvent:
        """A new CUDA event on this device."""
        return CUDAEvent(self)
