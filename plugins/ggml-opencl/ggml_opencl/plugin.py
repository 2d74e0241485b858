"""The OpenCL backend plugin: checks → programs → buffers → backend → device → registration.

Every OpenCL device of every platform becomes a ggml-core device ``OpenCL0``, ``OpenCL1``, … (``GGML_OPENCL_DEVICES``
restricts which). A device's memory is one ``cl.Buffer`` per ggml buffer; tensors are addressed by byte offset
inside it, so views need no sub-buffers. Kernels are plain OpenCL C (``kernels/*.cl``), built once per device with
tile sizes taken from the device's properties, and dispatched per op family by the ``ops_*`` modules. All backends
of a device share the device's in-order queue, so synchronous buffer reads and writes are always ordered after the
kernels queued before them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from ggml_core import (
    API_VERSION,
    AllocationError,
    Backend,
    BackendReg,
    Buffer,
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
    hookimpl,
)
from ggml_opencl._device_info import DeviceInfo, device_info
from ggml_opencl._tuning import announced_if_slow, label_device

if TYPE_CHECKING:
    from types import ModuleType

#: pyopencl, imported by the first device enumeration (:func:`_import_cl`): loading the plugin does not pay for it
cl: Any = None
#: why pyopencl is not importable (None: not tried yet, or imported)
_IMPORT_ERROR: str | None = None


def _import_cl() -> Any:
    """pyopencl, or None with :data:`_IMPORT_ERROR` saying why (optional: the registry then reports no devices)."""
    global cl, _IMPORT_ERROR
    if cl is None and _IMPORT_ERROR is None:
        try:
            import pyopencl

            cl = pyopencl
        except Exception as exc:  # noqa: BLE001 - ImportError, or a broken ICD loader raising at import
            _IMPORT_ERROR = f"pyopencl is not importable: {type(exc).__name__}: {exc} (pip install pyopencl)"
    return cl


_DISPATCH: ModuleType | None = None


def _ops() -> ModuleType:
    """The kernel dispatch table, filled by the ops_* modules on first use (a backend or supports_op)."""
    global _DISPATCH
    if _DISPATCH is None:
        from ggml_opencl import (  # noqa: F401 - the ops_* modules register their kernels
            _dispatch,
            ops_attention,
            ops_conv,
            ops_elementwise,
            ops_layout,
            ops_matmul,
            ops_movement,
            ops_norm,
            ops_recurrent,
            ops_reduce,
        )

        _DISPATCH = _dispatch
    return _DISPATCH


__all__ = [
    "OpenCLBackend",
    "OpenCLBuffer",
    "OpenCLBufferType",
    "OpenCLDevice",
    "OpenCLEvent",
    "OpenCLReg",
    "discover",
    "opencl_reg",
]

#: alignment of tensors inside a buffer (ggml's OpenCL backend uses 128; kernels need only element alignment)
ALIGNMENT: Final = 128
#: kernel sources, concatenated in this order into one program per device
KERNEL_FILES: Final = (
    "common.cl",
    "quants.cl",
    "elementwise.cl",
    "norm.cl",
    "attention.cl",
    "movement.cl",
    "matmul.cl",
    "layout.cl",
    "reduce.cl",
    "conv.cl",
    "recurrent.cl",
)


# ================================================================================================ checks


@dataclass
class Discovery:
    """The outcome of looking for OpenCL devices: usable ones, those left out (with why), or why there are none."""

    devices: list[tuple[DeviceInfo, Any]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    reason: str | None = None


def _selected(info: DeviceInfo, tokens: Sequence[str]) -> bool:
    """GGML_OPENCL_DEVICES: an integer token is a device index, anything else a case-insensitive name substring."""
    desc = info.description.lower()
    return any(int(t) == info.index if t.isdigit() else t.lower() in desc for t in tokens)


def discover(environ: Mapping[str, str]) -> Discovery:
    """Every device of every platform (honouring GGML_OPENCL_DEVICES); never raises."""
    out = Discovery()
    if _import_cl() is None:
        out.reason = _IMPORT_ERROR
        return out
    try:
        platforms = cl.get_platforms()
    except Exception as exc:  # noqa: BLE001 - pyopencl.Error (LogicError: PLATFORM_NOT_FOUND_KHR) or loader errors
        vendors = environ.get("OCL_ICD_VENDORS", "/etc/OpenCL/vendors")
        out.reason = f"no OpenCL platform (ICD loader found none in {vendors}): {type(exc).__name__}: {exc}"
        return out
    if not platforms:
        out.reason = "no OpenCL platform is installed (install an ICD, e.g. pocl-opencl-icd)"
        return out
    tokens = [t.strip() for t in environ.get("GGML_OPENCL_DEVICES", "").split(",") if t.strip()]
    index = 0
    for p_index, platform in enumerate(platforms):
        try:
            devs = platform.get_devices()
        except Exception as exc:  # noqa: BLE001 - DEVICE_NOT_FOUND on an empty platform
            out.skipped[platform.name.strip()] = f"no devices: {type(exc).__name__}: {exc}"
            continue
        for dev in devs:
            try:
                info = device_info(cl, dev, index, p_index, platform.name)
            except Exception as exc:  # noqa: BLE001
                out.skipped[f"device {index}"] = f"cannot read its properties: {type(exc).__name__}: {exc}"
                index += 1
                continue
            index += 1
            if tokens and not _selected(info, tokens):
                out.skipped[f"{info.index} {info.description}"] = "not selected by GGML_OPENCL_DEVICES"
                continue
            out.devices.append((info, dev))
    if not out.devices:
        if tokens and index:
            wanted = environ["GGML_OPENCL_DEVICES"]
            out.reason = f"GGML_OPENCL_DEVICES={wanted!r} selects none of the {index} devices found"
        elif not index:
            out.reason = "the OpenCL platforms have no devices"
    return out


# ================================================================================================ programs


def kernel_source() -> str:
    """All kernel sources of the package, concatenated."""
    folder = resources.files("ggml_opencl") / "kernels"
    return "\n".join(f"// ---- {name}\n" + (folder / name).read_text(encoding="utf-8") for name in KERNEL_FILES)


class ProgramCache:
    """Built programs, one per (context, device, options); building is the slow part (PoCL also caches on disk)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: dict[tuple[int, int, str], Any] = {}

    def get(self, context: Any, cl_device: Any, info: DeviceInfo, label: str = "") -> Any:
        """The program for this device, built on first use; a failure raises with the compiler's log. A build that
        takes more than a couple of seconds (not cached by the driver) says so on stderr while it runs."""
        opts = info.build_options()
        key = (context.int_ptr, cl_device.int_ptr, " ".join(opts))
        with self._lock:
            prog = self._built.get(key)
            if prog is None:
                note = f"ggml-opencl: building the OpenCL kernels for {label or info.description} (once: the driver "
                note += "caches them)"
                try:
                    with announced_if_slow(note):
                        prog = cl.Program(context, kernel_source()).build(options=opts, devices=[cl_device])
                except cl.Error as exc:
                    raise RuntimeError(f"{info.description}: the OpenCL kernels do not build: {exc}") from exc
                self._built[key] = prog
            return prog


# ================================================================================================ buffers


class OpenCLBufferType(BufferType):
    """``OpenCL<i>``: memory of one OpenCL device, at most the device's largest single allocation per buffer."""

    device: OpenCLDevice

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


# ================================================================================================ backend


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
        steps = []
        for node in graph.nodes:
            if node.is_view_op or node.op == GGMLOp.NONE or node.is_empty or not node.flags & TensorFlag.COMPUTE:
                continue
            try:
                steps.append((node, _ops().bind(self, node)))
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


class OpenCLDevice(Device):
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
        return (_DISPATCH or _ops()).supports(self.info, op)

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


# ================================================================================================ registration


class OpenCLReg(BackendReg):
    """The ``OpenCL`` registry: every OpenCL device on every platform, as selected by ``GGML_OPENCL_DEVICES``.

    When there are no devices (pyopencl missing, no ICD or platform, every device failing to build the
    kernels) :attr:`unavailable_reason` says why; reading it enumerates the devices first.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._reason: str | None = None
        self._environ = environ
        #: devices found but not exposed (filtered out or failing to build), with the reason
        self.skipped: dict[str, str] = {}
        super().__init__("OpenCL", description="OpenCL devices through pyopencl", priority=10)

    @property
    def unavailable_reason(self) -> str | None:
        """Why this registry has no devices (enumerating them first), or None."""
        if getattr(self, "_devices", None) is None and hasattr(self, "_lock"):
            try:
                self.devices  # noqa: B018 - enumeration records the reason
            except Exception as exc:  # noqa: BLE001 - a reason is shown, never raised
                self._reason = f"device enumeration failed: {type(exc).__name__}: {exc}"
        return self._reason

    @unavailable_reason.setter
    def unavailable_reason(self, value: str | None) -> None:
        self._reason = value

    def enumerate_devices(self) -> list[Device]:
        """Discover platforms and devices, build the kernels on each, name the survivors OpenCL0, OpenCL1…"""
        env = os.environ if self._environ is None else self._environ
        found: Discovery = discover(env)
        self.skipped = dict(found.skipped)
        programs = ProgramCache()
        contexts: dict[int, Any] = {}
        devices: list[Device] = []
        for info, cl_device in found.devices:
            name = f"OpenCL{len(devices)}"
            try:
                if info.platform_index not in contexts:
                    mine = [d for i, d in found.devices if i.platform_index == info.platform_index]
                    contexts[info.platform_index] = cl.Context(mine)
                dev = OpenCLDevice(name, info, cl_device, contexts[info.platform_index], programs)
                dev.program()
            except Exception as exc:  # noqa: BLE001 - one device failing must not hide the others
                self.skipped[info.description] = f"cannot build the kernels: {type(exc).__name__}: {exc}"
                continue
            devices.append(dev)
        if not devices:
            reason = found.reason or "no OpenCL device could be used"
            if self.skipped:
                reason += "; " + "; ".join(f"{k}: {v}" for k, v in self.skipped.items())
            self._reason = reason
        return devices

    def features(self) -> dict[str, str]:
        """pyopencl version and the devices left out (with why)."""
        out = {"pyopencl": getattr(cl, "VERSION_TEXT", "missing") if _import_cl() is not None else "missing"}
        for desc, why in self.skipped.items():
            out[f"skipped {desc}"] = why
        return out


_REG: OpenCLReg | None = None


def opencl_reg() -> OpenCLReg:
    """The process-wide OpenCL registry."""
    global _REG
    if _REG is None:
        _REG = OpenCLReg()
    return _REG


@hookimpl
def ggml_api_version() -> int:
    """This plugin speaks the current plugin API."""
    return API_VERSION


@hookimpl
def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
    """Register the OpenCL registry (it reports its own reason when there are no devices)."""
    register(opencl_reg())
