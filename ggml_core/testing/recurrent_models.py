"""Tiny random-weight GGUFs of the recurrent families (llama.cpp's key and tensor names) with a placeholder
vocabulary, for tests on every device that compare them with llama.cpp built here and with the CPU."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from ggml_core.quants import quantize

__all__ = [
    "GraniteConfig",
    "LFM2Config",
    "MambaConfig",
    "NemotronConfig",
    "add_placeholder_vocab",
    "granite_weights",
    "lfm2_weights",
    "mamba2_weights",
    "nemotron_weights",
    "write_gguf",
    "write_granitehybrid",
    "write_lfm2",
    "write_mamba2",
    "write_nemotron_h",
]


@dataclass(frozen=True)
class MambaConfig:
    """A Mamba-2 model's sizes."""

    n_vocab: int = 64
    n_embd: int = 64
    n_layer: int = 2
    d_inner: int = 128
    d_state: int = 16
    n_head: int = 8
    n_group: int = 2
    d_conv: int = 4
    rms_eps: float = 1e-5
    n_ctx: int = 256

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_group * self.d_state


@dataclass(frozen=True)
class GraniteConfig(MambaConfig):
    """A Granite 4 hybrid: Mamba-2 layers where ``kv_heads`` is 0, attention layers elsewhere, each with an FFN."""

    n_layer: int = 3
    kv_heads: tuple[int, ...] = (0, 2, 0)
    n_attn_head: int = 4
    n_ff: int = 96
    embedding_scale: float = 2.0
    residual_scale: float = 0.5
    logit_scale: float = 4.0
    attention_scale: float = 0.125


def _rng_mat(rng: np.random.Generator) -> Callable[[int, int], np.ndarray]:
    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    return mat


def _norm(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)


def _mamba_layer(w: dict[str, np.ndarray], cfg: MambaConfig, il: int, rng: np.random.Generator) -> None:
    mat = _rng_mat(rng)
    b = f"blk.{il}."
    d_in_proj = cfg.d_inner + cfg.conv_dim + cfg.n_head
    w[b + "ssm_in.weight"] = mat(d_in_proj, cfg.n_embd)
    w[b + "ssm_conv1d.weight"] = (rng.standard_normal((cfg.conv_dim, cfg.d_conv)) * 0.5).astype(np.float32)
    w[b + "ssm_conv1d.bias"] = (0.1 * rng.standard_normal(cfg.conv_dim)).astype(np.float32)
    w[b + "ssm_dt.bias"] = rng.uniform(-2.0, 0.5, cfg.n_head).astype(np.float32)
    w[b + "ssm_a"] = (-np.exp(rng.uniform(-1.0, 1.0, (cfg.n_head, 1)))).astype(np.float32)
    w[b + "ssm_d"] = rng.uniform(0.5, 1.5, (cfg.n_head, 1)).astype(np.float32)
    w[b + "ssm_norm.weight"] = _norm(rng, cfg.n_group, cfg.d_inner // cfg.n_group)
    w[b + "ssm_out.weight"] = mat(cfg.n_embd, cfg.d_inner)


def _frame(cfg: MambaConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "token_embd.weight": rng.standard_normal((cfg.n_vocab, cfg.n_embd)).astype(np.float32),
        "output_norm.weight": _norm(rng, cfg.n_embd),
        "output.weight": _rng_mat(rng)(cfg.n_vocab, cfg.n_embd),
    }


def granite_weights(cfg: GraniteConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights of a Granite 4 hybrid (numpy order)."""
    rng = np.random.default_rng(seed)
    mat = _rng_mat(rng)
    w = _frame(cfg, rng)
    head_dim = cfg.n_embd // cfg.n_attn_head
    for il, kv in enumerate(cfg.kv_heads):
        b = f"blk.{il}."
        w[b + "attn_norm.weight"] = _norm(rng, cfg.n_embd)
        if kv == 0:
            _mamba_layer(w, cfg, il, rng)
        else:
            w[b + "attn_q.weight"] = mat(cfg.n_embd, cfg.n_embd)
            w[b + "attn_k.weight"] = mat(kv * head_dim, cfg.n_embd)
            w[b + "attn_v.weight"] = mat(kv * head_dim, cfg.n_embd)
            w[b + "attn_output.weight"] = mat(cfg.n_embd, cfg.n_embd)
        w[b + "ffn_norm.weight"] = _norm(rng, cfg.n_embd)
        w[b + "ffn_gate.weight"] = mat(cfg.n_ff, cfg.n_embd)
        w[b + "ffn_up.weight"] = mat(cfg.n_ff, cfg.n_embd)
        w[b + "ffn_down.weight"] = mat(cfg.n_embd, cfg.n_ff)
    return w


@dataclass(frozen=True)
class LFM2Config:
    """An LFM2: short convolutions where ``kv_heads`` is 0, attention layers (QK-norm) elsewhere, each with an FFN."""

    n_vocab: int = 64
    n_embd: int = 64
    kv_heads: tuple[int, ...] = (0, 0, 2, 0)
    n_head: int = 4
    n_ff: int = 96
    l_cache: int = 3
    n_swa: int = 0
    rms_eps: float = 1e-5
    n_ctx: int = 256

    @property
    def n_layer(self) -> int:
        return len(self.kv_heads)


def lfm2_weights(cfg: LFM2Config, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights of an LFM2 (numpy order); the final norm is ``token_embd_norm``."""
    rng = np.random.default_rng(seed)
    mat = _rng_mat(rng)
    e, head_dim = cfg.n_embd, cfg.n_embd // cfg.n_head
    w = {
        "token_embd.weight": rng.standard_normal((cfg.n_vocab, e)).astype(np.float32),
        "token_embd_norm.weight": _norm(rng, e),
        "output.weight": mat(cfg.n_vocab, e),
    }
    for il, kv in enumerate(cfg.kv_heads):
        b = f"blk.{il}."
        w[b + "attn_norm.weight"] = _norm(rng, e)
        if kv == 0:
            w[b + "shortconv.conv.weight"] = (rng.standard_normal((e, cfg.l_cache)) * 0.5).astype(np.float32)
            w[b + "shortconv.in_proj.weight"] = mat(3 * e, e)
            w[b + "shortconv.out_proj.weight"] = mat(e, e)
        else:
            w[b + "attn_q.weight"] = mat(e, e)
            w[b + "attn_k.weight"] = mat(kv * head_dim, e)
            w[b + "attn_v.weight"] = mat(kv * head_dim, e)
            w[b + "attn_output.weight"] = mat(e, e)
            w[b + "attn_q_norm.weight"] = _norm(rng, head_dim)
            w[b + "attn_k_norm.weight"] = _norm(rng, head_dim)
        w[b + "ffn_norm.weight"] = _norm(rng, e)
        w[b + "ffn_gate.weight"] = mat(cfg.n_ff, e)
        w[b + "ffn_up.weight"] = mat(cfg.n_ff, e)
        w[b + "ffn_down.weight"] = mat(e, cfg.n_ff)
    return w


@dataclass(frozen=True)
class NemotronConfig(MambaConfig):
    """A Nemotron-H: per layer Mamba-2 (``M``), attention without rope (``A``) or a squared-ReLU MLP (``F``)."""

    n_layer: int = 4
    kinds: str = "MAFM"  # one letter per layer
    n_attn_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 96


def nemotron_weights(cfg: NemotronConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights of a Nemotron-H (numpy order)."""
    rng = np.random.default_rng(seed)
    mat = _rng_mat(rng)
    w = _frame(cfg, rng)
    kv = cfg.n_head_kv * (cfg.n_embd // cfg.n_attn_head)
    for il, kind in enumerate(cfg.kinds):
        b = f"blk.{il}."
        w[b + "attn_norm.weight"] = _norm(rng, cfg.n_embd)
        if kind == "M":
            _mamba_layer(w, cfg, il, rng)
        elif kind == "A":
            w[b + "attn_q.weight"] = mat(cfg.n_embd, cfg.n_embd)
            w[b + "attn_k.weight"] = mat(kv, cfg.n_embd)
            w[b + "attn_v.weight"] = mat(kv, cfg.n_embd)
            w[b + "attn_output.weight"] = mat(cfg.n_embd, cfg.n_embd)
        else:
            w[b + "ffn_up.weight"] = mat(cfg.n_ff, cfg.n_embd)
            w[b + "ffn_down.weight"] = mat(cfg.n_embd, cfg.n_ff)
    return w


def mamba2_weights(cfg: MambaConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights in numpy order (the reverse of ggml's ne), scaled so activations stay O(1)."""
    rng = np.random.default_rng(seed)
    w = _frame(cfg, rng)
    for il in range(cfg.n_layer):
        w[f"blk.{il}.attn_norm.weight"] = _norm(rng, cfg.n_embd)
        _mamba_layer(w, cfg, il, rng)
    return w


def add_placeholder_vocab(writer: GGUFWriter, n_vocab: int) -> None:
    """A SentencePiece vocabulary of ``n_vocab`` placeholder tokens (``<unk>``, ``<s>``, ``</s>``, ``t3``...):
    llama.cpp refuses a model without one; the tests feed token ids."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, n_vocab)]
    writer.add_string("tokenizer.ggml.model", "llama")
    writer.add_array("tokenizer.ggml.tokens", tokens)
    writer.add_array("tokenizer.ggml.scores", [0.0] * n_vocab)
    writer.add_array("tokenizer.ggml.token_type", [2, 3, 3] + [1] * (n_vocab - 3))
    writer.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
    writer.add_uint32("tokenizer.ggml.eos_token_id", 2)


def _ssm_f32_only(name: str, arr: np.ndarray) -> bool:
    """Vectors, convolution taps and the scan's A, D and norm stay f32, as llama.cpp's quantizer leaves them."""
    return arr.ndim == 1 or "conv" in name.split(".")[1] or name.endswith(("ssm_a", "ssm_d", "ssm_norm.weight"))


def _ssm_keys(writer: GGUFWriter, a: str, cfg: MambaConfig) -> None:
    add_placeholder_vocab(writer, cfg.n_vocab)
    writer.add_uint32(f"{a}.context_length", cfg.n_ctx)
    writer.add_uint32(f"{a}.embedding_length", cfg.n_embd)
    writer.add_uint32(f"{a}.block_count", cfg.n_layer)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", cfg.rms_eps)
    writer.add_uint32(f"{a}.ssm.conv_kernel", cfg.d_conv)
    writer.add_uint32(f"{a}.ssm.inner_size", cfg.d_inner)
    writer.add_uint32(f"{a}.ssm.state_size", cfg.d_state)
    writer.add_uint32(f"{a}.ssm.time_step_rank", cfg.n_head)
    writer.add_uint32(f"{a}.ssm.group_count", cfg.n_group)


def write_gguf(
    writer: GGUFWriter,
    w: dict[str, np.ndarray],
    wtype: str,
    path: Path,
    f32_only: Callable[[str, np.ndarray], bool] = _ssm_f32_only,
) -> Path:
    """Add the weights (matrices as ``wtype`` where ``f32_only`` says no and their rows fit q8_0 blocks, the rest
    f32), write the file and close it."""
    for name, arr in w.items():
        if f32_only(name, arr) or wtype == "f32" or arr.shape[-1] % 32:
            writer.add_tensor(name, arr.astype(np.float32))
        else:
            writer.add_tensor(name, quantize(arr, wtype), raw_dtype=GGMLQuantizationType[wtype.upper()])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_mamba2(path: Path, cfg: MambaConfig, w: dict[str, np.ndarray], wtype: str = "f32") -> Path:
    """A ``mamba2`` GGUF with a placeholder vocabulary; matrices stored as ``wtype`` (f32 or q8_0)."""
    writer = GGUFWriter(str(path), "mamba2")
    _ssm_keys(writer, "mamba2", cfg)
    writer.add_uint32("mamba2.feed_forward_length", 0)
    writer.add_uint32("mamba2.attention.head_count", 0)
    return write_gguf(writer, w, wtype, path)


def write_granitehybrid(path: Path, cfg: GraniteConfig, w: dict[str, np.ndarray], wtype: str = "f32") -> Path:
    """A ``granitehybrid`` GGUF: per-layer KV heads (0: Mamba-2), Granite's four scales."""
    a = "granitehybrid"
    writer = GGUFWriter(str(path), a)
    _ssm_keys(writer, a, cfg)
    writer.add_uint32(f"{a}.feed_forward_length", cfg.n_ff)
    writer.add_uint32(f"{a}.attention.head_count", cfg.n_attn_head)
    writer.add_array(f"{a}.attention.head_count_kv", list(cfg.kv_heads))
    writer.add_uint32(f"{a}.rope.dimension_count", cfg.n_embd // cfg.n_attn_head)
    writer.add_float32(f"{a}.rope.freq_base", 10000.0)
    writer.add_float32(f"{a}.embedding_scale", cfg.embedding_scale)
    writer.add_float32(f"{a}.residual_scale", cfg.residual_scale)
    writer.add_float32(f"{a}.logit_scale", cfg.logit_scale)
    writer.add_float32(f"{a}.attention.scale", cfg.attention_scale)
    return write_gguf(writer, w, wtype, path)


def write_lfm2(path: Path, cfg: LFM2Config, w: dict[str, np.ndarray], wtype: str = "f32") -> Path:
    """An ``lfm2`` GGUF: per-layer KV heads (0: short convolution), the convolution's cache length."""
    a = "lfm2"
    writer = GGUFWriter(str(path), a)
    add_placeholder_vocab(writer, cfg.n_vocab)
    writer.add_uint32(f"{a}.context_length", cfg.n_ctx)
    writer.add_uint32(f"{a}.embedding_length", cfg.n_embd)
    writer.add_uint32(f"{a}.block_count", cfg.n_layer)
    writer.add_uint32(f"{a}.feed_forward_length", cfg.n_ff)
    writer.add_uint32(f"{a}.attention.head_count", cfg.n_head)
    writer.add_array(f"{a}.attention.head_count_kv", list(cfg.kv_heads))
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", cfg.rms_eps)
    writer.add_float32(f"{a}.rope.freq_base", 10000.0)
    writer.add_uint32(f"{a}.shortconv.l_cache", cfg.l_cache)
    if cfg.n_swa:
        writer.add_uint32(f"{a}.attention.sliding_window", cfg.n_swa)
    return write_gguf(writer, w, wtype, path)


def write_nemotron_h(path: Path, cfg: NemotronConfig, w: dict[str, np.ndarray], wtype: str = "f32") -> Path:
    """A ``nemotron_h`` GGUF: per-layer KV heads and FFN widths give each layer's kind."""
    a = "nemotron_h"
    writer = GGUFWriter(str(path), a)
    _ssm_keys(writer, a, cfg)
    writer.add_float32(f"{a}.attention.layer_norm_epsilon", cfg.rms_eps)
    writer.add_uint32(f"{a}.attention.head_count", cfg.n_attn_head)
    writer.add_array(f"{a}.attention.head_count_kv", [cfg.n_head_kv if k == "A" else 0 for k in cfg.kinds])
    writer.add_array(f"{a}.feed_forward_length", [cfg.n_ff if k == "F" else 0 for k in cfg.kinds])
    return write_gguf(writer, w, wtype, path)
