"""Field readers shared by the block kernels (inlined by numba): f16 scales, 32-bit masks, K-quant scales."""

from __future__ import annotations

import numpy as np

from ggml_cpu.kernels.qdot._jit import inline

__all__ = ["f16_at", "scale_min_k4", "u32_at"]


@inline
def f16_at(row: np.ndarray, o: int, lut: np.ndarray) -> float:  # pragma: no cover - compiled
    """The little-endian f16 at ``row[o:o+2]`` as float32 (through the 65536-entry table ``lut``)."""
    return lut[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)]


@inline
def u32_at(row: np.ndarray, o: int) -> int:  # pragma: no cover - compiled
    """The little-endian uint32 at ``row[o:o+4]``."""
    return np.int64(row[o]) | (np.int64(row[o + 1]) << 8) | (np.int64(row[o + 2]) << 16) | (np.int64(row[o + 3]) << 24)


@inline
def scale_min_k4(row: np.ndarray, o: int, j: int) -> tuple[int, int]:  # pragma: no cover - compiled
    """Scale and min of sub-block ``j`` from the 12 packed bytes at ``row[o:o+12]`` (ggml's ``get_scale_min_k4``)."""
    if j < 4:
        return np.int64(row[o + j]) & 63, np.int64(row[o + 4 + j]) & 63
    sc = (np.int64(row[o + 4 + j]) & 15) | ((np.int64(row[o + j - 4]) >> 6) << 4)
    mn = (np.int64(row[o + 4 + j]) >> 4) | ((np.int64(row[o + j]) >> 6) << 4)
    return sc, mn
