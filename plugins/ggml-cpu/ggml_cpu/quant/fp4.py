"""The MXFP4 tile dequantizer (gpt-oss's expert weights, ggml type 39): a compiled :data:`.dequant.SIGNATURE`
kernel for the large-batch route and for MUL_MAT_ID's per-expert products.

A block is 17 bytes: an E8M0 exponent ``e`` and 32 four-bit E2M1 codes (low nibbles first, then high). Each value
is ``kvalues_mxfp4[q] · 2^(e - 128)`` (``GGML_E8M0_TO_FP32_HALF``: the table holds twice the E2M1 values), which
float32 holds exactly for every ``e``, subnormal scales included: bit for bit ``ggml_core.quants.dequantize``.
There is no integer block kernel for MXFP4: the products use these tiles with SGEMM on Q8_0-rounded activations.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from ggml_core import GGMLType
from ggml_cpu.jit import _jit
from ggml_cpu.quant.dequant import SIGNATURE

__all__ = ["SPECS"]

#: ggml-common.h's ``kvalues_mxfp4``
_KVALUES: Final = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def _deq_mxfp4(
    w: np.ndarray, wi: np.ndarray, r0: int, r1: int, lut: np.ndarray, out: np.ndarray, mins: np.ndarray
) -> None:  # pragma: no cover - compiled
    nb = out.shape[1] // 32
    for r in range(r1 - r0):
        row = w[r0 + r]
        dst = out[r]
        for b in range(nb):
            o = b * 17
            d = np.float32(math.ldexp(1.0, np.int64(row[o]) - 128))
            for j in range(16):
                v = np.int64(row[o + 1 + j])
                dst[b * 32 + j] = _KVALUES[v & 15] * d
                dst[b * 32 + 16 + j] = _KVALUES[v >> 4] * d


#: compiled-kernel specs per weight type (merged into the tile dequantizers)
SPECS: Final = {GGMLType.MXFP4: _jit.KernelSpec(_deq_mxfp4, SIGNATURE, readonly=(0, 1))}
