"""SET_ROWS' compiled kernel: rows of float32 written into a float32 or f16 destination (a KV cache) at the
indices given, rounded to f16 as numpy's ``astype`` does.

Each kernel is one call into compiled code with every operand passed as a flat 1-D view of its memory (from the
tensor's first element) plus element strides in one int64 parameter array (:mod:`ggml_cpu.jit._row_math`), so a call
unboxes a handful of arguments and allocates nothing. Imported only once numba is loaded (see
:mod:`ggml_cpu.jit._jit`).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_cpu.jit import _jit
from ggml_cpu.jit._row_math import as_elem, row_at

__all__ = ["SET_ROWS_BLOCK", "SET_ROWS_SPECS", "set_rows_rows"]


@_jit.inline
def set_rows_rows(src: np.ndarray, idx: np.ndarray, dst: np.ndarray, p: np.ndarray, r0: int, r1: int) -> int:
    """Rows ``[r0, r1)`` of src (rows ``(r, i2, i3)``): row ``r`` into row ``idx[r, i2 % c1, i3 % c2]`` of dst,
    converted to dst's type; returns 1 (writing nothing more) at the first index outside ``0..p[10]-1``.

    With ``p[17]`` = C > 0 (one-value rows, one index plane: a transposed V cache, whose source rows are C values
    per token, each going to its channel's row of the cache), ``[r0, r1)`` are blocks of :data:`SET_ROWS_BLOCK`
    channels instead: rows ``t·C + c`` for every token ``t`` and the block's channels ``c`` (:func:`_set_columns`)."""
    n, n1, n2 = p[0], p[1], p[2]  # pragma: no cover - compiled
    if p[17] > 0:
        return _set_columns(src, idx, dst, p, r0, r1)
    limit, d0 = p[10], p[16]
    start, i2, i3 = row_at(r0, n1, n2)
    left = r1 - r0
    while left > 0:
        io = (i2 % p[13]) * p[12] + (i3 % p[15]) * p[14]
        end = min(n1, start + left)
        left -= end - start
        for r in range(start, end):
            j = np.int64(idx[io + r * p[11]])
            if j < 0 or j >= limit:
                return 1
            so = r * p[4] + i2 * p[5] + i3 * p[6]
            do = j * p[7] + i2 * p[8] + i3 * p[9]
            if n == 1:  # a transposed V cache: one value per row, no row views (their refcounting costs more)
                dst[do] = as_elem(src[so], dst)
                continue
            sr = src[so : so + n]
            drow = dst[do : do + (n - 1) * d0 + 1]
            for i in range(n):
                drow[i * d0] = as_elem(sr[i], dst)
        start, i2 = 0, i2 + 1
        if i2 == n2:
            i2, i3 = 0, i3 + 1
    return 0


#: channels of one block of :func:`_set_columns` (16 f32 source values: one cache line per token)
SET_ROWS_BLOCK: Final = 16


@_jit.inline
def _set_columns(src: np.ndarray, idx: np.ndarray, dst: np.ndarray, p: np.ndarray, b0: int, b1: int) -> int:
    """Channel blocks ``[b0, b1)`` of a SET_ROWS of one-value rows ``r = t·C + c`` (``C = p[17]``; one index plane):
    per token, the block's channels in order. Writing row by row sends consecutive values to C different cache
    rows, C cache lines in flight per token; block by block the lines of 16 channels stay in L1 across the tokens,
    and two threads' blocks never share a line, so the store splits across threads (rows of one value could not:
    neighbouring tokens' values share lines). Measured in docs/performance.md (SET_ROWS)."""
    chans, limit, s_idx, s_src, s_dst = p[17], p[10], p[11], p[4], p[7]  # pragma: no cover - compiled
    tokens = p[1] // chans
    c0 = b0 * SET_ROWS_BLOCK
    c1 = min(chans, b1 * SET_ROWS_BLOCK)
    for t in range(tokens):
        first = t * chans
        for c in range(c0, c1):
            r = first + c
            j = np.int64(idx[r * s_idx])
            if j < 0 or j >= limit:
                return 1
            dst[j * s_dst] = as_elem(src[r * s_src], dst)
    return 0


def _set_rows(src: np.ndarray, idx: np.ndarray, dst: np.ndarray, p: np.ndarray) -> int:
    """:func:`set_rows_rows` over every row (every channel block with ``p[17]`` set)."""
    blocks = (p[17] + SET_ROWS_BLOCK - 1) // SET_ROWS_BLOCK  # pragma: no cover - compiled
    return set_rows_rows(src, idx, dst, p, 0, blocks if p[17] > 0 else p[1] * p[2] * p[3])


SET_ROWS_SPECS: Final = {
    (dst, ix): _jit.KernelSpec(
        _set_rows,
        f"int64(float32[::1], {ix}[::1], {dst}[::1], int64[::1])",
        readonly=(0, 1),
        name=f"_set_rows_{dst}_{ix}",
    )
    for dst in ("float32", "uint16")
    for ix in ("int32", "int64")
}
