"""The partial-op test device: checks → kernels → buffers → backend and events → device."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

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
    DeviceType,
    Event,
    GGMLOp,
    GGMLType,
    Graph,
    Tensor,
    TensorFlag,
    hookimpl,
)
from ggml_core.ops import VIEW_OPS

__all__ = [
    "DEFAULT_OPS",
    "SubsetBackend",
    "SubsetBuffer",
    "SubsetBufferType",
    "SubsetDevice",
    "SubsetEvent",
    "SubsetPlugin",
]

#: the ops the device computes unless told otherwise
DEFAULT_OPS = frozenset({GGMLOp.MUL_MAT, GGMLOp.ADD, GGMLOp.MUL, GGMLOp.RMS_NORM})

_F32 = GGMLType.F32


# ================================================================================================ checks


def _op_ok(t: Tensor) -> bool:
    """Types and layouts the kernels below handle."""
    a, b = t.src[0], t.src[1]
    if t.type != _F32 or not t.is_contiguous or a is None:
        return False
    if t.op == GGMLOp.MUL_MAT:
        return b is not None and a.type in (_F32, GGMLType.F16) and b.type == _F32
    if t.op in (GGMLOp.ADD, GGMLOp.MUL):
        return b is not None and a.type == _F32 and b.type == _F32 and b.can_repeat_to(a)
    if t.op == GGMLOp.RMS_NORM:
        return a.type == _F32
    if t.op == GGMLOp.MUL_MAT_ID:  # experts [K, N, n_expert], rows [K, n_b1, n_tokens], ids [n_used, n_tokens]
        ids = t.src[2]
        return b is not None and a.type in (_F32, GGMLType.F16) and b.type == _F32 and ids is not None
    if t.op == GGMLOp.SET_ROWS:  # ggml's operand order: rows, indices, destination; 2-D f32 only
        dst = t.src[2]
        flat = all(x is not None and x.ne[2] == x.ne[3] == 1 for x in (a, b, dst))
        return flat and b is not None and b.type == GGMLType.I64 and dst is not None and dst.type == _F32
    return False


def batch_size(t: Tensor) -> int:
    """ggml-cuda's ``get_op_batch_size``: what ``offload_op`` compares with the minimum batch."""
    if t.op == GGMLOp.MUL_MAT:
        return t.ne[1]
    if t.op in (GGMLOp.MUL_MAT_ID, GGMLOp.ROPE, GGMLOp.ROPE_BACK):
        return t.ne[2]
    if t.op == GGMLOp.GET_ROWS:
        return 0
    return t.nrows


# ================================================================================================ kernels


@dataclass(frozen=True)
class _Ref:
    """A tensor's memory captured when work is queued (what a real device would bind then)."""

    t: Tensor
    buffer: Buffer
    offset: int


def _ref(t: Tensor) -> _Ref:
    if t.buffer is None or t.data_offset is None:
        raise ComputeError(t, "Sub", "operand has no memory")
    return _Ref(t, t.buffer, t.data_offset)


def _load(r: _Ref) -> np.ndarray:
    """The values of a (possibly strided) f32/f16 tensor as float32 of numpy shape (ne3, ne2, ne1, ne0)."""
    t = r.t
    raw = r.buffer.read(r.offset, t.nbytes)
    dtype = np.float16 if t.type == GGMLType.F16 else np.float32
    shape = (t.ne[3], t.ne[2], t.ne[1], t.ne[0])
    strides = (t.nb[3], t.nb[2], t.nb[1], t.nb[0])
    return np.ndarray(shape, dtype=dtype, buffer=raw, strides=strides).astype(np.float32)


def _store(r: _Ref, values: np.ndarray) -> None:
    r.buffer.write(r.offset, np.ascontiguousarray(values, dtype=np.float32).tobytes())


def _tile(b: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.tile(b, tuple(n // m for n, m in zip(shape, b.shape, strict=True)))


def _set_rows_kernel(node: Tensor) -> Callable[[], None]:
    """SET_ROWS: row i of src0 into row idx[i] of the destination (the node is a view of it)."""
    dst, rows, idx = _ref(node), _ref(node.src[0]), _ref(node.src[1])  # type: ignore[arg-type]

    def run() -> None:
        vals = _load(rows).reshape(-1, node.ne[0])
        at = np.frombuffer(idx.buffer.read(idx.offset, idx.t.nbytes), dtype=np.int64)
        if at.size != vals.shape[0] or at.min(initial=0) < 0 or at.max(initial=0) >= node.ne[1]:
            raise ComputeError(node, "Sub", "SET_ROWS index outside the destination")
        for i, r in enumerate(at):
            dst.buffer.write(dst.offset + int(r) * node.nb[1], vals[i].astype(np.float32).tobytes())

    return run


def _mul_mat_id_kernel(node: Tensor) -> Callable[[], None]:
    """MUL_MAT_ID: out[t, k] = experts[ids[t, k]] · rows[t, k mod n_b1] (only the selected experts are read)."""
    dst, ex, rows, ids = _ref(node), _ref(node.src[0]), _ref(node.src[1]), _ref(node.src[2])  # type: ignore[arg-type]

    def run() -> None:
        it = ids.t
        raw = np.frombuffer(ids.buffer.read(ids.offset, it.nbytes), dtype=np.int32)
        sel = np.lib.stride_tricks.as_strided(raw, (it.ne[1], it.ne[0]), (it.nb[1], it.nb[0]))
        y = _load(rows)[0]  # (n_tokens, n_b1, K)
        et = ex.t
        per = et.nb[2]
        out = np.empty((it.ne[1], it.ne[0], node.ne[0]), dtype=np.float32)
        for e in np.unique(sel):
            w = _load(_Ref(_expert_view(et, int(e)), ex.buffer, ex.offset + int(e) * per))[0, 0]  # (N, K)
            tt, kk = np.nonzero(sel == e)
            out[tt, kk] = (y[tt, kk % y.shape[1]] @ w.T.astype(np.float64)).astype(np.float32)
        _store(dst, out)

    return run


def _expert_view(t: Tensor, e: int) -> Tensor:
    """A stand-in describing expert ``e`` of ``t`` ([K, N]) for :func:`_load`."""
    v = Tensor(None, t.type, (t.ne[0], t.ne[1], 1, 1), nb=(t.nb[0], t.nb[1], t.nb[2], t.nb[3]), name=f"{t.name}[{e}]")
    return v


def _kernel(node: Tensor) -> Callable[[], None]:
    """Bind ``node`` now (its operands' memory as it is at queue time); the thunk computes it."""
    if node.op == GGMLOp.SET_ROWS:
        return _set_rows_kernel(node)
    if node.op == GGMLOp.MUL_MAT_ID:
        return _mul_mat_id_kernel(node)
    dst = _ref(node)
    a = _ref(node.src[0])  # type: ignore[arg-type]
    b = _ref(node.src[1]) if node.src[1] is not None else None
    op = node.op
    eps = node.op_param_f32(0)

    def run() -> None:
        x = _load(a)
        if op == GGMLOp.MUL_MAT:
            assert b is not None
            y = _load(b)
            r2, r3 = y.shape[1] // x.shape[1], y.shape[0] // x.shape[0]
            x = np.repeat(np.repeat(x, r2, axis=1), r3, axis=0)
            out = np.matmul(y, np.swapaxes(x, -1, -2))
        elif op in (GGMLOp.ADD, GGMLOp.MUL):
            assert b is not None
            y = _tile(_load(b), x.shape)
            out = x + y if op == GGMLOp.ADD else x * y
        else:  # RMS_NORM
            x64 = x.astype(np.float64)
            out = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
        _store(dst, out)

    return run


# ================================================================================================ buffers


class SubsetBuffer(Buffer):
    """Private device memory: a numpy array the host never sees (``host_array()`` stays None)."""

    def __init__(self, buffer_type: SubsetBufferType, size: int) -> None:
        super().__init__(buffer_type, size)
        self._mem = np.zeros(size, dtype=np.uint8)

    def _write(self, offset: int, data: memoryview) -> None:
        self._mem[offset : offset + data.nbytes] = np.frombuffer(data, dtype=np.uint8)

    def _read(self, offset: int, out: memoryview) -> None:
        np.frombuffer(out, dtype=np.uint8)[:] = self._mem[offset : offset + out.nbytes]

    def _fill(self, offset: int, size: int, value: int) -> None:
        self._mem[offset : offset + size] = value

    def _copy_from(self, src: Buffer, src_offset: int, dst_offset: int, size: int) -> bool:
        if not isinstance(src, SubsetBuffer):
            return False
        self._mem[dst_offset : dst_offset + size] = src._mem[src_offset : src_offset + size]
        self.buffer_type.device.stats["d2d_copies"] += 1  # type: ignore[union-attr]
        return True

    def _free(self) -> None:
        dev = self.buffer_type.device
        assert isinstance(dev, SubsetDevice)
        dev.allocated -= self.size
        self._mem = np.zeros(0, dtype=np.uint8)


class SubsetBufferType(BufferType):
    """The device's memory; honours the device's ``capacity``."""

    def _alloc(self, size: int) -> Buffer:
        dev = self.device
        assert isinstance(dev, SubsetDevice)
        if dev.capacity is not None and dev.allocated + size > dev.capacity:
            raise AllocationError(dev.name, size, dev.capacity - dev.allocated, "out of device memory")
        dev.allocated += size
        return SubsetBuffer(self, size)


# ================================================================================================ backend and events


class SubsetBackend(Backend):
    """A stream. Synchronous devices run work at once; asynchronous ones queue it until synchronised."""

    def __init__(self, device: SubsetDevice) -> None:
        super().__init__(device)
        self.dev = device
        self._queue: deque[tuple[int, Callable[[], None]]] = deque()
        self._enqueued = 0

    def _submit(self, fn: Callable[[], None]) -> None:
        self._enqueued += 1
        if self.dev.asynchronous:
            self._queue.append((self._enqueued, fn))
        else:
            fn()

    def flush(self, until: int | None = None) -> None:
        """Run queued work up to position ``until`` (all by default)."""
        while self._queue and (until is None or self._queue[0][0] <= until):
            _, fn = self._queue.popleft()
            fn()

    def synchronize(self) -> None:
        """Run everything queued."""
        self.dev.stats["syncs"] += 1
        self.flush()

    def set_tensor_async(self, t: Tensor, data: memoryview | bytes, offset: int = 0) -> None:
        """Queue a host-to-device write (reads ``data`` when it runs)."""
        buf = t.buffer
        assert buf is not None
        mv = memoryview(data)
        self._submit(lambda: buf.set_tensor(t, mv, offset))

    def get_tensor_async(self, t: Tensor, out: memoryview, offset: int = 0) -> None:
        """Queue a device-to-host read into ``out``."""
        buf = t.buffer
        assert buf is not None
        self._submit(lambda: buf.get_tensor(t, out, offset))

    def cpy_tensor_async(self, src_backend: Backend, src: Tensor, dst: Tensor) -> bool:
        """Device-to-device copies only (as ggml-cuda): the source stream is waited for, then the copy queued."""
        if not isinstance(src.buffer, SubsetBuffer) or not isinstance(dst.buffer, SubsetBuffer):
            return False
        src_backend.synchronize()
        self.dev.stats["async_copies"] += 1
        dbuf = dst.buffer
        self._submit(lambda: dbuf.cpy_tensor(src, dst))
        return True

    def graph_compute_async(self, graph: Graph) -> None:
        """Bind every computed node now, run (or queue) the kernels in order."""
        thunks = []
        for node in graph.nodes:
            if node.op in VIEW_OPS or node.op == GGMLOp.NONE or not node.flags & TensorFlag.COMPUTE:
                continue
            if node.op not in self.dev.ops or not _op_ok(node):
                raise ComputeError(node, self.name, f"op {node.op_desc} is not supported by this device")
            thunks.append((node, _kernel(node)))
        for node, fn in thunks:
            self._submit(self._guarded(node, fn))

    def _guarded(self, node: Tensor, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            if node.name in self.dev.fail_on:
                raise ComputeError(node, self.name, "injected device fault")
            fn()
            self.dev.stats["computes"] += 1
            self.dev.computed.append(node.name)

        return run


class SubsetEvent(Event):
    """A marker in a stream: synchronising runs the stream up to it; waiting does the same (host wait)."""

    def __init__(self, device: SubsetDevice) -> None:
        super().__init__(device)
        self._backend: SubsetBackend | None = None
        self._mark = 0

    def record(self, backend: Backend) -> None:
        """Remember the current end of ``backend``'s queue."""
        assert isinstance(backend, SubsetBackend)
        self._backend = backend
        self._mark = backend._enqueued
        backend.dev.stats["event_records"] += 1

    def synchronize(self) -> None:
        """Run the recorded stream up to the mark."""
        if self._backend is not None:
            self._backend.flush(self._mark)

    def wait(self, backend: Backend) -> None:
        """Order ``backend`` after the mark (simulated by running the recorded stream up to it)."""
        assert isinstance(self.device, SubsetDevice)
        self.device.stats["event_waits"] += 1
        self.synchronize()


# ================================================================================================ device


class SubsetDevice(Device):
    """A GPU-like device with private memory that computes only ``ops``."""

    type = DeviceType.GPU

    def __init__(
        self,
        name: str = "Sub0",
        ops: Iterable[GGMLOp] = DEFAULT_OPS,
        *,
        asynchronous: bool = False,
        capacity: int | None = None,
        fail_on: Iterable[str] = (),
        offload_min_batch: int = 32,
        alignment: int = 128,
        max_size: int = 2**62,
    ) -> None:
        super().__init__(name, f"ggml-core test device: {', '.join(sorted(o.name for o in ops))} in private memory")
        self.ops = frozenset(ops)
        self.asynchronous = asynchronous
        self.caps = DeviceCaps(asynchronous=asynchronous, events=asynchronous)
        self.capacity = capacity
        self.allocated = 0
        self.fail_on = set(fail_on)
        self.offload_min_batch = offload_min_batch
        self._buft = SubsetBufferType(name, self, alignment=alignment, max_size=max_size, is_host=False)
        self.stats: dict[str, int] = dict.fromkeys(
            ("computes", "syncs", "async_copies", "d2d_copies", "event_records", "event_waits", "events"), 0
        )
        #: names of the nodes computed here, in order
        self.computed: list[str] = []

    def memory(self) -> tuple[int, int]:
        """(free, total) bytes."""
        # without a capacity: "plenty" (64 GiB, well past --fit's default 1 GiB margin)
        total = self.capacity if self.capacity is not None else 1 << 36
        return total - self.allocated, total

    def buffer_type(self) -> BufferType:
        """The private memory."""
        return self._buft

    def init_backend(self, params: str | None = None) -> Backend:
        """A new stream."""
        return SubsetBackend(self)

    def supports_op(self, op: Tensor) -> bool:
        """Views and leafs everywhere; compute ops from ``ops`` in the types the kernels handle."""
        if op.op == GGMLOp.NONE or op.op in VIEW_OPS:
            return True
        return op.op in self.ops and _op_ok(op)

    def supports_buft(self, buft: BufferType) -> bool:
        """Only its own memory."""
        return buft is self._buft

    def offload_op(self, op: Tensor) -> bool:
        """Worth running here despite host weights from ``offload_min_batch`` rows on (ggml-cuda's rule)."""
        return batch_size(op) >= self.offload_min_batch

    def event_new(self) -> Event | None:
        """Events on asynchronous devices."""
        if not self.asynchronous:
            return None
        self.stats["events"] += 1
        return SubsetEvent(self)


class SubsetPlugin:
    """A plugin registering ``devices`` as one backend: ``get_registry().register_plugin(SubsetPlugin(devs), name)``."""

    def __init__(self, devices: list[SubsetDevice], description: str = "subset test devices") -> None:
        self.devices, self.description = devices, description

    @hookimpl
    def ggml_api_version(self) -> int:
        return API_VERSION

    @hookimpl
    def ggml_register_backends(self, register: Callable[[BackendReg], None]) -> None:
        register(BackendReg(f"Sub[{self.devices[0].name}]", self.devices, description=self.description))
