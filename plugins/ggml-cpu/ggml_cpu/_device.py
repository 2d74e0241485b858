"""The CPU device and its backend: each graph is planned once — every node bound to its kernel (see
:mod:`ggml_cpu.ops`) over preallocated views — and the plan replayed on later computes of the same, identically
allocated graph (:mod:`ggml_cpu.engine`).

The kernels, the engine and the compiled code load on first use (a backend, supports_op), so that listing devices
does not pay for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ggml_core import Backend, Buffer, BufferType, Device, DeviceCaps, DeviceType, GGMLOp, Graph, Tensor
from ggml_cpu._buffers import ALIGNMENT, CPUBuffer, CPUBufferType, CPUMappedBufferType
from ggml_cpu._cpu import blas_kernels, cpu_name, host_memory, kernel_variant

if TYPE_CHECKING:
    from ggml_cpu.ops.matmul import WeightsCache

__all__ = ["CPUBackend", "CPUDevice"]


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
        from ggml_cpu.ops.matmul import WeightsCache

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
    (:func:`ggml_cpu.quant.compile_ahead`)."""
    from ggml_cpu.quant import BLOCK_KERNEL_TYPES, compile_ahead

    products = (GGMLOp.MUL_MAT, GGMLOp.MUL_MAT_ID)
    found = [n.src[0].type for n in graph.nodes if n.op in products and n.src and n.src[0] is not None]
    compile_ahead([t.name for t in dict.fromkeys(found) if t in BLOCK_KERNEL_TYPES])


class CPUDevice(Device):
    """The host CPU."""

    type = DeviceType.CPU
    caps = DeviceCaps(asynchronous=False, host_buffer=False, buffer_from_host_ptr=True, events=False)

    def __init__(self) -> None:
        blas = blas_kernels()  # f32 products: which kernels OpenBLAS runs them with here
        super().__init__("CPU", f"{cpu_name()} [{kernel_variant()}{'; f32 products: ' + blas if blas else ''}]")
        self._buft = CPUBufferType("CPU", self, alignment=ALIGNMENT, is_host=True)
        self._mapped = CPUMappedBufferType("CPU_Mapped", self, alignment=ALIGNMENT, is_host=True)

    def memory(self) -> tuple[int, int]:
        """Available and total RAM."""
        return host_memory()

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
    from ggml_cpu import ops

    _SUPPORTS = ops.KERNELS.supports
    return _SUPPORTS
