"""Dequantize a range of weight rows into a float32 tile (the large-batch path: tile by tile, then BLAS).

Each kernel writes ``out[r - r0] = dequantize(w[r])`` for ``r0 <= r < r1`` with exactly the float32 operations of
``ggml_core.quants.dequantize`` (ggml's ``dequantize_row_*``), bit for bit, except that Q4_1 and Q5_1 write only
``q·d`` and put the block minima ``m`` in ``mins`` (``out + m`` is the full dequantization): the product then adds
``m·s`` with Q8_1's f16-rounded ``s`` as ggml does. Serial: the tile route runs them on its own workers.

Signature :data:`SIGNATURE`: ``w`` (M, row bytes) uint8, ``wi`` the same as int8, ``r0``, ``r1``, ``lut`` (f16 →
f32 table), ``out`` float32 (≥ r1−r0, K), ``mins`` float32 (≥ r1−r0, K/32; Q4_1/Q5_1 only, else any shape).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core import GGMLType
from ggml_cpu.kernels.qdot import _jit
from ggml_cpu.kernels.qdot._blocks import f16_at, scale_min_k4, u32_at

__all__ = ["SIGNATURE", "SPECS"]

SIGNATURE: Final = "void(uint8[:, ::1], int8[:, ::1], int64, int64, float32[::1], float32[:, ::1], float32[:, ::1])"


def _deq_q4_0(
    w: np.ndarray, wi: np.ndarray, r0: int, r1: int, lut: np.ndarray, out: np.ndarray, mins: np.ndarray
) -> None:  # pragma: no cover - compiled
    nb = out.shape[1] // 32
    for r in range(r1 - r0):
        row = w[r0 + r]
        dst = out[r]
        for b in range(nb):
            o = b * 18
            d = f16_at(row, o, lut)
            for j in range(16):
                v = np.int32(row[o + 2 + j])
                dst[b * 32 + j] = np.float32((v & 15) - 8) * d
                dst[b * 32 + 16 + j] = np.float32((v >> 4) - 8) * d


def _deq_q4_1(
    w: np.ndarray, wi: np.ndarray, r0: int, r1: int, lut: np.ndarray, out: np.ndarray, mins: np.ndarray
) -> None:  # pragma: no cover - compiled
    nb = out.shape[1] // 32
    for r in range(r1 - r0):
        row = w[r0 + r]
        dst = out[r]
        for b in range(nb):
            o = b * 20
            d = f16_at(row, o, lut)
            mins[r, b] = f16_at(row, o + 2, lut)
            for j in range(16):
                v = np.int32(row[o + 4 + j])
                dst[b * 32 + j] = np.float32(v & 15) * d
                dst[b * 32 + 16 + j] = np.float32(v >> 4) * d


def _deq_q5_0(
    w: np.ndarray, wi: np.ndarray, r0: int, r1: int, lut: np.ndarray, out: np.ndarray, mins: np.ndarray
) -> None:  # pragma: no cover - compiled
    nb = out.shape[1] // 32
    for r in range(r1 - r0):
        row = w[r0 + r]
        dst = out[r]
        for b in range(nb):
            o = b * 22
            d = f16_at(row, o, lut)
            qh = u32_at(row, o + 2)
            for j in range(16):
                v = np.int64(row[o + 6 + j])
                lo = (v & 15) | (((qh >> j) & 1) << 4)
                hi = (v >> 4) | (((qh >> (j + 16)) & 1) << 4)
                dst[b * 32 + j] = np.float32(lo - 16) * d
                dst[b * 32 + 16 + j] = np.float32(hi - 16) * d


def _deq_q5_1(
    w: np.ndarray, wi: np.ndarray, r0: int, r1: int, lut: np.ndarray, out: np.ndarray, mins: np.ndarray
) -> None:  # pragma: no cover - compiled
    nb = out.shape[1] // 32
    for r in range(r1 - r0):
        row = w[r0 + r]
        dst = out[r]
        for b in range(nb):
            o = b * 24
            d = f16_at(row, o, lut)
            mins[r, b] = f16_at(row, o + 2, lut)
            qh = u32_at(row, o + 4)
            for j in range(16):
                v = np.int64(row[o + 8 + j])
                lo = (v & 15) | (((qh >> j) & 1) << 4)
                hi = (v >> 4) | (((qh >> (j + 16)) & 1) << 4)
                dst[b * 32 + j] = np.float32(lo) * d
                dst[b * 32 + 16 + j] = np.float32(hi) * d


def _deq_q8_0(
    w: np.ndarray, wi: np.ndarray, r0: int, r1: int, lut: np.ndarray, out: np.ndarray, mins: np.ndarray
) -> None:  # pragma: no cover - compiled
    nb = out.shape[1] // 32
    for r in range(r1 - r0):
        row = w[r0 + r]
        rowi = wi[r0 + r]
        dst = out[r]
        for b in range(nb):
            o = b * 34
            d = f16_at(row, o, lut)
            for j in range(32):
                dst[b * 32 + j] = np.float32(rowi[o + 2 + j]) * d


def _deq_q4_k(
    w: np.ndarray, wi: np.ndarray, r0: int, r1: int, lut: np.ndarray, out: np.ndarray, mins: np.ndarray
) -> None:  # pragma: no cover - compiled
    nb = out.shape[1] // 256
    for r in range(r1 - r0):
        row = w[r0 + r]
        dst = out[r]
        for b in range(nb):
            o = b * 144
            d = f16_at(row, o, lut)
            dmin = f16_at(row, o + 2, lut)
            for j in range(8):
                sc, mn = scale_min_k4(row, o + 4, j)
                d1 = d * np.float32(sc)
                m1 = dmin * np.float32(mn)
                q0 = o + 16 + (j >> 1) * 32
                sh = (j & 1) * 4
                base = b * 256 + j * 32
                for t in range(32):
                    dst[base + t] = d1 * np.float32((np.int64(row[q0 + t]) >> sh) & 15) - m1


def _deq_q5_k(
    w: np.ndarray, wi: np.ndarray, r0: int, r1: int, lut: np.ndarray, out: np.ndarray, mins: np.ndarray
) -> None:  # pragma: no cover - compiled
    nb = out.shape[1] // 256
    for r in range(r1 - r0):
        row = w[r0 + r]
        dst = out[r]
        for b in range(nb):
            o = b * 176
            d = f16_at(row, o, lut)
            dmin = f16_at(row, o + 2, lut)
            for j in range(8):
                sc, mn = scale_min_k4(row, o + 4, j)
                d1 = d * np.float32(sc)
                m1 = dmin * np.float32(mn)
                q0 = o + 48 + (j >> 1) * 32
                sh = (j & 1) * 4
                base = b * 256 + j * 32
                for t in range(32):
                    q = ((np.int64(row[q0 + t]) >> sh) & 15) | (((np.int64(row[o + 16 + t]) >> j) & 1) << 4)
                    dst[base + t] = d1 * np.float32(q) - m1


def _deq_q6_k(
    w: np.ndarray, wi: np.ndarray, r0: int, r1: int, lut: np.ndarray, out: np.ndarray, mins: np.ndarray
) -> None:  # pragma: no cover - compiled
    nb = out.shape[1] // 256
    for r in range(r1 - r0):
        row = w[r0 + r]
        rowi = wi[r0 + r]
        dst = out[r]
        for b in range(nb):
            o = b * 210
            d = f16_at(row, o + 208, lut)
            for h in range(2):
                for q in range(4):
                    ql = o + h * 64 + (q & 1) * 32
                    qh = o + 128 + h * 32
                    sh = (q >> 1) * 4
                    t0 = h * 8 + q * 2
                    base = b * 256 + h * 128 + q * 32
                    for half in range(2):
                        ds = d * np.float32(rowi[o + 192 + t0 + half])
                        for t in range(16):
                            lo = (np.int64(row[ql + half * 16 + t]) >> sh) & 15
                            hi = (np.int64(row[qh + half * 16 + t]) >> (2 * q)) & 3
                            dst[base + half * 16 + t] = ds * np.float32((lo | (hi << 4)) - 32)


#: compiled-kernel specs per weight type
SPECS: Final = {
    GGMLType.Q4_0: _jit.KernelSpec(_deq_q4_0, SIGNATURE, readonly=(0, 1)),
    GGMLType.Q4_1: _jit.KernelSpec(_deq_q4_1, SIGNATURE, readonly=(0, 1)),
    GGMLType.Q5_0: _jit.KernelSpec(_deq_q5_0, SIGNATURE, readonly=(0, 1)),
    GGMLType.Q5_1: _jit.KernelSpec(_deq_q5_1, SIGNATURE, readonly=(0, 1)),
    GGMLType.Q8_0: _jit.KernelSpec(_deq_q8_0, SIGNATURE, readonly=(0, 1)),
    GGMLType.Q4_K: _jit.KernelSpec(_deq_q4_k, SIGNATURE, readonly=(0, 1)),
    GGMLType.Q5_K: _jit.KernelSpec(_deq_q5_k, SIGNATURE, readonly=(0, 1)),
    GGMLType.Q6_K: _jit.KernelSpec(_deq_q6_k, SIGNATURE, readonly=(0, 1)),
}
