"""MUL_MAT with ggml's CPU numerics: activations are rounded to the weight type's dot type first.

ggml's CPU multiplies a quantized weight row with activations that it first quantizes to the weight type's
``vec_dot_type`` (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants; f16 weights round
activations to f16). Emulating that rounding, then multiplying in float32, agrees with ggml to float rounding.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.quants import dequantize, quantize

from ggml_cpu.kernels._base import Thunk, arr, f32, kernel

__all__ = ["VEC_DOT_TYPE", "activations_as_dot_type", "matmul_4d", "weights_f32"]

#: ggml's ``type_traits_cpu[t].vec_dot_type``
VEC_DOT_TYPE: Final[dict[GGMLType, GGMLType]] = {
    GGMLType.F32: GGMLType.F32,
    GGMLType.F16: GGMLType.F16,
    GGMLType.BF16: GGMLType.BF16,
    GGMLType.Q4_0: GGMLType.Q8_0,
    GGMLType.Q4_1: GGMLType.Q8_1,
    GGMLType.Q5_0: GGMLType.Q8_0,
    GGMLType.Q5_1: GGMLType.Q8_1,
    GGMLType.Q8_0: GGMLType.Q8_0,
    GGMLType.Q2_K: GGMLType.Q8_K,
    GGMLType.Q3_K: GGMLType.Q8_K,
    GGMLType.Q4_K: GGMLType.Q8_K,
    GGMLType.Q5_K: GGMLType.Q8_K,
    GGMLType.Q6_K: GGMLType.Q8_K,
}


def activations_as_dot_type(x: np.ndarray, wtype: GGMLType) -> np.ndarray:
    """float32 activations rounded through the dot type of weights of ``wtype`` (rows along the last axis)."""
    dot = VEC_DOT_TYPE[wtype]
    if dot == GGMLType.F32:
        return x
    if dot == GGMLType.F16:
        return x.astype(np.float16).astype(np.float32)
    return dequantize(quantize(np.ascontiguousarray(x, dtype=np.float32), dot), dot)


def weights_f32(w: Tensor) -> np.ndarray:
    """The weights as float32 (dequantized copy for quantized types)."""
    return f32(w)


def _q8_1_sums(xq: np.ndarray) -> np.ndarray:
    """The f16 ``s`` field (d·Σq, rounded to f16) of every Q8_1 block, shape (..., n_blocks)."""
    blocks = xq.reshape(*xq.shape[:-1], -1, 36)
    return blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)


def _q_1_mins(w: np.ndarray, wtype: GGMLType) -> np.ndarray:
    """The f16 ``m`` field of Q4_1 / Q5_1 blocks, shape (..., n_blocks)."""
    size = wtype.type_size
    blocks = w.reshape(*w.shape[:-1], -1, size)
    return blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)


def matmul_4d(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """ggml's broadcasting product: w (a3, a2, M, K), x (b3, b2, N, K) → (b3, b2, N, M), w index = x index / ratio."""
    a3, a2 = w.shape[:2]
    b3, b2, n, k = x.shape
    r2, r3 = b2 // a2, b3 // a3
    m = w.shape[2]
    if r2 == 1 and r3 == 1:
        return np.matmul(x, w.swapaxes(-1, -2))
    # group the x slices sharing one w slice: (a3, r3, a2, r2, N, K) → (a3, a2, r3*r2*N, K)
    xs = x.reshape(a3, r3, a2, r2, n, k).transpose(0, 2, 1, 3, 4, 5).reshape(a3, a2, r3 * r2 * n, k)
    out = np.matmul(xs, w.swapaxes(-1, -2))  # (a3, a2, r3*r2*N, M)
    return out.reshape(a3, a2, r3, r2, n, m).transpose(0, 2, 1, 3, 4, 5).reshape(b3, b2, n, m)


def _mul_mat_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    return a.type in VEC_DOT_TYPE and b.type in (GGMLType.F32, GGMLType.F16) and node.type == GGMLType.F32


@kernel(GGMLOp.MUL_MAT, supports=_mul_mat_ok)
def _bind_mul_mat(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    out = arr(node)
    wtype = a.type

    def run() -> None:
        x = f32(b)
        if wtype in (GGMLType.Q4_1, GGMLType.Q5_1):
            out[...] = _mul_mat_q_1(a, x)
            return
        xw = activations_as_dot_type(x, wtype)
        out[...] = matmul_4d(weights_f32(a), xw)

    return run


def _mul_mat_q_1(a: Tensor, x: np.ndarray) -> np.ndarray:
    # Q4_1/Q5_1 · Q8_1: Σ_blocks d_w·d_x·Σ q_w q_x + m_w · s_x, where s_x is d_x·Σq_x rounded to f16
    xq = quantize(np.ascontiguousarray(x, dtype=np.float32), GGMLType.Q8_1)
    xd = dequantize(xq, GGMLType.Q8_1)
    sx = _q8_1_sums(xq)  # (b3, b2, N, nb)
    wraw = np.ascontiguousarray(arr(a))
    w = dequantize(wraw, a.type)  # (a3, a2, M, K)
    mw = _q_1_mins(wraw, a.type)  # (a3, a2, M, nb)
    nb = mw.shape[-1]
    w_scaled = w - np.repeat(mw, 32, axis=-1)  # the d·q part of each weight
    return matmul_4d(w_scaled, xd) + matmul_4d(mw, sx.reshape(*sx.shape[:-1], nb))
