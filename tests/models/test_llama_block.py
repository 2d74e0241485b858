"""One LLaMA layer built from the foundation op set, on the CPU plugin, against numpy written from the definition."""

from __future__ import annotations

import numpy as np
import pytest

import ggml_core as g
from ggml_core import ops
from ggml_core.quants import dequantize, quantize

N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_TOKENS = 256, 4, 2, 512, 7
HEAD_DIM = N_EMBD // N_HEAD
EPS = 1e-5
FREQ_BASE = 10000.0


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def w(rows: int, cols: int) -> np.ndarray:
        return rng.uniform(-1, 1, (rows, cols)).astype(np.float32) / np.sqrt(cols)

    return {
        "attn_norm": rng.uniform(0.5, 1.5, N_EMBD).astype(np.float32),
        "wq": w(N_EMBD, N_EMBD),
        "wk": w(N_HEAD_KV * HEAD_DIM, N_EMBD),
        "wv": w(N_HEAD_KV * HEAD_DIM, N_EMBD),
        "wo": w(N_EMBD, N_EMBD),
        "ffn_norm": rng.uniform(0.5, 1.5, N_EMBD).astype(np.float32),
        "w_gate": w(N_FF, N_EMBD),
        "w_up": w(N_FF, N_EMBD),
        "w_down": w(N_EMBD, N_FF),
    }


# ------------------------------------------------------------------------------------------------ numpy reference


def _rms_norm(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + EPS)


def _rope(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """LLaMA rope (ggml NORMAL mode): rotate adjacent pairs (x[2i], x[2i+1]) by pos * base^(-2i/d)."""
    d = x.shape[-1]
    inv = FREQ_BASE ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None, None].astype(np.float64) * inv[None, None, :]  # (tokens, 1, d/2)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x, dtype=np.float64)
    out[..., 0::2] = x0 * np.cos(ang) - x1 * np.sin(ang)
    out[..., 1::2] = x0 * np.sin(ang) + x1 * np.cos(ang)
    return out


def _reference(x: np.ndarray, w: dict[str, np.ndarray], pos: np.ndarray, mm) -> np.ndarray:
    """x: (tokens, n_embd) → (tokens, n_embd); mm(w, x) is the weight product x @ w.T with the weight's numerics."""
    h = _rms_norm(x) * w["attn_norm"]
    q = mm(w["wq"], h).reshape(N_TOKENS, N_HEAD, HEAD_DIM)
    k = mm(w["wk"], h).reshape(N_TOKENS, N_HEAD_KV, HEAD_DIM)
    v = mm(w["wv"], h).reshape(N_TOKENS, N_HEAD_KV, HEAD_DIM)
    q, k = _rope(q, pos), _rope(k, pos)
    group = N_HEAD // N_HEAD_KV
    out = np.empty((N_TOKENS, N_HEAD, HEAD_DIM))
    causal = np.triu(np.full((N_TOKENS, N_TOKENS), -np.inf), 1)
    for hd in range(N_HEAD):
        kv = hd // group  # consecutive query heads share a kv head
        s = q[:, hd] @ k[:, kv].T / np.sqrt(HEAD_DIM) + causal
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, hd] = (p / p.sum(axis=1, keepdims=True)) @ v[:, kv]
    x = x + mm(w["wo"], out.reshape(N_TOKENS, N_EMBD).astype(np.float32))
    h = _rms_norm(x) * w["ffn_norm"]
    gate, up = mm(w["w_gate"], h), mm(w["w_up"], h)
    return x + mm(w["w_down"], (gate / (1 + np.exp(-gate)) * up).astype(np.float32))


# ------------------------------------------------------------------------------------------------ ggml graph


def _build(ctx: g.Context, wtype: str) -> tuple[dict[str, g.Tensor], g.Tensor, g.Tensor, g.Tensor, g.Tensor]:
    t: dict[str, g.Tensor] = {}
    for name, (rows, cols) in {
        "wq": (N_EMBD, N_EMBD),
        "wk": (N_HEAD_KV * HEAD_DIM, N_EMBD),
        "wv": (N_HEAD_KV * HEAD_DIM, N_EMBD),
        "wo": (N_EMBD, N_EMBD),
        "w_gate": (N_FF, N_EMBD),
        "w_up": (N_FF, N_EMBD),
        "w_down": (N_EMBD, N_FF),
    }.items():
        t[name] = ctx.new_tensor_2d(wtype, cols, rows, name)
    t["attn_norm"] = ctx.new_tensor_1d("f32", N_EMBD, "attn_norm")
    t["ffn_norm"] = ctx.new_tensor_1d("f32", N_EMBD, "ffn_norm")
    x = ctx.new_tensor_2d("f32", N_EMBD, N_TOKENS, "x").set_input()
    pos = ctx.new_tensor_1d("i32", N_TOKENS, "pos").set_input()
    mask = ctx.new_tensor_2d("f32", N_TOKENS, N_TOKENS, "mask").set_input()

    h = ops.mul(ops.rms_norm(x, EPS), t["attn_norm"])
    q = ops.reshape_3d(ops.mul_mat(t["wq"], h), HEAD_DIM, N_HEAD, N_TOKENS)
    k = ops.reshape_3d(ops.mul_mat(t["wk"], h), HEAD_DIM, N_HEAD_KV, N_TOKENS)
    v = ops.reshape_3d(ops.mul_mat(t["wv"], h), HEAD_DIM, N_HEAD_KV, N_TOKENS)
    q = ops.rope_ext(q, pos, None, HEAD_DIM, 0, 0, FREQ_BASE, 1.0, 0.0, 1.0, 0.0, 0.0)
    k = ops.rope_ext(k, pos, None, HEAD_DIM, 0, 0, FREQ_BASE, 1.0, 0.0, 1.0, 0.0, 0.0)
    q = ops.permute(q, 0, 2, 1, 3)  # [head_dim, tokens, heads]
    k = ops.permute(k, 0, 2, 1, 3)
    kq = ops.mul_mat(k, q)  # [kv_tokens, tokens, heads]: GQA by broadcasting over dim 2
    kq = ops.soft_max_ext(kq, mask, 1.0 / np.sqrt(HEAD_DIM), 0.0)
    vt = ops.cont(ops.permute(v, 1, 2, 0, 3))  # [kv_tokens, head_dim, heads_kv]
    kqv = ops.mul_mat(vt, kq)  # [head_dim, tokens, heads]
    merged = ops.cont_2d(ops.permute(kqv, 0, 2, 1, 3), N_EMBD, N_TOKENS)
    x2 = ops.add(x, ops.mul_mat(t["wo"], merged))
    h2 = ops.mul(ops.rms_norm(x2, EPS), t["ffn_norm"])
    ffn = ops.swiglu(ops.mul_mat(t["w_gate"], h2), ops.mul_mat(t["w_up"], h2))
    out = ops.add(x2, ops.mul_mat(t["w_down"], ffn)).set_output()
    return t, x, pos, mask, out


def _run(wtype: str, w: dict[str, np.ndarray], x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    ctx = g.Context("llama-layer")
    t, tx, tpos, tmask, out = _build(ctx, wtype)
    graph = g.build_graph(out)
    backend = g.init_backend("CPU")
    buf = g.alloc_ctx_tensors(ctx, backend)
    for name, tensor in t.items():
        tensor.set_data(w[name])
    tx.set_data(x)
    tpos.set_data(pos)
    tmask.set_data(np.triu(np.full((N_TOKENS, N_TOKENS), -np.inf, np.float32), 1))
    backend.graph_compute(graph)
    result = out.to_numpy().reshape(N_TOKENS, N_EMBD)
    buf.free()
    return result


def _f32_mm(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) @ w.T.astype(np.float64)


def test_llama_layer_f32_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    w = _weights(rng)
    x = rng.uniform(-1, 1, (N_TOKENS, N_EMBD)).astype(np.float32)
    pos = np.arange(3, 3 + N_TOKENS, dtype=np.int32)
    got = _run("f32", w, x, pos)
    ref = _reference(x, w, pos, _f32_mm)
    assert np.abs(got - ref).max() < 2e-5 * np.abs(ref).max()


@pytest.mark.parametrize("wtype", ["f16", "q8_0", "q4_0", "q4_K"])
def test_llama_layer_with_ggml_weight_numerics(wtype: str) -> None:
    """Quantized/f16 weights: ggml rounds activations to the weight type's dot type before the product."""
    rng = np.random.default_rng(2)
    w = _weights(rng)
    dot = {"f16": None, "q8_0": "q8_0", "q4_0": "q8_0", "q4_K": "q8_K"}[wtype]
    x = rng.uniform(-1, 1, (N_TOKENS, N_EMBD)).astype(np.float32)
    pos = np.arange(N_TOKENS, dtype=np.int32)

    def mm(wm: np.ndarray, xm: np.ndarray) -> np.ndarray:
        if wtype == "f16":
            wq = wm.astype(np.float16).astype(np.float64)
            xq = xm.astype(np.float32).astype(np.float16).astype(np.float64)
        else:
            wq = dequantize(quantize(wm, wtype), wtype).astype(np.float64)
            xq = dequantize(quantize(xm.astype(np.float32), dot), dot).astype(np.float64)
        return xq @ wq.T

    got = _run(wtype, w, x, pos)
    ref = _reference(x, w, pos, mm)
    # the reference computes in float64: where an activation sits on a rounding boundary of the dot type, the two
    # sides may round it differently (one step of the block scale), so compare as test-backend-ops does (NMSE)
    nmse = float(((got - ref) ** 2).sum() / (ref**2).sum())
    assert nmse < 1e-7, nmse
    assert np.abs(got - ref).max() < 1e-3 * np.abs(ref).max()
