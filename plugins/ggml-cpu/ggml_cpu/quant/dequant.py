"""Dequantize a range of weight rows into a float32 tile (the large-batch path: tile by tile, then BLAS).

Each kernel writes ``out[r - r0] = dequantize(w[r])`` for ``r0 <= r < r1`` with exactly the float32 operations of
``ggml_core.quants.dequantize`` (ggml's ``dequantize_row_*``), bit for bit, except that Q4_1 and Q5_1 write only
``q·d`` and put the block minima ``m`` in ``mins`` (``out + m`` is the full dequantization): the product then adds
``m·s`` with Q8_1's f16-rounded ``s`` as ggml does. Serial: the tile route runs them on its own workers.

Signature :data:`SIGNATURE`: ``w`` (M, row bytes) uint8, ``wi`` the same as int8, ``r0``, ``r1``, ``lut`` (f16 →
f32 table), ``out`` float32 (≥ r1−r0, K), ``mins`` float32 (≥ r1−r0, K/32; Q4_1/Q5_1 only, else any shape).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np

from ggml_core import GGMLType
from ggml_cpu.jit import _jit
from ggml_cpu.jit._blocks import f16_at, scale_min_k4, u32_at

__all__ = ["SIGNATURE", "SPECS"]

SIGNATURE: Final = "void(uint8[:, ::1], int8[:, ::1], int64, int64, float32[::1], float32[:, ::1], float32[:, ::1])"


_Q4_0, _Q4_1, _Q5_0, _Q5_1, _Q8_0 = 0, 1, 2, 3, 4


def _legacy(kind: int) -> Callable[..., None]:
    """The dequantizer of one 32-element type: ``kind`` is a constant of the closure, folded when compiled."""
    size = (18, 20, 22, 24, 34)[kind]
    qs_at = (2, 4, 6, 8, 2)[kind]
    offset = (8, 0, 16, 0, 0)[kind]  # Q4_0 / Q5_0 store q + 8 / q + 16

    def kernel(
        w: np.ndarray, wi: np.ndarray, r0: int, r1: int, lut: np.ndarray, out: np.ndarray, mins: np.ndarray
    ) -> None:  # pragma: no cover - compiled
        nb = out.shape[1] // 32
        for r in range(r1 - r0):
            row = w[r0 + r]
            rowi = wi[r0 + r]
            dst = out[r]
            for b in range(nb):
                o = b * size
                d = f16_at(row, o, lut)
                if kind in (_Q4_1, _Q5_1):
                    mins[r, b] = f16_at(row, o + 2, lut)
                if kind == _Q8_0:
                    for j in range(32):
                        dst[b * 32 + j] = np.float32(rowi[o + 2 + j]) * d
                    continue
                qh = u32_at(row, o + 2) if kind == _Q5_0 else u32_at(row, o + 4) if kind == _Q5_1 else 0
                for j in range(16):
                    v = np.int64(row[o + qs_at + j])
                    lo = (v & 15) | (((qh >> j) & 1) << 4)
                    hi = (v >> 4) | (((qh >> (j + 16)) & 1) << 4)
                    dst[b * 32 + j] = np.float32(lo - offset) * d
                    dst[b * 32 + 16 + j] = np.float32(hi - offset) * d

    return kernel


def _k45(with_qh: bool) -> Callable[..., None]:
    """The Q4_K (``with_qh`` False) or Q5_K dequantizer: ``(d·scale)·q − dmin·min`` per sub-block of 32."""
    size, qs_at = (176, 48) if with_qh else (144, 16)

    def kernel(
        w: np.ndarray, wi: np.ndarray, r0: int, r1: int, lut: np.ndarray, out: np.ndarray, mins: np.ndarray
    ) -> None:  # pragma: no cover - compiled
        nb = out.shape[1] // 256
        for r in range(r1 - r0):
            row = w[r0 + r]
            dst = out[r]
            for b in range(nb):
                o = b * size
                d = f16_at(row, o, lut)
                dmin = f16_at(row, o + 2, lut)
                for j in range(8):
                    sc, mn = scale_min_k4(row, o + 4, j)
                    d1 = d * np.float32(sc)
                    m1 = dmin * np.float32(mn)
                    q0 = o + qs_at + (j >> 1) * 32
                    sh = (j & 1) * 4
                    base = b * 256 + j * 32
                    for t in range(32):
                        q = (np.int64(row[q0 + t]) >> sh) & 15
                        if with_qh:
                            q |= ((np.int64(row[o + 16 + t]) >> j) & 1) << 4
                        dst[base + t] = d1 * np.float32(q) - m1

    return kernel


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
    GGMLType.Q4_0: _jit.KernelSpec(_legacy(_Q4_0), SIGNATURE, readonly=(0, 1), name="_deq_q4_0"),
    GGMLType.Q4_1: _jit.KernelSpec(_legacy(_Q4_1), SIGNATURE, readonly=(0, 1), name="_deq_q4_1"),
    GGMLType.Q5_0: _jit.KernelSpec(_legacy(_Q5_0), SIGNATURE, readonly=(0, 1), name="_deq_q5_0"),
    GGMLType.Q5_1: _jit.KernelSpec(_legacy(_Q5_1), SIGNATURE, readonly=(0, 1), name="_deq_q5_1"),
    GGMLType.Q8_0: _jit.KernelSpec(_legacy(_Q8_0), SIGNATURE, readonly=(0, 1), name="_deq_q8_0"),
    GGMLType.Q4_K: _jit.KernelSpec(_k45(False), SIGNATURE, readonly=(0, 1), name="_deq_q4_k"),
    GGMLType.Q5_K: _jit.KernelSpec(_k45(True), SIGNATURE, readonly=(0, 1), name="_deq_q5_k"),
    GGMLType.Q6_K: _jit.KernelSpec(_deq_q6_k, SIGNATURE, readonly=(0, 1)),
}
