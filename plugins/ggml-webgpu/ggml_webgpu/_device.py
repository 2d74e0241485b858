"""The device and its backend: a wgpu adapter opened on first use, a stream per backend, events.

A graph is recorded into one command encoder and one compute pass: each node is one or a few dispatches (see
:mod:`ggml_webgpu.ops`), each with its parameters in its own 256-byte slice of one uniform buffer per graph; the
recorded passes, bind groups and parameters are cached per graph. All backends of a device share its queue, so
reads and writes are ordered after the work submitted before them.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from ggml_core import (
    Backend,
    BufferType,
    ComputeError,
    DeviceCaps,
    DeviceProps,
    DeviceType,
    Event,
    GGMLError,
    GGMLOp,
    Graph,
    Tensor,
    TensorError,
    TensorFlag,
)
from ggml_webgpu._adapters import AdapterInfo, Limits
from ggml_webgpu._buffers import (
    ALIGNMENT,
    StagingRing,
    WebGPUBuffer,
    WebGPUBufferDevice,
    WebGPUBufferType,
    WebGPUHostBufferType,
    storage_usage,
    usage,
)
from ggml_webgpu._f16 import probe_native_f16
from ggml_webgpu._shaders import N_WORDS, OP_WORD, PARAM_BYTES, SLOT_BINDINGS, PipelineCache, common_source
from ggml_webgpu._sync import WorkDone, WorkDoneToken

if TYPE_CHECKING:
    from ggml_webgpu.ops import Dispatch

__all__ = ["SHOWN_LIMITS", "DeviceOpenError", "WebGPUBackend", "WebGPUDevice", "WebGPUEvent"]

#: limits shown by ``ggml-core devices`` (and requested at their adapter maximum)
SHOWN_LIMITS: Final = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroups-per-dimension",
    "min-storage-buffer-offset-alignment",
    "min-uniform-buffer-offset-alignment",
)
#: what a device is opened with besides the two sizes (requested explicitly, so the limits are known before opening)
_DEFAULT_ALIGNMENT: Final = 256
_DEFAULT_MAX_GROUPS: Final = 65535


# ================================================================================================ backend


class WebGPUEvent(Event):
    """A point in a device's queue: ``onSubmittedWorkDone`` registered at :meth:`record` (see ``_sync``), so waiting
    waits for the work submitted before it, not for later submissions; :meth:`query` asks without blocking. With a
    wgpu-py whose native binding is missing, waiting maps a word of a device buffer (after every submission)."""

    def __init__(self, device: WebGPUDevice) -> None:
        super().__init__(device)
        self._recorded = False
        self._token: WorkDoneToken | None = None

    def record(self, backend: Backend) -> None:
        """Mark the work submitted to ``backend``'s queue so far."""
        if not isinstance(backend, WebGPUBackend):
            raise TypeError(f"{self.device.name}: a WebGPU event can only be recorded on a WebGPU backend")
        self._token = backend.device.work_done.mark()
        self._recorded = True

    def query(self) -> bool:
        """True when the recorded work is done (never blocks where the native callback is available)."""
        if not self._recorded:
            return True
        if self._token is None:  # the fallback cannot ask: wait
            self.synchronize()
            return True
        assert isinstance(self.device, WebGPUDevice)
        self.device.work_done.poll()
        return self._token.done

    def synchronize(self) -> None:
        """Block until the recorded work is done (a never-recorded event is complete)."""
        if self._recorded:
            assert isinstance(self.device, WebGPUDevice)
            self.device.work_done.wait(self._token)
            self._recorded, self._token = False, None


@dataclass
class _Plan:
    """A graph recorded for replay: pipelines, bind groups and 2-d workgroup counts, with the uniform buffer."""

    signature: tuple[object, ...]
    steps: list[tuple[Tensor, Any, Any, tuple[int, int]]]
    params: Any
    checked: bool


class WebGPUBackend(Backend):
    """A stream on one WebGPU device: each graph is one command encoder with one compute pass, submitted at once.

    Kernels that can meet bad indices (GET_ROWS, SET_ROWS, MUL_MAT_ID) record an error code in a small buffer, which
    :meth:`synchronize` reads and raises as a :class:`ComputeError` naming the node.
    """

    device: WebGPUDevice

    def __init__(self, device: WebGPUDevice) -> None:
        super().__init__(device)
        self.gpu = device.gpu
        self.queue = device.queue
        self.limits = device.limits
        self._pipelines = device.pipelines
        self._scratch: dict[str, Any] = {}
        self._plans: dict[int, _Plan] = {}
        self._checked_nodes: dict[int, Tensor] = {}
        self._next_code = 0
        self._check_errors = False
        #: fuse NORM/RMS_NORM/L2_NORM with the MUL consuming it into one dispatch (``GGML_WEBGPU_FUSION=0``: off)
        self.fusion = os.environ.get("GGML_WEBGPU_FUSION", "1").strip() != "0"
        #: norm + MUL pairs fused by the plans made so far
        self.fused = 0
        self._dummy = self.gpu.create_buffer(size=16, usage=storage_usage())
        self.err_buf = self.gpu.create_buffer(size=16, usage=storage_usage())

    # ---- what binders use ---------------------------------------------------------------------------------

    def owns(self, t: Tensor) -> Any:
        """The GPU buffer of ``t`` when it lives on this device."""
        buf = t.buffer
        return buf.gpu if isinstance(buf, WebGPUBuffer) and buf.device.gpu is self.gpu else None

    def scratch(self, slot_name: str, nbytes: int) -> Any:
        """A device buffer of at least ``nbytes`` for temporaries; a larger one replaces it (old plans keep theirs)."""
        buf = self._scratch.get(slot_name)
        if buf is None or buf.size < nbytes:
            buf = self._scratch[slot_name] = self.gpu.create_buffer(
                size=max(16, -(-nbytes // 4) * 4), usage=storage_usage()
            )
        return buf

    def error_code(self, node: Tensor) -> int:
        """The code a kernel reports for a bad index in ``node`` (read back by :meth:`synchronize`)."""
        self._next_code += 1
        self._checked_nodes[self._next_code] = node
        return self._next_code

    # ---- copies -------------------------------------------------------------------------------------------

    def cpy_tensor_async(self, src_backend: Backend, src: Tensor, dst: Tensor) -> bool:
        """Copy on the device when both tensors live on it (ordered in the shared queue); False otherwise."""
        if self.owns(src) is None or self.owns(dst) is None:
            return False
        assert isinstance(dst.buffer, WebGPUBuffer)
        return dst.buffer.cpy_tensor(src, dst)

    def synchronize(self) -> None:
        """Wait for the queue; raise the first error a kernel reported (a bad row index...)."""
        if self._check_errors:
            self._check_errors = False
            err = int(np.frombuffer(self.queue.read_buffer(self.err_buf, 0, 4), dtype=np.uint32)[0])
            if err:
                self.queue.write_buffer(self.err_buf, 0, np.zeros(4, np.uint32))
                node = self._checked_nodes.get(err)
                raise ComputeError(node, self.name, "an index is out of range (the bad rows were left unwritten/zero)")
        else:
            self.device.wait_idle()

    # ---- compute ------------------------------------------------------------------------------------------

    @staticmethod
    def _signature(graph: Graph) -> tuple[object, ...]:
        return tuple(
            (
                t.id,
                t.op,
                t.ne,
                t.nb,
                getattr(t.buffer, "serial", id(t.buffer)),
                t.data_offset,
                *(s.id if s is not None else 0 for s in t.src[:5]),
            )
            for t in graph.nodes
        )

    def _plan(self, graph: Graph) -> _Plan:
        sig = self._signature(graph)
        cached = self._plans.get(graph.uid)
        if cached is not None and cached.signature == sig:
            return cached
        from ggml_webgpu.ops import KERNELS  # the op families load on the first bind or support question
        from ggml_webgpu.ops.rows import bind_norm_mul, fusable_norm_mul

        n_codes = self._next_code
        work: list[tuple[Tensor, Dispatch]] = []
        nodes = [
            n
            for n in graph.nodes
            if not (n.is_view_op or n.op == GGMLOp.NONE or n.is_empty or not n.flags & TensorFlag.COMPUTE)
        ]
        i = 0
        while i < len(nodes):
            node = nodes[i]
            nxt = nodes[i + 1] if i + 1 < len(nodes) else None
            try:
                if self.fusion and nxt is not None and fusable_norm_mul(self.limits, node, nxt, graph.use_counts):
                    work += [(nxt, d) for d in bind_norm_mul(self, node, nxt)]  # one dispatch for both
                    self.fused += 1
                    i += 2
                    continue
                if not KERNELS.supports(node, self.limits):
                    types = ", ".join(s.type.traits.name for s in node.src if s is not None)
                    raise NotImplementedError(
                        f"{self.name} has no kernel for {node.op_desc} with these operands ({types} -> "
                        f"{node.type.traits.name}); let the scheduler place it on another device"
                    )
                work += [(node, d) for d in KERNELS.get(node)(self, node)]
            except (NotImplementedError, TensorError) as exc:
                raise ComputeError(node, self.name, str(exc)) from exc
            i += 1
        params = self.gpu.create_buffer(size=max(1, len(work)) * PARAM_BYTES, usage=usage("UNIFORM", "COPY_DST"))
        host = np.zeros((max(1, len(work)), N_WORDS), dtype=np.uint32)
        steps = []
        for i, (node, d) in enumerate(work):
            for s_i, s in enumerate(d.slots):
                if s is not None:
                    host[i, 9 * s_i : 9 * s_i + 9] = s.words
            host[i, OP_WORD : OP_WORD + len(d.op)] = np.array(d.op, dtype=np.int64).astype(np.uint32)
            entries = [{"binding": 0, "resource": {"buffer": params, "offset": i * PARAM_BYTES, "size": PARAM_BYTES}}]
            slots = (*d.slots, *(None,) * (len(SLOT_BINDINGS) - len(d.slots)))
            for binding, s in zip(SLOT_BINDINGS, slots, strict=True):
                res = (
                    {"buffer": s.buffer, "offset": s.offset, "size": s.size}
                    if s is not None
                    else {"buffer": self._dummy, "offset": 0, "size": 16}
                )
                entries.append({"binding": binding, "resource": res})
            entries.append({"binding": 5, "resource": {"buffer": self.err_buf, "offset": 0, "size": 16}})
            group = self.gpu.create_bind_group(layout=self._pipelines.layout, entries=entries)
            gx = min(d.groups, self.limits.max_groups)
            try:
                pipe = self._pipelines.get(d.kernel)
            except Exception as exc:
                raise ComputeError(node, self.name, str(exc)) from exc
            steps.append((node, pipe, group, (gx, -(-d.groups // gx))))
        self.queue.write_buffer(params, 0, host)
        if len(self._plans) > 64:  # forget old graphs (and the nodes their error codes name)
            self._plans.clear()
            self._checked_nodes = {c: n for c, n in self._checked_nodes.items() if c > n_codes}
        plan = _Plan(sig, steps, params, self._next_code > n_codes)
        self._plans[graph.uid] = plan
        return plan

    def graph_compute_async(self, graph: Graph) -> None:
        """Record every node's dispatches into one compute pass and submit it; returns before the work is done."""
        plan = self._plan(graph)
        if not plan.steps:
            return
        enc = self.gpu.create_command_encoder()
        cpass = enc.begin_compute_pass()
        for node, pipe, group, (gx, gy) in plan.steps:
            if self.abort_callback is not None and self.abort_callback():
                raise ComputeError(node, self.name, "aborted by the abort callback")
            cpass.set_pipeline(pipe)
            cpass.set_bind_group(0, group)
            cpass.dispatch_workgroups(gx, gy)
        cpass.end()
        try:
            self.queue.submit([enc.finish()])
        except Exception as exc:
            raise ComputeError(plan.steps[0][0], self.name, f"wgpu refused the graph: {exc}") from exc
        self._check_errors = self._check_errors or plan.checked

    def free(self) -> None:
        """Wait for the queue and release the temporaries."""
        self.device.wait_idle()
        self._plans.clear()
        self._scratch.clear()


# ================================================================================================ device


def _host_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


class DeviceOpenError(GGMLError, RuntimeError):
    """A WebGPU device could not be opened (``requestDevice``) or cannot compile WGSL; names the device and why."""

    def __init__(self, device: str, reason: str) -> None:
        super().__init__(f"{device}: cannot be opened: {reason}")
        self.device = device
        self.reason = reason


@dataclass
class _Opened:
    """What opening an adapter gives: the GPU device, its queue, pipelines, staging ring and work-done waits."""

    gpu: Any
    queue: Any
    pipelines: PipelineCache
    staging: StagingRing
    work_done: WorkDone


class WebGPUDevice(WebGPUBufferDevice):
    """One wgpu adapter as a GPU device. The adapter is opened (``requestDevice``, the kernels' probe) on first
    use, not when the devices are listed: ``ggml-core devices`` reads only the adapter's properties."""

    caps = DeviceCaps(asynchronous=True, host_buffer=True, buffer_from_host_ptr=False, events=True)

    def __init__(self, name: str, info: AdapterInfo, adapter: Any, max_binding: int | None = None) -> None:
        super().__init__(name, info.description, device_id=f"wgpu:{info.index}")
        self.info = info
        self.type = info.type
        self._adapter = adapter
        lim = info.limits
        binding = int(lim["max-storage-buffer-binding-size"])
        #: what the device is opened with: the adapter's largest buffer and binding, WebGPU's default alignment
        #: and workgroup count (known without opening it)
        self.requested_limits = {
            "max-buffer-size": int(lim["max-buffer-size"]),
            "max-storage-buffer-binding-size": binding,
            "min-storage-buffer-offset-alignment": max(
                _DEFAULT_ALIGNMENT, int(lim.get("min-storage-buffer-offset-alignment", 0))
            ),
            "max-compute-workgroups-per-dimension": min(
                _DEFAULT_MAX_GROUPS, int(lim.get("max-compute-workgroups-per-dimension", _DEFAULT_MAX_GROUPS))
            ),
        }
        self.limits = Limits(
            max_binding=min(binding, max_binding) if max_binding else binding,
            offset_alignment=self.requested_limits["min-storage-buffer-offset-alignment"],
            max_groups=self.requested_limits["max-compute-workgroups-per-dimension"],
        )
        #: bytes allocated in this device's buffers (wgpu has no free-memory query)
        self.allocated = 0
        self._opened: _Opened | None = None
        #: how f16 storage is loaded: decided when the device is opened (``_f16``)
        self.f16_loads = "decided when the device is opened"
        self._open_lock = threading.Lock()
        self._open_error: str | None = None
        self._buft = WebGPUBufferType(name, self, alignment=ALIGNMENT, max_size=int(lim["max-buffer-size"]))
        self._host_buft = WebGPUHostBufferType(self)

    # ---- opening ------------------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """Whether the adapter has been opened (by a backend, a buffer or a wait)."""
        return self._opened is not None

    def _open(self) -> _Opened:
        opened = self._opened
        if opened is not None:
            return opened
        with self._open_lock:
            if self._open_error is not None:  # opened once and failed: the same error, without asking again
                raise DeviceOpenError(self.name, self._open_error)
            if self._opened is None:
                feats = [f for f in ("shader-f16",) if f in self.info.features]
                try:
                    gpu = self._adapter.request_device_sync(
                        required_features=feats, required_limits=self.requested_limits
                    )
                    native, self.f16_loads = False, "integer (GGML_WEBGPU_F16=0)"
                    if os.environ.get("GGML_WEBGPU_F16", "1").strip() != "0":
                        native, self.f16_loads = probe_native_f16(gpu, common_source())
                    pipelines = PipelineCache(gpu, native)
                    pipelines.probe()
                except Exception as exc:
                    self._open_error = f"{type(exc).__name__}: {exc}"
                    raise DeviceOpenError(self.name, self._open_error) from exc
                fence = gpu.create_buffer(size=4, usage=storage_usage())
                self._opened = _Opened(gpu, gpu.queue, pipelines, StagingRing(gpu), WorkDone(gpu, fence))
            return self._opened

    @property
    def gpu(self) -> Any:
        """The wgpu ``GPUDevice`` (opening the adapter on first use)."""
        return self._open().gpu

    @property
    def queue(self) -> Any:
        """The device's queue, shared by all its backends."""
        return self._open().queue

    @property
    def pipelines(self) -> PipelineCache:
        """The device's compiled kernels."""
        return self._open().pipelines

    @property
    def staging(self) -> StagingRing:
        """The mapped upload buffers every large write goes through."""
        return self._open().staging

    @property
    def work_done(self) -> WorkDone:
        """Work-done notifications of the queue (events, waits)."""
        return self._open().work_done

    def wait_idle(self) -> None:
        """Block until every submission to the queue has finished (nothing to wait for when never opened)."""
        if self._opened is not None:
            self._opened.work_done.wait_all()

    def memory(self) -> tuple[int, int]:
        """(total minus what this process allocated, total): host memory, as wgpu has no memory query."""
        total = _host_memory()
        return max(0, total - self.allocated), total

    def props(self) -> DeviceProps:
        """Props, with the adapter's API, type, driver, features and limits under ``extra``."""
        p = super().props()
        extra: dict[str, Any] = {
            "api": self.info.backend,
            "adapter type": self.info.adapter_type,
            "driver": self.info.driver,
            "features": ", ".join(self.info.features),
            **{k: self.info.limits[k] for k in SHOWN_LIMITS if k in self.info.limits},
            "binding window": self.limits.max_binding,
            "opened": self.is_open,
            "f16 loads": self.f16_loads,
        }
        p.extra.update(extra)
        return p

    def buffer_type(self) -> BufferType:
        """Device memory."""
        return self._buft

    def host_buffer_type(self) -> BufferType:
        """Host memory whose uploads go through the staging ring (``WebGPU<i>_Host``)."""
        return self._host_buft

    def init_backend(self, params: str | None = None) -> Backend:
        """A new stream on this device (sharing the device's queue)."""
        return WebGPUBackend(self)

    def supports_op(self, op: Tensor) -> bool:
        """Ops, types, layouts and sizes with a WGSL kernel that passes the conformance comparison with the CPU."""
        from ggml_webgpu.ops import KERNELS  # the op families load on the first bind or support question

        return KERNELS.supports(op, self.limits)

    def supports_buft(self, buft: BufferType) -> bool:
        """Only this device's own memory."""
        return buft is self._buft

    def offload_op(self, op: Tensor) -> bool:
        """Large matrix products are worth moving to a real GPU; never to a CPU adapter."""
        if self.type not in (DeviceType.GPU, DeviceType.IGPU) or op.op != GGMLOp.MUL_MAT:
            return False
        b = op.src[1]
        return b is not None and b.ne[1] * b.ne[2] * b.ne[3] >= 32

    def event_new(self) -> Event:
        """A new event."""
        return WebGPUEvent(self)
