"""A prompt batch's product over repacked weights, bound once to its node's arrays.

:func:`.product.qmatmul` serves any caller: on every call it quantizes (or, for the same activations as the
previous product, compares and reuses), forms the sub-block sums with numpy, looks up the repack and re-binds its
split. Measured on a 128-token q4_K prompt at 2 threads, that host work cost a layer's first projection about
0.2 ms over the same product on already quantized activations. A graph node's operands stay at the same addresses
for the life of its plan, so :class:`PromptProduct` resolves all of it once: its quantization buffers (shared by
the products that read the same activations, see :func:`_buffers`), the repack, the split over the spinning
helpers (:mod:`._packed_split`, which quantizes the rows in parts of rows as its first job). A call is then one
call into compiled code, and gives :func:`.product.qmatmul`'s bits: the same quantizer and the same lane tiles on
the same rows.

Only weights mapped read-only from a file are bound so (their repack cannot go stale); others keep
:func:`.product.qmatmul`, which checks them against a copy on every call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ggml_core import GGMLType
from ggml_cpu.jit import _jit
from ggml_cpu.jit.halves import F16_VALUES
from ggml_cpu.quant.activations import act_buffers, numpy_into
from ggml_cpu.quant.product import DOT_TYPE, check_operands, packed_ready, qmatmul, split_of

__all__ = ["PromptProduct", "prompt_product"]


class PromptProduct:
    """``out = x · W`` for a prompt batch ``x`` (N, K) over the repacked form of the file-mapped weights ``w``.

    The repack is made (or found in its cache) on the first call; when it cannot be (the cache is full), every
    call runs :func:`.product.qmatmul` instead. Activations holding NaN or infinity are quantized by the numpy
    reference, as everywhere else.
    """

    __slots__ = ("_acts", "_out", "_p", "_serial", "_split", "_tail", "_w", "_wtype", "_x")

    def __init__(self, w: np.ndarray, wtype: GGMLType, x: np.ndarray, out: np.ndarray) -> None:
        self._w, self._wtype, self._x, self._out = w, wtype, x, out
        self._p: Any = None  # the repack, or False once it cannot be made
        self._split: tuple[int, Any] | None = None  # (threads, PackedSplit)
        self._serial: Any = None
        self._tail: tuple[Any, ...] = ()
        self._acts: tuple[np.ndarray, ...] = ()

    def _bind(self) -> None:
        """Repack (or find the repack) and allocate the quantization buffers; ``_p`` False when no repack can be
        used."""
        from ggml_cpu.quant import repack

        p = repack.packed(self._w, self._wtype)
        fns = repack.decode_kernels(p) if p is not None else None
        if p is None or fns is None or p.rows != self._out.shape[1] or p.rows % 16:
            self._p = False
            return
        xq, xd, xsum, xs, dx, sx = _buffers(self._x, DOT_TYPE[self._wtype], self._x.shape[1] // p.group)
        self._p, self._serial, self._acts = p, fns[1], (xq, xd, xsum, xs, dx, sx)
        self._tail = (p.q, p.s1, p.s2, xq, xd, xsum, xs, F16_VALUES, dx, sx, p.offset)

    def _split_for(self, threads: int) -> Any:
        """The split over ``threads`` threads (None where its kernels do not compile: then one thread)."""
        split = self._split
        if split is None or split[0] != threads:
            from ggml_cpu.quant import repack

            p = self._p
            arrays = (self._x, *self._acts, self._out)
            ps = split_of(p, arrays, F16_VALUES, repack.dot_code(p.group, p.has_min), threads, self._serial)
            split = self._split = (threads, ps)
        return split[1]

    def __call__(self) -> None:
        if self._p is None:
            self._bind()
        if self._p is False:
            qmatmul(self._w, self._wtype, self._x, self._out)
            return
        threads = _jit.current_threads()
        split = self._split_for(threads) if threads > 1 else None
        x, out = self._x, self._out
        bad = split(True) if split is not None else self._serial(x, True, *self._tail, out)
        if bad:  # non-finite activations: the numpy quantizer defines their bytes; the driver forms the sums
            numpy_into(x, DOT_TYPE[self._wtype], *self._acts[:4])
            self._serial(x, False, *self._tail, out)


#: quantization buffers per (activations' address, rows, values a row, dot type, sub-blocks a row)
_shared: dict[tuple[int, int, int, GGMLType, int], tuple[np.ndarray, ...]] = {}


def _buffers(x: np.ndarray, dot: GGMLType, nsub: int) -> tuple[np.ndarray, ...]:
    """The quantization buffers ``(xq, xd, xsum, xs, dx, sx)`` for the activations ``x``, shared by every product
    that reads the same activation memory (a layer's Q, K and V; gate and up; the same cells in later layers).

    Sharing is safe: products that read one activation array belong to graphs of the backend that owns that
    memory, which computes one graph at a time, so they run one after another, and each quantizes its rows into the
    buffers before its product reads them. It saves ~40 % of these buffers (Gemma 3 270M: ~15 MB for a 128-token
    prompt's graph unshared). Products keep their buffers alive; the table only finds them."""
    n, k = x.shape
    key = (int(x.__array_interface__["data"][0]), n, k, dot, nsub)
    got = _shared.get(key)
    if got is None:
        got = (*act_buffers(n, k, dot), np.empty((n, nsub), np.float32), np.empty((n, nsub), np.int32))
        if len(_shared) >= 1024:  # bounded: the graphs in use
            _shared.clear()
        _shared[key] = got
    return got


def prompt_product(w: np.ndarray, wtype: GGMLType, x: np.ndarray, out: np.ndarray) -> PromptProduct | None:
    """A :class:`PromptProduct` for these arrays, or None when it does not apply: weights not mapped read-only
    from a file, no repacked layout compiled here for ``wtype``, or operands not C-contiguous float32.

    :param w: the weight rows, uint8 ``(M, row_bytes)`` C-contiguous, M a multiple of 16
    :param x: float32 activations ``(N, K)`` C-contiguous (read on every call)
    :param out: float32 ``(N, M)`` C-contiguous
    """
    check_operands(w, wtype, x, out)
    if not packed_ready(wtype) or out.shape[1] % 16 or not w.flags.c_contiguous:
        return None
    if x.dtype != np.float32 or not x.flags.c_contiguous or out.dtype != np.float32 or not out.flags.c_contiguous:
        return None
    from ggml_cpu.quant import repack

    return PromptProduct(w, wtype, x, out) if repack.file_backed(w) else None
