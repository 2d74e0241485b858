"""Op → kernel plumbing: the kernel table, kernel arguments in C layout, launch geometry, scratch memory.

A kernel in :data:`KERNELS` is a *binder*: it turns one graph node into the kernel launches that compute it,
``KERNELS.get(node)(node, ctx) -> [Launch]``. Binding happens once per graph (the backend caches plans); a launch's
arguments are already resolved to device pointers, except scratch memory, which is placed after every node of the
graph has said how much it needs.

Arguments are typed so that packing follows the C ABI of the kernels' parameter lists: ``P`` a pointer, ``i`` an
``int``, ``q`` a ``long long``, ``f`` a ``float`` and ``T`` a :c:type:`TDesc` (``long long ne[4], nb[4]``, passed
by value). The tests compare these codes with the parameter lists nvcc writes into the PTX of every kernel.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from ggml_core import GGMLType, Tensor, TensorError
from ggml_core.backend import KernelTable

__all__ = [
    "ARG_LAYOUT",
    "KERNELS",
    "STATUS",
    "Args",
    "BindContext",
    "Binder",
    "Launch",
    "Scratch",
    "flat_grid",
    "pack_args",
    "rows_grid",
    "src",
    "type_id",
]

#: (size, alignment) in bytes of each argument code, as the kernels declare them
ARG_LAYOUT: Final = {"P": (8, 8), "i": (4, 4), "q": (8, 8), "f": (4, 4), "T": (64, 8)}

_STRUCT_CODE: Final = {"P": "Q", "i": "i", "q": "q", "f": "f", "T": "8q"}

#: the most blocks a grid dimension is given; kernels loop (grid-stride) over the rest
MAX_GRID_X: Final = 1 << 20
MAX_GRID_Y: Final = 65535


@dataclass(frozen=True)
class Scratch:
    """A pointer ``offset`` bytes into the backend's scratch area (resolved when the plan is finished)."""

    offset: int


class _Status:
    """The backend's 4-byte status word, where kernels report bad row indices (see common.cuh)."""

    def __repr__(self) -> str:
        return "STATUS"


#: placeholder for the status word pointer
STATUS: Final = _Status()

ArgValue = int | float | Scratch | _Status | tuple[int, ...]


@dataclass
class Args:
    """A kernel's parameter list, built in declaration order."""

    codes: list[str] = field(default_factory=list)
    values: list[ArgValue] = field(default_factory=list)

    def ptr(self, p: int | Scratch | _Status) -> Args:
        """A pointer (device address, scratch or the status word)."""
        self.codes.append("P")
        self.values.append(p)
        return self

    def desc(self, ne: Sequence[int], nb: Sequence[int]) -> Args:
        """A TDesc: four element counts and four byte strides."""
        if len(ne) != 4 or len(nb) != 4:
            raise ValueError(f"a tensor descriptor needs 4 ne and 4 nb, got {list(ne)} / {list(nb)}")
        self.codes.append("T")
        self.values.append((*(int(n) for n in ne), *(int(b) for b in nb)))
        return self

    def tdesc(self, t: Tensor) -> Args:
        """The TDesc of a tensor."""
        return self.desc(t.ne, t.nb)

    def i32(self, v: int) -> Args:
        """An ``int``."""
        v = int(v)
        if not -(2**31) <= v < 2**31:
            raise OverflowError(f"kernel argument {v} does not fit in an int")
        self.codes.append("i")
        self.values.append(v)
        return self

    def i64(self, v: int) -> Args:
        """A ``long long``."""
        self.codes.append("q")
        self.values.append(int(v))
        return self

    def f32(self, v: float) -> Args:
        """A ``float``."""
        self.codes.append("f")
        self.values.append(float(v))
        return self


@dataclass(frozen=True)
class Launch:
    """One kernel launch: which kernel, its geometry, its arguments and its dynamic shared memory."""

    module: str
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    codes: str
    values: tuple[ArgValue, ...]
    shared: int = 0

    @staticmethod
    def of(module: str, kernel: str, grid: Sequence[int], block: Sequence[int], args: Args, shared: int = 0) -> Launch:
        """Build a launch, checking the geometry."""
        g = tuple(int(x) for x in (*grid, 1, 1)[:3])
        b = tuple(int(x) for x in (*block, 1, 1)[:3])
        if any(x < 1 for x in g) or any(x < 1 for x in b) or b[0] * b[1] * b[2] > 1024:
            raise ValueError(f"{kernel}: invalid launch geometry grid={g} block={b}")
        if g[1] > MAX_GRID_Y or g[2] > MAX_GRID_Y or g[0] > 2**31 - 1:
            raise ValueError(f"{kernel}: grid {g} exceeds CUDA's limits")
        return Launch(module, kernel, g, b, "".join(args.codes), tuple(args.values), shared)  # type: ignore[arg-type]


def pack_args(codes: str, values: Sequence[ArgValue], scratch_base: int = 0, status_ptr: int = 0) -> bytes:
    """The kernel parameter buffer in C layout (natural alignment, no trailing padding)."""
    flat: list[int | float] = []
    for code, value in zip(codes, values, strict=True):
        if code == "P":
            if isinstance(value, Scratch):
                flat.append(scratch_base + value.offset)
            elif isinstance(value, _Status):
                flat.append(status_ptr)
            else:
                flat.append(int(value))  # type: ignore[arg-type]
        elif code == "T":
            flat.extend(value)  # type: ignore[arg-type]
        else:
            flat.append(value)  # type: ignore[arg-type]
    fmt = "@" + "".join(_STRUCT_CODE[c] for c in codes)
    return struct.pack(fmt, *flat)


# ================================================================================================ binding context


class BindContext:
    """What a binder may ask while binding one node: device pointers, scratch space, the device's architecture.

    :param resolve: tensor → device address of its first byte (raises for tensors outside the device's memory)
    :param compute_capability: the device's (major, minor)
    """

    def __init__(self, resolve: Callable[[Tensor], int], compute_capability: tuple[int, int]) -> None:
        self._resolve = resolve
        self.compute_capability = compute_capability
        #: scratch bytes the current node needs (offsets restart at 0 for each node: nodes run one after another)
        self.node_scratch = 0

    def ptr(self, t: Tensor) -> int:
        """The device address of tensor ``t``."""
        return self._resolve(t)

    def begin_node(self) -> None:
        """Start a new node: its scratch offsets restart at 0."""
        self.node_scratch = 0

    def scratch(self, nbytes: int, align: int = 256) -> Scratch:
        """Reserve ``nbytes`` of scratch memory for the current node."""
        off = (self.node_scratch + align - 1) // align * align
        self.node_scratch = off + max(int(nbytes), 0)
        return Scratch(off)


# ================================================================================================ geometry


def rows_grid(ne0: int, nrows: int, max_block: int = 256) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) for the row-major elementwise kernels: x walks ne[0], y walks rows (both grid-stride)."""
    block = min(max_block, max(32, -(-ne0 // 32) * 32))
    gx = max(1, min(-(-ne0 // block), MAX_GRID_X))
    gy = max(1, min(nrows, MAX_GRID_Y))
    return (gx, gy, 1), (block, 1, 1)


def flat_grid(n: int, block: int = 256) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) for one thread per item over ``n`` items (grid-stride beyond MAX_GRID_X blocks)."""
    return (max(1, min(math.ceil(n / block), MAX_GRID_X)), 1, 1), (block, 1, 1)


def type_id(t: GGMLType) -> int:
    """The ggml type id the kernels switch on."""
    return int(t)


# ================================================================================================ kernel table

#: a CUDA kernel: turns one graph node into the launches that compute it
Binder = Callable[[Tensor, BindContext], list[Launch]]

#: op → binder; each op family's module registers with ``@KERNELS.kernel(op, ..., supports=pred)``, ``pred(node)``
KERNELS: KernelTable[Binder] = KernelTable("CUDA")


def src(node: Tensor, i: int) -> Tensor:
    """Operand ``i`` of ``node`` (raises naming the node when it is missing)."""
    s = node.src[i]
    if s is None:
        raise TensorError(node, f"operand {i} of {node.op_desc} is missing")
    return s
