"""The ggml backend object model: BackendReg → Device → BufferType → Buffer → tensor, plus Backend and Event.

A plugin subclasses these. Each class has a few *required* hooks (``_alloc``, ``_write``, ``_read``,
``graph_compute_async``, ...) that raise ``NotImplementedError("need …")`` until implemented, and optional ones
with working defaults. Public methods do the argument and bounds checking once, here, so that no plugin can be
asked to read or write outside a buffer.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from ggml_core._errors import (
    AllocationError,
    BufferFreedError,
    GGMLError,
    GraphInUseError,
    OutOfBoundsError,
    TensorError,
)

if TYPE_CHECKING:
    from ggml_core._graph import Graph
    from ggml_core._tensor import Tensor

__all__ = [
    "API_VERSION",
    "Backend",
    "BackendReg",
    "Buffer",
    "BufferType",
    "BufferUsage",
    "Device",
    "DeviceCaps",
    "DeviceProps",
    "DeviceType",
    "Event",
    "buffer_of",
]

#: the plugin API version of this ggml-core; a plugin declaring another one is not loaded
API_VERSION: Final = 1

#: ggml's SIZE_MAX stand-in for "no limit"
_NO_LIMIT: Final = 2**63 - 1
#: most devices one registry may enumerate (the registry records a longer answer as a problem)
DEVICES_MAX: Final = 256


class DeviceType(enum.IntEnum):
    """``enum ggml_backend_dev_type``."""

    CPU = 0  #: the host CPU
    GPU = 1  #: a device with its own memory
    IGPU = 2  #: a device using host memory
    ACCEL = 3  #: an accelerator used together with the CPU (BLAS, AMX)


class BufferUsage(enum.IntEnum):
    """``enum ggml_backend_buffer_usage``: what a buffer holds; WEIGHTS steers the scheduler's placement."""

    ANY = 0
    WEIGHTS = 1
    COMPUTE = 2


@dataclass(frozen=True)
class DeviceCaps:
    """``ggml_backend_dev_caps``."""

    #: the backend runs copies and graphs asynchronously (``async`` in ggml)
    asynchronous: bool = False
    #: the device offers a pinned host buffer type for faster uploads
    host_buffer: bool = False
    #: the device can wrap existing host memory (mmap'd weights) without copying
    buffer_from_host_ptr: bool = False
    #: the device supports events for synchronisation between streams
    events: bool = False


@dataclass(frozen=True)
class DeviceProps:
    """``ggml_backend_dev_props``: what ``ggml-core devices`` shows."""

    name: str
    description: str
    memory_free: int
    memory_total: int
    type: DeviceType
    device_id: str | None
    caps: DeviceCaps
    extra: dict[str, Any] = field(default_factory=dict)


# ================================================================================================ buffer types


class BufferType:
    """A kind of memory on a device: alignment, size limits and how to allocate it.

    Required hook: :meth:`_alloc`. Optional: :meth:`alloc_size` (padding), ``max_size``, ``is_host``.
    """

    def __init__(
        self, name: str, device: Device | None, *, alignment: int = 32, max_size: int = _NO_LIMIT, is_host: bool = False
    ) -> None:
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"buffer type {name!r}: alignment must be a power of two, got {alignment}")
        self.name = name
        self.device = device
        self.alignment = alignment
        self.max_size = max_size
        self.is_host = is_host

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def alloc_size(self, tensor: Tensor) -> int:
        """Bytes to reserve for ``tensor`` (at least ``tensor.nbytes``; override to add padding)."""
        return tensor.nbytes

    def alloc_buffer(self, size: int) -> Buffer:
        """Allocate a buffer of ``size`` bytes (0 gives an empty buffer).

        The plugin's :meth:`_alloc` is checked here: any exception it raises other than the core's own becomes an
        :class:`AllocationError` naming the buffer type, and so does an answer that is not a buffer of at least
        ``size`` bytes.
        """
        if size < 0:
            raise ValueError(f"buffer type {self.name!r}: negative size {size}")
        dev = getattr(self.device, "name", None) or self.name
        if size > self.max_size:
            raise AllocationError(dev, size, reason=f"over the buffer type's maximum of {self.max_size} bytes")
        try:
            buf = self._alloc(size)
        except GGMLError:
            raise
        except Exception as exc:
            raise AllocationError(
                dev, size, reason=f"buffer type {self.name!r}: _alloc raised {type(exc).__name__}: {exc}"
            ) from exc
        got = getattr(buf, "size", None)
        if not isinstance(buf, Buffer) or isinstance(got, bool) or not isinstance(got, int) or got < size:
            what = f"a {got}-byte buffer" if isinstance(buf, Buffer) else f"{type(buf).__name__} {buf!r:.60}"
            raise AllocationError(dev, size, reason=f"buffer type {self.name!r}: _alloc returned {what}")
        return buf

    def _alloc(self, size: int) -> Buffer:
        raise NotImplementedError("need _alloc")


# ================================================================================================ buffers


class Buffer:
    """A block of device memory of ``size`` bytes; tensors are bound to it at byte offsets.

    Required hooks: :meth:`_write` and :meth:`_read`. Optional: :meth:`_write_2d`, :meth:`_read_2d` (strided
    rows; the defaults go row by row through the 1-D hooks), :meth:`_fill`, :meth:`_copy_from`,
    :meth:`_free`, :meth:`host_array`, :meth:`init_tensor`. Every public method checks bounds first.
    """

    def __init__(self, buffer_type: BufferType, size: int) -> None:
        self.buffer_type = buffer_type
        self.size = size
        self.usage = BufferUsage.ANY
        self.freed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.buffer_type.name!r}, {self.size} bytes, {self.usage.name})"

    @property
    def name(self) -> str:
        """The buffer type's name."""
        return self.buffer_type.name

    @property
    def is_host(self) -> bool:
        """True when the memory is host memory with ggml's standard layout."""
        return self.buffer_type.is_host

    def set_usage(self, usage: BufferUsage) -> None:
        """Declare what the buffer holds (WEIGHTS guides the scheduler)."""
        self.usage = BufferUsage(usage)

    # ---- required hooks -------------------------------------------------------------------------------------

    def _write(self, offset: int, data: memoryview) -> None:
        raise NotImplementedError("need _write")

    def _read(self, offset: int, out: memoryview) -> None:
        raise NotImplementedError("need _read")

    # ---- optional hooks -------------------------------------------------------------------------------------

    def _fill(self, offset: int, size: int, value: int) -> None:
        """Set ``size`` bytes to ``value`` (default: one write of a filled block)."""
        self._write(offset, memoryview(bytes([value]) * size))

    def _copy_from(self, src: Buffer, src_offset: int, dst_offset: int, size: int) -> bool:
        """Copy from another buffer directly; return False when this pair is not supported (a staged copy follows)."""
        return False

    def _write_2d(
        self, offset: int, data: memoryview, size: int, n_copies: int, stride_buffer: int, stride_data: int
    ) -> None:
        """Write ``n_copies`` rows of ``size`` bytes: row ``i`` of ``data`` (at ``i * stride_data``) goes to
        ``offset + i * stride_buffer`` (ggml's ``set_tensor_2d``). Called with the region already bounds-checked.

        Default: one :meth:`_write` per row; override to move the whole region in one transfer.
        """
        for i in range(n_copies):
            start = i * stride_data
            self._write(offset + i * stride_buffer, data[start : start + size])

    def _read_2d(
        self, offset: int, out: memoryview, size: int, n_copies: int, stride_buffer: int, stride_data: int
    ) -> None:
        """Read ``n_copies`` rows of ``size`` bytes from ``offset + i * stride_buffer`` into ``out`` at
        ``i * stride_data`` (ggml's ``get_tensor_2d``). Default: one :meth:`_read` per row."""
        for i in range(n_copies):
            start = i * stride_data
            self._read(offset + i * stride_buffer, out[start : start + size])

    def _free(self) -> None:
        """Release the memory (default: nothing to do, garbage collection frees it)."""

    def host_array(self) -> np.ndarray | None:
        """The whole buffer as a writable uint8 numpy array, for host buffers; None otherwise."""
        return None

    def init_tensor(self, tensor: Tensor) -> None:
        """Called when a tensor is bound to this buffer (ggml's ``init_tensor``; e.g. to set ``tensor.extra``)."""

    # ---- public, checked --------------------------------------------------------------------------------------

    def _check_live(self) -> None:
        if self.freed:
            raise TensorError(self.name, "buffer was freed")

    def _span(self, what: str, offset: int, size: int) -> None:
        self._check_live()
        if offset < 0 or size < 0 or offset + size > self.size:
            raise OutOfBoundsError(f"buffer {self.name}", offset, size, self.size)

    def _tensor_span(self, t: Tensor, offset: int, size: int) -> int:
        if self.freed:
            raise BufferFreedError(t, self)
        if t.buffer is not self or t.data_offset is None:
            raise TensorError(t, f"is not allocated in this {self.name} buffer")
        if offset < 0 or size < 0 or offset + size > t.nbytes:
            raise OutOfBoundsError(f"tensor {t.describe()}", offset, size, t.nbytes)
        start = t.data_offset + offset
        self._span(f"tensor {t.describe()}", start, size)
        return start

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write raw bytes at a buffer offset (bounds-checked)."""
        mv = memoryview(data).cast("B")
        self._span("write", offset, mv.nbytes)
        if mv.nbytes:
            self._write(offset, mv)

    def read(self, offset: int, size: int) -> bytes:
        """Read raw bytes at a buffer offset (bounds-checked)."""
        self._span("read", offset, size)
        out = bytearray(size)
        if size:
            self._read(offset, memoryview(out))
        return bytes(out)

    def set_tensor(self, t: Tensor, data: memoryview, offset: int = 0) -> None:
        """``ggml_backend_tensor_set``: write ``data`` at byte ``offset`` of tensor ``t``."""
        mv = memoryview(data).cast("B")
        start = self._tensor_span(t, offset, mv.nbytes)
        if mv.nbytes:
            self._write(start, mv)

    def get_tensor(self, t: Tensor, out: memoryview, offset: int = 0) -> None:
        """``ggml_backend_tensor_get``: fill ``out`` from byte ``offset`` of tensor ``t``."""
        mv = memoryview(out).cast("B")
        start = self._tensor_span(t, offset, mv.nbytes)
        if mv.nbytes:
            self._read(start, mv)

    def _region_2d(
        self, t: Tensor, data: memoryview, offset: int, size: int, n_copies: int, stride_tensor: int, stride_data: int
    ) -> int:
        """Check a 2-D region of ``t`` and its host side; the region's buffer offset (``OutOfBoundsError`` naming
        the tensor and the region when either side is out of bounds)."""
        for name, value in (
            ("offset", offset),
            ("size", size),
            ("n_copies", n_copies),
            ("stride_tensor", stride_tensor),
            ("stride_data", stride_data),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TensorError(t, f"2-D access: {name} must be a non-negative integer, got {value!r}")
        region = f"{n_copies} rows of {size} bytes every {stride_tensor} bytes from offset {offset}"
        if n_copies == 0 or size == 0:
            return self._tensor_span(t, 0, 0)
        extent = (n_copies - 1) * stride_tensor + size
        if offset + extent > t.nbytes:
            raise OutOfBoundsError(f"tensor {t.describe()}, 2-D region of {region}", offset, extent, t.nbytes)
        host = (n_copies - 1) * stride_data + size
        if host > data.nbytes:
            raise OutOfBoundsError(
                f"host data for tensor {t.describe()}, 2-D region of {region} (rows every {stride_data} bytes)",
                0,
                host,
                data.nbytes,
            )
        return self._tensor_span(t, offset, extent)

    def set_tensor_2d(
        self,
        t: Tensor,
        data: memoryview | bytes | bytearray,
        offset: int,
        size: int,
        n_copies: int,
        stride_tensor: int,
        stride_data: int,
    ) -> None:
        """``ggml_backend_tensor_set_2d``: write ``n_copies`` rows of ``size`` bytes, row ``i`` taken from
        ``data[i * stride_data:]`` and written at byte ``offset + i * stride_tensor`` of ``t``."""
        mv = memoryview(data).cast("B")
        start = self._region_2d(t, mv, offset, size, n_copies, stride_tensor, stride_data)
        if n_copies and size:
            self._write_2d(start, mv, size, n_copies, stride_tensor, stride_data)

    def get_tensor_2d(
        self, t: Tensor, out: memoryview, offset: int, size: int, n_copies: int, stride_tensor: int, stride_data: int
    ) -> None:
        """``ggml_backend_tensor_get_2d``: read ``n_copies`` rows of ``size`` bytes from byte
        ``offset + i * stride_tensor`` of ``t`` into ``out[i * stride_data:]``."""
        mv = memoryview(out).cast("B")
        if mv.readonly:
            raise TensorError(t, "2-D read into a read-only host buffer")
        start = self._region_2d(t, mv, offset, size, n_copies, stride_tensor, stride_data)
        if n_copies and size:
            self._read_2d(start, mv, size, n_copies, stride_tensor, stride_data)

    def memset_tensor(self, t: Tensor, value: int, offset: int = 0, size: int | None = None) -> None:
        """``ggml_backend_tensor_memset``: set bytes of ``t`` to ``value``."""
        if size is None:
            size = t.nbytes - offset
        if not 0 <= value <= 255:
            raise ValueError(f"memset value must be a byte, got {value}")
        start = self._tensor_span(t, offset, size)
        if size:
            self._fill(start, size, value)

    def cpy_tensor(self, src: Tensor, dst: Tensor) -> bool:
        """Copy ``src`` (any buffer) into ``dst`` (this buffer) directly if this pair supports it."""
        src_buf = buffer_of(src)
        if src_buf is None or src.data_offset is None:
            raise TensorError(src, "source is not allocated")
        n = src.nbytes
        if n != dst.nbytes:
            raise TensorError(dst, f"copy needs equal sizes: source has {n} bytes, destination {dst.nbytes}")
        start = self._tensor_span(dst, 0, n)
        src_buf._tensor_span(src, 0, n)
        return bool(n == 0 or self._copy_from(src_buf, src.data_offset, start, n))

    def clear(self, value: int = 0) -> None:
        """Set every byte of the buffer to ``value``."""
        self._span("clear", 0, self.size)
        if self.size:
            self._fill(0, self.size, value)

    def free(self) -> None:
        """Release the memory; later access raises."""
        if not self.freed:
            self._free()
            self.freed = True

    def alloc_tensor(self, t: Tensor, offset: int) -> None:
        """``ggml_backend_tensor_alloc``: bind ``t`` at ``offset`` (checks alignment-free bounds and re-binding)."""
        self._check_live()
        if t.view_src is not None:
            raise TensorError(t, "is a view; bind its source instead (views follow their source)")
        if t.buffer is not None and t.buffer is not self:
            raise TensorError(t, f"is already allocated in a {t.buffer.name} buffer")
        need = self.buffer_type.alloc_size(t)
        if offset < 0 or offset + need > self.size:
            raise OutOfBoundsError(f"binding tensor {t.describe()}", offset, need, self.size)
        t.buffer = self
        t.data_offset = offset
        self.init_tensor(t)

    @staticmethod
    def view_init(t: Tensor) -> None:
        """``ggml_backend_view_init``: bind a view to its source's memory."""
        src = t.view_src
        if src is None or src.buffer is None or src.data_offset is None:
            raise TensorError(t, "view source has no memory yet")
        t.buffer = src.buffer
        t.data_offset = src.data_offset + t.view_offs
        src.buffer.init_tensor(t)


# ================================================================================================ events


class Event:
    """A point in a backend's stream (``ggml_backend_event``): record it, wait on it from another stream or host."""

    def __init__(self, device: Device) -> None:
        self.device = device

    def record(self, backend: Backend) -> None:
        """Mark the current end of ``backend``'s stream."""
        raise NotImplementedError("need record")

    def synchronize(self) -> None:
        """Block the host until the recorded work is done."""
        raise NotImplementedError("need synchronize")

    def wait(self, backend: Backend) -> None:
        """Make ``backend``'s stream wait for the recorded work (default: host wait)."""
        self.synchronize()


# ================================================================================================ backends


class Backend:
    """A stream of work on one device: tensor copies and graph computes, possibly asynchronous.

    Required hook: :meth:`graph_compute_async`. Asynchronous backends also override the ``*_async`` copies and
    :meth:`synchronize`; the defaults are synchronous.
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        self.abort_callback: Callable[[], bool] | None = None
        self._compute_lock = threading.RLock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def name(self) -> str:
        """The device's name."""
        return self.device.name

    @property
    def default_buffer_type(self) -> BufferType:
        """The device's buffer type."""
        return self.device.buffer_type()

    def alloc_buffer(self, size: int) -> Buffer:
        """Allocate from the default buffer type."""
        return self.default_buffer_type.alloc_buffer(size)

    # ---- copies (synchronous defaults) --------------------------------------------------------------------

    def set_tensor_async(self, t: Tensor, data: memoryview | bytes, offset: int = 0) -> None:
        """Queue a host-to-tensor copy; ``data`` must stay unchanged until :meth:`synchronize`."""
        _buffer_of(t).set_tensor(t, memoryview(data), offset)

    def get_tensor_async(self, t: Tensor, out: memoryview, offset: int = 0) -> None:
        """Queue a tensor-to-host copy into ``out``; valid after :meth:`synchronize`."""
        _buffer_of(t).get_tensor(t, out, offset)

    def set_tensor_2d_async(
        self,
        t: Tensor,
        data: memoryview | bytes,
        offset: int,
        size: int,
        n_copies: int,
        stride_tensor: int,
        stride_data: int,
    ) -> None:
        """Queue a 2-D host-to-tensor copy (see :meth:`Buffer.set_tensor_2d`); ``data`` must stay unchanged until
        :meth:`synchronize`. Default: the buffer's synchronous 2-D write."""
        _buffer_of(t).set_tensor_2d(t, memoryview(data), offset, size, n_copies, stride_tensor, stride_data)

    def get_tensor_2d_async(
        self, t: Tensor, out: memoryview, offset: int, size: int, n_copies: int, stride_tensor: int, stride_data: int
    ) -> None:
        """Queue a 2-D tensor-to-host copy (see :meth:`Buffer.get_tensor_2d`); valid after :meth:`synchronize`."""
        _buffer_of(t).get_tensor_2d(t, out, offset, size, n_copies, stride_tensor, stride_data)

    def cpy_tensor_async(self, src_backend: Backend, src: Tensor, dst: Tensor) -> bool:
        """Queue a copy from ``src`` (on ``src_backend``) to ``dst`` (on this backend); False if unsupported."""
        return False

    def synchronize(self) -> None:
        """Wait for every queued operation of this stream."""

    # ---- compute --------------------------------------------------------------------------------------------

    def graph_compute(self, graph: Graph) -> None:
        """Compute every node of ``graph`` and wait for it.

        Thread-safe: concurrent calls on one backend run one after another (a per-backend lock), and every tensor
        of the graph is checked to live in a buffer that was not freed (:class:`~ggml_core.BufferFreedError`).
        A graph itself is data shared by whoever computes it: computing a graph while another thread computes it
        raises :class:`~ggml_core.GraphInUseError`; threads sharing one graph must hold a lock of their own around
        setting its inputs, computing it and reading its outputs (or use one graph each).
        """
        with computing(graph, self.name), _lock_of(self):
            check_graph_memory(graph)
            self.graph_compute_async(graph)
            self.synchronize()

    def graph_compute_async(self, graph: Graph) -> None:
        """Queue the computation of every node of ``graph`` (view ops are no-ops).

        The plugin's hook, not locked: callers other than :meth:`graph_compute` (the scheduler) hold
        :func:`compute_locks` around it.
        """
        raise NotImplementedError("need graph_compute_async")

    def graph_optimize(self, graph: Graph) -> None:
        """Optional: reorder or fuse nodes of one split before it is allocated (``graph_optimize``)."""

    # ---- events ---------------------------------------------------------------------------------------------

    def event_record(self, event: Event) -> None:
        """Record ``event`` at the current end of this stream."""
        event.record(self)

    def event_wait(self, event: Event) -> None:
        """Make this stream wait for ``event``."""
        event.wait(self)

    # ---- device forwarding (deprecated in ggml, kept for convenience) ----------------------------------------

    def supports_op(self, op: Tensor) -> bool:
        """Forwarded to the device."""
        return self.device.supports_op(op)

    def supports_buft(self, buft: BufferType) -> bool:
        """Forwarded to the device."""
        return self.device.supports_buft(buft)

    def offload_op(self, op: Tensor) -> bool:
        """Forwarded to the device."""
        return self.device.offload_op(op)

    def set_n_threads(self, n_threads: int) -> None:
        """Set the number of worker threads, where the backend has any (default: ignored)."""

    def free(self) -> None:
        """Release the stream's resources."""


#: graphs being computed now: id → (thread id, depth, the graph, kept alive while it runs)
_computing: dict[int, tuple[int, int, Graph]] = {}
_computing_lock = threading.Lock()
_backend_locks_lock = threading.Lock()


class _Computing:
    """:func:`computing`'s context manager (a class: a generator-based one costs a few µs a decode step)."""

    __slots__ = ("_graph", "_key", "_me", "_who")

    def __init__(self, graph: Graph, who: str) -> None:
        self._graph, self._who = graph, who
        self._key, self._me = id(graph), 0

    def __enter__(self) -> None:
        me = self._me = threading.get_ident()
        with _computing_lock:
            entry = _computing.get(self._key)
            if entry is not None and entry[0] != me:
                raise GraphInUseError(self._graph, self._who)
            _computing[self._key] = (me, entry[1] + 1 if entry else 1, self._graph)

    def __exit__(self, *exc: object) -> None:
        with _computing_lock:
            _, depth, _ = _computing[self._key]
            if depth > 1:
                _computing[self._key] = (self._me, depth - 1, self._graph)
            else:
                del _computing[self._key]


def computing(graph: Graph, who: str) -> contextlib.AbstractContextManager[None]:
    """Mark ``graph`` as being computed by this thread; :class:`GraphInUseError` if another thread computes it."""
    return _Computing(graph, who)


def _lock_of(backend: Backend) -> threading.RLock:
    """The backend's compute lock (created here for subclasses that skip ``Backend.__init__``)."""
    lock: threading.RLock | None = backend.__dict__.get("_compute_lock")
    if lock is None:
        with _backend_locks_lock:
            lock = backend.__dict__.setdefault("_compute_lock", threading.RLock())
    return lock


def compute_locks(backends: Sequence[Backend]) -> contextlib.AbstractContextManager[Any]:
    """Hold the compute locks of several backends (taken in one global order, so holders never deadlock)."""
    if len(backends) == 1:  # one backend: its lock itself (no stack to build per compute)
        return _lock_of(backends[0])
    return _compute_locks(backends)


@contextlib.contextmanager
def _compute_locks(backends: Sequence[Backend]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for be in sorted(set(backends), key=id):
            stack.enter_context(_lock_of(be))
        yield


def check_graph_memory(graph: Graph) -> None:
    """:class:`BufferFreedError` naming the first tensor of ``graph`` whose buffer was freed.

    Runs before every compute: the few distinct buffers are collected in one set comprehension (CPython
    specialises its slot reads: about twice as fast as ``map`` of an attribute getter) and each is asked once; only
    when one was freed are the tensors walked to name the first that uses it."""
    try:
        buffers = {t.buffer for t in itertools.chain(graph.leafs, graph.nodes)}
    except TypeError:  # a plugin's buffer class that is not hashable: walk the tensors
        buffers = None
    if buffers is not None and not any(b is not None and b.freed for b in buffers):
        return
    for t in itertools.chain(graph.leafs, graph.nodes):
        buf = t.buffer
        if buf is not None and buf.freed:
            raise BufferFreedError(t, buf)


def buffer_of(t: Tensor) -> Buffer | None:
    """``t.buffer`` as the :class:`Buffer` it is (None before ``t`` is allocated), for code that needs its type.

    The tensor layer, below this one, types ``Tensor.buffer`` by its :class:`~ggml_core._tensor.TensorBuffer`
    protocol; tensors are bound by :meth:`Buffer.alloc_tensor`, so the object is a Buffer.
    """
    buf = t.buffer
    if buf is None or isinstance(buf, Buffer):
        return buf
    raise TensorError(
        t, f"is bound to a {type(buf).__name__}, not a ggml_core.Buffer; bind it with Buffer.alloc_tensor"
    )


def _buffer_of(t: Tensor) -> Buffer:
    buf = buffer_of(t)
    if buf is None:
        raise TensorError(t, "has no memory; allocate it first")
    return buf


# ================================================================================================ devices


class Device:
    """One device (``ggml_backend_dev``): its properties, memory, buffer types and the backends it creates.

    Required hooks: :meth:`buffer_type`, :meth:`init_backend`, :meth:`supports_op`, :meth:`memory`.
    """

    #: device kind
    type: DeviceType = DeviceType.GPU
    #: capabilities
    caps: DeviceCaps = DeviceCaps()
    #: True for the host CPU seen through another API (an OpenCL CPU device such as PoCL's): the default placement
    #: does not prefer it over the CPU plugin (it would compete for the same cores); it is used when named
    host_cpu: bool = False
    #: set by the registry when it accepts the device: runs a guarded hook, checks its answer and reports a bad one
    #: (``backend._validate.guarded_call``), called as ``_boundary(device, hook, fn, args, kwargs)``
    _boundary: Callable[[Device, str, Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Guard the hooks a plugin overrides: once the registry accepted a device, their answers are checked."""
        super().__init_subclass__(**kwargs)
        for hook in _GUARDED_HOOKS:
            fn = cls.__dict__.get(hook)
            if inspect.isfunction(fn) and not getattr(fn, "_ggml_guarded", False):
                setattr(cls, hook, _guard(hook, fn))

    def __init__(self, name: str, description: str = "", *, device_id: str | None = None) -> None:
        self.name = name
        self.description = description or name
        self.device_id = device_id
        #: the registry that owns this device (set on registration)
        self.reg: BackendReg | None = None
        #: buffer types other plugins contributed to this device (``ggml_backend_dev_get_extra_bufts``)
        self.extra_buffer_types: list[BufferType] = []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def memory(self) -> tuple[int, int]:
        """(free, total) bytes."""
        raise NotImplementedError("need memory")

    def props(self) -> DeviceProps:
        """Everything ``ggml-core devices`` shows about this device."""
        free, total = self.memory()
        return DeviceProps(self.name, self.description, free, total, self.type, self.device_id, self.caps)

    def buffer_type(self) -> BufferType:
        """The device's own memory."""
        raise NotImplementedError("need buffer_type")

    def host_buffer_type(self) -> BufferType | None:
        """A pinned host buffer type for fast uploads, or None."""
        return None

    def buffer_from_host_ptr(self, memory: np.ndarray | memoryview, max_tensor_size: int) -> Buffer | None:
        """Wrap existing host memory (e.g. an mmap'd GGUF) as a buffer without copying; None if unsupported."""
        return None

    def init_backend(self, params: str | None = None) -> Backend:
        """A new stream on this device."""
        raise NotImplementedError("need init_backend")

    def supports_op(self, op: Tensor) -> bool:
        """True when this device computes ``op`` (with its operands' types and layouts) correctly."""
        raise NotImplementedError("need supports_op")

    def supports_buft(self, buft: BufferType) -> bool:
        """True when this device's backends can use memory of ``buft`` directly."""
        return buft is self.buffer_type() or buft in self.extra_buffer_types or buft.device is self

    def offload_op(self, op: Tensor) -> bool:
        """True when it pays to run ``op`` here even though its weights live in host memory (large batches)."""
        return False

    def event_new(self) -> Event | None:
        """A new event, or None when the device has none."""
        return None

    def all_buffer_types(self) -> list[BufferType]:
        """The device's buffer type, its host buffer type if any, then extra buffer types."""
        out = [self.buffer_type()]
        host = self.host_buffer_type()
        if host is not None:
            out.append(host)
        out.extend(self.extra_buffer_types)
        return out


#: Device hooks whose answers are checked after the registry accepted the device
_GUARDED_HOOKS: Final = (
    "memory",
    "props",
    "buffer_type",
    "host_buffer_type",
    "buffer_from_host_ptr",
    "init_backend",
    "supports_op",
    "supports_buft",
    "offload_op",
    "event_new",
)


def _guard(hook: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def guarded(self: Device, *args: Any, **kwargs: Any) -> Any:
        boundary = getattr(self, "_boundary", None)
        if boundary is None:  # not (yet) accepted by a registry: a plain call
            return fn(self, *args, **kwargs)
        return boundary(self, hook, fn, args, kwargs)

    guarded._ggml_guarded = True  # type: ignore[attr-defined]
    return guarded


# ================================================================================================ registries


class BackendReg:
    """A family of devices from one plugin (``ggml_backend_reg``), e.g. "CUDA" with CUDA0, CUDA1.

    Subclass and override :meth:`enumerate_devices` (called once, lazily), or pass ``devices``. A registry that
    finds no usable hardware sets :attr:`unavailable_reason` so that users see why it has no devices.
    """

    api_version: int = API_VERSION

    def __init__(
        self,
        name: str,
        devices: Sequence[Device] | None = None,
        *,
        description: str = "",
        priority: int = 0,
    ) -> None:
        self.name = name
        self.description = description
        #: tie-breaker between registries of the same device type (higher first)
        self.priority = priority
        #: why this registry offers no devices (no driver, no platform...), or None
        self.unavailable_reason: str | None = None
        #: the plugin that registered it (set by the registry)
        self.plugin: str | None = None
        self._devices: list[Device] | None = list(devices) if devices is not None else None
        for d in self._devices or ():
            d.reg = self
        #: devices other plugins added (``ggml_register_devices``), listed after the registry's own
        self._added: list[Device] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def enumerate_devices(self) -> Sequence[Device]:
        """Find the devices (called once; may raise: the registry records the error)."""
        raise NotImplementedError("need enumerate_devices")

    @property
    def devices(self) -> list[Device]:
        """The registry's own devices (enumerated on first use), then those other plugins added."""
        return self.own_devices() + list(self._added)

    def own_devices(self) -> list[Device]:
        """The devices :meth:`enumerate_devices` found (called once)."""
        with self._lock:
            if self._devices is None:
                self._devices = list(itertools.islice(self.enumerate_devices(), DEVICES_MAX + 1))
                for d in self._devices:
                    if isinstance(d, Device):  # anything else is refused by the registry's checks
                        d.reg = self
            return list(self._devices)

    def add_device(self, device: Device) -> None:
        """Add a device beside the registry's own (the ``ggml_register_devices`` hook); never replaces them."""
        with self._lock:
            device.reg = self
            self._added.append(device)

    def get_proc_address(self, name: str) -> Callable[..., Any] | None:
        """An optional extra function by name (ggml's ``get_proc_address``), e.g. ``"set_n_threads"``."""
        fn = getattr(self, name, None)
        return fn if callable(fn) else None

    def features(self) -> dict[str, str]:
        """Build features to show (``ggml_backend_get_features``), e.g. {"BLAS": "OpenBLAS"}."""
        return {}
