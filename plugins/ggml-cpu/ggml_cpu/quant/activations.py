"""Activation rows quantized to a dot type (Q8_0, Q8_1, Q8_K), in the layout the block kernels read.

ggml's CPU quantizes the float activations of a quantized product to the weight type's ``vec_dot_type`` before any
dot product, with the type's CPU ``from_float`` — which is *not* always the reference quantizer that
``ggml_core.quants`` (and ggml's ``ggml_quantize_chunk``, for weights) implements. On x86 with AVX (every x86-64
machine this project targets) ``quantize_row_q8_0`` / ``quantize_row_q8_1`` of ``ggml-cpu/arch/x86/quants.c``
multiply by ``id = 127/amax`` (the reference: ``1/(amax/127)``, which differs in the last bit for some ``amax``)
and round half to even (``_mm256_round_ps``; the reference's ``roundf`` rounds half away from zero); ``d =
amax/127`` is the same. Q8_K's ``quantize_row_q8_K`` is the reference. :func:`from_float` is that definition in
numpy; :func:`quantize_activations` does the same with compiled kernels (``QActs.to_bytes`` reassembles ggml's
blocks; the tests compare them with :func:`from_float`). Rows holding NaN or infinity go through numpy: there the
x86 instructions define the bytes (``cvtps2dq`` of NaN is ``INT_MIN``, saturated to -128 by the packs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from ggml_core import GGMLType
from ggml_core.quants import quantize
from ggml_cpu.jit import _jit

__all__ = [
    "DOT_TYPES",
    "QActs",
    "act_buffers",
    "from_float",
    "numpy_into",
    "quantize_activations",
    "quantize_activations_numpy",
]

#: the dot types handled here and their block length
DOT_TYPES: Final = {GGMLType.Q8_0: 32, GGMLType.Q8_1: 32, GGMLType.Q8_K: 256}

#: below this many elements the serial quantizer is used (a parallel launch costs more than the work)
_PARALLEL_MIN: Final = 1 << 18


@dataclass(frozen=True)
class QActs:
    """Quantized activation rows.

    :ivar type: Q8_0, Q8_1 or Q8_K
    :ivar q: int8 quants, ``(N, K)``
    :ivar d: per-block scale as the dot product uses it, float32 ``(N, K / block)`` (f16-rounded for Q8_0/Q8_1)
    :ivar sums: int32 sums of the quants per 32 (Q8_0, Q8_1) or per 16 (Q8_K: ggml's ``bsums``)
    :ivar s: Q8_1's stored ``s = f16(d·Σq)`` per block as float32; zeros for the other types
    """

    type: GGMLType
    q: np.ndarray
    d: np.ndarray
    sums: np.ndarray
    s: np.ndarray

    @property
    def rows(self) -> int:
        """Number of rows N."""
        return int(self.q.shape[0])

    def dequantized(self) -> np.ndarray:
        """The rows as float32 ``q·d``, exactly what :func:`ggml_core.quants.dequantize` returns for them."""
        bl = DOT_TYPES[self.type]
        n, k = self.q.shape
        out = self.q.astype(np.float32)
        out.reshape(n, k // bl, bl)[...] *= self.d[..., None]  # in place: one float32 copy of the rows at a time
        return out

    def to_bytes(self) -> np.ndarray:
        """ggml's block bytes ``(N, row_bytes)`` (for tests: they must equal ``quantize(x, type)``)."""
        n, k = self.q.shape
        bl = DOT_TYPES[self.type]
        nb = k // bl
        qb = self.q.reshape(n, nb, bl).view(np.uint8)
        if self.type == GGMLType.Q8_K:
            out = np.empty((n, nb, 292), np.uint8)
            out[..., 0:4] = self.d.astype("<f4").reshape(n, nb, 1).view(np.uint8)
            out[..., 4:260] = qb
            out[..., 260:292] = self.sums.astype("<i2").reshape(n, nb, 16).view(np.uint8)
            return out.reshape(n, nb * 292)
        size = self.type.type_size
        out = np.empty((n, nb, size), np.uint8)
        out[..., 0:2] = self.d.astype("<f2").reshape(n, nb, 1).view(np.uint8)
        if self.type == GGMLType.Q8_1:
            out[..., 2:4] = self.s.astype("<f2").reshape(n, nb, 1).view(np.uint8)
        out[..., size - 32 :] = qb
        return out.reshape(n, nb * size)


# ------------------------------------------------------------------------------------------------ entry points


def _f16_round(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(np.float16).astype(np.float32)


def quantize_activations(x: np.ndarray, dot: GGMLType) -> QActs:
    """Rows ``x`` (N, K) float32 quantized to ``dot`` (compiled when possible, else numpy)."""
    bl = DOT_TYPES[dot]
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, k = x.shape
    fn = None
    if _jit.enabled():
        from ggml_cpu.quant._act_kernels import SPECS

        fn = _jit.get(SPECS[bl, x.size >= _PARALLEL_MIN])
    if fn is None:
        return quantize_activations_numpy(x, dot)
    q = np.empty((n, k), np.int8)
    d = np.empty((n, k // bl), np.float32)
    sums = np.empty((n, k // 16 if bl == 256 else k // 32), np.int32)
    if fn(x, q, d, sums):
        return quantize_activations_numpy(x, dot)  # NaN / inf somewhere: the numpy quantizer defines the bytes
    if dot == GGMLType.Q8_K:
        return QActs(dot, q, d, sums, np.zeros(0, np.float32))
    s = _f16_round(sums.astype(np.float32) * d) if dot == GGMLType.Q8_1 else np.zeros(0, np.float32)
    return QActs(dot, q, _f16_round(d), sums, s)


def _maxps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x86 ``maxps``: ``a > b ? a : b`` (the second operand when either is NaN)."""
    return np.where(a > b, a, b)


def _x86_q8_32(x: np.ndarray, dot: GGMLType) -> np.ndarray:
    """``quantize_row_q8_0`` / ``quantize_row_q8_1`` of ggml-cpu's x86 AVX code: block bytes ``(N, row_bytes)``."""
    n, k = x.shape
    lanes = np.abs(x).reshape(n, k // 32, 4, 8)  # the four 8-float registers of a block
    m = lanes[..., 0, :]
    for j in range(1, 4):
        m = _maxps(m, lanes[..., j, :])
    m4 = _maxps(m[..., 4:], m[..., :4])  # extractf128 (high half first), then movehl and movehdup
    amax = _maxps(_maxps(m4[..., 0], m4[..., 2]), _maxps(m4[..., 1], m4[..., 3]))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = (amax / np.float32(127.0)).astype(np.float32)
        inv = np.where(amax != 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
        v = np.rint(x.reshape(n, k // 32, 32) * inv[..., None])  # half to even
        q32 = np.where(np.isnan(v), np.float32(-(2.0**31)), v).astype(np.int64)  # cvtps2dq: NaN -> INT_MIN
    q = np.clip(q32, -128, 127).astype(np.int8)  # packs_epi32, packs_epi16: saturating
    size = dot.type_size
    out = np.empty((n, k // 32, size), np.uint8)
    with np.errstate(over="ignore", invalid="ignore"):
        out[..., 0:2] = d.astype("<f2").reshape(n, -1, 1).view(np.uint8)
        if dot == GGMLType.Q8_1:  # s = f16(d * hsum of the int32 quants, wrapping as add_epi32 does)
            total = (q32.sum(axis=-1) + 2**31) % 2**32 - 2**31
            out[..., 2:4] = (d * total.astype(np.float32)).astype("<f2").reshape(n, -1, 1).view(np.uint8)
    out[..., size - 32 :] = q.view(np.uint8)
    return out.reshape(n, -1)


def from_float(x: np.ndarray, dot: GGMLType) -> np.ndarray:
    """ggml-cpu's ``from_float`` of ``dot`` on x86 for rows ``x`` (..., K): the blocks' bytes ``(..., row_bytes)``,
    as :func:`ggml_core.quants.quantize` lays them out (see the module doc)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dot not in (GGMLType.Q8_0, GGMLType.Q8_1):
        return quantize(x, dot)
    rows = _x86_q8_32(x.reshape(-1, x.shape[-1]), dot)
    return rows.reshape(*x.shape[:-1], rows.shape[-1])


def quantize_activations_numpy(x: np.ndarray, dot: GGMLType) -> QActs:
    """The same as :func:`quantize_activations` through :func:`from_float` (numpy; no numba needed)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, k = x.shape
    raw = from_float(x, dot)
    if dot == GGMLType.Q8_K:
        blocks = raw.reshape(n, k // 256, 292)
        d = np.ascontiguousarray(blocks[..., 0:4]).view("<f4").reshape(n, -1).astype(np.float32)
        q = np.ascontiguousarray(blocks[..., 4:260]).view(np.int8).reshape(n, k)
        sums = np.ascontiguousarray(blocks[..., 260:292]).view("<i2").reshape(n, -1).astype(np.int32)
        return QActs(dot, q, d, sums, np.zeros(0, np.float32))
    size = dot.type_size
    blocks = raw.reshape(n, k // 32, size)
    d = np.ascontiguousarray(blocks[..., 0:2]).view("<f2").reshape(n, -1).astype(np.float32)
    q = np.ascontiguousarray(blocks[..., size - 32 :]).view(np.int8).reshape(n, k)
    sums = q.reshape(n, k // 32, 32).astype(np.int32).sum(axis=-1, dtype=np.int32)
    s: np.ndarray = np.zeros(0, np.float32)
    if dot == GGMLType.Q8_1:
        s = np.ascontiguousarray(blocks[..., 2:4]).view("<f2").reshape(n, -1).astype(np.float32)
    return QActs(dot, q, d, sums, s)


def act_buffers(n: int, k: int, dot: GGMLType) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Empty buffers ``(q, d, sums, s)`` for ``n`` rows of ``k`` values quantized to ``dot``, as the compiled
    quantizers fill them: int8 quants, a float32 scale per block, int32 sums (per 16 values for Q8_K, per block
    otherwise) and Q8_1's ``s`` (zeros; unused by the other types)."""
    nb = k // DOT_TYPES[dot]
    sums = np.empty((n, k // 16 if dot == GGMLType.Q8_K else k // 32), np.int32)
    return np.empty((n, k), np.int8), np.empty((n, nb), np.float32), sums, np.zeros((n, nb), np.float32)


def numpy_into(x: np.ndarray, dot: GGMLType, q: np.ndarray, d: np.ndarray, sums: np.ndarray, s: np.ndarray) -> None:
    """:func:`quantize_activations_numpy` of ``x`` written into :func:`act_buffers`: how the compiled paths handle
    rows holding NaN or infinity (the numpy quantizer defines their bytes)."""
    acts = quantize_activations_numpy(x, dot)
    q[...], d[...], sums[...] = acts.q, acts.d, acts.sums
    if acts.s.size:
        s[...] = acts.s
