"""numpy references for data movement: GET_ROWS, SET_ROWS, CPY/DUP/CONT, REPEAT, CONCAT, PAD, ARANGE, FILL,
SET, DIAG_MASK_INF/ZERO; and test-backend-ops' error estimates for quantizing copies."""

from __future__ import annotations

import math

import numpy as np

from ggml_core._types import GGMLType
from ggml_core.testing._inputs import round_to_type

__all__ = [
    "arange",
    "concat",
    "copy_into",
    "cpy_quant_nmse",
    "diag",
    "diag_mask",
    "fill",
    "get_rows",
    "pad",
    "pad_ext",
    "pad_reflect_1d",
    "repeat",
    "repeat_back",
    "roll",
    "set_rows",
    "set_rows_quant_nmse",
    "timestep_embedding",
    "tri",
]


def get_rows(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """GET_ROWS: a (a3, a2, rows, ne0), idx (1, a3, a2, n) → (a3, a2, n, ne0) with out[i3, i2, j] = a[i3, i2, idx]."""
    i = np.asarray(idx)[0].astype(np.int64)
    i3 = np.arange(a.shape[0])[:, None, None]
    i2 = np.arange(a.shape[1])[None, :, None]
    return np.asarray(a)[i3, i2, i]


def set_rows(dst: np.ndarray, src: np.ndarray, idx: np.ndarray, dst_type: GGMLType) -> np.ndarray:
    """SET_ROWS: ``dst`` with row ``idx[i3 % c3, i2 % c2, j]`` replaced by ``src[i3, i2, j]`` stored as ``dst_type``.

    dst (d3, d2, rows, ne0); src (d3, d2, n, ne0); idx (1, c3, c2, n) broadcast over dims 2 and 3 of src.
    """
    out = np.array(dst, dtype=np.float32 if dst_type.is_quantized or dst_type == GGMLType.BF16 else None)
    written = round_to_type(np.asarray(src, dtype=np.float32), dst_type)
    ix = np.asarray(idx)[0].astype(np.int64)
    d3, d2 = src.shape[0], src.shape[1]
    for i3 in range(d3):
        for i2 in range(d2):
            rows = ix[i3 % ix.shape[0], i2 % ix.shape[1]]
            out[i3, i2, rows] = written[i3, i2]
    return out


def copy_into(a: np.ndarray, dst_shape: tuple[int, ...]) -> np.ndarray:
    """CPY/DUP/CONT: a's values in logical (row-major) order, laid into the destination's shape."""
    return np.asarray(a).reshape(-1).reshape(dst_shape)


def repeat(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """REPEAT: a tiled to ``shape``."""
    return np.tile(np.asarray(a), tuple(s // n for s, n in zip(shape, a.shape, strict=True)))


def concat(a: np.ndarray, b: np.ndarray, dim: int) -> np.ndarray:
    """CONCAT along ggml dimension ``dim`` (numpy axis 3 − dim)."""
    return np.concatenate([np.asarray(a), np.asarray(b)], axis=3 - dim)


def pad(a: np.ndarray, p: tuple[int, int, int, int]) -> np.ndarray:
    """PAD: zeros appended after the end of each dimension (p = elements added to ne[0..3])."""
    return np.pad(np.asarray(a, dtype=np.float32), ((0, p[3]), (0, p[2]), (0, p[1]), (0, p[0])))


def arange(start: float, stop: float, step: float) -> np.ndarray:
    """ARANGE: start + i·step in float32 for i < ceil((stop − start) / step)."""
    n = math.ceil((stop - start) / step)
    return np.float32(start) + np.float32(step) * np.arange(n, dtype=np.float32)


def fill(a: np.ndarray, c: float) -> np.ndarray:
    """FILL: every element equals c."""
    return np.full(a.shape, np.float32(c), dtype=np.float32)


def diag_mask(a: np.ndarray, n_past: int, value: float) -> np.ndarray:
    """DIAG_MASK_INF/ZERO: ``value`` where the column i exceeds n_past + the row j."""
    x = np.array(a, dtype=np.float32)
    rows, cols = x.shape[-2], x.shape[-1]
    mask = np.arange(cols)[None, :] > n_past + np.arange(rows)[:, None]
    x[..., mask] = np.float32(value)
    return x


_ONE_STEP: dict[GGMLType, float] = {
    GGMLType.Q4_0: 1 / 8,
    GGMLType.Q4_1: 1 / 8,
    GGMLType.IQ4_NL: 1 / 8,
    GGMLType.Q5_0: 1 / 16,
    GGMLType.Q5_1: 1 / 16,
    GGMLType.Q8_0: 1 / 64,
}


def cpy_quant_nmse(src: GGMLType, dst: GGMLType, n: int) -> float:
    """test-backend-ops' CPY threshold: same type exact, legacy quants one step off per value (inputs ±150)."""
    if src == dst:
        return 0.0
    step = _ONE_STEP.get(dst)
    if step is None:
        return 1e-6
    est = step * 150.0 * (2.0 if dst == GGMLType.IQ4_NL else 1.0)
    return est * est / (150.0 * 150.0 * 0.25 * n)


def set_rows_quant_nmse(src: GGMLType, dst: GGMLType, n: int) -> float:
    """test-backend-ops' SET_ROWS threshold for quantized destinations (inputs ±1; ``n`` elements written)."""
    step = _ONE_STEP.get(dst)
    if step is None and dst != GGMLType.Q2_0:
        return 1e-7
    est = 1 / 8 if step is None else step
    if src == GGMLType.F16 and dst == GGMLType.Q2_0:
        est *= 4
    est *= est
    if src == GGMLType.F16:
        est *= 16
    return est / (0.25 * n)


def repeat_back(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """REPEAT_BACK: the sum of a's tiles of ``shape`` (the gradient of REPEAT)."""
    x = np.asarray(a, dtype=np.float64)
    split: list[int] = []
    for n, s in zip(x.shape, shape, strict=True):
        split += [n // s, s]
    return x.reshape(split).sum(axis=(0, 2, 4, 6))


def pad_ext(a: np.ndarray, p: tuple[int, ...]) -> np.ndarray:
    """PAD with zeros before and after each dimension: p = (lp0, rp0, lp1, rp1, lp2, rp2, lp3, rp3)."""
    return np.pad(np.asarray(a, dtype=np.float32), ((p[6], p[7]), (p[4], p[5]), (p[2], p[3]), (p[0], p[1])))


def pad_reflect_1d(a: np.ndarray, p0: int, p1: int) -> np.ndarray:
    """PAD_REFLECT_1D: dim 0 padded by reflection (the edge element is not repeated)."""
    return np.pad(np.asarray(a, dtype=np.float32), ((0, 0), (0, 0), (0, 0), (p0, p1)), mode="reflect")


def roll(a: np.ndarray, shifts: tuple[int, int, int, int]) -> np.ndarray:
    """ROLL: circular shift of every dimension, out[i] = a[(i − shift) mod n]."""
    return np.roll(np.asarray(a), (shifts[3], shifts[2], shifts[1], shifts[0]), axis=(0, 1, 2, 3))


def diag(a: np.ndarray) -> np.ndarray:
    """DIAG: a (d3, d2, 1, n) → (d3, d2, n, n) with a on the diagonal."""
    x = np.asarray(a, dtype=np.float32)
    n = x.shape[-1]
    return x[:, :, 0, None, :] * np.eye(n, dtype=np.float32)


def tri(a: np.ndarray, kind: str) -> np.ndarray:
    """TRI: keep the elements of each (row r, column i) where LOWER: i < r, LOWER_DIAG: i ≤ r, UPPER: i > r,
    UPPER_DIAG: i ≥ r; zeros elsewhere."""
    x = np.asarray(a, dtype=np.float32)
    r = np.arange(x.shape[-2])[:, None]
    i = np.arange(x.shape[-1])[None, :]
    keep = {"LOWER": i < r, "LOWER_DIAG": i <= r, "UPPER": i > r, "UPPER_DIAG": i >= r}[kind]
    return np.where(keep, x, np.float32(0.0))


def timestep_embedding(t: np.ndarray, dim: int, max_period: int) -> np.ndarray:
    """TIMESTEP_EMBEDDING: per timestep, [cos(t·f_j) for j < half, sin(t·f_j) for j < half] (+ a 0 when dim is odd),
    f_j = exp(−ln(max_period)·j/half) in float32."""
    ts = np.asarray(t, dtype=np.float32).reshape(-1)
    half = dim // 2
    j = np.arange(half, dtype=np.float32)
    freq = np.exp(-np.log(np.float32(max_period)) * j / np.float32(half)).astype(np.float32)
    arg = ts[:, None] * freq[None, :]
    out = np.zeros((ts.size, dim), np.float32)
    out[:, :half] = np.cos(arg)
    out[:, half : 2 * half] = np.sin(arg)
    return out
