"""Kernel dispatch: the kernel table, tensor arguments for kernels, launch helpers.

A kernel in :data:`KERNELS` is a *binder*: it turns one graph node into a thunk that enqueues its kernel(s),
``KERNELS.get(node)(backend, node) -> thunk``. Binding resolves buffers, offsets, shapes and kernel objects once;
the backend caches thunks per graph. Each op family lives in its own module of :mod:`ggml_opencl.ops` and
registers its binders with a support predicate ``supports(info, node)`` that says exactly which types and layouts
its kernel handles; the device asks ``KERNELS.supports(node, info)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import numpy as np

from ggml_core import GGMLType, Tensor, TensorError
from ggml_core.backend import KernelTable

if TYPE_CHECKING:
    from ggml_opencl._device_info import DeviceInfo

__all__ = [
    "FLOAT_TYPES",
    "KERNELS",
    "QUANT_TYPES",
    "Binder",
    "Launcher",
    "Supports",
    "Thunk",
    "chain",
    "enqueue",
    "enqueue_nd",
    "float4",
    "int4",
    "int8",
    "local_mem",
    "long4",
    "mem_of",
    "roundup",
    "targs",
    "targs_view",
]

Thunk = Callable[[], None]


class Launcher(Protocol):
    """What a binder needs from the backend (see ``OpenCLBackend``)."""

    queue: Any
    info: DeviceInfo
    context: Any
    err_buf: Any

    @property
    def name(self) -> str:
        """The device's name (for messages)."""

    def kernel(self, name: str) -> Any:
        """The ``cl.Kernel`` for ``name``."""

    def local_size(self, name: str, wanted: int) -> int:
        """``wanted`` work-items per group, lowered to what kernel ``name`` allows on this device (a power of 2)."""

    def scratch(self, slot: str, nbytes: int) -> Any:
        """A temporary device buffer of at least ``nbytes``."""

    def error_code(self, node: Tensor) -> int:
        """The code kernels report for a bad index in ``node``."""


Binder = Callable[[Launcher, Tensor], Thunk]
Supports = Callable[["DeviceInfo", Tensor], bool]

#: plain float element types every elementwise kernel reads and writes (bf16 and f16 as storage)
FLOAT_TYPES: Final = frozenset({GGMLType.F32, GGMLType.F16, GGMLType.BF16})
#: quantized types the kernels decode (``dq32`` in quants.cl)
QUANT_TYPES: Final = frozenset(
    {
        GGMLType.Q4_0,
        GGMLType.Q4_1,
        GGMLType.Q5_0,
        GGMLType.Q5_1,
        GGMLType.Q8_0,
        GGMLType.IQ4_NL,
        GGMLType.Q2_K,
        GGMLType.Q3_K,
        GGMLType.Q4_K,
        GGMLType.Q5_K,
        GGMLType.Q6_K,
        GGMLType.IQ4_XS,
        GGMLType.TQ1_0,
        GGMLType.TQ2_0,
        GGMLType.MXFP4,
        GGMLType.NVFP4,
        GGMLType.Q1_0,
    }
)

#: op → binder; each op family's module registers with ``@KERNELS.kernel(op, ..., supports=pred)``, where
#: ``pred(info, node)`` says exactly which types and layouts its kernel handles on a device
KERNELS: KernelTable[Binder] = KernelTable("OpenCL")


# ------------------------------------------------------------------------------------------------ arguments


def int4(v: Sequence[int]) -> np.ndarray:
    """An OpenCL ``int4`` argument."""
    return np.array(tuple(v), dtype=_INT4)


def long4(v: Sequence[int]) -> np.ndarray:
    """An OpenCL ``long4`` argument."""
    return np.array(tuple(v), dtype=_LONG4)


def float4(v: Sequence[float]) -> np.ndarray:
    """An OpenCL ``float4`` argument (zero-padded)."""
    vals = [*v, *[0.0] * (4 - len(v))]
    return np.array(tuple(vals), dtype=_FLOAT4)


def int8(v: Sequence[int]) -> np.ndarray:
    """An OpenCL ``int8`` argument (eight int32, zero-padded)."""
    vals = [*v, *[0] * (8 - len(v))]
    return np.array(tuple(vals), dtype=_INT8)


_INT4: Final = np.dtype({"names": ["s0", "s1", "s2", "s3"], "formats": ["<i4"] * 4})
_FLOAT4: Final = np.dtype({"names": ["s0", "s1", "s2", "s3"], "formats": ["<f4"] * 4})
_INT8: Final = np.dtype({"names": [f"s{i}" for i in range(8)], "formats": ["<i4"] * 8})
_LONG4: Final = np.dtype({"names": ["s0", "s1", "s2", "s3"], "formats": ["<i8"] * 4})


def mem_of(launcher: Launcher, t: Tensor) -> tuple[Any, int]:
    """(``cl.Buffer``, byte offset) of ``t``; raises naming the tensor when it is not in this device's context."""
    buf = t.buffer
    if buf is None or t.data_offset is None:
        raise TensorError(t, "has no memory; allocate the graph before computing it")
    mem = getattr(buf, "cl_mem", None)
    if mem is None or getattr(buf, "context", None) != launcher.context:
        raise TensorError(
            t, f"lives in {buf.name} memory, which {launcher.name}'s kernels cannot address; copy it to {launcher.name}"
        )
    return mem, t.data_offset


def targs(launcher: Launcher, t: Tensor) -> list[Any]:
    """The four kernel arguments of a ``TENSOR(x)`` parameter: buffer, byte offset, ne (int4), nb (long4)."""
    mem, off = mem_of(launcher, t)
    return [mem, np.uint64(off), int4(t.ne), long4(t.nb)]


def targs_view(
    launcher: Launcher, t: Tensor, ne: Sequence[int], extra_offset: int = 0, nb: Sequence[int] | None = None
) -> list[Any]:
    """Like :func:`targs` with another shape (and strides) at an added byte offset (halves of a row, a region...)."""
    mem, off = mem_of(launcher, t)
    return [mem, np.uint64(off + extra_offset), int4(ne), long4(t.nb if nb is None else nb)]


def roundup(n: int, m: int) -> int:
    """``n`` rounded up to a multiple of ``m``."""
    return (n + m - 1) // m * m


def enqueue(launcher: Launcher, name: str, n_items: int, args: Sequence[Any], local: int | None = None) -> Thunk:
    """A thunk launching ``name`` over ``n_items`` work-items in 1-d (kernels end with a ``long n`` guard)."""
    k = launcher.kernel(name)
    ls = launcher.local_size(name, local or launcher.info.ew_ls)
    gs = (roundup(max(n_items, 1), ls),)
    full = [*args, np.int64(n_items)]
    queue = launcher.queue

    def run() -> None:
        k(queue, gs, (ls,), *full)

    return run


def enqueue_nd(launcher: Launcher, name: str, gs: tuple[int, ...], ls: tuple[int, ...], args: Sequence[Any]) -> Thunk:
    """A thunk launching ``name`` over an explicit NDRange (global sizes already multiples of ``ls``)."""
    k = launcher.kernel(name)
    queue = launcher.queue

    def run() -> None:
        k(queue, gs, ls, *args)

    return run


def chain(*thunks: Thunk) -> Thunk:
    """One thunk running several in order."""

    def run() -> None:
        for t in thunks:
            t()

    return run


def n_items(ne: Sequence[int]) -> int:
    """Product of a shape."""
    return math.prod(ne)


def local_mem(nbytes: int) -> Any:
    """A ``__local`` kernel argument of ``nbytes``."""
    import pyopencl as cl

    return cl.LocalMemory(max(nbytes, 4))
