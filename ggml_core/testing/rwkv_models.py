"""Tiny random-weight RWKV-7 GGUFs (llama.cpp's key and tensor names, gguf-py's writer) with a placeholder
vocabulary, for tests on every device that compare the rwkv7 family with llama.cpp built here and with the CPU."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
from gguf import GGUFWriter

from ggml_core.testing.recurrent_models import add_placeholder_vocab, write_gguf

__all__ = ["RwkvConfig", "rwkv7_weights", "write_rwkv7"]

#: tensors llama.cpp's quantizer keeps in f32 (the LoRAs, the fused interpolations), besides every vector
F32_ONLY: Final = ("time_mix_w", "time_mix_a", "time_mix_v", "time_mix_g", "time_mix_lerp_fused")


@dataclass(frozen=True)
class RwkvConfig:
    """An RWKV-7 model's sizes (head size 64, as real RWKV-7 models and llama.cpp's SIMD kernels have it)."""

    n_vocab: int = 64
    n_embd: int = 128
    n_layer: int = 2
    head_size: int = 64
    n_ff: int = 256
    lora_decay: int = 32
    lora_iclr: int = 32
    lora_value_res_mix: int = 32
    lora_gate: int = 32
    norm_eps: float = 1e-5
    n_ctx: int = 1024


def rwkv7_weights(cfg: RwkvConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights in numpy order (the reverse of ggml's ne), scaled so activations stay O(1)."""
    rng = np.random.default_rng(seed)
    e = cfg.n_embd

    def mat(rows: int, cols: int, gain: float = 1.0) -> np.ndarray:
        return (gain * rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def vec(centre: float, spread: float, *shape: int) -> np.ndarray:
        return (centre + spread * rng.standard_normal(shape or (e,))).astype(np.float32)

    w = {
        "token_embd.weight": rng.standard_normal((cfg.n_vocab, e)).astype(np.float32),
        "token_embd_norm.weight": vec(1.0, 0.1),
        "token_embd_norm.bias": vec(0.0, 0.1),
        "output_norm.weight": vec(1.0, 0.1),
        "output_norm.bias": vec(0.0, 0.1),
        "output.weight": mat(cfg.n_vocab, e),
    }
    for il in range(cfg.n_layer):
        b = f"blk.{il}."
        for norm in ("attn_norm", "attn_norm_2", "time_mix_ln"):
            w[f"{b}{norm}.weight"], w[f"{b}{norm}.bias"] = vec(1.0, 0.1), vec(0.0, 0.1)
        w[b + "time_mix_lerp_fused.weight"] = rng.uniform(0.0, 1.0, (6, 1, 1, e)).astype(np.float32)
        # llama.cpp loads a value-residual LoRA in the first layer too (unused there; converters copy the iclr one)
        v_rank = cfg.lora_iclr if il == 0 else cfg.lora_value_res_mix
        for name, rank, centre in (("w", cfg.lora_decay, -1.0), ("a", cfg.lora_iclr, 0.0), ("v", v_rank, 0.0)):
            w[f"{b}time_mix_{name}0.weight"] = vec(centre, 0.5)
            w[f"{b}time_mix_{name}1.weight"] = mat(rank, e, 0.5)
            w[f"{b}time_mix_{name}2.weight"] = mat(e, rank, 0.5)
        w[b + "time_mix_g1.weight"] = mat(cfg.lora_gate, e)
        w[b + "time_mix_g2.weight"] = mat(e, cfg.lora_gate)
        w[b + "time_mix_k_k.weight"] = vec(0.8, 0.2)
        w[b + "time_mix_k_a.weight"] = vec(1.0, 0.2)
        w[b + "time_mix_r_k.weight"] = vec(0.0, 0.3)
        for name in ("key", "value", "receptance", "output"):
            w[f"{b}time_mix_{name}.weight"] = mat(e, e)
        w[b + "channel_mix_lerp_k.weight"] = rng.uniform(0.0, 1.0, (1, 1, e)).astype(np.float32)
        w[b + "channel_mix_key.weight"] = mat(cfg.n_ff, e)
        w[b + "channel_mix_value.weight"] = mat(e, cfg.n_ff, 0.5)
    return w


def write_rwkv7(path: Path, cfg: RwkvConfig, w: dict[str, np.ndarray], wtype: str = "f32") -> Path:
    """An ``rwkv7`` GGUF with a placeholder vocabulary, the keys llama.cpp's converter writes; the matrices llama.cpp
    would quantize stored as ``wtype`` (f32 or q8_0)."""
    a = "rwkv7"
    writer = GGUFWriter(str(path), a)
    add_placeholder_vocab(writer, cfg.n_vocab)
    for key, value in (
        ("context_length", cfg.n_ctx),
        ("embedding_length", cfg.n_embd),
        ("block_count", cfg.n_layer),
        ("feed_forward_length", cfg.n_ff),
        ("attention.head_count", 0),
        ("wkv.head_size", cfg.head_size),
        ("attention.decay_lora_rank", cfg.lora_decay),
        ("attention.iclr_lora_rank", cfg.lora_iclr),
        ("attention.value_residual_mix_lora_rank", cfg.lora_value_res_mix),
        ("attention.gate_lora_rank", cfg.lora_gate),
    ):
        writer.add_uint32(f"{a}.{key}", value)
    writer.add_float32(f"{a}.attention.layer_norm_epsilon", cfg.norm_eps)
    return write_gguf(writer, w, wtype, path, lambda name, arr: arr.ndim != 2 or any(s in name for s in F32_ONLY))
