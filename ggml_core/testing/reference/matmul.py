"""numpy references for matrix products: MUL_MAT, MUL_MAT_ID, OUT_PROD.

ggml's CPU first converts the activations (src1 rows) to the weight type's ``vec_dot_type`` — Q8_0, Q8_1, Q8_K,
f16 or bf16 — and multiplies the weights with that rounded copy. The reference does the same rounding with
:mod:`ggml_core.quants` (bit-exact with ggml), then multiplies in float64. For Q8_0 / Q8_1 that is the CPU's
``from_float``, not the reference quantizer: ggml-cpu's x86 code (AVX and up) multiplies by ``127/amax`` and
rounds half to even (blocks holding NaN or infinity take the reference quantizer here). Dims 2 and 3 broadcast by
*repetition*: weight slice ``i // ratio`` serves activation slice ``i``.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core._types import GGMLType
from ggml_core.quants import dequantize, quantize

__all__ = ["VEC_DOT_TYPE", "activations", "mul_mat", "mul_mat_id", "out_prod"]

T = GGMLType

#: ggml CPU's ``vec_dot_type`` per weight type (ggml-cpu.c ``type_traits_cpu``)
VEC_DOT_TYPE: Final[dict[GGMLType, GGMLType]] = {
    T.F32: T.F32,
    T.F16: T.F16,
    T.BF16: T.BF16,
    T.Q1_0: T.Q8_0,
    T.Q2_0: T.Q8_0,
    T.Q4_0: T.Q8_0,
    T.Q4_1: T.Q8_1,
    T.Q5_0: T.Q8_0,
    T.Q5_1: T.Q8_1,
    T.Q8_0: T.Q8_0,
    T.MXFP4: T.Q8_0,
    T.NVFP4: T.Q8_0,
    T.IQ4_NL: T.Q8_0,
    **{
        t: T.Q8_K
        for t in (
            T.Q2_K,
            T.Q3_K,
            T.Q4_K,
            T.Q5_K,
            T.Q6_K,
            T.IQ2_XXS,
            T.IQ2_XS,
            T.IQ3_XXS,
            T.IQ3_S,
            T.IQ2_S,
            T.IQ1_S,
            T.IQ1_M,
            T.IQ4_XS,
            T.TQ1_0,
            T.TQ2_0,
        )
    },
}


def activations(x: np.ndarray, wtype: GGMLType) -> np.ndarray:
    """Activations (rows along the last axis) rounded through the dot type of weights of ``wtype``."""
    dot = VEC_DOT_TYPE.get(wtype, T.F32)
    v = np.ascontiguousarray(x, dtype=np.float32)
    if dot == T.F32:
        return v
    if dot == T.F16:
        return v.astype(np.float16).astype(np.float32)
    ref = dequantize(quantize(v, dot), dot).reshape(v.shape)
    if dot not in (T.Q8_0, T.Q8_1):
        return ref
    blocks = v.reshape(*v.shape[:-1], -1, 32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        amax = np.abs(blocks).max(axis=-1, keepdims=True)
        inv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
        d = (amax / np.float32(127.0)).astype(np.float16).astype(np.float32)
        x86 = (np.rint(blocks * inv) * d).astype(np.float32).reshape(v.shape)
    finite = np.repeat(np.isfinite(amax), 32, axis=-1).reshape(v.shape)
    return np.where(finite, x86, ref)


def _repeat_to(w: np.ndarray, d3: int, d2: int) -> np.ndarray:
    """Repeat dims 0 and 1 (ggml's dims 3 and 2) of ``w`` up to (d3, d2): slice i serves i*ratio .. (i+1)*ratio−1."""
    return np.repeat(np.repeat(w, d3 // w.shape[0], axis=0), d2 // w.shape[1], axis=1)


def mul_mat(a: np.ndarray, b: np.ndarray, wtype: GGMLType) -> np.ndarray:
    """MUL_MAT: a (a3, a2, M, K) weights of type ``wtype``, b (b3, b2, N, K) → (b3, b2, N, M) = b · aᵀ."""
    x = activations(b, wtype).astype(np.float64)
    w = _repeat_to(np.asarray(a, dtype=np.float64), b.shape[0], b.shape[1])
    return np.matmul(x, np.swapaxes(w, -1, -2))


def mul_mat_id(as_: np.ndarray, b: np.ndarray, ids: np.ndarray, wtype: GGMLType) -> np.ndarray:
    """MUL_MAT_ID: as_ (1, E, M, K); b (1, T, U or 1, K); ids (1, 1, T, U) → (1, T, U, M).

    Token t's slot u multiplies expert ``ids[t, u]`` with b row ``u % b.ne[1]`` of token t.
    """
    w = np.asarray(as_, dtype=np.float64)[0]
    x = activations(b, wtype).astype(np.float64)[0]  # (T, U or 1, K)
    idx = np.asarray(ids)[0, 0]  # (T, U)
    n_tok, n_used = idx.shape
    out = np.zeros((1, n_tok, n_used, w.shape[1]))
    for t in range(n_tok):
        for u in range(n_used):
            out[0, t, u] = w[idx[t, u]] @ x[t, u % x.shape[1]]
    return out


def out_prod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """OUT_PROD: a (a3, a2, K, M), b (b3, b2, K, N) → (b3, b2, N, M) = Σ_k b[k, n]·a[k, m]."""
    x = np.asarray(b, dtype=np.float64)
    w = _repeat_to(np.asarray(a, dtype=np.float64), x.shape[0], x.shape[1])
    return np.matmul(np.swapaxes(x, -1, -2), w)
