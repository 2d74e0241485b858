"""Kernel dispatch: the kernel table, tensor operands (bound windows + descriptors), dispatch records.

A kernel in :data:`KERNELS` is a *binder*: it turns one graph node into a list of :class:`Dispatch` records
(kernel, workgroup count, operand windows, op words); the backend records them into one compute pass. Each binder
is registered together with its support predicate ``supports(limits, node)``, which says exactly which types,
layouts and sizes its kernel handles; the device asks ``KERNELS.supports(node, limits)``.

Operands are bound as windows of a device buffer: the window starts at the tensor's first byte rounded down to
the device's storage offset alignment and must fit the largest storage binding; the kernel receives the tensor's
byte offset inside the window with its ``ne`` and ``nb`` (a 9-word descriptor).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ggml_core import GGMLType, Tensor, TensorError
from ggml_core.backend import KernelTable
from ggml_webgpu._adapters import Limits

__all__ = [
    "FLOAT_TYPES",
    "KERNELS",
    "QUANT_TYPES",
    "Binder",
    "Dispatch",
    "Launcher",
    "Limits",
    "Slot",
    "Supports",
    "elementwise",
    "extent",
    "f32",
    "fits",
    "groups_1d",
    "raw_slot",
    "row_windows",
    "slot",
    "src",
]

#: plain float element types the kernels read and write (f16 and bf16 converted with integer arithmetic)
FLOAT_TYPES: Final = frozenset({GGMLType.F32, GGMLType.F16, GGMLType.BF16})
#: quantized types decoded in-shader (``a_dq32`` in quants.wgsl)
QUANT_TYPES: Final = frozenset(
    {
        GGMLType.Q4_0,
        GGMLType.Q4_1,
        GGMLType.Q5_0,
        GGMLType.Q5_1,
        GGMLType.Q8_0,
        GGMLType.Q2_K,
        GGMLType.Q3_K,
        GGMLType.Q4_K,
        GGMLType.Q5_K,
        GGMLType.Q6_K,
        GGMLType.IQ4_NL,
        GGMLType.IQ4_XS,
        GGMLType.TQ1_0,
        GGMLType.TQ2_0,
        GGMLType.MXFP4,
        GGMLType.NVFP4,
        GGMLType.Q1_0,
    }
)
#: invocations per workgroup of every kernel (WG in common.wgsl)
WG: Final = 64


@dataclass(frozen=True)
class Slot:
    """One operand: a window of a GPU buffer and the tensor's 9-word descriptor (offset in window, ne, nb)."""

    buffer: Any
    offset: int
    size: int
    words: tuple[int, ...]


@dataclass
class Dispatch:
    """One kernel launch: ``groups`` workgroups (laid out 2-d by the backend) over operands A, B, C, D (, E, F)."""

    kernel: str
    groups: int
    slots: tuple[Slot | None, ...]
    op: list[int]


class Launcher(Protocol):
    """What a binder needs from the backend (see ``WebGPUBackend``)."""

    limits: Limits

    @property
    def name(self) -> str:
        """The device's name (for messages)."""

    def owns(self, t: Tensor) -> Any:
        """The GPU buffer holding ``t`` when it lives on this device, else None."""

    def scratch(self, slot_name: str, nbytes: int) -> Any:
        """A temporary GPU buffer of at least ``nbytes`` (reused across the nodes of a pass)."""

    def error_code(self, node: Tensor) -> int:
        """The code kernels report for a bad index in ``node``."""


Binder = Callable[[Launcher, Tensor], list[Dispatch]]
Supports = Callable[[Limits, Tensor], bool]

#: op → binder; each op family's module registers with ``@KERNELS.kernel(op, ..., supports=pred)``, where
#: ``pred(limits, node)`` says exactly which types, layouts and sizes its kernel handles
KERNELS: KernelTable[Binder] = KernelTable("WebGPU")


# ------------------------------------------------------------------------------------------------ operands


def extent(t_type: GGMLType, ne: Sequence[int], nb: Sequence[int]) -> int:
    """``ggml_nbytes`` of a view with this shape and these strides."""
    if min(ne) <= 0:
        return 0
    tail = sum((n - 1) * s for n, s in zip(ne[1:], nb[1:], strict=True))
    bs = t_type.block_size
    if bs == 1:
        return t_type.type_size + (ne[0] - 1) * nb[0] + tail
    return ne[0] * nb[0] // bs + tail


def fits(limits: Limits, *ts: Tensor | None) -> bool:
    """Every given tensor's bytes fit one storage binding (with the offset alignment's slack)."""
    return all(t is None or t.nbytes + limits.offset_alignment + 4 <= limits.max_binding for t in ts)


def slot(
    launcher: Launcher,
    t: Tensor,
    *,
    ne: Sequence[int] | None = None,
    nb: Sequence[int] | None = None,
    extra: int = 0,
    nbytes: int | None = None,
) -> Slot:
    """``t`` (or a view of it with ``ne``/``nb`` at ``extra`` more bytes) as a kernel operand; ``nbytes``
    overrides the window's byte count (for shapes counted in blocks)."""
    if t.buffer is None or t.data_offset is None:
        raise TensorError(t, "has no memory; allocate the graph before computing it")
    gpu = launcher.owns(t)
    if gpu is None:
        raise TensorError(
            t, f"lives in {t.buffer.name} memory, which {launcher.name}'s kernels cannot address; copy it there"
        )
    ne = tuple(t.ne if ne is None else ne)
    nb = tuple(t.nb if nb is None else nb)
    span = extent(t.type, ne, nb) if nbytes is None else nbytes
    return raw_slot(launcher.limits, gpu, t.data_offset + extra, span, ne, nb, what=t)


def raw_slot(
    limits: Limits, gpu: Any, offset: int, nbytes: int, ne: Sequence[int], nb: Sequence[int], what: object = None
) -> Slot:
    """A window of GPU buffer ``gpu`` covering ``nbytes`` from ``offset``, with a descriptor of ``ne``/``nb``."""
    start = offset - offset % limits.offset_alignment
    size = min(-(-(offset + max(nbytes, 1) - start) // 4) * 4, int(gpu.size) - start)
    if size > limits.max_binding:
        raise NotImplementedError(
            f"{what}: {nbytes} bytes exceed the device's largest storage binding ({limits.max_binding} bytes)"
        )
    return Slot(gpu, start, size, (offset - start, *ne, *nb))


def f32(x: float) -> int:
    """The bits of ``x`` as an f32 (op words are u32)."""
    return int(struct.unpack("<I", struct.pack("<f", float(x)))[0])


def groups_1d(n_items: int) -> int:
    """Workgroups of 64 covering ``n_items`` invocations."""
    return max(1, math.ceil(n_items / WG))


# ------------------------------------------------------------------------------------------------ binder helpers


def src(node: Tensor, i: int) -> Tensor:
    """Operand ``i`` of ``node`` (the op builders guarantee it exists)."""
    s = node.src[i]
    assert s is not None, f"{node.op_desc}: operand {i} is missing"
    return s


def elementwise(kernel_name: str, launcher: Launcher, node: Tensor, op: list[int], **slots: Tensor) -> Dispatch:
    """One invocation per element of ``node``, operands ``a``/``b``/``c`` in A/B/C, ``node`` in D."""
    n = node.nelements
    a, b, c = (slot(launcher, slots[k]) if k in slots else None for k in "abc")
    return Dispatch(kernel_name, groups_1d(n), (a, b, c, slot(launcher, node)), [n, *op])


def row_windows(limits: Limits, t: Tensor) -> list[tuple[int, int]]:
    """(first row, row count) windows of ``t``'s dimension 1, each fitting one storage binding."""
    if fits(limits, t):
        return [(0, t.ne[1])]
    tail = extent(t.type, (t.ne[0], 1, t.ne[2], t.ne[3]), t.nb)
    per = (limits.max_binding - limits.offset_alignment - tail) // t.nb[1] + 1
    if per < 1:
        raise NotImplementedError(f"{t.describe()}: its rows cannot be split into windows of the storage binding")
    return [(r, min(per, t.ne[1] - r)) for r in range(0, t.ne[1], per)]
