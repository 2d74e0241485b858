"""The driver layer: a thin adapter over pycuda, the only module that imports it.

Everything else in the plugin talks to a :class:`Driver`: devices by ordinal, raw device pointers as ``int``,
streams/events/modules/functions as opaque handles, kernel arguments as packed bytes. :class:`PyCudaDriver` maps
each method onto one or two pycuda calls; tests inject a fake driver (``tests/fake_driver.py``) that simulates
memory with numpy and records launches, so the host-side logic is testable on machines without a GPU.

:func:`load_driver` never raises: without pycuda, without ``libcuda.so.1`` or without a GPU it returns the exact
reason, which the registry shows in ``ggml-core plugins`` / ``ggml-core devices``.
"""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "DeviceInfo",
    "Driver",
    "DriverCallError",
    "PyCudaDriver",
    "load_driver",
]


@dataclass(frozen=True)
class DeviceInfo:
    """What the driver says about one device (read once, at enumeration)."""

    ordinal: int
    name: str
    #: compute capability (major, minor), e.g. (9, 0) for Hopper
    compute_capability: tuple[int, int]
    total_memory: int
    #: PCI bus id as the driver writes it, e.g. ``"0000:19:00.0"``
    pci_bus_id: str
    multiprocessors: int = 0
    #: the most dynamic shared memory one block may opt in to
    max_shared_per_block_optin: int = 48 * 1024
    l2_bytes: int = 0


class DriverCallError(RuntimeError):
    """A CUDA driver call failed; ``call`` names it, ``out_of_memory`` tells allocation failures apart."""

    def __init__(self, call: str, message: str, *, out_of_memory: bool = False) -> None:
        super().__init__(f"{call}: {message}")
        self.call = call
        self.out_of_memory = out_of_memory


class Driver(ABC):
    """The CUDA operations the plugin needs; every method activates the device's context itself."""

    #: a short name for messages and ``features()``, e.g. ``"pycuda 2026.1"``
    name: str = "driver"

    @abstractmethod
    def device_count(self) -> int:
        """Number of CUDA devices."""

    @abstractmethod
    def device_info(self, ordinal: int) -> DeviceInfo:
        """Properties of device ``ordinal``."""

    @abstractmethod
    def mem_info(self, ordinal: int) -> tuple[int, int]:
        """(free, total) bytes of device memory."""

    @abstractmethod
    def alloc(self, ordinal: int, size: int) -> Any:
        """Allocate ``size`` bytes of device memory (cuMemAlloc, never managed memory); ``int(handle)`` is the pointer.

        Raises :class:`DriverCallError` with ``out_of_memory=True`` when it does not fit.
        """

    @abstractmethod
    def free(self, ordinal: int, handle: Any) -> None:
        """Release an allocation from :meth:`alloc`."""

    @abstractmethod
    def alloc_host(self, size: int) -> np.ndarray:
        """Page-locked (pinned, portable) host memory as a writable uint8 array."""

    @abstractmethod
    def copy_htod(self, ordinal: int, dst: int, src: memoryview, stream: Any | None) -> None:
        """Host → device copy (queued on ``stream`` when given, else synchronous)."""

    @abstractmethod
    def copy_dtoh(self, ordinal: int, dst: memoryview, src: int, stream: Any | None) -> None:
        """Device → host copy (queued on ``stream`` when given, else synchronous)."""

    @abstractmethod
    def copy_dtod(self, ordinal: int, dst: int, src: int, size: int, stream: Any | None) -> None:
        """Device → device copy within one device."""

    @abstractmethod
    def copy_peer(self, dst_ordinal: int, dst: int, src_ordinal: int, src: int, size: int, stream: Any | None) -> None:
        """Copy between two devices (cuMemcpyPeer; staged through the host where peer access is off)."""

    @abstractmethod
    def memset(self, ordinal: int, dst: int, value: int, size: int, stream: Any | None) -> None:
        """Set ``size`` bytes to ``value``."""

    @abstractmethod
    def stream_create(self, ordinal: int) -> Any:
        """A new stream on the device."""

    @abstractmethod
    def stream_synchronize(self, ordinal: int, stream: Any) -> None:
        """Wait for everything queued on ``stream``."""

    @abstractmethod
    def event_create(self, ordinal: int) -> Any:
        """A new event (timing disabled)."""

    @abstractmethod
    def event_record(self, ordinal: int, event: Any, stream: Any) -> None:
        """Record ``event`` at the current end of ``stream``."""

    @abstractmethod
    def event_synchronize(self, ordinal: int, event: Any) -> None:
        """Block the host until ``event`` has completed."""

    @abstractmethod
    def stream_wait_event(self, ordinal: int, stream: Any, event: Any) -> None:
        """Make ``stream`` wait for ``event`` (possibly recorded on another device's stream)."""

    @abstractmethod
    def module_load(self, ordinal: int, image: bytes) -> Any:
        """Load a compiled module (cubin) into the device's context."""

    @abstractmethod
    def function(self, ordinal: int, module: Any, name: str) -> Any:
        """The kernel ``name`` of a loaded module."""

    @abstractmethod
    def set_max_dynamic_shared(self, ordinal: int, function: Any, size: int) -> None:
        """Allow ``function`` to use ``size`` bytes of dynamic shared memory (above the 48 KiB default)."""

    @abstractmethod
    def launch(
        self,
        ordinal: int,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: bytes,
        shared: int,
        stream: Any,
    ) -> None:
        """Queue a kernel launch on ``stream`` with its parameters packed in ``args`` (C layout)."""

    @contextlib.contextmanager
    def activate(self, ordinal: int) -> Iterator[None]:
        """Make device ``ordinal``'s context current for a block of calls (no-op by default)."""
        yield


# ================================================================================================ pycuda


class PyCudaDriver(Driver):
    """:class:`Driver` over pycuda's driver API wrapper, with primary contexts (as the CUDA runtime uses)."""

    def __init__(self, cuda: Any, version: str) -> None:
        self._cuda = cuda
        self.name = f"pycuda {version}"
        self._contexts: dict[int, Any] = {}
        self._devices: dict[int, Any] = {}
        self._prepared: set[int] = set()
        self._local = threading.local()
        self._lock = threading.Lock()

    # ---- contexts -------------------------------------------------------------------------------------------

    def _context(self, ordinal: int) -> Any:
        with self._lock:
            ctx = self._contexts.get(ordinal)
            if ctx is None:
                dev = self._device(ordinal)
                ctx = dev.retain_primary_context()
                self._contexts[ordinal] = ctx
            return ctx

    def _device(self, ordinal: int) -> Any:
        dev = self._devices.get(ordinal)
        if dev is None:
            dev = self._cuda.Device(ordinal)
            self._devices[ordinal] = dev
        return dev

    @contextlib.contextmanager
    def activate(self, ordinal: int) -> Iterator[None]:
        """Push the device's primary context unless this thread already has it current."""
        stack: list[int] = self._local.__dict__.setdefault("stack", [])
        if stack and stack[-1] == ordinal:
            yield
            return
        ctx = self._context(ordinal)
        ctx.push()
        stack.append(ordinal)
        try:
            yield
        finally:
            stack.pop()
            self._cuda.Context.pop()

    @contextlib.contextmanager
    def _call(self, ordinal: int, call: str) -> Iterator[None]:
        """Activate the context and turn pycuda's errors into :class:`DriverCallError`."""
        cuda = self._cuda
        try:
            with self.activate(ordinal):
                yield
        except cuda.MemoryError as exc:
            raise DriverCallError(call, f"{type(exc).__name__}: {exc}", out_of_memory=True) from exc
        except cuda.Error as exc:
            raise DriverCallError(call, f"{type(exc).__name__}: {exc}") from exc

    # ---- devices --------------------------------------------------------------------------------------------

    def device_count(self) -> int:
        """``cuDeviceGetCount``."""
        return int(self._cuda.Device.count())

    def device_info(self, ordinal: int) -> DeviceInfo:
        """Name, compute capability, memory, PCI bus id and a few limits."""
        dev = self._device(ordinal)
        attr = self._cuda.device_attribute

        def get(name: str, default: int) -> int:
            try:
                return int(dev.get_attribute(getattr(attr, name)))
            except (AttributeError, self._cuda.Error):
                return default

        major, minor = dev.compute_capability()
        return DeviceInfo(
            ordinal=ordinal,
            name=str(dev.name()),
            compute_capability=(int(major), int(minor)),
            total_memory=int(dev.total_memory()),
            pci_bus_id=str(dev.pci_bus_id()).lower(),
            multiprocessors=get("MULTIPROCESSOR_COUNT", 0),
            max_shared_per_block_optin=get("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", 48 * 1024),
            l2_bytes=get("L2_CACHE_SIZE", 0),
        )

    def mem_info(self, ordinal: int) -> tuple[int, int]:
        """``cuMemGetInfo`` in the device's context."""
        with self._call(ordinal, "cuMemGetInfo"):
            free, total = self._cuda.mem_get_info()
        return int(free), int(total)

    # ---- memory ---------------------------------------------------------------------------------------------

    def alloc(self, ordinal: int, size: int) -> Any:
        """``cuMemAlloc``."""
        with self._call(ordinal, "cuMemAlloc"):
            return self._cuda.mem_alloc(size)

    def free(self, ordinal: int, handle: Any) -> None:
        """``cuMemFree``."""
        with self._call(ordinal, "cuMemFree"):
            handle.free()

    def alloc_host(self, size: int) -> np.ndarray:
        """``cuMemHostAlloc`` with the PORTABLE flag (usable from every context)."""
        cuda = self._cuda
        with self._call(0, "cuMemHostAlloc"):
            return cuda.pagelocked_empty(max(size, 1), np.uint8, mem_flags=cuda.host_alloc_flags.PORTABLE)[:size]

    def copy_htod(self, ordinal: int, dst: int, src: memoryview, stream: Any | None) -> None:
        """``cuMemcpyHtoD[Async]``."""
        with self._call(ordinal, "cuMemcpyHtoD"):
            if stream is None:
                self._cuda.memcpy_htod(dst, src)
            else:
                self._cuda.memcpy_htod_async(dst, src, stream)

    def copy_dtoh(self, ordinal: int, dst: memoryview, src: int, stream: Any | None) -> None:
        """``cuMemcpyDtoH[Async]``."""
        with self._call(ordinal, "cuMemcpyDtoH"):
            if stream is None:
                self._cuda.memcpy_dtoh(dst, src)
            else:
                self._cuda.memcpy_dtoh_async(dst, src, stream)

    def copy_dtod(self, ordinal: int, dst: int, src: int, size: int, stream: Any | None) -> None:
        """``cuMemcpyDtoD[Async]``."""
        with self._call(ordinal, "cuMemcpyDtoD"):
            if stream is None:
                self._cuda.memcpy_dtod(dst, src, size)
            else:
                self._cuda.memcpy_dtod_async(dst, src, size, stream)

    def copy_peer(self, dst_ordinal: int, dst: int, src_ordinal: int, src: int, size: int, stream: Any | None) -> None:
        """``cuMemcpyPeer[Async]`` between the two devices' primary contexts."""
        dctx, sctx = self._context(dst_ordinal), self._context(src_ordinal)
        with self._call(dst_ordinal, "cuMemcpyPeer"):
            if stream is None:
                self._cuda.memcpy_peer(dst, src, size, dest_context=dctx, src_context=sctx)
            else:
                self._cuda.memcpy_peer_async(dst, src, size, dest_context=dctx, src_context=sctx, stream=stream)

    def memset(self, ordinal: int, dst: int, value: int, size: int, stream: Any | None) -> None:
        """``cuMemsetD8[Async]``."""
        with self._call(ordinal, "cuMemsetD8"):
            if stream is None:
                self._cuda.memset_d8(dst, value, size)
            else:
                self._cuda.memset_d8_async(dst, value, size, stream)

    # ---- streams and events -------------------------------------------------------------------------------

    def stream_create(self, ordinal: int) -> Any:
        """``cuStreamCreate`` with default flags: the stream is ordered with the legacy default stream, so the
        synchronous copies (which run there, and may return before a pageable upload's DMA has finished) always
        complete before kernels queued after them, and see the results of kernels queued before them."""
        with self._call(ordinal, "cuStreamCreate"):
            return self._cuda.Stream(flags=0)

    def stream_synchronize(self, ordinal: int, stream: Any) -> None:
        """``cuStreamSynchronize``: this is where errors of earlier asynchronous work surface."""
        with self._call(ordinal, "cuStreamSynchronize"):
            stream.synchronize()

    def event_create(self, ordinal: int) -> Any:
        """``cuEventCreate`` with timing disabled."""
        cuda = self._cuda
        with self._call(ordinal, "cuEventCreate"):
            return cuda.Event(flags=cuda.event_flags.DISABLE_TIMING)

    def event_record(self, ordinal: int, event: Any, stream: Any) -> None:
        """``cuEventRecord``."""
        with self._call(ordinal, "cuEventRecord"):
            event.record(stream)

    def event_synchronize(self, ordinal: int, event: Any) -> None:
        """``cuEventSynchronize``."""
        with self._call(ordinal, "cuEventSynchronize"):
            event.synchronize()

    def stream_wait_event(self, ordinal: int, stream: Any, event: Any) -> None:
        """``cuStreamWaitEvent``."""
        with self._call(ordinal, "cuStreamWaitEvent"):
            stream.wait_for_event(event)

    # ---- modules and launches -------------------------------------------------------------------------------

    def module_load(self, ordinal: int, image: bytes) -> Any:
        """``cuModuleLoadData``."""
        with self._call(ordinal, "cuModuleLoadData"):
            return self._cuda.module_from_buffer(image)

    def function(self, ordinal: int, module: Any, name: str) -> Any:
        """``cuModuleGetFunction``."""
        with self._call(ordinal, f"cuModuleGetFunction({name})"):
            return module.get_function(name)

    def set_max_dynamic_shared(self, ordinal: int, function: Any, size: int) -> None:
        """``cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)``."""
        with self._call(ordinal, "cuFuncSetAttribute"):
            function.set_attribute(self._cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, size)

    def launch(
        self,
        ordinal: int,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: bytes,
        shared: int,
        stream: Any,
    ) -> None:
        """``cuLaunchKernel`` with the packed parameter buffer (pycuda's prepared call with one ``Ns`` field)."""
        with self._call(ordinal, "cuLaunchKernel"):
            fmt = f"{len(args)}s"
            if getattr(function, "arg_format", None) != fmt:
                function.prepare(fmt)
            function.prepared_async_call(grid, block, stream, args, shared_size=shared)


# ================================================================================================ loading


def load_driver() -> tuple[Driver | None, str | None]:
    """(driver, None) when pycuda, the NVIDIA driver and at least one GPU are usable; else (None, reason).

    The reason names what is missing exactly as the failing call reported it, e.g.
    ``"no CUDA driver: ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"``.
    """
    try:
        import pycuda
    except ImportError as exc:
        return None, (
            f"pycuda is not installed ({type(exc).__name__}: {exc}); "
            "install it with 'pip install pycuda' on a machine with the NVIDIA driver and the CUDA toolkit"
        )
    try:
        import pycuda.driver as cuda
    except (ImportError, OSError) as exc:
        return None, f"no CUDA driver: {type(exc).__name__}: {exc}"
    version = str(getattr(pycuda, "VERSION_TEXT", "?"))
    error_type: type[BaseException] = getattr(cuda, "Error", RuntimeError)
    try:
        cuda.init()
        count = int(cuda.Device.count())
    except error_type as exc:  # pycuda._driver.RuntimeError etc.: not the builtin RuntimeError
        return None, f"CUDA driver present but unusable: {_qualname(exc)}: {exc}"
    except Exception as exc:  # noqa: BLE001 - an unexpected failure is a reason too, never a crash
        return None, f"CUDA initialisation failed: {_qualname(exc)}: {exc}"
    if count == 0:
        return None, "the CUDA driver reports no devices (check CUDA_VISIBLE_DEVICES)"
    return PyCudaDriver(cuda, version), None


def _qualname(exc: BaseException) -> str:
    t = type(exc)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ not in ("builtins", "__main__") else t.__qualname__
