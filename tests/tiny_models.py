"""Tiny random LLaMA-family models for the model tests: written with ``gguf.GGUFWriter`` in the test's temporary
directory (never committed), and a numpy forward pass written from the architecture's definition.

The reference follows ggml's numerics where they differ from the textbook (ggml-semantics.md): a product with
quantized weights first rounds the activations through the weight type's dot type (Q8_0 for Q4_0/Q8_0, Q8_K for
Q4_K), f16 weights round them to f16; an f16 KV cache stores K and V in f16, so q (for q·Kᵀ) and the softmax
probabilities (for ·V) are rounded to f16 too. Everything else is float64 from the definitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from ggml_core.quants import dequantize, quantize

__all__ = ["TinyConfig", "random_weights", "reference_logits", "weight_type_of", "write_model"]


@dataclass(frozen=True)
class TinyConfig:
    """Shape of a tiny model."""

    arch: str = "llama"
    n_vocab: int = 64
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 96
    n_ctx: int = 64
    rms_eps: float = 1e-5
    freq_base: float = 10000.0
    n_expert: int = 0
    n_expert_used: int = 0
    tied_output: bool = False
    rope_freqs: bool = False

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def with_(self, **kw: object) -> TinyConfig:
        return replace(self, **kw)  # type: ignore[arg-type]


def random_weights(cfg: TinyConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Weights in numpy layout (rows = output features), scaled so activations stay O(1)."""
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int, *lead: int) -> np.ndarray:
        return (rng.uniform(-1, 1, (*lead, rows, cols)) / np.sqrt(cols)).astype(np.float32)

    e, hd = cfg.n_embd, cfg.head_dim
    w: dict[str, np.ndarray] = {
        "token_embd.weight": rng.uniform(-1, 1, (cfg.n_vocab, e)).astype(np.float32),
        "output_norm.weight": rng.uniform(0.5, 1.5, e).astype(np.float32),
    }
    if not cfg.tied_output:
        w["output.weight"] = mat(cfg.n_vocab, e)
    if cfg.rope_freqs:
        w["rope_freqs.weight"] = rng.uniform(1.0, 8.0, hd // 2).astype(np.float32)
    for il in range(cfg.n_layer):
        b = f"blk.{il}."
        w[b + "attn_norm.weight"] = rng.uniform(0.5, 1.5, e).astype(np.float32)
        w[b + "attn_q.weight"] = mat(cfg.n_head * hd, e)
        w[b + "attn_k.weight"] = mat(cfg.n_head_kv * hd, e)
        w[b + "attn_v.weight"] = mat(cfg.n_head_kv * hd, e)
        w[b + "attn_output.weight"] = mat(e, cfg.n_head * hd)
        w[b + "ffn_norm.weight"] = rng.uniform(0.5, 1.5, e).astype(np.float32)
        if cfg.arch == "qwen2":
            w[b + "attn_q.bias"] = rng.uniform(-0.5, 0.5, cfg.n_head * hd).astype(np.float32)
            w[b + "attn_k.bias"] = rng.uniform(-0.5, 0.5, cfg.n_head_kv * hd).astype(np.float32)
            w[b + "attn_v.bias"] = rng.uniform(-0.5, 0.5, cfg.n_head_kv * hd).astype(np.float32)
        if cfg.n_expert:
            w[b + "ffn_gate_inp.weight"] = mat(cfg.n_expert, e) * 4
            w[b + "ffn_gate_exps.weight"] = mat(cfg.n_ff, e, cfg.n_expert)
            w[b + "ffn_up_exps.weight"] = mat(cfg.n_ff, e, cfg.n_expert)
            w[b + "ffn_down_exps.weight"] = mat(e, cfg.n_ff, cfg.n_expert)
        else:
            w[b + "ffn_gate.weight"] = mat(cfg.n_ff, e)
            w[b + "ffn_up.weight"] = mat(cfg.n_ff, e)
            w[b + "ffn_down.weight"] = mat(e, cfg.n_ff)
    return w


def weight_type_of(name: str, arr: np.ndarray, wtype: str) -> str:
    """The type a tensor is stored in: vectors f32; matrices ``wtype`` where their rows fit its blocks, else f32."""
    if arr.ndim == 1 or name.endswith("ffn_gate_inp.weight"):
        return "f32"
    block = {"f32": 1, "f16": 1, "q8_0": 32, "q4_0": 32, "q4_K": 256}[wtype]
    return wtype if arr.shape[-1] % block == 0 else "f32"


def write_model(path: Path, cfg: TinyConfig, w: dict[str, np.ndarray], wtype: str = "f32") -> Path:
    """Write a GGUF with llama.cpp's key and tensor names; matrices stored as ``wtype`` (see weight_type_of)."""
    writer = GGUFWriter(str(path), cfg.arch)
    a = cfg.arch
    writer.add_uint32(f"{a}.context_length", cfg.n_ctx)
    writer.add_uint32(f"{a}.embedding_length", cfg.n_embd)
    writer.add_uint32(f"{a}.block_count", cfg.n_layer)
    writer.add_uint32(f"{a}.feed_forward_length", cfg.n_ff)
    writer.add_uint32(f"{a}.attention.head_count", cfg.n_head)
    writer.add_uint32(f"{a}.attention.head_count_kv", cfg.n_head_kv)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", cfg.rms_eps)
    writer.add_float32(f"{a}.rope.freq_base", cfg.freq_base)
    writer.add_uint32(f"{a}.rope.dimension_count", cfg.head_dim)
    if cfg.n_expert:
        writer.add_uint32(f"{a}.expert_count", cfg.n_expert)
        writer.add_uint32(f"{a}.expert_used_count", cfg.n_expert_used)
    for name, arr in w.items():
        t = weight_type_of(name, arr, wtype)
        if t == "f32":
            writer.add_tensor(name, arr.astype(np.float32))
        elif t == "f16":
            writer.add_tensor(name, arr.astype(np.float16))
        else:
            q = quantize(arr.astype(np.float32), t)
            writer.add_tensor(name, q, raw_dtype=GGMLQuantizationType[t.upper()])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# ------------------------------------------------------------------------------------------------- numpy reference


def _stored(name: str, arr: np.ndarray, wtype: str) -> tuple[np.ndarray, str]:
    """The weight as the model holds it (float64) and its type."""
    t = weight_type_of(name, arr, wtype)
    if t == "f32":
        return arr.astype(np.float64), t
    if t == "f16":
        return arr.astype(np.float16).astype(np.float64), t
    return dequantize(quantize(arr.astype(np.float32), t), t).astype(np.float64), t


def _round_acts(x: np.ndarray, wtype: str) -> np.ndarray:
    """Activations as ggml's CPU rounds them before a product with weights of ``wtype``."""
    dot = {"f32": None, "f16": "f16", "q8_0": "q8_0", "q4_0": "q8_0", "q4_K": "q8_K"}[wtype]
    if dot is None:
        return x
    if dot == "f16":
        return x.astype(np.float32).astype(np.float16).astype(np.float64)
    return dequantize(quantize(np.ascontiguousarray(x, dtype=np.float32), dot), dot).astype(np.float64)


def _rms_norm(x: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def _rope(
    x: np.ndarray, pos: np.ndarray, n_rot: int, base: float, neox: bool, factors: np.ndarray | None = None
) -> np.ndarray:
    """x (tokens, heads, d): rotate pairs by pos·base^(-2i/n_rot) (divided by factors[i] when given);
    NORMAL pairs (2i, 2i+1), NEOX (i, i+n_rot/2)."""
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half) / n_rot)
    if factors is not None:
        inv = inv / factors.astype(np.float64)
    theta = pos[:, None, None].astype(np.float64) * inv[None, None, :]
    c, s = np.cos(theta), np.sin(theta)
    out = x.copy()
    if neox:
        x0, x1 = x[..., :half], x[..., half:n_rot]
        out[..., :half] = x0 * c - x1 * s
        out[..., half:n_rot] = x0 * s + x1 * c
    else:
        x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x0 * c - x1 * s
        out[..., 1:n_rot:2] = x0 * s + x1 * c
    return out


def reference_logits(
    cfg: TinyConfig,
    w: dict[str, np.ndarray],
    tokens: list[int],
    wtype: str = "f32",
    kv_type: str = "f32",
    *,
    round_activations: bool = True,
) -> np.ndarray:
    """Logits of every position ``[n_tokens, n_vocab]`` for the whole sequence, from the definition.

    ``round_activations=False`` leaves out ggml's activation rounding (weights stay as stored): a test can check
    that the emulation is what makes its comparison pass.
    """
    st = {n: _stored(n, a, wtype) for n, a in w.items()}

    def mm(name: str, x: np.ndarray) -> np.ndarray:
        wm, t = st[name]
        return (_round_acts(x, t) if round_activations else x) @ wm.T

    n, hd = len(tokens), cfg.head_dim
    pos = np.arange(n)
    x = st["token_embd.weight"][0][np.asarray(tokens)]
    neox = cfg.arch == "qwen2"
    group = cfg.n_head // cfg.n_head_kv
    causal = np.triu(np.full((n, n), -np.inf), 1)
    for il in range(cfg.n_layer):
        b = f"blk.{il}."
        h = _rms_norm(x, cfg.rms_eps) * st[b + "attn_norm.weight"][0]
        q, k, v = mm(b + "attn_q.weight", h), mm(b + "attn_k.weight", h), mm(b + "attn_v.weight", h)
        if cfg.arch == "qwen2":
            q, k, v = q + st[b + "attn_q.bias"][0], k + st[b + "attn_k.bias"][0], v + st[b + "attn_v.bias"][0]
        ff = w.get("rope_freqs.weight")
        q = _rope(q.reshape(n, cfg.n_head, hd), pos, hd, cfg.freq_base, neox, ff)
        k = _rope(k.reshape(n, cfg.n_head_kv, hd), pos, hd, cfg.freq_base, neox, ff)
        v = v.reshape(n, cfg.n_head_kv, hd)
        if kv_type == "f16":  # the cache stores f16; mul_mat rounds q to f16 to meet it
            k = k.astype(np.float32).astype(np.float16).astype(np.float64)
            v = v.astype(np.float32).astype(np.float16).astype(np.float64)
            if round_activations:
                q = q.astype(np.float32).astype(np.float16).astype(np.float64)
        out = np.empty((n, cfg.n_head, hd))
        for hh in range(cfg.n_head):
            kvh = hh // group  # consecutive query heads share one KV head
            s = q[:, hh] @ k[:, kvh].T / np.sqrt(hd) + causal
            p = np.exp(s - s.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            if kv_type == "f16" and round_activations:
                p = p.astype(np.float32).astype(np.float16).astype(np.float64)
            out[:, hh] = p @ v[:, kvh]
        x = x + mm(b + "attn_output.weight", out.reshape(n, cfg.n_head * hd))
        h = _rms_norm(x, cfg.rms_eps) * st[b + "ffn_norm.weight"][0]
        x = x + (_moe(cfg, st, b, h) if cfg.n_expert else _ffn(mm, b, h))
    h = _rms_norm(x, cfg.rms_eps) * st["output_norm.weight"][0]
    return mm("output.weight" if "output.weight" in st else "token_embd.weight", h)


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _ffn(mm: Callable[[str, np.ndarray], np.ndarray], b: str, h: np.ndarray) -> np.ndarray:
    return mm(b + "ffn_down.weight", _silu(mm(b + "ffn_gate.weight", h)) * mm(b + "ffn_up.weight", h))


def _moe(cfg: TinyConfig, st: dict[str, tuple[np.ndarray, str]], b: str, h: np.ndarray) -> np.ndarray:
    """Mixtral: softmax router, the top-k experts, their weights renormalised to sum to 1."""
    gw, gt = st[b + "ffn_gate_inp.weight"]
    logits = _round_acts(h, gt) @ gw.T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        chosen = np.argsort(-p[t], kind="stable")[: cfg.n_expert_used]
        wsel = p[t, chosen] / p[t, chosen].sum()
        for ex, we in zip(chosen, wsel, strict=True):

            def emm(name: str, xv: np.ndarray, ex: int = int(ex)) -> np.ndarray:
                wm, wt = st[b + name]
                return _round_acts(xv[None, :], wt)[0] @ wm[ex].T

            y = emm("ffn_down_exps.weight", _silu(emm("ffn_gate_exps.weight", h[t])) * emm("ffn_up_exps.weight", h[t]))
            out[t] += we * y
    return out
