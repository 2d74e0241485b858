"""The device and its backend: CUDA<n> with its properties, memory and op support; a stream per backend; events.

``graph_compute_async`` binds every node to its kernel launches once per graph and allocation (see
:mod:`ggml_cuda.ops`), packs their arguments, and afterwards only queues the launches on the stream. Copies
(``*_async``) are queued on the same stream; :meth:`CUDABackend.synchronize` waits for them and then checks the
status word where kernels report bad row indices.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from ggml_core import (
    AllocationError,
    Backend,
    BufferType,
    ComputeError,
    Device,
    DeviceCaps,
    DeviceProps,
    DeviceType,
    Event,
    GGMLOp,
    Graph,
    Tensor,
    TensorError,
    TensorFlag,
)
from ggml_core.backend import EMPTY_OPS
from ggml_cuda._buffers import CUDABuffer, CUDABufferType, CUDAHostBufferType
from ggml_cuda._compile import CompileError, arch_flag
from ggml_cuda._driver import DeviceInfo, Driver, DriverCallError
from ggml_cuda._programs import Compiler, Programs
from ggml_cuda.ops import KERNELS, STATUS, BindContext, Launch, pack_args

__all__ = ["DEFAULT_OFFLOAD_MIN_BATCH", "CUDABackend", "CUDADevice", "CUDAEvent", "Step", "op_batch_size"]

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


# ================================================================================================ events


class CUDAEvent(Event):
    """A CUDA event: recorded on a CUDA backend's stream, waited on by another stream or by the host."""

    def __init__(self, device: CUDADevice) -> None:
        super().__init__(device)
        self.cuda_device = device
        self.handle = device.driver.event_create(device.ordinal)

    def record(self, backend: Backend) -> None:
        """Record at the current end of ``backend``'s stream (a CUDA backend of any device)."""
        stream = getattr(backend, "stream", None)
        if stream is None:
            raise TensorError(backend.name, "a CUDA event can only be recorded on a CUDA backend's stream")
        self.cuda_device.driver.event_record(backend.device.ordinal, self.handle, stream)  # type: ignore[attr-defined]

    def synchronize(self) -> None:
        """Block the host until the recorded work is done."""
        self.cuda_device.driver.event_synchronize(self.cuda_device.ordinal, self.handle)

    def wait(self, backend: Backend) -> None:
        """Make ``backend``'s stream wait (a CUDA backend), or block the host (any other backend)."""
        stream = getattr(backend, "stream", None)
        if stream is None:
            self.synchronize()
            return
        self.cuda_device.driver.stream_wait_event(backend.device.ordinal, stream, self.handle)  # type: ignore[attr-defined]


# ================================================================================================ backend


_MAX_PLANS = 64


@dataclass(frozen=True)
class Step:
    """A launch ready to queue: the node it computes, the kernel handle and the packed arguments."""

    node: Tensor
    launch: Launch
    function: Any
    args: bytes
    uses_status: bool


class CUDABackend(Backend):
    """A stream on one CUDA device."""

    def __init__(self, device: CUDADevice) -> None:
        super().__init__(device)
        self.cuda_device = device
        drv, ordinal = device.driver, device.ordinal
        self.stream = drv.stream_create(ordinal)
        self._status = drv.alloc(ordinal, 4)
        drv.memset(ordinal, int(self._status), 0, 4, None)
        self._status_nodes: list[Tensor] = []
        self._scratch: Any = None
        self._scratch_size = 0
        self._plans: dict[int, tuple[tuple[object, ...], list[Step]]] = {}

    # ---- tensors ------------------------------------------------------------------------------------------

    def resolve(self, t: Tensor) -> int:
        """The device address of ``t`` (which must live in this device's memory)."""
        buf = t.buffer
        if buf is None or t.data_offset is None:
            raise TensorError(t, "has no memory; allocate the graph before computing it")
        if not isinstance(buf, CUDABuffer) or buf.device is not self.cuda_device:
            raise TensorError(
                t,
                f"lives in {buf.name} memory; the {self.name} backend computes only on tensors in {self.name} memory "
                "(copy it there first, or let the scheduler do it)",
            )
        return buf.device_ptr(t.data_offset)

    def _own_buffer(self, t: Tensor) -> CUDABuffer | None:
        buf = t.buffer
        return buf if isinstance(buf, CUDABuffer) and buf.device is self.cuda_device else None

    # ---- copies ---------------------------------------------------------------------------------------------

    def set_tensor_async(self, t: Tensor, data: memoryview | bytes, offset: int = 0) -> None:
        """Queue a host → tensor copy on this stream (``data`` must stay unchanged until synchronize)."""
        buf = self._own_buffer(t)
        if buf is None:
            super().set_tensor_async(t, data, offset)
            return
        mv = memoryview(data).cast("B")
        start = buf._tensor_span(t, offset, mv.nbytes)
        if mv.nbytes:
            self._call(
                t,
                "queue an upload",
                self.cuda_device.driver.copy_htod,
                self.cuda_device.ordinal,
                buf.ptr + start,
                mv,
                self.stream,
            )

    def get_tensor_async(self, t: Tensor, out: memoryview, offset: int = 0) -> None:
        """Queue a tensor → host copy on this stream; ``out`` is valid after synchronize."""
        buf = self._own_buffer(t)
        if buf is None:
            super().get_tensor_async(t, out, offset)
            return
        mv = memoryview(out).cast("B")
        start = buf._tensor_span(t, offset, mv.nbytes)
        if mv.nbytes:
            self._call(
                t,
                "queue a download",
                self.cuda_device.driver.copy_dtoh,
                self.cuda_device.ordinal,
                mv,
                buf.ptr + start,
                self.stream,
            )

    def cpy_tensor_async(self, src_backend: Backend, src: Tensor, dst: Tensor) -> bool:
        """Queue a device → device (or peer) copy on this stream, after ``src_backend``'s queued work."""
        dbuf = self._own_buffer(dst)
        sbuf = src.buffer
        if dbuf is None or not isinstance(sbuf, CUDABuffer) or src.data_offset is None:
            return False
        n = src.nbytes
        if n != dst.nbytes:
            raise TensorError(dst, f"copy needs equal sizes: source has {n} bytes, destination {dst.nbytes}")
        dstart = dbuf._tensor_span(dst, 0, n)
        sstart = sbuf._tensor_span(src, 0, n)
        drv, ordinal = self.cuda_device.driver, self.cuda_device.ordinal
        src_stream = getattr(src_backend, "stream", None)
        if src_backend is not self and src_stream is not None:
            ev = drv.event_create(src_backend.device.ordinal)  # type: ignore[attr-defined]
            drv.event_record(src_backend.device.ordinal, ev, src_stream)  # type: ignore[attr-defined]
            drv.stream_wait_event(ordinal, self.stream, ev)
        if n == 0:
            return True
        if sbuf.device is self.cuda_device:
            self._call(
                dst, "queue a device copy", drv.copy_dtod, ordinal, dbuf.ptr + dstart, sbuf.ptr + sstart, n, self.stream
            )
        else:
            self._call(
                dst,
                "queue a peer copy",
                drv.copy_peer,
                ordinal,
                dbuf.ptr + dstart,
                sbuf.ordinal,
                sbuf.ptr + sstart,
                n,
                self.stream,
            )
        return True

    def _call(self, node: object, what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except DriverCallError as exc:
            raise ComputeError(node, self.name, f"cannot {what}: {exc}") from exc

    # ---- synchronisation -----------------------------------------------------------------------------------

    def synchronize(self) -> None:
        """Wait for the stream, then raise if a kernel reported a bad row index since the last synchronize."""
        drv, ordinal = self.cuda_device.driver, self.cuda_device.ordinal
        try:
            drv.stream_synchronize(ordinal, self.stream)
        except DriverCallError as exc:
            raise ComputeError("<stream>", self.name, f"an asynchronous operation failed: {exc}") from exc
        if not self._status_nodes:
            return
        nodes, self._status_nodes = self._status_nodes, []
        word = np.zeros(1, np.uint32)
        drv.copy_dtoh(ordinal, memoryview(word.data).cast("B"), int(self._status), None)
        if word[0]:
            drv.memset(ordinal, int(self._status), 0, 4, None)
            names = ", ".join(n.describe() for n in nodes[:4])
            raise ComputeError(
                nodes[0],
                self.name,
                f"a row index was outside its tensor (GET_ROWS/SET_ROWS among {names}); "
                "the rows with bad indices were skipped",
            )

    # ---- plans ----------------------------------------------------------------------------------------------

    @staticmethod
    def _signature(graph: Graph) -> tuple[object, ...]:
        def tkey(t: Tensor | None) -> tuple[object, ...]:
            if t is None:
                return ()
            return (t.id, t.type, t.ne, t.nb, id(t.buffer), t.data_offset)

        return tuple((tkey(t), t.op, t.op_params.tobytes(), *(tkey(s) for s in t.src[:6])) for t in graph.nodes)

    def _ensure_scratch(self, size: int) -> int:
        if size <= self._scratch_size:
            return int(self._scratch) if self._scratch is not None else 0
        drv, ordinal = self.cuda_device.driver, self.cuda_device.ordinal
        self.synchronize()  # queued kernels may still use the old scratch
        if self._scratch is not None:
            drv.free(ordinal, self._scratch)
            self._scratch = None
            self._scratch_size = 0
            self._plans.clear()  # their packed arguments point into the old scratch
        new_size = max(size, 1 << 20)
        new_size = 1 << (new_size - 1).bit_length() if new_size < 1 << 30 else new_size
        try:
            self._scratch = drv.alloc(ordinal, new_size)
        except DriverCallError as exc:
            free = self.cuda_device.memory()[0]
            raise AllocationError(self.name, new_size, free, f"scratch memory for the graph's kernels ({exc})") from exc
        self._scratch_size = new_size
        return int(self._scratch)

    def plan(self, graph: Graph) -> list[Step]:
        """The launches computing ``graph``, bound and packed (cached while the graph and its memory are unchanged)."""
        sig = self._signature(graph)
        cached = self._plans.get(graph.uid)
        if cached is not None and cached[0] == sig:
            return cached[1]
        ctx = BindContext(self.resolve, self.cuda_device.info.compute_capability)
        bound: list[tuple[Tensor, Launch]] = []
        need = 0
        for node in graph.nodes:
            if node.op in EMPTY_OPS or node.is_empty or not node.flags & TensorFlag.COMPUTE:
                continue
            ctx.begin_node()
            try:
                if not KERNELS.supports(node):
                    raise NotImplementedError(
                        f"the CUDA plugin has no kernel for {node.op_desc} with these operand types"
                    )
                launches = KERNELS.get(node)(node, ctx)
            except (NotImplementedError, TensorError, OverflowError, ValueError) as exc:
                raise ComputeError(node, self.name, str(exc)) from exc
            need = max(need, ctx.node_scratch)
            bound.extend((node, launch) for launch in launches)
        base = self._ensure_scratch(need) if need else 0
        status = int(self._status)
        steps: list[Step] = []
        programs = self.cuda_device.programs
        for node, launch in bound:
            try:
                fn = programs.function(launch.module, launch.kernel)
            except (CompileError, DriverCallError) as exc:
                raise ComputeError(node, self.name, f"kernel {launch.kernel} unavailable: {exc}") from exc
            packed = pack_args(launch.codes, launch.values, base, status)
            uses_status = any(v is STATUS for v in launch.values)
            steps.append(Step(node, launch, fn, packed, uses_status))
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
        self._plans[graph.uid] = (sig, steps)
        return steps

    # ---- compute --------------------------------------------------------------------------------------------

    def graph_compute_async(self, graph: Graph) -> None:
        """Queue every node's kernels on the stream."""
        steps = self.plan(graph)
        drv, ordinal, stream = self.cuda_device.driver, self.cuda_device.ordinal, self.stream
        last: Tensor | None = None
        with drv.activate(ordinal):
            for step in steps:
                if step.node is not last:
                    last = step.node
                    if self.abort_callback is not None and self.abort_callback():
                        raise ComputeError(step.node, self.name, "aborted by the abort callback")
                    if step.uses_status:
                        self._status_nodes.append(step.node)
                ln = step.launch
                try:
                    drv.launch(ordinal, step.function, ln.grid, ln.block, step.args, ln.shared, stream)
                except DriverCallError as exc:
                    raise ComputeError(step.node, self.name, f"launching {ln.kernel} failed: {exc}") from exc

    def free(self) -> None:
        """Release the scratch memory and the status word (after the stream's work is done)."""
        drv, ordinal = self.cuda_device.driver, self.cuda_device.ordinal
        try:
            drv.stream_synchronize(ordinal, self.stream)
        finally:
            for handle in (self._scratch, self._status):
                if handle is not None:
                    drv.free(ordinal, handle)
            self._scratch = self._status = None
            self._scratch_size = 0
            self._plans.clear()


# ================================================================================================ device


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
        self._buft = CUDABufferType(self, driver, self.ordinal)
        self._host_buft = CUDAHostBufferType(self, driver)

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
        return KERNELS.supports(op)

    def supports_buft(self, buft: BufferType) -> bool:
        """Only this device's own memory: kernels do not read host or other devices' memory."""
        return buft is self._buft

    def offload_op(self, op: Tensor) -> bool:
        """ggml's rule: worth running here with host weights when the batch is at least the offload minimum."""
        return op_batch_size(op) >= self.offload_min_batch

    def event_new(self) -> CUDAEvent:
        """A new CUDA event on this device."""
        return CUDAEvent(self)
