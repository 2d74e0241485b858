"""A fake CUDA driver for testing the plugin's host-side logic on machines without a GPU.

It simulates device memory with numpy (every access is checked against the allocation it falls in, so a wrong
pointer or size fails loudly), records every call and every kernel launch, and resolves kernels by name from
the package's ``.cu`` sources. It does NOT run kernels: tests that use it check what the host asks the GPU to do
(which kernel, geometry, packed arguments, copies, events), never kernel results. Nothing here is GPU
verification.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ggml_cuda._compile import KERNEL_DIR
from ggml_cuda._driver import DeviceInfo, Driver, DriverCallError

_KERNEL_RE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(', re.S)
#: kernels stamped out by a macro such as ``MV_Q_KERNEL(k_mv_q4_0, GT_Q4_0)``
_MACRO_KERNEL_RE = re.compile(r"^[A-Z_]+_KERNEL\((\w+),", re.M)


def kernel_names(source: str) -> set[str]:
    """The ``extern "C" __global__`` kernel names declared in a CUDA source (directly or through a macro)."""
    names = set(_KERNEL_RE.findall(source)) | set(_MACRO_KERNEL_RE.findall(source))
    return {n for n in names if not n.startswith("__") and n != "NAME"}  # not the macro's own definition


def fake_info(ordinal: int = 0, cc: tuple[int, int] = (9, 0), memory: int = 1 << 30) -> DeviceInfo:
    """A plausible DeviceInfo (an H200-like device by default, with little memory)."""
    return DeviceInfo(
        ordinal=ordinal,
        name=f"Fake GPU {ordinal} (sm_{cc[0]}{cc[1]})",
        compute_capability=cc,
        total_memory=memory,
        pci_bus_id=f"0000:{0x19 + ordinal:02X}:00.0".lower(),
        multiprocessors=132,
        max_shared_per_block_optin=227 * 1024,
        l2_bytes=60 << 20,
    )


@dataclass
class FakeLaunch:
    """One recorded kernel launch."""

    ordinal: int
    module: str
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: bytes
    shared: int
    stream: Any


@dataclass
class FakeFunction:
    module: str
    name: str
    max_dynamic_shared: int = 48 * 1024


@dataclass
class FakeModule:
    name: str
    kernels: set[str]


@dataclass
class FakeAllocation:
    ordinal: int
    base: int
    mem: np.ndarray

    def __int__(self) -> int:
        return self.base


@dataclass
class FakeStream:
    ordinal: int
    serial: int


@dataclass
class FakeEvent:
    ordinal: int
    serial: int
    recorded_on: FakeStream | None = None


@dataclass
class FakeDriver(Driver):
    """Simulated devices: memory in numpy, calls and launches recorded."""

    infos: list[DeviceInfo] = field(default_factory=lambda: [fake_info(0)])
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    launches: list[FakeLaunch] = field(default_factory=list)
    allocations: dict[int, FakeAllocation] = field(default_factory=dict)
    name: str = "fake driver"
    _serial: int = 0
    _cursor: dict[int, int] = field(default_factory=dict)

    def _next(self) -> int:
        self._serial += 1
        return self._serial

    # ---- devices ---------------------------------------------------------------------------------------------

    def device_count(self) -> int:
        return len(self.infos)

    def device_info(self, ordinal: int) -> DeviceInfo:
        return self.infos[ordinal]

    def used(self, ordinal: int) -> int:
        return sum(a.mem.size for a in self.allocations.values() if a.ordinal == ordinal)

    def mem_info(self, ordinal: int) -> tuple[int, int]:
        total = self.infos[ordinal].total_memory
        return total - self.used(ordinal), total

    # ---- memory ------------------------------------------------------------------------------------------------

    def alloc(self, ordinal: int, size: int) -> FakeAllocation:
        free, _ = self.mem_info(ordinal)
        if size > free:
            raise DriverCallError("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY: out of memory", out_of_memory=True)
        # device address ranges 1 TiB apart per device; allocations 4 KiB aligned, never reused, a gap between them
        base = self._cursor.get(ordinal, (ordinal + 1) << 40)
        self._cursor[ordinal] = base + -(-max(size, 1) // 4096) * 4096 + 4096
        alloc = FakeAllocation(ordinal, base, np.zeros(size, np.uint8))
        self.allocations[base] = alloc
        self.calls.append(("alloc", ordinal, size))
        return alloc

    def free(self, ordinal: int, handle: Any) -> None:
        if self.allocations.pop(int(handle), None) is None:
            raise DriverCallError("cuMemFree", "CUDA_ERROR_INVALID_VALUE: not an allocation")
        self.calls.append(("free", ordinal, int(handle)))

    def alloc_host(self, size: int) -> np.ndarray:
        self.calls.append(("alloc_host", size))
        return np.zeros(size, np.uint8)

    def view(self, ptr: int, size: int, ordinal: int | None = None) -> np.ndarray:
        """The simulated bytes [ptr, ptr + size); raises like an illegal address if they leave an allocation."""
        for base, a in self.allocations.items():
            if base <= ptr and ptr + size <= base + a.mem.size:
                if ordinal is not None and a.ordinal != ordinal:
                    raise DriverCallError("memory access", f"address {ptr:#x} belongs to device {a.ordinal}")
                return a.mem[ptr - base : ptr - base + size]
        raise DriverCallError("memory access", f"CUDA_ERROR_ILLEGAL_ADDRESS: [{ptr:#x}, +{size}) is not allocated")

    def copy_htod(self, ordinal: int, dst: int, src: memoryview, stream: Any | None) -> None:
        data = np.frombuffer(src, np.uint8)
        self.view(dst, data.size, ordinal)[:] = data
        self.calls.append(("copy_htod", ordinal, dst, data.size, stream))

    def copy_dtoh(self, ordinal: int, dst: memoryview, src: int, stream: Any | None) -> None:
        out = np.frombuffer(dst, np.uint8)
        out[:] = self.view(src, out.size, ordinal)
        self.calls.append(("copy_dtoh", ordinal, src, out.size, stream))

    def copy_dtod(self, ordinal: int, dst: int, src: int, size: int, stream: Any | None) -> None:
        self.view(dst, size, ordinal)[:] = self.view(src, size, ordinal).copy()
        self.calls.append(("copy_dtod", ordinal, dst, src, size, stream))

    def copy_peer(self, dst_ordinal: int, dst: int, src_ordinal: int, src: int, size: int, stream: Any | None) -> None:
        self.view(dst, size, dst_ordinal)[:] = self.view(src, size, src_ordinal).copy()
        self.calls.append(("copy_peer", dst_ordinal, dst, src_ordinal, src, size, stream))

    def memset(self, ordinal: int, dst: int, value: int, size: int, stream: Any | None) -> None:
        self.view(dst, size, ordinal)[:] = value
        self.calls.append(("memset", ordinal, dst, value, size, stream))

    # ---- streams and events ------------------------------------------------------------------------------------

    def stream_create(self, ordinal: int) -> FakeStream:
        s = FakeStream(ordinal, self._next())
        self.calls.append(("stream_create", ordinal))
        return s

    def stream_synchronize(self, ordinal: int, stream: Any) -> None:
        self.calls.append(("stream_synchronize", ordinal, stream))

    def event_create(self, ordinal: int) -> FakeEvent:
        self.calls.append(("event_create", ordinal))
        return FakeEvent(ordinal, self._next())

    def event_record(self, ordinal: int, event: Any, stream: Any) -> None:
        event.recorded_on = stream
        self.calls.append(("event_record", ordinal, event, stream))

    def event_synchronize(self, ordinal: int, event: Any) -> None:
        self.calls.append(("event_synchronize", ordinal, event))

    def stream_wait_event(self, ordinal: int, stream: Any, event: Any) -> None:
        self.calls.append(("stream_wait_event", ordinal, stream, event))

    # ---- modules and launches ----------------------------------------------------------------------------------

    def module_load(self, ordinal: int, image: bytes) -> FakeModule:
        text = image.decode("utf-8", errors="replace")
        name = text.split("\n", 1)[0].removeprefix("// module ")
        self.calls.append(("module_load", ordinal, name))
        return FakeModule(name, kernel_names(text))

    def function(self, ordinal: int, module: Any, name: str) -> FakeFunction:
        if name not in module.kernels:
            raise DriverCallError(f"cuModuleGetFunction({name})", "CUDA_ERROR_NOT_FOUND: named symbol not found")
        return FakeFunction(module.name, name)

    def set_max_dynamic_shared(self, ordinal: int, function: Any, size: int) -> None:
        function.max_dynamic_shared = size

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
        self.launches.append(FakeLaunch(ordinal, function.module, function.name, grid, block, args, shared, stream))


def fake_compiler(log: list[tuple[str, str]] | None = None) -> Any:
    """A (module, arch) → image function that returns the module's source (with a name line) and logs calls."""

    def compile_fake(module: str, arch: str) -> bytes:
        if log is not None:
            log.append((module, arch))
        source = (KERNEL_DIR / f"{module}.cu").read_text()
        return f"// module {module}\n{source}".encode()

    return compile_fake
