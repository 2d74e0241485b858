"""Tiny random LLaMA-family models for the model tests: written with ``gguf.GGUFWriter`` in the test's temporary
directory (never committed), and a numpy forward pass written from the architecture's definition.

The reference follows ggml's numerics where they differ from the textbook (ggml-semantics.md): a product with
quantized weights first rounds the activations through the weight type's dot type (Q8_0 for Q4_0/Q8_0, Q8_K for
Q4_K; Q8_0 as ggml-cpu's x86 ``quantize_row_q8_0``: ``127/amax``, round half to even), f16 weights round them to
f16; an f16 KV cache stores K and V in f16, so q (for q·Kᵀ) and the softmax probabilities (for ·V) are rounded to
f16 too. Everything else is float64 from the definitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter

from ggml_core import GGMLType, as_type
from ggml_core.quants import dequantize, quantize
from ggml_core.testing import llama_cpp
from ggml_core.testing.recurrent_models import add_placeholder_vocab
from ggml_core.testing.reference.matmul import activations

__all__ = [
    "TinyConfig",
    "add_placeholder_vocab",
    "llama_cpp_built",
    "random_weights",
    "reference_logits",
    "weight_type_of",
    "write_model",
]


#: qwen2moe's shared expert width (``expert_shared_feed_forward_length``; unlike the experts' n_ff)
SHARED_FF = 64
#: dots1: the leading dense layer's width (``feed_forward_length``; the experts' is n_ff), its routing keys
DOTS_DENSE_FF = 64
DOTS_W_SCALE = 2.5


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
    #: sliding window (gemma2/gemma3 layers that are local attend over this many positions)
    n_swa: int = 0
    #: gemma2: attention-logit and final-logit softcapping
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    #: dots1: the first layers have a dense FFN
    n_dense_lead: int = 0
    #: the head width when it is not n_embd / n_head (written as ``attention.key_length`` / ``value_length``)
    key_length: int = 0

    @property
    def gemma(self) -> bool:
        return self.arch in ("gemma2", "gemma3")

    @property
    def qk_norm(self) -> bool:
        return self.arch in ("gemma3", "qwen3", "qwen3moe", "dots1")

    @property
    def neox(self) -> bool:
        return self.arch != "llama"

    def is_moe_layer(self, il: int) -> bool:
        return self.n_expert > 0 and il >= self.n_dense_lead

    @property
    def dense_ff(self) -> int:
        """The dense FFN's width (``feed_forward_length``)."""
        return DOTS_DENSE_FF if self.arch == "dots1" else self.n_ff

    def is_swa(self, il: int) -> bool:
        """llama.cpp's patterns: gemma3 five local layers then a global one, gemma2 even layers local."""
        if not self.n_swa or not self.gemma:
            return False
        pattern = 6 if self.arch == "gemma3" else 2
        return il % pattern < pattern - 1

    def rope_base(self, il: int) -> float:
        return 10000.0 if self.arch == "gemma3" and self.is_swa(il) else self.freq_base

    @property
    def head_dim(self) -> int:
        return self.key_length or self.n_embd // self.n_head

    def with_(self, **kw: object) -> TinyConfig:
        return replace(self, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module", name="built")
def llama_cpp_built() -> None:
    """Fixture ``built``: llama.cpp's harness built here (``ggml_core.testing.llama_cpp``), else the test skips
    saying why. A test module imports it to use it."""
    try:
        llama_cpp.harness()
    except llama_cpp.Unavailable as exc:
        pytest.skip(f"llama.cpp cannot be built here: {exc}")


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
        if cfg.qk_norm:
            w[b + "attn_q_norm.weight"] = rng.uniform(0.5, 1.5, hd).astype(np.float32)
            w[b + "attn_k_norm.weight"] = rng.uniform(0.5, 1.5, hd).astype(np.float32)
        if cfg.gemma:
            w[b + "post_attention_norm.weight"] = rng.uniform(0.5, 1.5, e).astype(np.float32)
            w[b + "post_ffw_norm.weight"] = rng.uniform(0.5, 1.5, e).astype(np.float32)
        if cfg.arch in ("qwen2", "qwen2moe"):
            w[b + "attn_q.bias"] = rng.uniform(-0.5, 0.5, cfg.n_head * hd).astype(np.float32)
            w[b + "attn_k.bias"] = rng.uniform(-0.5, 0.5, cfg.n_head_kv * hd).astype(np.float32)
            w[b + "attn_v.bias"] = rng.uniform(-0.5, 0.5, cfg.n_head_kv * hd).astype(np.float32)
        if cfg.is_moe_layer(il):
            w[b + "ffn_gate_inp.weight"] = mat(cfg.n_expert, e) * 4
            w[b + "ffn_gate_exps.weight"] = mat(cfg.n_ff, e, cfg.n_expert)
            w[b + "ffn_up_exps.weight"] = mat(cfg.n_ff, e, cfg.n_expert)
            w[b + "ffn_down_exps.weight"] = mat(e, cfg.n_ff, cfg.n_expert)
            if cfg.arch == "qwen2moe":  # the shared expert and its gate
                w[b + "ffn_gate_inp_shexp.weight"] = rng.uniform(-1, 1, e).astype(np.float32)
                w[b + "ffn_gate_shexp.weight"] = mat(SHARED_FF, e)
                w[b + "ffn_up_shexp.weight"] = mat(SHARED_FF, e)
                w[b + "ffn_down_shexp.weight"] = mat(e, SHARED_FF)
            if cfg.arch == "dots1":  # the selection bias and the ungated shared expert (one expert wide)
                w[b + "exp_probs_b.bias"] = rng.uniform(-0.5, 0.5, cfg.n_expert).astype(np.float32)
                w[b + "ffn_gate_shexp.weight"] = mat(cfg.n_ff, e)
                w[b + "ffn_up_shexp.weight"] = mat(cfg.n_ff, e)
                w[b + "ffn_down_shexp.weight"] = mat(e, cfg.n_ff)
        else:
            w[b + "ffn_gate.weight"] = mat(cfg.dense_ff, e)
            w[b + "ffn_up.weight"] = mat(cfg.dense_ff, e)
            w[b + "ffn_down.weight"] = mat(e, cfg.dense_ff)
    return w


def weight_type_of(name: str, arr: np.ndarray, wtype: str) -> str:
    """The type a tensor is stored in: vectors f32; matrices ``wtype`` where their rows fit its blocks, else f32."""
    if arr.ndim == 1 or name.endswith("ffn_gate_inp.weight"):
        return "f32"
    block = {"f32": 1, "f16": 1, "q8_0": 32, "q4_0": 32, "q4_K": 256}[wtype]
    return wtype if arr.shape[-1] % block == 0 else "f32"


def write_and_close(writer: GGUFWriter) -> None:
    """Write a GGUFWriter's header, key-values and tensors to its file, and close it."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_model(
    path: Path,
    cfg: TinyConfig,
    w: dict[str, np.ndarray],
    wtype: str = "f32",
    *,
    vocab: bool = False,
    extra: Callable[[GGUFWriter], None] | None = None,
) -> Path:
    """Write a GGUF with llama.cpp's key and tensor names; matrices stored as ``wtype`` (see weight_type_of).

    ``vocab``: add a SentencePiece vocabulary of ``n_vocab`` placeholder tokens (llama.cpp refuses a model without
    one; the tests feed token ids). ``extra``: writes more metadata (a tokenizer of the test's own).
    """
    writer = GGUFWriter(str(path), cfg.arch)
    a = cfg.arch
    if vocab:
        add_placeholder_vocab(writer, cfg.n_vocab)
    writer.add_uint32(f"{a}.context_length", cfg.n_ctx)
    writer.add_uint32(f"{a}.embedding_length", cfg.n_embd)
    writer.add_uint32(f"{a}.block_count", cfg.n_layer)
    writer.add_uint32(f"{a}.feed_forward_length", cfg.dense_ff)
    writer.add_uint32(f"{a}.attention.head_count", cfg.n_head)
    writer.add_uint32(f"{a}.attention.head_count_kv", cfg.n_head_kv)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", cfg.rms_eps)
    writer.add_float32(f"{a}.rope.freq_base", cfg.freq_base)
    writer.add_uint32(f"{a}.rope.dimension_count", cfg.head_dim)
    if cfg.key_length:
        writer.add_uint32(f"{a}.attention.key_length", cfg.key_length)
        writer.add_uint32(f"{a}.attention.value_length", cfg.key_length)
    if extra is not None:
        extra(writer)
    if cfg.n_swa:
        writer.add_uint32(f"{a}.attention.sliding_window", cfg.n_swa)
    if cfg.attn_softcap:
        writer.add_float32(f"{a}.attn_logit_softcapping", cfg.attn_softcap)
    if cfg.final_softcap:
        writer.add_float32(f"{a}.final_logit_softcapping", cfg.final_softcap)
    if cfg.n_expert:
        writer.add_uint32(f"{a}.expert_count", cfg.n_expert)
        writer.add_uint32(f"{a}.expert_used_count", cfg.n_expert_used)
        if a in ("qwen3moe", "qwen2moe", "dots1"):
            writer.add_uint32(f"{a}.expert_feed_forward_length", cfg.n_ff)
        if a == "qwen2moe":
            writer.add_uint32(f"{a}.expert_shared_feed_forward_length", SHARED_FF)
        if a == "dots1":
            writer.add_uint32(f"{a}.leading_dense_block_count", cfg.n_dense_lead)
            writer.add_uint32(f"{a}.expert_shared_count", 1)
            writer.add_uint32(f"{a}.expert_gating_func", 2)  # sigmoid
            writer.add_bool(f"{a}.expert_weights_norm", True)
            writer.add_float32(f"{a}.expert_weights_scale", DOTS_W_SCALE)
    for name, arr in w.items():
        t = weight_type_of(name, arr, wtype)
        if t == "f32":
            writer.add_tensor(name, arr.astype(np.float32))
        elif t == "f16":
            writer.add_tensor(name, arr.astype(np.float16))
        else:
            q = quantize(arr.astype(np.float32), t)
            writer.add_tensor(name, q, raw_dtype=GGMLQuantizationType[t.upper()])
    write_and_close(writer)
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
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    if dot == "q8_0":  # ggml-cpu's x86 from_float, not the reference quantizer: q = rint(x·(127/amax)), d = f16
        return activations(x32, GGMLType.Q8_0).astype(np.float64)
    return dequantize(quantize(x32, dot), dot).astype(np.float64)


def _cached(x: np.ndarray, kv_type: str) -> np.ndarray:
    """Rows ``x`` ``(n, heads, d)`` as a cache of ``kv_type`` holds them (ggml-cpu's from_float: x86 Q8_0 ties to
    even, the other types through ggml's reference quantizers)."""
    x32 = np.ascontiguousarray(x.reshape(x.shape[0], -1), dtype=np.float32)
    t = as_type(kv_type)
    if t == GGMLType.Q8_0 or not t.is_quantized:
        got = activations(x32, t)  # Q8_0 is its own dot type; f16 rounds, f32 stays
    else:
        got = dequantize(quantize(x32, t), t).reshape(x32.shape)
    return got.astype(np.float64).reshape(x.shape)


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
    type_v: str | None = None,
) -> np.ndarray:
    """Logits of every position ``[n_tokens, n_vocab]`` for the whole sequence, from the definition.

    ``kv_type``: the cache type of K (and of V when ``type_v`` is None). A quantized cache (or K and V of different
    types) stores each token's row as ggml-cpu's SET_ROWS rounds it, q is rounded to K's dot type, and the
    attention weights stay f32 unless V is f16 (read by MUL_MAT; flash attention's f16 accumulation is not modelled).

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
    if cfg.gemma:
        x = x * np.float64(np.float32(np.sqrt(cfg.n_embd)))
    group = cfg.n_head // cfg.n_head_kv
    back = pos[:, None] - pos[None, :]
    causal = np.where(back >= 0, 0.0, -np.inf)
    window = np.where((back >= 0) & (back < max(cfg.n_swa, 1)), 0.0, -np.inf)

    def norm(t: np.ndarray, name: str) -> np.ndarray:
        return _rms_norm(t, cfg.rms_eps) * st[name][0]

    for il in range(cfg.n_layer):
        b = f"blk.{il}."
        h = norm(x, b + "attn_norm.weight")
        q, k, v = mm(b + "attn_q.weight", h), mm(b + "attn_k.weight", h), mm(b + "attn_v.weight", h)
        if cfg.arch in ("qwen2", "qwen2moe"):
            q, k, v = q + st[b + "attn_q.bias"][0], k + st[b + "attn_k.bias"][0], v + st[b + "attn_v.bias"][0]
        q, k = q.reshape(n, cfg.n_head, hd), k.reshape(n, cfg.n_head_kv, hd)
        if cfg.qk_norm:
            q, k = norm(q, b + "attn_q_norm.weight"), norm(k, b + "attn_k_norm.weight")
        ff = w.get("rope_freqs.weight")
        q = _rope(q, pos, hd, cfg.rope_base(il), cfg.neox, ff)
        k = _rope(k, pos, hd, cfg.rope_base(il), cfg.neox, ff)
        # gemma scales q (by 1/sqrt(head_dim), a power of two here) and the softmax by 1
        scale = 1.0 / np.sqrt(hd)
        if cfg.gemma:
            q, scale = q * np.float64(np.float32(scale)), 1.0
        v = v.reshape(n, cfg.n_head_kv, hd)
        mixed = type_v is not None or kv_type not in ("f32", "f16")
        if mixed:
            k, v = _cached(k, kv_type), _cached(v, type_v or kv_type)
            if round_activations:
                q = activations(q.astype(np.float32), as_type(kv_type)).astype(np.float64)
        elif kv_type == "f16":  # the cache stores f16; mul_mat rounds q to f16 to meet it
            k = k.astype(np.float32).astype(np.float16).astype(np.float64)
            v = v.astype(np.float32).astype(np.float16).astype(np.float64)
            if round_activations:
                q = q.astype(np.float32).astype(np.float16).astype(np.float64)
        mask = window if cfg.is_swa(il) else causal
        out = np.empty((n, cfg.n_head, hd))
        for hh in range(cfg.n_head):
            kvh = hh // group  # consecutive query heads share one KV head
            s = q[:, hh] @ k[:, kvh].T
            if cfg.attn_softcap:
                s = cfg.attn_softcap * np.tanh(s / cfg.attn_softcap)
            s = s * scale + mask
            p = np.exp(s - s.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            if (type_v or kv_type) == "f16" and round_activations:
                p = p.astype(np.float32).astype(np.float16).astype(np.float64)
            out[:, hh] = p @ v[:, kvh]
        a = mm(b + "attn_output.weight", out.reshape(n, cfg.n_head * hd))
        if cfg.gemma:
            a = norm(a, b + "post_attention_norm.weight")
        x = x + a
        h = norm(x, b + "ffn_norm.weight")
        if cfg.is_moe_layer(il):
            f = _moe(cfg, st, b, h)
        else:
            f = _ffn(mm, b, h, _gelu_ggml if round_activations else _gelu) if cfg.gemma else _ffn(mm, b, h)
        if cfg.gemma:
            f = norm(f, b + "post_ffw_norm.weight")
        x = x + f
    h = norm(x, "output_norm.weight")
    logits = mm("output.weight" if "output.weight" in st else "token_embd.weight", h)
    if cfg.final_softcap:
        logits = cfg.final_softcap * np.tanh(logits / cfg.final_softcap)
    return logits


def _gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _gelu_ggml(x: np.ndarray) -> np.ndarray:
    """ggml's CPU GELU on f32: for -10 < x < 10 its f16 table at f16(x) (GELU rounded to f16), x or 0 outside."""
    x16 = x.astype(np.float32).astype(np.float16).astype(np.float64)
    table = _gelu(x16).astype(np.float32).astype(np.float16).astype(np.float64)
    return np.where(x <= -10.0, 0.0, np.where(x >= 10.0, x, table))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _ffn(
    mm: Callable[[str, np.ndarray], np.ndarray],
    b: str,
    h: np.ndarray,
    act: Callable[[np.ndarray], np.ndarray] = _silu,
) -> np.ndarray:
    return mm(b + "ffn_down.weight", act(mm(b + "ffn_gate.weight", h)) * mm(b + "ffn_up.weight", h))


def _moe(cfg: TinyConfig, st: dict[str, tuple[np.ndarray, str]], b: str, h: np.ndarray) -> np.ndarray:
    """Mixtral: softmax router, the top-k experts, their weights renormalised to sum to 1. qwen2moe: not
    renormalised, plus the shared expert scaled by sigmoid(gate_inp_shexp · h). dots1: sigmoid router, the choice
    steered by exp_probs_b, the unbiased weights renormalised and scaled, plus the ungated shared expert."""
    gw, gt = st[b + "ffn_gate_inp.weight"]
    logits = _round_acts(h, gt) @ gw.T
    if cfg.arch == "dots1":
        p = 1.0 / (1.0 + np.exp(-logits))
        chooser = p + st[b + "exp_probs_b.bias"][0]
    else:
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        chooser = p
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        chosen = np.argsort(-chooser[t], kind="stable")[: cfg.n_expert_used]
        wsel = p[t, chosen] if cfg.arch == "qwen2moe" else p[t, chosen] / p[t, chosen].sum()
        if cfg.arch == "dots1":
            wsel = wsel * DOTS_W_SCALE
        for ex, we in zip(chosen, wsel, strict=True):

            def emm(name: str, xv: np.ndarray, ex: int = int(ex)) -> np.ndarray:
                wm, wt = st[b + name]
                return _round_acts(xv[None, :], wt)[0] @ wm[ex].T

            y = emm("ffn_down_exps.weight", _silu(emm("ffn_gate_exps.weight", h[t])) * emm("ffn_up_exps.weight", h[t]))
            out[t] += we * y
    if cfg.arch in ("qwen2moe", "dots1"):

        def smm(name: str, xv: np.ndarray) -> np.ndarray:
            wm, wt = st[b + name]
            return _round_acts(xv, wt) @ wm.T

        shared = smm("ffn_down_shexp.weight", _silu(smm("ffn_gate_shexp.weight", h)) * smm("ffn_up_shexp.weight", h))
        if cfg.arch == "qwen2moe":
            gate = smm("ffn_gate_inp_shexp.weight", h)  # 1-D weight: one logit per token
            shared = shared * (1.0 / (1.0 + np.exp(-gate)))[:, None]
        out += shared
    return out


def fuse_phi3(cfg: TinyConfig, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Phi 3's file layout from separate weights: attn_qkv = rows q | k | v, ffn_up = rows gate | up."""
    out = dict(w)
    for il in range(cfg.n_layer):
        b = f"blk.{il}."
        out[b + "attn_qkv.weight"] = np.concatenate([out.pop(b + f"attn_{x}.weight") for x in "qkv"])
        out[b + "ffn_up.weight"] = np.concatenate([out.pop(b + "ffn_gate.weight"), out.pop(b + "ffn_up.weight")])
    return out
