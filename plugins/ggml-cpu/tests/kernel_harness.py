"""Helpers shared by the kernel tests: build one graph, run it on the CPU plugin, and (optionally) on real ggml.

``CpuGraph`` builds tensors in a fresh :class:`ggml_core.Context`, allocates everything on the CPU backend and
returns the output as numpy. ``GgmlGraph`` does the same through ggml-python's C API (``import ggml``) so a test
can compare against the real ggml CPU backend when that package is installed.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ggml_core as gc
from ggml_core import Context, GGMLType, Tensor
from ggml_core.quants import dequantize, quantize

__all__ = [
    "CpuGraph", "GgmlGraph", "count_row_jobs", "f32_dot_bound", "f32_mul_mat", "gelu_tanh_f64", "restore_threads",
    "rng",
]  # fmt: skip

_BACKEND: gc.Backend | None = None


def rng(seed: int = 0) -> np.random.Generator:
    """A seeded generator (tests stay reproducible)."""
    return np.random.default_rng(seed)


def _backend() -> gc.Backend:
    global _BACKEND
    if _BACKEND is None:
        _BACKEND = gc.init_backend("CPU")
    return _BACKEND


class CpuGraph:
    """One graph on the ggml-core CPU plugin."""

    def __init__(self) -> None:
        self.ctx = Context("kernel-test")
        self._inputs: list[tuple[Tensor, np.ndarray]] = []

    def tensor(self, values: Any, type: str | GGMLType = "f32") -> Tensor:
        """A contiguous input tensor holding ``values`` (numpy shape = (ne3, ne2, ne1, ne0), up to 4 dims)."""
        v = np.asarray(values)
        ne = list(v.shape[::-1]) or [1]
        t = self.ctx.new_tensor(type, ne)
        self._inputs.append((t, v))
        return t

    def compute(self, out: Tensor, *more: Tensor, raw: bool = False) -> np.ndarray:
        """Allocate, upload the inputs, compute ``out`` (and ``more``) and return ``out`` as numpy (4-d).

        With ``raw``, quantized results come back as rows of bytes and BF16 results as their uint16 bits.
        """
        gc.alloc_ctx_tensors(self.ctx, _backend())
        for t, v in self._inputs:
            if t.type in (GGMLType.I32, GGMLType.I64, GGMLType.I16, GGMLType.I8):
                t.set_data(v.astype(t.type.np_dtype))
            else:
                t.set_data(v.astype(np.float32) if v.dtype != np.float16 else v)
        graph = gc.build_graph([out, *more])
        _backend().graph_compute(graph)
        if raw and out.type.is_quantized:
            return out.to_numpy(dequantize=False)
        if raw and out.type == GGMLType.BF16:
            return (out.to_numpy().view(np.uint32) >> 16).astype(np.uint16)
        return out.to_numpy()


def count_row_jobs(monkeypatch: Any) -> list[int]:
    """A list that grows by one for each row job run (a split across the helpers, or its fallback on a stall);
    skips the test where the row split did not compile."""
    import pytest

    from ggml_cpu.ops import _compiled

    parts: Any = _compiled.row_split_parts()
    if parts is None:
        pytest.skip("the row split's kernels did not compile here (numba off, or not Linux x86-64)")
    calls: list[int] = []
    original = parts.RowJob.__call__

    def counted(self: object) -> int:
        calls.append(1)
        return int(original(self))

    monkeypatch.setattr(parts.RowJob, "__call__", counted)
    return calls


def f32_dot_bound(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A float32 error bound for each output of ``x · wᵀ`` (rows of ``w`` and ``x`` of ``k`` values), in any
    summation order: ``k`` roundings of the sum of the terms' magnitudes (``k · 2⁻²⁴ · Σ|x·w|``)."""
    return w.shape[1] * 2.0**-24 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T) + 1e-30


def f32_mul_mat(m: int, k: int, n: int, seed: int) -> tuple[CpuGraph, Tensor, np.ndarray, np.ndarray]:
    """A graph of one MUL_MAT: ``m × k`` f32 weights (normal random) times ``n`` activation rows; (graph, node,
    weights, activations)."""
    r = rng(seed)
    w = r.standard_normal((m, k)).astype(np.float32)
    x = r.standard_normal((n, k)).astype(np.float32)
    g = CpuGraph()
    return g, gc.ops.mul_mat(g.tensor(w), g.tensor(x)), w, x


@pytest.fixture
def restore_threads() -> Iterator[None]:
    """The CPU backend's thread count as it was before the test (use with ``pytest.mark.usefixtures``)."""
    before = _backend().n_threads
    yield
    _backend().set_n_threads(before)


def gelu_tanh_f64(x: np.ndarray) -> np.ndarray:
    """Textbook tanh-approximated GELU in float64."""
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * x * (1.0 + 0.044715 * x * x)))


# ================================================================================================ real ggml


class GgmlGraph:
    """The same kind of graph built with ggml-python's C API on ``ggml_backend_cpu_init`` (needs ``import ggml``).

    :param use_ref: force ggml's reference (non-tiled, non-split) kernels where the CPU backend has them
    """

    def __init__(self, use_ref: bool = False) -> None:
        import ggml

        self.g = ggml
        params = ggml.ggml_init_params(mem_size=64 * 1024 * 1024, mem_buffer=None, no_alloc=True)
        self.ctx = ggml.ggml_init(params)
        self.use_ref = use_ref
        self._inputs: list[tuple[Any, bytes]] = []

    def __getattr__(self, name: str) -> Any:
        """``gg.mul_mat(a, b)`` calls ``ggml_mul_mat(ctx, a, b)``."""
        fn = getattr(self.g, f"ggml_{name}")
        return lambda *args: fn(self.ctx, *args)

    def tensor(self, values: Any, type: str | GGMLType = "f32") -> Any:
        """An input tensor holding ``values`` converted to ``type`` with ggml-core's (bit-exact) converters."""
        t_type = gc.as_type(type)
        v = np.asarray(values)
        ne = list(v.shape[::-1]) + [1] * (4 - v.ndim)
        t = self.g.ggml_new_tensor_4d(self.ctx, int(t_type), *ne)
        if t_type.np_dtype is not None and t_type != GGMLType.BF16:
            raw = np.ascontiguousarray(v, dtype=t_type.np_dtype).tobytes()
        else:
            raw = quantize(np.ascontiguousarray(v, dtype=np.float32), t_type).tobytes()
        self._inputs.append((t, raw))
        return t

    def compute(self, out: Any, n_threads: int = 1, raw: bool = False) -> np.ndarray:
        """Run the graph of ``out`` on ggml's CPU backend; ``out`` comes back as numpy (4-d), like
        :meth:`CpuGraph.compute`: plain types in their dtype, BF16 as float32 and quantized types dequantized, or
        with ``raw`` BF16 as uint16 bits and quantized types as rows of bytes.
        """
        g = self.g
        graph = g.ggml_new_graph(self.ctx)
        g.ggml_build_forward_expand(graph, out)
        backend = g.ggml_backend_cpu_init()
        g.ggml_backend_cpu_set_n_threads(backend, n_threads)
        if self.use_ref:
            g.ggml_backend_cpu_set_use_ref(backend, True)
        buf = g.ggml_backend_alloc_ctx_tensors(self.ctx, backend)
        try:
            for t, data in self._inputs:
                g.ggml_backend_tensor_set(t, ctypes.c_char_p(data), 0, len(data))
            g.ggml_backend_graph_compute(backend, graph)
            o = out.contents
            ne = [int(o.ne[i]) for i in range(4)]
            nb = [int(o.nb[i]) for i in range(4)]
            n = int(g.ggml_nbytes(out))
            raw_out = (ctypes.c_uint8 * n)()
            g.ggml_backend_tensor_get(out, ctypes.cast(raw_out, ctypes.c_void_p), 0, n)
            out_type = GGMLType(int(o.type))
            if out_type.is_quantized:  # rows of raw bytes, like Tensor.to_numpy(dequantize=False)
                row = ne[0] // out_type.block_size * out_type.type_size
                shape, strides, dtype = (ne[3], ne[2], ne[1], row), (nb[3], nb[2], nb[1], 1), np.dtype(np.uint8)
            else:
                shape, strides = (ne[3], ne[2], ne[1], ne[0]), (nb[3], nb[2], nb[1], nb[0])
                dtype = np.dtype(np.uint16) if out_type == GGMLType.BF16 else out_type.np_dtype
            result = np.ndarray(shape, dtype=dtype, buffer=bytes(raw_out), strides=strides).copy()
            if raw or not (out_type.is_quantized or out_type == GGMLType.BF16):
                return result
            if out_type == GGMLType.BF16:
                return (result.astype(np.uint32) << 16).view(np.float32)
            return dequantize(result, out_type)
        finally:
            g.ggml_backend_buffer_free(buf)
            g.ggml_backend_free(backend)
            g.ggml_free(self.ctx)
