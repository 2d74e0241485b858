"""The CPU backend plugin: checks → buffers → backend → device → registration.

Host memory is numpy: a buffer is one aligned ``uint8`` array, tensors are strided views of it. The backend
plans every graph once — each node bound to its kernel (see :mod:`ggml_cpu.kernels`) over preallocated views —
and replays the plan on later computes of the same, identically allocated graph (:mod:`ggml_cpu.engine`).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import platform
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import numpy as np

from ggml_core import (
    API_VERSION,
    Backend,
    BackendReg,
    Buffer,
    BufferType,
    Device,
    DeviceCaps,
    DeviceType,
    Graph,
    HostBuffer,
    Tensor,
    hookimpl,
)

if TYPE_CHECKING:
    from ggml_cpu.kernels.matmul import WeightsCache

# The kernels, the engine and the compiled code load on first use (a backend, supports_op, features), so that
# listing devices does not pay for them.

__all__ = ["CPUBackend", "CPUBuffer", "CPUBufferType", "CPUDevice", "CPUReg", "cpu_reg"]

#: ggml's CPU buffers align to 32 bytes (TENSOR_ALIGNMENT); 64 keeps rows on cache lines
ALIGNMENT: Final = 64


# ================================================================================================ checks


def _host_memory() -> tuple[int, int]:
    """(available, total) bytes of RAM, from /proc/meminfo where present."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.count(":") == 1}
        return info.get("MemAvailable", info.get("MemFree", 0)), info.get("MemTotal", 0)
    except (OSError, ValueError, IndexError):
        pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 0
        return pages * size, pages * size


def _cpuinfo(key: str) -> str:
    """The first ``key`` line of /proc/cpuinfo ('' when unreadable: not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _cpu_name() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine() or "CPU"


def kernel_variant() -> str:
    """The vector ISA the compiled kernels target here and the int8 dot-product variant they use, without
    importing numba (the same decision as ``qdot._simd``: VNNI's ``vpdpbusd`` when the CPU has AVX-VNNI or
    AVX-512 VNNI+VL, numba targets the host CPU and ``GGML_CPU_VNNI`` is not 0; else AVX2's ``vpmaddubsw`` pair
    sums where there is AVX2, else generic sums), e.g. ``AVX-512, VNNI int8 dots``.
    """
    jit = sys.modules.get("ggml_cpu.kernels.qdot._jit")  # loaded: its verdict; else the same checks, no imports
    if jit is not None:
        reason = jit.disabled_reason()
    elif os.environ.get("GGML_CPU_NUMBA", "1").strip().lower() in ("0", "false", "no", "off"):
        reason = "disabled by GGML_CPU_NUMBA=0"
    else:
        try:
            found = importlib.util.find_spec("numba") is not None
        except (ImportError, ValueError):  # a broken or blocked install
            found = False
        reason = None if found else "numba is not installed: pip install numba"
    if reason is not None:
        return f"numpy only ({reason})"
    flags = set(_cpuinfo("flags").split())
    if {"avx512f", "avx512bw", "avx512vl"} <= flags:
        isa = "AVX-512"
    elif "avx2" in flags:
        isa = "AVX2"
    elif flags:
        isa = "SSE" if "sse4_2" in flags else "baseline x86-64"
    else:
        isa = platform.machine() or "unknown ISA"
    target = os.environ.get("NUMBA_CPU_NAME")  # numba compiling for another CPU: no host features
    has_vnni = "avx_vnni" in flags or ("avx512_vnni" in flags and "avx512vl" in flags)
    why = "no VNNI" if not has_vnni else "GGML_CPU_VNNI=0"
    if target:
        dots = "generic int8 dots"
    elif has_vnni and os.environ.get("GGML_CPU_VNNI", "1") != "0":
        dots = "VNNI int8 dots (vpdpbusd)"
    elif "avx2" in flags:
        dots = f"AVX2 int8 pair sums (vpmaddubsw, {why})"
    else:
        dots = f"generic int8 dots ({why})"
    return f"numba for {'NUMBA_CPU_NAME=' + target if target else 'this CPU'}: {isa}, {dots}"


#: the CPU flags OpenBLAS's AVX-512 (SkylakeX) kernels need, as /proc/cpuinfo names them
_AVX512_FLAGS = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})


def blas_kernels(cpu_flags: frozenset[str] | set[str] | None = None) -> str:
    """Which kernels OpenBLAS chose for this CPU (its core name), and a warning when ``OPENBLAS_CORETYPE`` holds
    it to narrower vectors than the CPU has: OpenBLAS reads that variable once, when numpy loads it, so the f32
    products of a whole process follow it. On an AMD EPYC (Zen 5) with ``OPENBLAS_CORETYPE=Haswell`` set by the
    machine's environment, a one-thread 128 × 512 × 1536 SGEMM took 1.96 ms against 1.23 ms with OpenBLAS's own
    choice (SkylakeX). Empty when the BLAS is not OpenBLAS."""
    from ggml_cpu import threads

    fn = threads.openblas_function("get_corename")
    if fn is None:
        return ""
    fn.argtypes, fn.restype = [], ctypes.c_char_p
    core = (fn() or b"?").decode(errors="replace")
    forced = os.environ.get("OPENBLAS_CORETYPE")
    if not forced:
        return f"OpenBLAS {core} kernels"
    if cpu_flags is None:
        cpu_flags = set(_cpuinfo("flags").split())
    narrower = cpu_flags >= _AVX512_FLAGS and core.lower() in ("haswell", "zen", "sandybridge", "prescott", "core2")
    note = "; this CPU has AVX-512: unset it for OpenBLAS's AVX-512 kernels (f32 products ~1.6x)" if narrower else ""
    return f"OpenBLAS {core} kernels (OPENBLAS_CORETYPE={forced}{note})"


# ================================================================================================ buffers


class CPUBuffer(HostBuffer):
    """Host memory as one numpy ``uint8`` array (owned, or wrapping caller memory such as an mmap), with the numpy
    views the kernels made of its tensors."""

    def __init__(self, buffer_type: BufferType, mem: np.ndarray) -> None:
        super().__init__(buffer_type, mem)
        #: numpy views of tensors in this buffer, made by the kernels (see ``ggml_cpu.kernels._base.arr``)
        self.view_cache: dict[int, tuple[object, ...]] = {}

    def _free(self) -> None:
        self.view_cache.clear()
        super()._free()


def _aligned_bytes(size: int, alignment: int) -> np.ndarray:
    raw = np.zeros(size + alignment, dtype=np.uint8)
    shift = (-raw.ctypes.data) % alignment
    return raw[shift : shift + size]


class CPUBufferType(BufferType):
    """``CPU``: aligned host memory."""

    def _alloc(self, size: int) -> Buffer:
        try:
            mem = _aligned_bytes(size, self.alignment)
        except MemoryError as exc:
            from ggml_core import AllocationError

            raise AllocationError("CPU", size, _host_memory()[0], "out of host memory") from exc
        return CPUBuffer(self, mem)


class CPUMappedBufferType(BufferType):
    """``CPU_Mapped``: caller-owned host memory (e.g. an mmap'd GGUF), wrapped without copying."""

    def _alloc(self, size: int) -> Buffer:
        raise NotImplementedError("CPU_Mapped buffers come from Device.buffer_from_host_ptr, not alloc_buffer")


# ================================================================================================ backend


class CPUBackend(Backend):
    """Runs graphs synchronously: each graph is planned once and replayed (see :mod:`ggml_cpu.engine`).

    Settings (also as ``init_backend`` params, comma-separated): ``n_threads=N`` (BLAS and the compiled kernels;
    default: the CPUs this process may use), ``weights_cache=1`` (keep float32 copies of quantized / f16 weights
    for large-batch products: faster prompts, 4 bytes per weight more memory; off by default),
    ``weights_cache_mb=M`` (the cache's limit).
    """

    def __init__(self, device: CPUDevice) -> None:
        super().__init__(device)
        from ggml_cpu.engine import Engine
        from ggml_cpu.threads import default_threads

        self.engine = Engine(self.name, default_threads())
        self._types_seen = False

    @property
    def n_threads(self) -> int:
        """Threads for BLAS and the plugin's compiled kernels."""
        return self.engine.threads.n_threads

    def set_n_threads(self, n_threads: int) -> None:
        """Threads for BLAS and the plugin's compiled kernels."""
        if n_threads <= 0:
            raise ValueError(f"CPU: n_threads must be positive, got {n_threads}")
        self.engine.threads.n_threads = n_threads

    @property
    def weights_cache(self) -> WeightsCache | None:
        """The opt-in cache of dequantized weights (None: off, the default)."""
        return self.engine.weights_cache

    def set_weights_cache(self, enabled: bool, max_bytes: int | None = None) -> None:
        """Turn the dequantized-weights cache on (optionally limited to ``max_bytes``) or off (frees it)."""
        from ggml_cpu.kernels.matmul import WeightsCache

        self.engine.weights_cache = WeightsCache(max_bytes) if enabled else None
        self.engine.forget()  # MUL_MAT thunks hold the cache they were bound with

    def graph_compute_async(self, graph: Graph) -> None:
        """Compute every node in order (synchronous: the work is done when this returns)."""
        if not self._types_seen:
            self._types_seen = True
            _compile_ahead(graph)
        self.engine.compute(graph, self.abort_callback)

    def free(self) -> None:
        """Drop the plans and the weights cache."""
        self.engine.forget()
        self.engine.weights_cache = None


def _compile_ahead(graph: Graph) -> None:
    """Name the weight types of the first graph's quantized products to the compiler (in the order the graph uses
    them): when this process has to compile their kernels, a worker compiles them too, from the other end
    (:func:`ggml_cpu.kernels.qdot.compile_ahead`)."""
    from ggml_core import GGMLOp
    from ggml_cpu.kernels.qdot import BLOCK_KERNEL_TYPES, compile_ahead

    products = (GGMLOp.MUL_MAT, GGMLOp.MUL_MAT_ID)
    found = [n.src[0].type for n in graph.nodes if n.op in products and n.src and n.src[0] is not None]
    compile_ahead([t.name for t in dict.fromkeys(found) if t in BLOCK_KERNEL_TYPES])


# ================================================================================================ device


class CPUDevice(Device):
    """The host CPU."""

    type = DeviceType.CPU
    caps = DeviceCaps(asynchronous=False, host_buffer=False, buffer_from_host_ptr=True, events=False)

    def __init__(self) -> None:
        blas = blas_kernels()  # f32 products: which kernels OpenBLAS runs them with here
        super().__init__("CPU", f"{_cpu_name()} [{kernel_variant()}{'; f32 products: ' + blas if blas else ''}]")
        self._buft = CPUBufferType("CPU", self, alignment=ALIGNMENT, is_host=True)
        self._mapped = CPUMappedBufferType("CPU_Mapped", self, alignment=ALIGNMENT, is_host=True)

    def memory(self) -> tuple[int, int]:
        """Available and total RAM."""
        return _host_memory()

    def buffer_type(self) -> BufferType:
        """Aligned host memory."""
        return self._buft

    def buffer_from_host_ptr(self, memory: np.ndarray | memoryview, max_tensor_size: int = 0) -> Buffer:
        """Wrap host memory (an mmap, a numpy array) as a buffer without copying."""
        arr = np.frombuffer(memory, dtype=np.uint8) if isinstance(memory, memoryview) else memory
        if arr.dtype != np.uint8 or arr.ndim != 1:
            arr = arr.reshape(-1).view(np.uint8)
        return CPUBuffer(self._mapped, arr)

    def init_backend(self, params: str | None = None) -> Backend:
        """A new CPU stream; ``params``: ``"n_threads=N,weights_cache=1,weights_cache_mb=M"`` (any subset)."""
        backend = CPUBackend(self)
        settings: dict[str, str] = {}
        for item in (params or "").split(","):
            if item.strip():
                key, _, value = item.partition("=")
                settings[key.strip()] = value.strip()
        unknown = sorted(set(settings) - {"n_threads", "weights_cache", "weights_cache_mb"})
        try:
            if unknown:
                raise ValueError(f"unknown setting(s) {', '.join(unknown)}")
            if "n_threads" in settings:
                backend.set_n_threads(int(settings["n_threads"]))
            if settings.get("weights_cache", "0").lower() in ("1", "true", "yes", "on"):
                limit = settings.get("weights_cache_mb")
                backend.set_weights_cache(True, int(limit) << 20 if limit else None)
        except ValueError as exc:
            raise ValueError(
                f"CPU: bad backend params {params!r} ({exc}); expected n_threads=N, weights_cache=0|1, "
                "weights_cache_mb=M"
            ) from exc
        return backend

    def supports_op(self, op: Tensor) -> bool:
        """Every op with a numpy kernel, on host-readable operands."""
        return (_SUPPORTS or _load_supports())(op)

    def supports_buft(self, buft: BufferType) -> bool:
        """Any host buffer type."""
        return buft.is_host


_SUPPORTS: Callable[[Tensor], bool] | None = None


def _load_supports() -> Callable[[Tensor], bool]:
    """Import the kernels (filling their table) on the first supports_op; later calls skip the import."""
    global _SUPPORTS
    from ggml_cpu import kernels

    _SUPPORTS = kernels.supports
    return _SUPPORTS


# ================================================================================================ registration


class CPUReg(BackendReg):
    """The ``CPU`` backend registry: one device."""

    def __init__(self) -> None:
        super().__init__("CPU", description="numpy on the host CPU", priority=0)

    def enumerate_devices(self) -> list[Device]:
        """The single CPU device."""
        return [CPUDevice()]

    def set_n_threads(self, backend: Backend, n_threads: int) -> None:
        """ggml's ``ggml_backend_set_n_threads`` proc address."""
        backend.set_n_threads(n_threads)

    def features(self) -> dict[str, str]:
        """numpy version, the BLAS it uses, and the compiled kernels' state."""
        out = {"numpy": np.__version__}
        try:
            cfg = np.show_config(mode="dicts")
            blas = cfg.get("Build Dependencies", {}).get("blas", {})
            if blas:
                out["BLAS"] = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
        except Exception:  # noqa: BLE001 - informative only
            pass
        kernels = blas_kernels()
        if kernels:
            out["BLAS kernels"] = kernels
        from ggml_cpu.engine import describe

        out["kernels"] = kernel_variant()
        out.update(describe())
        return out


_REG: CPUReg | None = None


def cpu_reg() -> CPUReg:
    """The process-wide CPU registry (one per process, like ggml's)."""
    global _REG
    if _REG is None:
        _REG = CPUReg()
    return _REG


@hookimpl
def ggml_api_version() -> int:
    """This plugin speaks the current plugin API."""
    return API_VERSION


@hookimpl
def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
    """Register the CPU registry."""
    register(cpu_reg())
