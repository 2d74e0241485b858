"""The device and its backend: one OpenCL device with its context, in-order queue and kernel program; a stream per
backend; marker events.

All backends of a device share the device's in-order queue, so synchronous buffer reads and writes are always
ordered after the kernels queued before them. Graph nodes are bound to kernel launches once per graph (see
:mod:`ggml_opencl.ops`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ggml_core import (
    AllocationError,
    Backend,
    BufferType,
    ComputeError,
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
from ggml_opencl._buffers import ALIGNMENT, OpenCLBuffer, OpenCLBufferDevice, OpenCLBufferType
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl._notices import label_device
from ggml_opencl._opencl import cl
from ggml_opencl._programs import ProgramCache

__all__ = ["OpenCLBackend", "OpenCLDevice", "OpenCLEvent"]


class OpenCLEvent(Event):
    """An OpenCL marker event: recorded on a backend's queue, waited on by the host or by another queue."""

    def __init__(self, device: OpenCLDevice) -> None:
        super().__init__(device)
        self.cl_event: Any = None

    def record(self, backend: Backend) -> None:
        """Mark the current end of ``backend``'s queue."""
        if not isinstance(backend, OpenCLBackend):
            raise TypeError(f"{self.device.name}: an OpenCL event can only be recorded on an OpenCL backend")
        self.cl_event = cl.enqueue_marker(backend.queue)

    def synchronize(self) -> None:
        """Block until the recorded work is done (a never-recorded event is complete)."""
        if self.cl_event is not None:
            self.cl_event.wait()

    def wait(self, backend: Backend) -> None:
        """Make ``backend``'s queue wait for the event: on the device when they share a context, else on the host."""
        if self.cl_event is None:
            return
        if isinstance(backend, OpenCLBackend) and backend.queue.context == self.cl_event.context:
            cl.enqueue_barrier(backend.queue, wait_for=[self.cl_event])
        else:
            self.synchronize()


class OpenCLBackend(Backend):
    """A stream on one OpenCL device: kernels, copies and markers go to the device's in-order queue.

    Graph nodes are bound to kernel launches once per graph and allocation (like the CPU backend's plan cache);
    computing only enqueues them. Kernels that can meet bad indices (GET_ROWS, SET_ROWS) record an error code in
    a small device buffer, which :meth:`synchronize` reads and raises as a :class:`ComputeError`.
    """

    device: OpenCLDevice

    def __init__(self, device: OpenCLDevice) -> None:
        super().__init__(device)
        self.queue = device.queue
        self.info = device.info
        self.context = device.context
        self._program = device.program()
        self._kernels: dict[str, Any] = {}
        self._limits: dict[str, int] = {}
        self._scratch: dict[str, Any] = {}
        self._pending: list[Any] = []
        self._plans: dict[int, tuple[tuple[object, ...], list[tuple[Tensor, Callable[[], None]]]]] = {}
        self._checked_nodes: dict[int, Tensor] = {}
        self._check_errors = False
        self.err_buf = cl.Buffer(
            self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=np.zeros(1, np.int32)
        )

    # ---- what binders use ---------------------------------------------------------------------------------

    def kernel(self, name: str) -> Any:
        """This backend's ``cl.Kernel`` object for ``name`` (one per backend: kernels hold argument state)."""
        k = self._kernels.get(name)
        if k is None:
            k = self._kernels[name] = cl.Kernel(self._program, name)
        return k

    def local_size(self, name: str, wanted: int) -> int:
        """``wanted`` work-items per group, lowered to the kernel's limit on this device (a power of two)."""
        key = f"{name}/ls"
        limit = self._limits.get(key)
        if limit is None:
            dev = self.device.cl_device
            limit = int(self.kernel(name).get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, dev))
            self._limits[key] = limit
        ls = 1
        while ls * 2 <= min(wanted, limit):
            ls *= 2
        return ls

    def scratch(self, slot: str, nbytes: int) -> Any:
        """A device buffer of at least ``nbytes`` for temporaries, reused across nodes (the queue is in order)."""
        buf = self._scratch.get(slot)
        if buf is None or buf.size < nbytes:
            if nbytes > self.info.max_alloc:
                raise AllocationError(self.name, nbytes, None, f"scratch {slot!r} exceeds the largest allocation")
            buf = self._scratch[slot] = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 4))
        return buf

    def error_code(self, node: Tensor) -> int:
        """The code a kernel reports for a bad index in ``node`` (read back by :meth:`synchronize`)."""
        self._check_errors = True
        code = len(self._checked_nodes) + 1
        self._checked_nodes[code] = node
        return code

    # ---- copies -------------------------------------------------------------------------------------------

    def _own(self, t: Tensor) -> OpenCLBuffer | None:
        buf = t.buffer
        return buf if isinstance(buf, OpenCLBuffer) and buf.context == self.context else None

    def set_tensor_async(self, t: Tensor, data: memoryview | bytes, offset: int = 0) -> None:
        """Queue a host-to-device copy; ``data`` must stay unchanged until :meth:`synchronize`."""
        buf = self._own(t)
        if buf is None:
            return super().set_tensor_async(t, data, offset)
        host = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
        start = buf._tensor_span(t, offset, host.nbytes)
        if host.nbytes:
            self._pending.append(cl.enqueue_copy(self.queue, buf.cl_mem, host, dst_offset=start, is_blocking=False))

    def get_tensor_async(self, t: Tensor, out: memoryview, offset: int = 0) -> None:
        """Queue a device-to-host copy into ``out``; its content is valid after :meth:`synchronize`."""
        buf = self._own(t)
        if buf is None:
            return super().get_tensor_async(t, out, offset)
        host = np.frombuffer(memoryview(out).cast("B"), dtype=np.uint8)
        start = buf._tensor_span(t, offset, host.nbytes)
        if host.nbytes:
            self._pending.append(cl.enqueue_copy(self.queue, host, buf.cl_mem, src_offset=start, is_blocking=False))

    def cpy_tensor_async(self, src_backend: Backend, src: Tensor, dst: Tensor) -> bool:
        """Queue a device-to-device copy when both tensors live in this context; False otherwise."""
        sbuf, dbuf = self._own(src), self._own(dst)
        if sbuf is None or dbuf is None:
            return False
        if src.nbytes != dst.nbytes:
            raise TensorError(dst, f"copy needs equal sizes: source has {src.nbytes} bytes, destination {dst.nbytes}")
        s0 = sbuf._tensor_span(src, 0, src.nbytes)
        d0 = dbuf._tensor_span(dst, 0, dst.nbytes)
        if not src.nbytes:
            return True
        wait = None
        if isinstance(src_backend, OpenCLBackend) and src_backend.queue != self.queue:
            wait = [cl.enqueue_marker(src_backend.queue)]
        cl.enqueue_copy(
            self.queue, dbuf.cl_mem, sbuf.cl_mem, byte_count=src.nbytes, src_offset=s0, dst_offset=d0, wait_for=wait
        )
        return True

    def synchronize(self) -> None:
        """Wait for the queue; raise the first error a kernel reported (a bad row index...)."""
        self.queue.finish()
        self._pending.clear()
        if self._check_errors:
            err = np.zeros(1, np.int32)
            cl.enqueue_copy(self.queue, err, self.err_buf, is_blocking=True)
            if err[0]:
                cl.enqueue_fill_buffer(self.queue, self.err_buf, np.int32(0), 0, 4).wait()
                node = self._checked_nodes.get(int(err[0]))
                raise ComputeError(node, self.name, "an index is out of range (the bad rows were left unwritten/zero)")

    # ---- compute ------------------------------------------------------------------------------------------

    @staticmethod
    def _signature(graph: Graph) -> tuple[object, ...]:
        return tuple(
            (t.id, t.op, t.ne, t.nb, id(t.buffer), t.data_offset, *(s.id if s is not None else 0 for s in t.src[:5]))
            for t in graph.nodes
        )

    def _plan(self, graph: Graph) -> list[tuple[Tensor, Callable[[], None]]]:
        sig = self._signature(graph)
        cached = self._plans.get(graph.uid)
        if cached is not None and cached[0] == sig:
            return cached[1]
        from ggml_opencl.ops import KERNELS  # the op families load on the first bind or support question

        steps = []
        for node in graph.nodes:
            if node.is_view_op or node.op == GGMLOp.NONE or node.is_empty or not node.flags & TensorFlag.COMPUTE:
                continue
            try:
                if not KERNELS.supports(node, self.info):
                    types = ", ".join(s.type.traits.name for s in node.src if s is not None)
                    raise NotImplementedError(
                        f"{self.name} does not support {node.op_desc} with these operands ({types} -> "
                        f"{node.type.traits.name}); let the scheduler place it on another device"
                    )
                steps.append((node, KERNELS.get(node)(self, node)))
            except (NotImplementedError, TensorError) as exc:
                raise ComputeError(node, self.name, str(exc)) from exc
        if len(self._plans) > 64:
            self._plans.clear()
            self._checked_nodes.clear()
        self._plans[graph.uid] = (sig, steps)
        return steps

    def graph_compute_async(self, graph: Graph) -> None:
        """Enqueue every node's kernels in order; returns before they finish (see :meth:`synchronize`)."""
        for node, thunk in self._plan(graph):
            if self.abort_callback is not None and self.abort_callback():
                raise ComputeError(node, self.name, "aborted by the abort callback")
            try:
                thunk()
            except cl.Error as exc:
                raise ComputeError(node, self.name, f"OpenCL error: {exc}") from exc

    def free(self) -> None:
        """Wait for the queue and release the temporaries."""
        self.queue.finish()
        for buf in self._scratch.values():
            buf.release()
        self._scratch.clear()
        self._plans.clear()


# ================================================================================================ device


def _device_type(info: DeviceInfo) -> DeviceType:
    """The device's kind as OpenCL reports it. A CPU-type device (PoCL) is ``ACCEL``, as a CPU-type Vulkan device
    is in ggml-webgpu: not ``CPU``, which is the host device holding graph inputs and fallbacks (the CPU plugin's),
    while this one has buffers of its own; not ``GPU``, which it is not: ``init_best`` and the default placement
    pass it over, and it runs what it is given by name (``--device OpenCL0``). A GPU sharing host memory is an
    IGPU; other devices (discrete GPUs, accelerator cards) have memory of their own: GPU."""
    if info.cl_type == "CPU":
        return DeviceType.ACCEL
    if info.cl_type == "GPU" and info.host_unified:
        return DeviceType.IGPU
    return DeviceType.GPU


class OpenCLDevice(OpenCLBufferDevice):
    """One OpenCL device with its context, in-order queue and kernel program."""

    caps = DeviceCaps(asynchronous=True, host_buffer=False, buffer_from_host_ptr=False, events=True)

    def __init__(self, name: str, info: DeviceInfo, cl_device: Any, context: Any, programs: ProgramCache) -> None:
        super().__init__(name, info.description, device_id=info.device_id)
        self.info = info
        self.type = _device_type(info)
        label_device(cl_device, name)
        #: a CPU-type OpenCL device runs on the host's cores: not preferred over the CPU plugin unless named
        self.host_cpu = info.is_cpu
        self.cl_device = cl_device
        #: shared by the devices of one platform, so that copies between them stay on the devices
        self.context = context
        self.queue = cl.CommandQueue(context, cl_device)
        #: bytes allocated in this device's buffers (OpenCL has no free-memory query)
        self.allocated = 0
        self._programs = programs
        self._buft = OpenCLBufferType(name, self, alignment=ALIGNMENT, max_size=info.max_alloc)

    def program(self) -> Any:
        """The device's built kernel program (built once, at enumeration)."""
        return self._programs.get(self.context, self.cl_device, self.info, self.name)

    def memory(self) -> tuple[int, int]:
        """(total minus what this process allocated, global memory size)."""
        total = self.info.global_mem
        return max(0, total - self.allocated), total

    def props(self) -> DeviceProps:
        """Props, with the OpenCL details (platform, type, fp16, tile sizes) under ``extra``."""
        p = super().props()
        p.extra.update(self.info.extra())
        return p

    def buffer_type(self) -> BufferType:
        """Device memory."""
        return self._buft

    def init_backend(self, params: str | None = None) -> Backend:
        """A new stream on this device (sharing the device's in-order queue)."""
        return OpenCLBackend(self)

    def supports_op(self, op: Tensor) -> bool:
        """Ops and type combinations with an OpenCL kernel that passes the conformance comparison with the CPU."""
        from ggml_opencl.ops import KERNELS  # the op families load on the first bind or support question

        return KERNELS.supports(op, self.info)

    def supports_buft(self, buft: BufferType) -> bool:
        """Only this device's own memory."""
        return buft is self._buft

    def offload_op(self, op: Tensor) -> bool:
        """Large matrix products are worth moving to a real GPU; never to a CPU-type device."""
        if self.info.cl_type != "GPU" or op.op not in (GGMLOp.MUL_MAT, GGMLOp.MUL_MAT_ID):
            return False
        b = op.src[1]
        return b is not None and b.ne[1] * b.ne[2] * b.ne[3] >= 32

    def event_new(self) -> Event:
        """A new marker event."""
        return OpenCLEvent(self)
