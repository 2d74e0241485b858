"""Tensors laid out exactly as ggml lays them out: ``ne``/``nb``, views, op, op_params, srcs, flags, buffer binding.

A tensor never owns memory. It is *described* in a :class:`~ggml_core.Context` and later *bound* to a backend
buffer (``buffer`` + ``data_offset``) by an allocator. ``ne[0]`` varies fastest: a contiguous tensor
``ne=[ne0, ne1, ne2, ne3]`` is byte-identical to a C-contiguous numpy array of shape ``(ne3, ne2, ne1, ne0)``.

The context and the buffer live in layers above this one (the context creates tensors, the buffer's methods take
them): a tensor refers to them through the protocols :class:`TensorOwner` and :class:`TensorBuffer`, which
:class:`~ggml_core.Context` and :class:`~ggml_core.Buffer` implement.
"""

from __future__ import annotations

import enum
import itertools
import operator
from collections.abc import Sequence
from typing import Any, Final, Protocol

import numpy as np

from ggml_core import _convert
from ggml_core._errors import BufferFreedError, TensorError
from ggml_core._types import GGMLType
from ggml_core.ops._enum import VIEW_OPS, GGMLOp, GluOp, UnaryOp

__all__ = [
    "MAX_BYTES",
    "MAX_DIMS",
    "MAX_NAME",
    "MAX_NE",
    "MAX_OP_PARAMS",
    "MAX_SRC",
    "Tensor",
    "TensorBuffer",
    "TensorFlag",
    "TensorOwner",
]

MAX_DIMS: Final = 4
MAX_SRC: Final = 10
MAX_OP_PARAMS: Final = 64  # bytes
MAX_NAME: Final = 64  # bytes, NUL included
#: ggml's ``ne`` and element counts are int64
MAX_NE: Final = 2**63 - 1
#: ggml's byte sizes are size_t; offsets into a buffer (and Python's buffers) are signed, so this is the bound
MAX_BYTES: Final = 2**63 - 1

_ids = itertools.count(1)


class TensorFlag(enum.IntFlag):
    """``GGML_TENSOR_FLAG_*``."""

    INPUT = 1  #: an input of the graph: placed on the CPU, allocated first, never overwritten by the allocator
    OUTPUT = 2  #: an output of the graph: never freed by the allocator
    PARAM = 4  #: trainable parameter
    LOSS = 8  #: defines a loss
    COMPUTE = 16  #: must be computed (set by build_forward_expand on every node it reaches)


class TensorOwner(Protocol):
    """The context a tensor is described in (a :class:`~ggml_core.Context`), as a tensor sees it: a name."""

    name: str


class TensorBuffer(Protocol):
    """The memory a tensor is bound to (a :class:`~ggml_core.Buffer`), as code holding the tensor uses it.

    The tensor-level half of :class:`~ggml_core.Buffer`: its state and its bounds-checked tensor accesses. Code that
    needs the buffer's type or device asks :func:`ggml_core.backend.interfaces.buffer_of` for the Buffer itself.
    """

    @property
    def name(self) -> str:
        """The buffer type's name."""

    @property
    def freed(self) -> bool:
        """True once the memory was released."""

    @property
    def is_host(self) -> bool:
        """True when the memory is host memory with ggml's standard layout."""

    @property
    def usage(self) -> int:
        """What the buffer holds (a :class:`~ggml_core.BufferUsage`)."""

    def host_array(self) -> np.ndarray | None:
        """The whole buffer as a writable uint8 numpy array, for host buffers; None otherwise."""

    def init_tensor(self, tensor: Tensor) -> None:
        """Called when a tensor is bound to the buffer."""

    def set_tensor(self, t: Tensor, data: memoryview, offset: int = 0) -> None:
        """Write ``data`` at byte ``offset`` of ``t``."""

    def get_tensor(self, t: Tensor, out: memoryview, offset: int = 0) -> None:
        """Fill ``out`` from byte ``offset`` of ``t``."""

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
        """Write ``n_copies`` rows of ``size`` bytes into ``t`` (see :meth:`ggml_core.Buffer.set_tensor_2d`)."""

    def memset_tensor(self, t: Tensor, value: int, offset: int = 0, size: int | None = None) -> None:
        """Set bytes of ``t`` to ``value``."""

    def cpy_tensor(self, src: Tensor, dst: Tensor) -> bool:
        """Copy ``src`` into ``dst`` (in this buffer) directly if this pair supports it."""

    def _tensor_span(self, t: Tensor, offset: int, size: int) -> int:
        """The buffer offset of bytes ``offset .. offset + size`` of ``t``, bounds-checked."""


class Tensor:
    """One ggml tensor: shape, strides, type, the op that produces it and the memory it is bound to.

    Create tensors with :meth:`Context.new_tensor` and the op builders in :mod:`ggml_core.ops`, not directly.
    """

    __slots__ = (
        "__weakref__",
        "_name",
        "buffer",
        "ctx",
        "data_offset",
        "extra",
        "flags",
        "id",
        "nb",
        "ne",
        "op",
        "op_params",
        "src",
        "type",
        "view_offs",
        "view_src",
    )

    #: owning context
    ctx: TensorOwner | None
    #: element type
    type: GGMLType
    #: number of elements per dimension, ne[0] fastest
    ne: tuple[int, int, int, int]
    #: stride in bytes per dimension
    nb: tuple[int, int, int, int]
    #: the op producing this tensor (NONE for leafs)
    op: GGMLOp
    #: ggml's 64 bytes of op parameters, as 16 int32 (floats are stored bit-cast, as ggml does)
    op_params: np.ndarray
    #: TensorFlag bits, kept as a plain int (IntFlag arithmetic is many times slower in hot loops)
    flags: int
    #: the op's operands, up to 10 (None for absent ones)
    src: list[Tensor | None]
    #: the tensor whose memory this view aliases (always a non-view tensor), or None
    view_src: Tensor | None
    #: byte offset of this view inside view_src
    view_offs: int
    #: the buffer holding the data, once allocated
    buffer: TensorBuffer | None
    #: byte offset of element 0 inside ``buffer`` (ggml's ``data`` pointer, relative to the buffer)
    data_offset: int | None
    #: free slot for backends (ggml's ``extra``)
    extra: Any
    #: a process-unique id (stable identity for hashing, RPC ids, debug output)
    id: int

    def __init__(
        self,
        ctx: TensorOwner | None,
        type: GGMLType,
        ne: Sequence[int],
        *,
        nb: Sequence[int] | None = None,
        view_src: Tensor | None = None,
        view_offs: int = 0,
        name: str = "",
    ) -> None:
        ne4 = _pad4(ne, 1, "ne", name)
        if any(n < 0 for n in ne4):
            raise TensorError(name or "(new)", f"negative dimension in ne={list(ne4)}")
        if ne4[0] * ne4[1] * ne4[2] * ne4[3] > MAX_NE:
            raise TensorError(
                name or "(new)", f"ne={list(ne4)} has more than 2^63-1 elements (ggml counts elements in int64)"
            )
        if ne4[0] % type.block_size:
            raise TensorError(
                name or "(new)",
                f"ne[0]={ne4[0]} is not a multiple of {type.traits.name}'s block size {type.block_size}",
            )
        if nb is None:
            nb0 = type.type_size
            nb1 = nb0 * (ne4[0] // type.block_size)
            nb2 = nb1 * ne4[1]
            nb3 = nb2 * ne4[2]
            nb4 = (nb0, nb1, nb2, nb3)
        else:
            nb4 = _pad4(nb, 0, "nb", name)
        # ggml: a view of a view points at the base tensor with the offsets added
        if view_src is not None and view_src.view_src is not None:
            view_offs += view_src.view_offs
            view_src = view_src.view_src
        self.ctx = ctx
        self.type = type
        self.ne = ne4
        self.nb = nb4
        self.op = GGMLOp.NONE
        self.op_params = np.zeros(MAX_OP_PARAMS // 4, dtype=np.int32)
        self.flags = 0
        self.src = [None] * MAX_SRC
        self.view_src = view_src
        self.view_offs = view_offs
        self.buffer = None
        self.data_offset = None
        self.extra = None
        self.id = next(_ids)
        self._name = ""
        self.name = name
        if self.nbytes > MAX_BYTES:
            raise TensorError(self, f"needs {self.nbytes} bytes, over the 2^63-1 a buffer can address")
        if view_src is not None:
            self._check_view_extent()
            if view_src.buffer is not None and view_src.data_offset is not None:
                self.buffer = view_src.buffer
                self.data_offset = view_src.data_offset + view_offs

    # ----------------------------------------------------------------------------------------------- naming

    @property
    def name(self) -> str:
        """The tensor's name (ggml keeps at most 63 bytes)."""
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        raw = value.encode("utf-8")[: MAX_NAME - 1]
        self._name = raw.decode("utf-8", errors="ignore")

    def set_name(self, name: str) -> Tensor:
        """Set the name and return the tensor (for chaining, like ``ggml_set_name``)."""
        self.name = name
        return self

    @property
    def op_desc(self) -> str:
        """``ggml_op_desc``: the sub-op's name for UNARY and GLU, the op's name otherwise."""
        if self.op == GGMLOp.UNARY:
            return UnaryOp(int(self.op_params[0])).name
        if self.op == GGMLOp.GLU:
            return GluOp(int(self.op_params[0])).name
        return self.op.name

    def describe(self) -> str:
        """A short description for messages: ``'q' (f32, ne=[64, 8, 1, 1])``."""
        return f"{self.name or '#' + str(self.id)!r} ({self.type.traits.name}, ne={list(self.ne)})"

    def __repr__(self) -> str:
        op = "" if self.op == GGMLOp.NONE else f", op={self.op_desc}"
        return f"Tensor({self.name or '#' + str(self.id)!r}, {self.type.traits.name}, ne={list(self.ne)}{op})"

    # ------------------------------------------------------------------------------------------- geometry

    @property
    def nelements(self) -> int:
        """Total number of elements."""
        return self.ne[0] * self.ne[1] * self.ne[2] * self.ne[3]

    @property
    def nrows(self) -> int:
        """Number of rows (``ne[1]*ne[2]*ne[3]``)."""
        return self.ne[1] * self.ne[2] * self.ne[3]

    @property
    def n_dims(self) -> int:
        """``ggml_n_dims``: index of the last dimension > 1, plus one (at least 1)."""
        for i in range(MAX_DIMS - 1, 0, -1):
            if self.ne[i] > 1:
                return i + 1
        return 1

    @property
    def nbytes(self) -> int:
        """``ggml_nbytes``: bytes from the first to one past the last element, following the strides."""
        ne0, ne1, ne2, ne3 = self.ne
        if ne0 <= 0 or ne1 <= 0 or ne2 <= 0 or ne3 <= 0:
            return 0
        nb0, nb1, nb2, nb3 = self.nb
        tail = (ne1 - 1) * nb1 + (ne2 - 1) * nb2 + (ne3 - 1) * nb3
        bs = self.type.block_size
        if bs == 1:
            return self.type.type_size + (ne0 - 1) * nb0 + tail
        return ne0 * nb0 // bs + tail

    @property
    def row_size(self) -> int:
        """Bytes of one contiguous row of ``ne[0]`` elements."""
        return self.ne[0] // self.type.block_size * self.type.type_size

    def _contiguous_m(self, m: int) -> bool:
        # ggml_is_contiguous_m_n(t, m, 4): dimensions above m must be packed (size-1 dimensions are free)
        next_nb = self.type.type_size
        if self.ne[0] != self.type.block_size and self.nb[0] != next_nb:
            return False
        next_nb *= self.ne[0] // self.type.block_size
        for i in range(1, MAX_DIMS):
            if i > m:
                if self.ne[i] != 1 and self.nb[i] != next_nb:
                    return False
                next_nb *= self.ne[i]
            else:
                next_nb = self.ne[i] * self.nb[i]
        return True

    @property
    def is_contiguous(self) -> bool:
        """``ggml_is_contiguous``: elements packed with no gaps (size-1 dimensions may have any stride)."""
        return self._contiguous_m(0)

    @property
    def is_contiguous_1(self) -> bool:
        """``ggml_is_contiguous_1``: contiguous for dimensions >= 1 (rows packed, rows may be apart)."""
        return self._contiguous_m(1)

    @property
    def is_contiguous_2(self) -> bool:
        """``ggml_is_contiguous_2``: contiguous for dimensions >= 2."""
        return self._contiguous_m(2)

    @property
    def is_padded_1d(self) -> bool:
        """``ggml_is_padded_1d``: packed elements and packed dims 2, 3 (rows may be padded)."""
        return (
            self.nb[0] == self.type.type_size
            and self.nb[2] == self.nb[1] * self.ne[1]
            and self.nb[3] == self.nb[2] * self.ne[2]
        )

    @property
    def is_contiguous_rows(self) -> bool:
        """``ggml_is_contiguous_rows``: each row's elements are packed."""
        return self.ne[0] == self.type.block_size or self.nb[0] == self.type.type_size

    @property
    def is_transposed(self) -> bool:
        """``ggml_is_transposed``: nb[0] > nb[1]."""
        return self.nb[0] > self.nb[1]

    @property
    def is_permuted(self) -> bool:
        """``ggml_is_permuted``: strides not in increasing order."""
        return self.nb[0] > self.nb[1] or self.nb[1] > self.nb[2] or self.nb[2] > self.nb[3]

    @property
    def is_empty(self) -> bool:
        """True when any dimension is 0."""
        return any(n == 0 for n in self.ne)

    @property
    def is_view(self) -> bool:
        """True when this tensor aliases another tensor's memory."""
        return self.view_src is not None

    @property
    def is_view_op(self) -> bool:
        """True for VIEW/RESHAPE/PERMUTE/TRANSPOSE nodes, which run no kernel."""
        return self.op in VIEW_OPS

    def same_shape(self, other: Tensor) -> bool:
        """``ggml_are_same_shape``."""
        return self.ne == other.ne

    def can_repeat_to(self, other: Tensor) -> bool:
        """``ggml_can_repeat(self, other)``: self tiles ``other`` an integer number of times in every dimension."""
        if self.is_empty:
            return other.is_empty
        return all(self.ne[i] > 0 and other.ne[i] % self.ne[i] == 0 for i in range(MAX_DIMS))

    def _check_view_extent(self) -> None:
        base = self.view_src
        assert base is not None
        if self.view_offs < 0:
            raise TensorError(self, f"negative view offset {self.view_offs}")
        if self.is_empty:
            return
        if any(s < 0 for s in self.nb):
            raise TensorError(self, f"negative stride in nb={list(self.nb)}")
        end = self.view_offs + self.nbytes
        if end > base.nbytes:
            raise TensorError(
                self,
                f"view reaches byte {end} of its source {base.describe()}, which has only {base.nbytes} bytes "
                f"(offset {self.view_offs}, ne={list(self.ne)}, nb={list(self.nb)})",
            )

    # ------------------------------------------------------------------------------------------- op params

    def op_param_i32(self, i: int) -> int:
        """op_params[i] as int32."""
        return int(self.op_params[i])

    def op_param_f32(self, i: int) -> float:
        """op_params[i] reinterpreted as float32 (ggml stores floats bit-cast into the int32 slots)."""
        return float(self.op_params[i : i + 1].view(np.float32)[0])

    def set_op_param_i32(self, i: int, value: int) -> None:
        """Store an int32 in op_params[i]."""
        self.op_params[i] = np.int32(value)

    def set_op_param_f32(self, i: int, value: float) -> None:
        """Store a float32 (bit-cast) in op_params[i]."""
        self.op_params[i : i + 1].view(np.float32)[0] = np.float32(value)

    def set_op_params_i32(self, values: Sequence[int]) -> None:
        """Store several int32 from op_params[0] on."""
        self.op_params[: len(values)] = np.asarray(values, dtype=np.int64).astype(np.int32)

    def set_op_params_f32(self, values: Sequence[float], start: int = 0) -> None:
        """Store several float32 (bit-cast) from op_params[start] on."""
        self.op_params[start : start + len(values)].view(np.float32)[:] = np.asarray(values, dtype=np.float32)

    # ---------------------------------------------------------------------------------------------- flags

    def set_input(self) -> Tensor:
        """Mark as a graph input (``ggml_set_input``)."""
        self.flags = int(self.flags) | TensorFlag.INPUT.value
        return self

    def set_output(self) -> Tensor:
        """Mark as a graph output (``ggml_set_output``): the allocator never reuses its memory."""
        self.flags = int(self.flags) | TensorFlag.OUTPUT.value
        return self

    def set_param(self) -> Tensor:
        """Mark as a trainable parameter."""
        self.flags = int(self.flags) | TensorFlag.PARAM.value
        return self

    # ------------------------------------------------------------------------------------------------ data

    @property
    def is_allocated(self) -> bool:
        """True once bound to a buffer."""
        return self.buffer is not None and self.data_offset is not None

    def _require_allocated(self) -> TensorBuffer:
        if self.buffer is None or self.data_offset is None:
            raise TensorError(
                self,
                "has no memory yet: allocate its context (ggml_core.alloc_ctx_tensors) or run its graph through "
                "an allocator or scheduler first",
            )
        if self.buffer.freed:
            raise BufferFreedError(self, self.buffer)
        return self.buffer

    def set_bytes(self, data: bytes | bytearray | memoryview | np.ndarray, offset: int = 0) -> None:
        """Copy raw bytes into the tensor's memory at byte ``offset`` (``ggml_backend_tensor_set``)."""
        buf = self._require_allocated()
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
        buf.set_tensor(self, memoryview(data).cast("B"), offset)

    def get_bytes(self, offset: int = 0, size: int | None = None) -> bytes:
        """Read raw bytes of the tensor's memory (``ggml_backend_tensor_get``)."""
        buf = self._require_allocated()
        if size is None:
            size = self.nbytes - offset
        out = bytearray(size)
        buf.get_tensor(self, memoryview(out), offset)
        return bytes(out)

    def set_data(self, array: Any) -> None:
        """Write values into a contiguous tensor, converting them to its type (quantizing if needed).

        ``array`` may have the tensor's numpy shape ``(ne3, ne2, ne1, ne0)`` or any shape with as many elements.
        Raises :class:`~ggml_core.TensorDataError` for values the type cannot hold (integers out of range, finite
        floats that would become inf) and for non-numeric data (object, string, complex arrays).
        """
        if not self.is_contiguous:
            raise TensorError(self, "set_data needs a contiguous tensor; copy into a contiguous tensor instead")
        raw = _convert.to_bytes(_convert.as_array(array, self), self)
        self.set_bytes(raw)

    def to_numpy(self, *, dequantize: bool = True) -> np.ndarray:
        """Read the tensor into a new numpy array of shape ``(ne3, ne2, ne1, ne0)`` (strides respected).

        Plain types come back in their own dtype (F16 as float16, BF16 as float32); quantized types are
        dequantized to float32, or returned as raw rows of bytes with ``dequantize=False``.
        """
        raw = np.frombuffer(self.get_bytes(), dtype=np.uint8)
        return _convert.from_bytes(raw, self, dequantize=dequantize)

    def numpy_view(self) -> np.ndarray:
        """A zero-copy numpy view of a tensor in host memory (raises for device buffers and quantized types)."""
        buf = self._require_allocated()
        host = buf.host_array()
        if host is None:
            raise TensorError(self, f"lives in {buf.name} memory, which is not host memory; use to_numpy()")
        return _convert.strided_view(host, self)


def _pad4(values: Sequence[int], fill: int, what: str, name: str) -> tuple[int, int, int, int]:
    if len(values) > MAX_DIMS:
        raise TensorError(name or "(new)", f"{what} has at most {MAX_DIMS} dimensions: {list(values)}")
    try:
        v = [operator.index(x) for x in values] + [fill] * (MAX_DIMS - len(values))
    except TypeError:
        raise TensorError(name or "(new)", f"{what}={list(values)} must hold integers") from None
    if any(abs(x) > MAX_NE for x in v):
        raise TensorError(name or "(new)", f"{what}={v} is outside ggml's int64 range")
    return (v[0], v[1], v[2], v[3])
