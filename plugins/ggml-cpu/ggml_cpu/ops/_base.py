"""Kernel plumbing: the kernel table, numpy views of tensors in host memory, type conversions.

A kernel is a *binder*: ``bind(node) -> thunk``. Binding resolves every operand to a numpy view once; the thunk
does the arithmetic. The backend caches thunks per graph, so replaying a graph costs one call per node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np

from ggml_core import ComputeError, GGMLType, Tensor, TensorError
from ggml_core.backend import KernelTable
from ggml_core.quants import dequantize, quantize
from ggml_cpu.quant import from_float

__all__ = [
    "FLOAT_TYPES",
    "KERNELS",
    "Binder",
    "Thunk",
    "arr",
    "check_index_range",
    "f32",
    "host",
    "store",
    "view_at",
]

Thunk = Callable[[], None]
Binder = Callable[[Tensor], Thunk]

FLOAT_TYPES: Final = frozenset({GGMLType.F32, GGMLType.F16, GGMLType.BF16})

#: op → binder and support predicate (``supports(node)``, no context); importing :mod:`ggml_cpu.ops` fills it
KERNELS: Final[KernelTable[Binder]] = KernelTable("CPU")


def host(t: Tensor) -> np.ndarray:
    """The host memory of ``t``'s buffer (all of it, as bytes); a clear error when ``t`` has none the CPU reads."""
    buf = t.buffer
    if buf is None or t.data_offset is None:
        raise TensorError(t, "has no memory; allocate the graph before computing it")
    memory = buf.host_array()
    if memory is None:
        raise TensorError(t, f"lives in {buf.name} memory, which the CPU cannot read directly")
    return memory


#: views kept per buffer (``CPUBuffer.view_cache``) are dropped past this many, so long runs do not accumulate them
_VIEW_CACHE_LIMIT = 8192


def arr(t: Tensor) -> np.ndarray:
    """A zero-copy strided view of ``t`` with numpy shape ``(ne3, ne2, ne1, ne0)``.

    F32/F16/I* come back in their dtype, BF16 as uint16 bits, quantized types as rows of bytes
    ``(ne3, ne2, ne1, row_size)``. Views are remembered by the buffer (keyed by tensor, checked against its offset,
    shape, strides and type), so a kernel that asks on every call pays a dictionary lookup, not a new view; the
    buffer forgets them when it is freed.
    """
    cache = getattr(t.buffer, "view_cache", None)
    if cache is not None:
        hit = cache.get(t.id)
        if hit is not None and hit[0] == t.data_offset and hit[1] == t.ne and hit[2] == t.nb and hit[3] is t.type:
            return hit[4]
    view = _new_view(t)
    if cache is not None:
        if len(cache) >= _VIEW_CACHE_LIMIT:
            cache.clear()
        cache[t.id] = (t.data_offset, t.ne, t.nb, t.type, view)
    return view


def _new_view(t: Tensor) -> np.ndarray:
    memory = host(t)
    off = t.data_offset
    assert off is not None
    if t.type.is_quantized:
        shape: tuple[int, ...] = (t.ne[3], t.ne[2], t.ne[1], t.row_size)
        strides: tuple[int, ...] = (t.nb[3], t.nb[2], t.nb[1], 1)
        dt: np.dtype = np.dtype(np.uint8)
    else:
        plain = t.type.np_dtype
        assert plain is not None
        dt = plain
        shape = (t.ne[3], t.ne[2], t.ne[1], t.ne[0])
        strides = (t.nb[3], t.nb[2], t.nb[1], t.nb[0])
    if t.nelements == 0:
        return np.zeros(shape, dtype=dt)
    return np.ndarray(shape, dtype=dt, buffer=memory, offset=off, strides=strides)


def view_at(t: Tensor, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> np.ndarray:
    """A zero-copy view of ``t``'s memory (plain types) from byte ``offset`` past its data, with numpy ``shape``
    and byte ``strides``: the sub-view SET/ACC write. numpy refuses views that would leave the host buffer; the
    op builders check the view against the tensor's own extent.
    """
    memory = host(t)
    dt = t.type.np_dtype
    assert dt is not None and t.data_offset is not None
    return np.ndarray(shape, dtype=dt, buffer=memory, offset=t.data_offset + offset, strides=strides)


def f32(t: Tensor) -> np.ndarray:
    """``t``'s values as float32 (a view for F32, a converted copy otherwise), numpy shape."""
    a = arr(t)
    tt = t.type
    if tt == GGMLType.F32:
        return a
    if tt == GGMLType.BF16:
        return (a.astype(np.uint32) << 16).view(np.float32)
    if tt.is_quantized:
        return dequantize(np.ascontiguousarray(a), tt)
    if tt == GGMLType.F16:
        from ggml_cpu.jit.halves import f16_to_f32

        return f16_to_f32(a)
    return a.astype(np.float32)


def store(t: Tensor, values: np.ndarray) -> None:
    """Write float values (broadcastable to t's numpy shape) into ``t`` converting to its type as ggml does."""
    dst = arr(t)
    tt = t.type
    if tt in (GGMLType.F32, GGMLType.F16, GGMLType.F64) or not (tt.is_quantized or tt == GGMLType.BF16):
        with np.errstate(over="ignore", invalid="ignore"):  # f32 → f16 overflow gives inf, as in ggml
            np.copyto(dst, values, casting="unsafe")
        return
    v = np.broadcast_to(np.asarray(values, dtype=np.float32), (t.ne[3], t.ne[2], t.ne[1], t.ne[0]))
    # quantized as ggml-cpu's from_float does (x86 Q8_0 / Q8_1: 127/amax, ties to even), not the reference rounding
    np.copyto(dst, from_float(np.ascontiguousarray(v), tt).reshape(dst.shape) if tt.is_quantized else _bf16(v))


def _bf16(v: np.ndarray) -> np.ndarray:
    return quantize(np.ascontiguousarray(v, dtype=np.float32), GGMLType.BF16).view(np.uint16).reshape(v.shape)


def check_index_range(node: Tensor, idx: np.ndarray, limit: int, what: str) -> None:
    """Raise :class:`ComputeError` naming ``node`` unless every index lies in ``0..limit-1``.

    Index tensors (GET_ROWS, SET_ROWS, MUL_MAT_ID) are data, not shapes: they are checked on every run so that a
    bad index is an error naming the node, never a read or write outside a tensor or numpy's negative wraparound.
    """
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= limit):
        bad = idx[(idx < 0) | (idx >= limit)].reshape(-1)[0]
        raise ComputeError(node, "CPU", f"{what} index {int(bad)} is outside 0..{limit - 1}")
