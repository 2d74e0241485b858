"""Row kernels of a prompt batch split across the calling thread and the spinning helpers of :mod:`._packed_split`.

A prompt's small ops — RMS_NORM (+ MUL), ROPE's rotation, SWIGLU, SET_ROWS into the KV cache and the softmax of the
attention scores — are row loops (:mod:`._norm_kernels`, :mod:`._attn_kernels`, :mod:`._glu_kernels`,
:mod:`._movement_kernels`) that took a quarter of a 128-token batch on two threads while the second core waited.
Here each runs as parts of whole rows claimed by whichever thread gets to them first, on the same helpers as the
repacked products (they spin between a batch's nodes, so a part starts within a microsecond; a Python thread pool
took ~100 µs to wake on a 2-core VM). Every row is the same code on the same operands as on one thread, so the bits
do not depend on the split.

Descriptor (int64, the helpers' ``desc``; :data:`._packed_split.MODE` says which kernel): up to six array addresses
and their lengths, the kernel's int64 parameters and float64 settings (addresses), one extra count, then per part
its first and last row. Imported only once numba is loaded (see :mod:`ggml_cpu.jit._jit`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import numba
import numpy as np

from ggml_cpu.jit import _jit, _spin
from ggml_cpu.jit._spin import atomic_add, f32_at, f64_at, i32_at, i64_at, u16_at
from ggml_cpu.ops._attn_kernels import batch_soft_max_rows, rope_rows
from ggml_cpu.ops._glu_kernels import swiglu_rows
from ggml_cpu.ops._matmul_kernels import f32_dot_rows
from ggml_cpu.ops._movement_kernels import set_rows_rows
from ggml_cpu.ops._norm_kernels import rms_norm_rows
from ggml_cpu.quant import _packed_split
from ggml_cpu.quant._gemm_kernels import f32_gemm_tiles
from ggml_cpu.threads import RowSplit

__all__ = [
    "F32_DOT", "F32_GEMM", "FIRST_MODE", "GLU", "RMS_NORM", "ROPE", "SET_ROWS", "SOFT_MAX", "RowJob", "nudge",
    "row_part",
]  # fmt: skip

#: ``desc`` fields of a row job: array addresses, their lengths (elements), the int64 parameters, the float64
#: settings, one count (ROPE: the pairs per token)
A0, L0, P_AT, P_LEN, F_AT, EXTRA = 0, 6, 12, 13, 14, 15
MAX_ARRAYS: Final = 6
#: the row kernels' modes (``desc[MODE]``; 0 and 1 are the products' and the quantizer's)
GLU, RMS_NORM, ROPE, SOFT_MAX = 2, 3, 4, 5
#: SET_ROWS per (destination, index) type
SET_ROWS: Final = {("float32", "int32"): 6, ("float32", "int64"): 7, ("uint16", "int32"): 8, ("uint16", "int64"): 9}
#: few-row products of f32 weights: their weight rows split (:func:`._matmul_kernels.f32_dot_rows`)
F32_DOT: Final = 10
#: many-row products of f32 weights (a prompt batch): their weight tiles split (:func:`._gemm_kernels.f32_gemm_tiles`)
F32_GEMM: Final = 11
FIRST_MODE: Final = GLU


@_jit.inline
def _f32(desc: np.ndarray, i: int) -> np.ndarray:  # pragma: no cover - compiled
    return numba.carray(f32_at(desc[A0 + i]), desc[L0 + i])


@_jit.inline
def row_part(ctl: np.ndarray, desc: np.ndarray, mode: int, r0: int, r1: int) -> None:  # pragma: no cover
    """Rows ``[r0, r1)`` of the row job in ``desc``; a SET_ROWS index out of range is counted in
    ``ctl[BAD]``. Each mode is a function of its own, called (not inlined): a caller whose ``mode`` is a constant
    compiles that mode's kernel only (numba prunes the other branches before typing them)."""
    if mode == GLU:
        _glu_rows(desc, r0, r1)
    elif mode == RMS_NORM:
        _rms_norm_rows(desc, r0, r1)
    elif mode == ROPE:
        _rope_rows(desc, r0, r1)
    elif mode == F32_DOT:
        _f32_dot_rows(desc, r0, r1)
    elif mode == F32_GEMM:
        _f32_gemm_rows(desc, r0, r1)
    elif mode == SOFT_MAX:
        _soft_max_rows(desc, r0, r1)
    elif _set_rows_rows(desc, mode, r0, r1):
        atomic_add(ctl, _spin.BAD, 1)


@_jit.inline
def _params(desc: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    return numba.carray(i64_at(desc[P_AT]), desc[P_LEN])


@_jit.inline
def _setting(desc: np.ndarray) -> float:  # pragma: no cover - compiled
    return float(numba.carray(f64_at(desc[F_AT]), 1)[0])


@_jit.callee
def _glu_rows(desc: np.ndarray, r0: int, r1: int) -> None:  # pragma: no cover - compiled
    swiglu_rows(_f32(desc, 0), _f32(desc, 1), _f32(desc, 2), _params(desc), r0, r1)


@_jit.callee
def _rms_norm_rows(desc: np.ndarray, r0: int, r1: int) -> None:  # pragma: no cover - compiled
    p, eps = _params(desc), _setting(desc)
    rms_norm_rows(_f32(desc, 0), _f32(desc, 1), _f32(desc, 2), _f32(desc, 3), p, eps, r0, r1)


@_jit.callee
def _rope_rows(desc: np.ndarray, r0: int, r1: int) -> None:  # pragma: no cover - compiled
    n_pairs = desc[EXTRA]
    cos = numba.carray(f32_at(desc[A0 + 2]), (desc[L0 + 2] // n_pairs, n_pairs))
    sin = numba.carray(f32_at(desc[A0 + 3]), (desc[L0 + 3] // n_pairs, n_pairs))
    rope_rows(_f32(desc, 0), _f32(desc, 1), cos, sin, _params(desc), r0, r1)


@_jit.callee
def _f32_dot_rows(desc: np.ndarray, r0: int, r1: int) -> None:  # pragma: no cover - compiled
    f32_dot_rows(_f32(desc, 0), _f32(desc, 1), _f32(desc, 2), _params(desc), r0, r1)


@_jit.callee
def _f32_gemm_rows(desc: np.ndarray, r0: int, r1: int) -> None:  # pragma: no cover - compiled
    f32_gemm_tiles(_f32(desc, 0), _f32(desc, 1), _f32(desc, 2), _params(desc), r0, r1)


@_jit.callee
def _soft_max_rows(desc: np.ndarray, r0: int, r1: int) -> None:  # pragma: no cover - compiled
    p = _params(desc)
    heads, tokens, width, n_kv = p[0], p[1], p[2], p[3]
    s = numba.carray(f32_at(desc[A0]), (heads, tokens, width))
    mask = numba.carray(f32_at(desc[A0 + 1]), (p[4], n_kv))
    out = numba.carray(f32_at(desc[A0 + 2]), (heads, tokens, n_kv))
    batch_soft_max_rows(s, mask, out, p[5], _setting(desc), r0, r1)


@_jit.callee
def _set_rows_rows(desc: np.ndarray, mode: int, r0: int, r1: int) -> int:  # pragma: no cover - compiled
    """SET_ROWS of the :data:`SET_ROWS` ``mode``: non-zero when an index was out of range."""
    p = _params(desc)
    if mode == 6:
        idx32 = numba.carray(i32_at(desc[A0 + 1]), desc[L0 + 1])
        return set_rows_rows(_f32(desc, 0), idx32, _f32(desc, 2), p, r0, r1)
    if mode == 7:
        idx64 = numba.carray(i64_at(desc[A0 + 1]), desc[L0 + 1])
        return set_rows_rows(_f32(desc, 0), idx64, _f32(desc, 2), p, r0, r1)
    if mode == 8:
        idx32h = numba.carray(i32_at(desc[A0 + 1]), desc[L0 + 1])
        return set_rows_rows(_f32(desc, 0), idx32h, numba.carray(u16_at(desc[A0 + 2]), desc[L0 + 2]), p, r0, r1)
    idx64h = numba.carray(i64_at(desc[A0 + 1]), desc[L0 + 1])
    return set_rows_rows(_f32(desc, 0), idx64h, numba.carray(u16_at(desc[A0 + 2]), desc[L0 + 2]), p, r0, r1)


def _rows_part(mode: int) -> Any:
    """The helpers' part function of the row kernel ``mode``: the rows of one part (:func:`row_part`)."""

    def part(ctl_at: int, desc_at: int, p: int) -> int:  # pragma: no cover - compiled
        desc = numba.carray(i64_at(desc_at), _packed_split.DESC_SIZE)
        at = _packed_split.PART0 + _packed_split.PART_FIELDS * p
        row_part(numba.carray(i64_at(ctl_at), _spin.CTL_SIZE), desc, mode, desc[at], desc[at + 1])
        return 0

    return part


_packed_split.add_part_kind("rows", _rows_part, "spin_part_rows")


class RowJob:
    """One row kernel's rows split across the calling thread and ``threads − 1`` spinning helpers.

    :param mode: the kernel (:data:`GLU`, :data:`RMS_NORM`, :data:`ROPE`, :data:`SOFT_MAX`, a :data:`SET_ROWS`)
    :param arrays: its array operands in :func:`row_part`'s order (1-D views, or C-contiguous arrays), rebound by
        :meth:`bind` when they move
    :param p: the kernel's int64 parameters; ``f`` its float64 settings (eps, scale); ``extra`` one count
    :param rows: how many rows the kernel runs
    :param serial: the whole kernel on this thread (its result: non-zero for a bad SET_ROWS index); it runs when the
        helpers are busy or backing off after a stall (see :class:`ggml_cpu.threads.RowSplit`)
    :param batch: a batch product's job: its pool then takes the batch's row kernels too (see
        :func:`._packed_split.running`)
    """

    __slots__ = ("_fallback_result", "_keep", "_rows", "_serial")

    def __init__(
        self, mode: int, arrays: Sequence[np.ndarray], p: np.ndarray, f: Sequence[float], rows: int, threads: int,
        serial: Callable[[], Any], extra: int = 0, *, batch: bool = False,
    ) -> None:  # fmt: skip
        fns, helpers = _packed_split.jobs(), _packed_split.pool(threads - 1, batch=batch)
        part = _packed_split.part_address("rows", mode)
        if fns is None or helpers is None or part is None:
            raise RuntimeError("ggml-cpu: the row split's kernels did not compile here")
        params, settings = np.ascontiguousarray(p, np.int64), np.array(list(f) or [0.0], np.float64)
        desc = np.zeros(_packed_split.DESC_SIZE, np.int64)
        desc[P_AT], desc[P_LEN], desc[F_AT], desc[EXTRA] = params.ctypes.data, params.size, settings.ctypes.data, extra
        desc[_packed_split.MODE], desc[_packed_split.PART_FN] = mode, part
        n_parts = max(1, min(rows, 4 * threads, _packed_split.MAX_PARTS))  # ~4 a thread: a late helper costs one
        cuts = [rows * i // n_parts for i in range(n_parts + 1)]
        desc[_packed_split.N_PARTS] = n_parts
        at, width = _packed_split.PART0, _packed_split.PART_FIELDS
        for i in range(n_parts):
            desc[at + width * i : at + width * (i + 1)] = (cuts[i], cuts[i + 1])
        self._serial, self._fallback_result = serial, 0
        self._keep: tuple[Any, ...] = (params, settings)
        self._rows = RowSplit((fns[0], fns[1]), desc, [(_none, ()), (self._fallback, ())], threads, helpers=helpers)
        self.bind(arrays)

    def bind(self, arrays: Sequence[np.ndarray]) -> None:
        """Use these arrays from now on (their addresses and lengths are written; the job keeps them alive)."""
        if len(arrays) > MAX_ARRAYS:
            raise ValueError(f"ggml-cpu: a row job takes at most {MAX_ARRAYS} arrays, not {len(arrays)}")
        desc = self._rows._desc
        for i, a in enumerate(arrays):
            desc[A0 + i], desc[L0 + i] = a.__array_interface__["data"][0], a.size
        self._keep = (*self._keep[:2], *arrays)

    def _fallback(self) -> None:
        self._fallback_result = int(self._serial() or 0)

    def __call__(self) -> int:
        """Run every row: 0, or non-zero when a SET_ROWS index was out of range (rows may be written before and
        after it, as when ggml's threads split SET_ROWS)."""
        self._fallback_result = 0
        res = self._rows(False)
        if res is None:  # backing off: this thread alone
            return int(self._serial() or 0)
        return res or self._fallback_result


def helping(threads: int) -> bool:
    """True when row jobs of ``threads`` threads should go to the helpers: their pool is already running for a
    batch's products (the repacked quantized products, or the f32 tiles of :mod:`._gemm_kernels`). Where a batch's
    products run elsewhere (numpy's threaded BLAS, or dequantized tiles on the plugin's workers), those threads
    spin after each product: a helper spinning beside them on a 2-core VM made the row kernels 3-5× slower there
    (f32 bench model on OpenBLAS, 2 threads: ROPE 0.6 → 2.8 ms a batch), so those rows stay on the calling
    thread."""
    return _packed_split.running(threads)


def nudge(threads: int) -> None:
    """Wake the helpers of ``threads`` threads ahead of a row job (:func:`._packed_split.nudge`)."""
    _packed_split.nudge(threads)


def _none() -> int:
    return 0
