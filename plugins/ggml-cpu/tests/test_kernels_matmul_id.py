"""MUL_MAT_ID (MoE expert routing) and OUT_PROD on the CPU plugin against numpy written from the definitions.

Weights are dequantized with gguf-py (an independent implementation of ggml's block formats); the activation
rounding that ggml's CPU applies before a quantized dot product (Q8_0 / Q8_1 blocks of 32) is written out here.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GQ
from gguf import quants as gquants
from kernel_harness import CpuGraph, rng

from ggml_core import ComputeError, OpError, ops


def _q8_blocks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ggml's Q8_0/Q8_1 rounding of rows of x: per block of 32, d = amax/127, q = round(x/d) half away from 0.

    Returns (f16-rounded d per block, q per element, f16-rounded s = d·Σq per block).
    """
    xb = x.reshape(*x.shape[:-1], -1, 32).astype(np.float32)
    d = np.abs(xb).max(axis=-1) / np.float32(127)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    v = xb * inv[..., None]
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)
    s = (q.sum(axis=-1) * d).astype(np.float16).astype(np.float64)
    return d.astype(np.float16).astype(np.float64), q, s


def _dot_ref(w_type: str, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x (n, K) · w (M, K)ᵀ with ggml CPU's numerics for weights of ``w_type`` (float64 result)."""
    if w_type == "f32":
        return x.astype(np.float64) @ w.astype(np.float64).T
    if w_type == "f16":
        return x.astype(np.float16).astype(np.float64) @ w.astype(np.float16).astype(np.float64).T
    gtype = GQ[w_type.upper()]
    raw = gquants.quantize(w.astype(np.float32), gtype)
    wd = gquants.dequantize(raw, gtype).astype(np.float64)
    d, q, s = _q8_blocks(x)
    xd = (d[..., None] * q).reshape(x.shape)
    if w_type in ("q4_0", "q5_0", "q8_0"):
        return xd @ wd.T
    # Q4_1/Q5_1 · Q8_1: Σ_blocks (w - m_w)·x_q + m_w·s, with m_w the block minimum stored as f16 at bytes 2..3
    m_w = raw.reshape(w.shape[0], -1, raw.shape[-1] // (w.shape[1] // 32))[..., 2:4].copy().view(np.float16)[..., 0]
    m_w = m_w.astype(np.float64)  # (M, n_blocks)
    w_scaled = wd - np.repeat(m_w, 32, axis=-1)
    return xd @ w_scaled.T + s @ m_w.T


def _moe_ref(w_type: str, experts: np.ndarray, x: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """result[t, e] = experts[ids[t, e]] · x[t, e % x.shape[1]] (numpy shape (1, n_tokens, n_used, M))."""
    n_tokens, n_used = ids.shape
    out = np.zeros((1, n_tokens, n_used, experts.shape[1]))
    for t in range(n_tokens):
        for e in range(n_used):
            col = x[t, e % x.shape[1]][None, :]
            out[0, t, e] = _dot_ref(w_type, experts[ids[t, e]], col)[0]
    return out


def _route(n_tokens: int, n_used: int, n_expert: int, seed: int) -> np.ndarray:
    r = rng(seed)
    return np.stack([r.permutation(n_expert)[:n_used] for _ in range(n_tokens)]).astype(np.int32)


@pytest.mark.parametrize("w_type", ["f32", "f16", "q8_0", "q4_0", "q4_1", "q5_1"])
@pytest.mark.parametrize("broadcast_b", [False, True])
def test_mul_mat_id(w_type: str, broadcast_b: bool) -> None:
    r = rng(20)
    n_expert, m, k, n_tokens, n_used = 5, 6, 64, 4, 2
    experts = r.standard_normal((n_expert, m, k)).astype(np.float32)
    x = r.standard_normal((n_tokens, 1 if broadcast_b else n_used, k)).astype(np.float32)
    ids = _route(n_tokens, n_used, n_expert, 21)
    g = CpuGraph()
    out = ops.mul_mat_id(g.tensor(experts, w_type), g.tensor(x), g.tensor(ids, "i32"))
    assert out.ne == (m, n_used, n_tokens, 1)
    got = g.compute(out)
    np.testing.assert_allclose(got, _moe_ref(w_type, experts, x, ids), rtol=1e-5, atol=2e-5)


def test_mul_mat_id_strided_ids_and_unused_experts() -> None:
    """ids as a view of the first 2 columns of a top-k-like [4, n_tokens] table; experts 0 and 4 never picked."""
    r = rng(22)
    experts = r.standard_normal((5, 3, 32)).astype(np.float32)
    x = r.standard_normal((3, 2, 32)).astype(np.float32)
    table = np.array([[1, 3, 0, 4], [2, 2, 4, 0], [3, 1, 0, 0]], np.int32)  # tokens x 4 slots
    g = CpuGraph()
    t = g.tensor(table, "i32")
    ids = ops.view_2d(t, 2, 3, t.nb[1], 0)
    got = g.compute(ops.mul_mat_id(g.tensor(experts), g.tensor(x), ids))
    np.testing.assert_allclose(got, _moe_ref("f32", experts, x, table[:, :2]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [5, -1])
def test_mul_mat_id_expert_out_of_range(bad: int) -> None:
    g = CpuGraph()
    ids = np.array([[0, 1], [bad, 2]], np.int32)
    out = ops.mul_mat_id(
        g.tensor(np.ones((5, 3, 32), np.float32)), g.tensor(np.ones((2, 2, 32), np.float32)), g.tensor(ids, "i32")
    )
    with pytest.raises(ComputeError, match=f"expert index {bad} is outside 0..4"):
        g.compute(out)


def test_mul_mat_id_checks() -> None:
    g = CpuGraph()
    experts = g.tensor(np.zeros((4, 3, 32), np.float32))
    b = g.tensor(np.zeros((5, 2, 32), np.float32))
    with pytest.raises(OpError, match=r"MUL_MAT_ID.*i32"):
        ops.mul_mat_id(experts, b, g.tensor(np.zeros((5, 2), np.float32)))
    with pytest.raises(OpError, match=r"MUL_MAT_ID.*tokens"):
        ops.mul_mat_id(experts, b, g.tensor(np.zeros((4, 2), np.int32), "i32"))
    with pytest.raises(OpError, match=r"MUL_MAT_ID.*inner"):
        ops.mul_mat_id(experts, g.tensor(np.zeros((5, 2, 16), np.float32)), g.tensor(np.zeros((5, 2), np.int32), "i32"))
    with pytest.raises(OpError, match=r"MUL_MAT_ID.*divide"):
        ops.mul_mat_id(experts, g.tensor(np.zeros((5, 3, 32), np.float32)), g.tensor(np.zeros((5, 2), np.int32), "i32"))


# ================================================================================================ OUT_PROD


@pytest.mark.parametrize("a_type", ["f32", "f16", "q8_0"])
def test_out_prod(a_type: str) -> None:
    """dst[i3, i2, n, m] = Σ_k a[i3 / r3, i2 / r2, k, m] · b[i3, i2, k, n] (a repeated over b's dims 2, 3)."""
    r = rng(23)
    a = r.standard_normal((1, 2, 5, 32)).astype(np.float32)  # [M=32, K=5, 2, 1]
    b = r.standard_normal((3, 4, 5, 7)).astype(np.float32)  # [N=7, K=5, 4, 3]
    g = CpuGraph()
    out = ops.out_prod(g.tensor(a, a_type), g.tensor(b))
    assert out.ne == (32, 7, 4, 3)
    got = g.compute(out)
    if a_type == "f16":
        a_vals = a.astype(np.float16).astype(np.float64)
    elif a_type == "q8_0":
        a_vals = gquants.dequantize(gquants.quantize(a, GQ.Q8_0), GQ.Q8_0).astype(np.float64)
    else:
        a_vals = a.astype(np.float64)
    ref = np.zeros((3, 4, 7, 32))
    for i3 in range(3):
        for i2 in range(4):
            ref[i3, i2] = b[i3, i2].astype(np.float64).T @ a_vals[0, i2 // 2]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_out_prod_transposed_b() -> None:
    r = rng(24)
    a = r.standard_normal((6, 8)).astype(np.float32)  # [M=8, K=6]
    bt = r.standard_normal((5, 6)).astype(np.float32)  # stored [K=6, N=5]; b = transpose → [N=5, K=6]
    g = CpuGraph()
    got = g.compute(ops.out_prod(g.tensor(a), ops.transpose(g.tensor(bt))))
    np.testing.assert_allclose(got[0, 0], bt.astype(np.float64) @ a.astype(np.float64), rtol=1e-5, atol=1e-5)
