"""Attention's compiled kernels: SOFT_MAX and ROPE's rotation per row, and the softmax of a prompt batch's
attention scores with the float32 ``exp`` it uses.

SOFT_MAX (:data:`SOFT_MAX_SPEC`) and ROPE (:data:`ROPE_SPEC`, :data:`ROPE_POS_SPEC`) take flat views and strides as
the other row kernels (:mod:`ggml_cpu.jit._row_math`).

:func:`_batch_soft_max` takes the KQ scores of a range of query heads, already summed (one BLAS product per K/V
head, see :func:`ggml_cpu.ops.attention.bind_batch_attention`), and does ggml's softmax on every row in one
nogil call: ``w = s·scale + mask``, ``e = exp(w − max)``, ``Σe`` in double, ``e · float32(1/Σe)``; columns from
``n_used`` on (masked in every row) are written 0. Two threads given different heads really run in parallel, and
the bits of a row depend only on that row: the same for any split.

:func:`exp_f32_fast` is Cephes' ``expf``: the range reduction ``x = n·ln2 + r`` in float32 (ln2 split in two,
``n`` rounded to nearest), a degree-7 polynomial in float32, and ``2ⁿ`` applied as two exact powers of two so that
subnormal results round once. Within 1 ulp of the exact ``exp`` (float64) over the float32 range (measured: 0.96 ulp at
most over every 7th float32 in [−110, 90]; tests/test_prompt_batch.py checks a grid and the edges); 0 at and below
−104 (where float32 ``exp`` rounds to 0), inf from 88.73, NaN stays NaN. Branch-free float32, so its loop
vectorises (half the time of :func:`ggml_cpu.jit._row_math.exp_f32`, float64 rounded once, here); ggml's own
softmax uses a float32 SIMD ``expf`` (``ggml_v_expf``) too.

Imported only once numba is loaded (see :mod:`ggml_cpu.jit._jit`).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from ggml_cpu.jit import _jit
from ggml_cpu.jit._blocks import f32_from_bits
from ggml_cpu.jit._row_math import exp_f32, next_row, row_at

__all__ = [
    "BATCH_SOFT_MAX_SPEC",
    "EXP_SPEC",
    "ROPE_POS_SPEC",
    "ROPE_SPEC",
    "SOFT_MAX_SPEC",
    "USED_COLUMNS_SPEC",
    "exp_f32_fast",
    "rope_rows",
]


_LOG2E: Final = np.float32(1.44269504088896341)
_ROUND: Final = np.float32(12582912.0)  # 1.5·2²³: adding and subtracting it rounds |v| < 2²² to an integer
_C1: Final = np.float32(0.693359375)  # ln 2 = _C1 − _C2, _C1 with few bits: n·_C1 exact
_C2: Final = np.float32(-2.12194440e-4)
_P: Final = tuple(np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                                          1.6666665459e-1, 5.0000001201e-1))  # fmt: skip


@_jit.inline
def exp_f32_fast(x: np.float32) -> np.float32:  # pragma: no cover - compiled
    """``exp(x)`` of a float32 within 1 ulp (see the module docstring); vectorises."""
    # at or below −104 (masked cells: −inf) the result is 0, selected at the end: the lanes compute exp(0)
    # meanwhile, not a subnormal (each subnormal product costs a microcode assist, ~100 cycles)
    tiny = x <= np.float32(-104.0)
    xc = x if x < np.float32(89.0) else np.float32(89.0)
    xc = np.float32(0.0) if tiny else xc
    n = (xc * _LOG2E + _ROUND) - _ROUND  # round to nearest: |r| ≤ ln2/2
    r = (xc - n * _C1) - n * _C2
    z = r * r
    y = _P[0] * r + _P[1]
    y = y * r + _P[2]
    y = y * r + _P[3]
    y = y * r + _P[4]
    y = y * r + _P[5]
    y = (y * z + r) + np.float32(1.0)
    ni = np.int32(n)
    n1 = ni >> 1  # 2ⁿ as 2^n1 · 2^(n − n1), both normal: the first product is exact, the second rounds once
    res = (y * f32_from_bits(np.int32((n1 + 127) << 23))) * f32_from_bits(np.int32((ni - n1 + 127) << 23))
    res = np.float32(0.0) if tiny else res
    return res if x == x else x


def _exp(x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        out[i] = exp_f32_fast(x[i])


#: ``out = exp_f32_fast(x)`` elementwise (for the tests' bound against float64)
EXP_SPEC: Final = _jit.KernelSpec(_exp, "void(float32[::1], float32[::1])", readonly=(0,))


@_jit.inline
def _soft_max_row(row: np.ndarray, m: np.ndarray, o: np.ndarray, n: int, sc: np.float32) -> None:  # pragma: no cover
    """``o[:n] = e / Σe`` with ``e = exp(row·sc + m − max)`` (Σ in double: eight running sums in a fixed order, the
    same on any SIMD width), ``o[n:] = 0``; ``row`` (the scores) is overwritten."""
    for j in range(n):
        row[j] = row[j] * sc + m[j]
    # the max in eight lanes (a NaN score is skipped here, but its exp is NaN, so Σ and the whole row are NaN:
    # what numpy's NaN max gives)
    n8 = n - n % 8
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = np.float32(-np.inf)
    for j0 in range(0, n8, 8):
        m0 = row[j0] if row[j0] > m0 else m0
        m1 = row[j0 + 1] if row[j0 + 1] > m1 else m1
        m2 = row[j0 + 2] if row[j0 + 2] > m2 else m2
        m3 = row[j0 + 3] if row[j0 + 3] > m3 else m3
        m4 = row[j0 + 4] if row[j0 + 4] > m4 else m4
        m5 = row[j0 + 5] if row[j0 + 5] > m5 else m5
        m6 = row[j0 + 6] if row[j0 + 6] > m6 else m6
        m7 = row[j0 + 7] if row[j0 + 7] > m7 else m7
    mx = max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))
    for j in range(n8, n):
        mx = row[j] if row[j] > mx else mx
    for j in range(n):
        row[j] = exp_f32_fast(row[j] - mx)
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for j0 in range(0, n8, 8):
        s0 += np.float64(row[j0])
        s1 += np.float64(row[j0 + 1])
        s2 += np.float64(row[j0 + 2])
        s3 += np.float64(row[j0 + 3])
        s4 += np.float64(row[j0 + 4])
        s5 += np.float64(row[j0 + 5])
        s6 += np.float64(row[j0 + 6])
        s7 += np.float64(row[j0 + 7])
    total = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    for j in range(n8, n):
        total += np.float64(row[j])
    inv = np.float32(1.0 / total)
    for j in range(n):
        o[j] = row[j] * inv
    for j in range(n, o.shape[0]):
        o[j] = np.float32(0.0)


def _batch_soft_max(
    s: np.ndarray, mask: np.ndarray, out: np.ndarray, n_used: int, scale: float, h0: int, h1: int
) -> None:  # fmt: skip
    """Heads ``[h0, h1)``: ``out[h, i] = softmax(s[h, i, :n_used]·scale + mask[i])`` then zeros (see the module
    docstring). ``s`` (H, T, ≥ n_used) scores (overwritten), ``mask`` (T, n_kv), ``out`` (H, T, n_kv), all
    C-contiguous."""
    n_tok = s.shape[1]  # pragma: no cover - compiled
    batch_soft_max_rows(s, mask, out, n_used, scale, h0 * n_tok, h1 * n_tok)


@_jit.inline
def batch_soft_max_rows(
    s: np.ndarray, mask: np.ndarray, out: np.ndarray, n_used: int, scale: float, r0: int, r1: int
) -> None:  # pragma: no cover - compiled
    """:func:`_batch_soft_max` of the rows ``[r0, r1)`` counted over (head, token), token fastest."""
    sc = np.float32(scale)
    n_tok = s.shape[1]
    for r in range(r0, r1):
        h = r // n_tok
        i = r - h * n_tok
        _soft_max_row(s[h, i], mask[i], out[h, i], n_used, sc)


_C3: Final = "float32[:, :, ::1]"  # C-contiguous: rows of unit stride (the loops vectorise)
BATCH_SOFT_MAX_SPEC: Final = _jit.KernelSpec(
    _batch_soft_max, f"void({_C3}, float32[:, ::1], {_C3}, int64, float64, int64, int64)", readonly=(1,)
)


def _used_columns(m: np.ndarray) -> int:
    """One past the last column of the 2-D ``m`` holding a value other than −inf (0 when none). Rows from the last
    (a causal mask's widest) up; per row one branch-free count of the columns past those already known used, and a
    scan from the right only when it finds one: a 128 × 256 causal mask in ~8 µs, against ~50 µs for numpy's
    several array passes."""
    used = 0  # pragma: no cover - compiled
    n = m.shape[1]
    for i in range(m.shape[0] - 1, -1, -1):
        row = m[i]
        hits = np.int32(0)
        for c in range(used, n):
            hits += np.int32(row[c] != -np.inf)
        if hits:
            for c in range(n - 1, used - 1, -1):
                if row[c] != -np.inf:
                    used = c + 1
                    break
    return used


USED_COLUMNS_SPEC: Final = _jit.KernelSpec(_used_columns, "int64(float32[:, :])", readonly=(0,))


def _soft_max(
    x: np.ndarray, out: np.ndarray, mask: np.ndarray, sinks: np.ndarray, slopes: np.ndarray, p: np.ndarray,
    scale: float,
) -> None:  # fmt: skip
    """ggml's soft_max_ext per row: ``w = x·scale + slope·mask``, ``e = exp(w − max)``, ``e / Σe`` (Σ in double).

    With ``p[18]`` set (the caller guarantees x = 0 wherever the mask is −inf, and slopes of 1: a fused KV-cache
    product's scores) a row's trailing run of −inf mask columns is not walked: each of them is ``w = −inf``, adds
    0 to Σ and never wins the max, so they are written as ``exp(−inf − max) / Σ`` (0, or NaN where the max is) —
    the values the full walk gives. A decode step's 256-cell window with a few cells in use skips most columns."""
    n, n1, n2, n3 = p[0], p[1], p[2], p[3]
    has_mask, has_sinks, trim = p[10], p[17], p[18]
    sc = np.float32(scale)
    for i3 in range(n3):  # pragma: no cover - compiled
        for i2 in range(n2):
            slope = slopes[i2]
            mo2 = (i2 % p[11]) * p[15] + (i3 % p[12]) * p[16]
            for i1 in range(n1):
                xo = i1 * p[4] + i2 * p[5] + i3 * p[6]
                oo = i1 * p[7] + i2 * p[8] + i3 * p[9]
                mo = i1 * p[14] + mo2
                xr, orow = x[xo : xo + n], out[oo : oo + n]
                mrow = mask[mo : mo + n] if has_mask else mask
                end = n
                if trim and has_mask:
                    while end > 0 and mrow[end - 1] == -np.inf:
                        end -= 1
                    if end == 0:  # every column masked: the full walk (its NaN rows, as ggml's)
                        end = n
                mx = np.float32(-np.inf)
                for i in range(end):
                    w = xr[i] * sc
                    if has_mask:
                        w = w + slope * mrow[i]
                    orow[i] = w
                    if w > mx or w != w:  # a NaN wins, as numpy's max
                        mx = w
                if n == 0:
                    mx = np.float32(0.0)
                sk = np.float32(0.0)
                if has_sinks:
                    sk = sinks[i2]
                    if sk > mx or sk != sk:  # np.maximum: a NaN wins
                        mx = sk
                total = 0.0
                for i in range(end):
                    orow[i] = exp_f32(orow[i] - mx)
                for i in range(end):
                    total += np.float64(orow[i])
                if has_sinks:
                    total += np.float64(exp_f32(sk - mx))
                inv = np.float32(1.0 / total)
                for i in range(end):
                    orow[i] = orow[i] * inv
                tail = exp_f32(np.float32(-np.inf) - mx) * inv  # each trailing masked column's value
                for i in range(end, n):
                    orow[i] = tail


SOFT_MAX_SPEC: Final = _jit.KernelSpec(
    _soft_max,
    "void(float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], int64[::1], float64)",
    readonly=(0, 2, 3, 4),
)


@_jit.inline
def _rotate_row(
    xr: np.ndarray,
    orow: np.ndarray,
    cr: np.ndarray,
    sr: np.ndarray,
    n_pairs: int,
    first: int,
    step: int,
    delta: int,
) -> None:  # pragma: no cover - compiled
    """``orow`` = ``xr`` with the pairs ``(first + i·step, + delta)`` rotated by ``cr[i]`` / ``sr[i]``."""
    for i in range(xr.shape[0]):  # in place this copies each value onto itself
        orow[i] = xr[i]
    for i in range(n_pairs):
        j = first + i * step
        x0 = xr[j]
        x1 = xr[j + delta]
        c = cr[i]
        s = sr[i]
        orow[j] = x0 * c - x1 * s
        orow[j + delta] = x0 * s + x1 * c


@_jit.inline
def rope_rows(
    x: np.ndarray, out: np.ndarray, cos: np.ndarray, sin: np.ndarray, p: np.ndarray, r0: int, r1: int
) -> None:  # pragma: no cover - compiled
    """Rows ``[r0, r1)``: rotate the pairs ``(first + i·step, + delta)`` of each row by the token's ``cos``/``sin``
    (tokens = dim 2); the other channels are copied."""
    n, n1, n2 = p[0], p[1], p[2]
    first, step, delta = p[10], p[11], p[12]
    n_pairs = cos.shape[1]
    i1, i2, i3 = row_at(r0, n1, n2)
    for _ in range(r1 - r0):
        xo = i1 * p[4] + i2 * p[5] + i3 * p[6]
        oo = i1 * p[7] + i2 * p[8] + i3 * p[9]
        xr, orow = x[xo : xo + n], out[oo : oo + n]
        _rotate_row(xr, orow, cos[i2], sin[i2], n_pairs, first, step, delta)
        i1, i2, i3 = next_row(i1, i2, i3, n1, n2)


def _rope(x: np.ndarray, out: np.ndarray, cos: np.ndarray, sin: np.ndarray, p: np.ndarray) -> None:
    """:func:`rope_rows` over every row."""
    rope_rows(x, out, cos, sin, p, 0, p[1] * p[2] * p[3])  # pragma: no cover - compiled


ROPE_SPEC: Final = _jit.KernelSpec(
    _rope,
    "void(float32[::1], float32[::1], float32[:, ::1], float32[:, ::1], int64[::1])",
    readonly=(0, 2, 3),
)


def _rope_pos(x: np.ndarray, out: np.ndarray, pos: np.ndarray, p: np.ndarray, f: np.ndarray, cs: np.ndarray) -> None:
    """:func:`_rope` with each token's cos / sin computed here from its position, operation for operation as
    ``attention.rope_cos_sin`` (theta advanced by float32 products, YaRN's ramp in float32 and its one float64
    blend, ``cos``/``sin`` in float64 rounded once, times ``mscale``); ``cs`` holds one token's table."""
    n, n1, n2, n3 = p[0], p[1], p[2], p[3]
    first, step, delta, n_pairs = p[10], p[11], p[12], p[13]
    ts, fscale, ext, mscale = np.float32(f[0]), np.float32(f[1]), np.float32(f[2]), np.float32(f[3])
    low, high = np.float32(f[4]), np.float32(f[5])
    span = high - low
    span = span if span > np.float32(0.001) else np.float32(0.001)
    for i2 in range(n2):  # pragma: no cover - compiled
        theta_e = np.float32(pos[i2])
        for i in range(n_pairs):
            theta = fscale * theta_e
            if ext != np.float32(0.0):
                y = (np.float32(i) - low) / span
                y = y if y > np.float32(0.0) else np.float32(0.0)
                y = y if y < np.float32(1.0) else np.float32(1.0)
                ramp = (np.float32(1.0) - y) * ext
                second = theta_e * ramp
                theta = np.float32(np.float64(theta) * np.float64(np.float32(1.0) - ramp) + np.float64(second))
            cs[i] = np.float32(math.cos(np.float64(theta))) * mscale
            cs[n_pairs + i] = np.float32(math.sin(np.float64(theta))) * mscale
            theta_e = theta_e * ts
        for i3 in range(n3):
            for i1 in range(n1):
                xo = i1 * p[4] + i2 * p[5] + i3 * p[6]
                oo = i1 * p[7] + i2 * p[8] + i3 * p[9]
                _rotate_row(x[xo : xo + n], out[oo : oo + n], cs[:n_pairs], cs[n_pairs:], n_pairs, first, step, delta)


ROPE_POS_SPEC: Final = _jit.KernelSpec(
    _rope_pos,
    "void(float32[::1], float32[::1], int32[::1], int64[::1], float64[::1], float32[::1])",
    readonly=(0, 2, 4),
)
