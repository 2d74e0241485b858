"""Tiny random-weight GGUFs of the gated delta-net families (qwen35, qwen35moe, qwen3next), with llama.cpp's key and
tensor names, for the tests that compare them with llama.cpp built here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from ggml_core.testing.recurrent_models import add_placeholder_vocab, write_gguf

__all__ = ["DeltaNetConfig", "delta_net_model_weights", "write_delta_net_model"]


@dataclass(frozen=True)
class DeltaNetConfig:
    """A hybrid model's sizes: ``recurrent`` per layer (None: the file gives ``full_attention_interval``)."""

    arch: str = "qwen35"
    n_vocab: int = 64
    n_embd: int = 64
    n_layer: int = 3
    recurrent: tuple[bool, ...] | None = (True, False, True)
    full_attention_interval: int = 2
    # attention layers
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_rot: int = 8
    #: IMROPE sections (qwen35, qwen35moe; None: not written)
    sections: tuple[int, int, int, int] | None = (2, 1, 1, 0)
    n_ff: int = 96
    # delta-net layers: key heads (group_count), value heads (time_step_rank), head size (state_size)
    n_k_heads: int = 2
    n_v_heads: int = 4
    d_state: int = 16
    d_conv: int = 4
    # experts (qwen35moe, qwen3next)
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 32
    n_ff_shexp: int = 64
    #: multi-token-prediction blocks after the trunk (``nextn_predict_layers``; attention blocks with ``nextn.*``)
    n_nextn: int = 0
    rms_eps: float = 1e-6
    n_ctx: int = 256

    @property
    def d_inner(self) -> int:
        return self.d_state * self.n_v_heads

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_k_heads * self.d_state

    @property
    def moe(self) -> bool:
        return self.arch != "qwen35"

    def is_recurrent(self, il: int) -> bool:
        if il >= self.n_layer:  # a prediction block
            return False
        if self.recurrent is not None:
            return self.recurrent[il]
        return (il + 1) % self.full_attention_interval != 0


def delta_net_model_weights(cfg: DeltaNetConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights in numpy order (the reverse of ggml's ne), scaled so activations stay O(1)."""
    rng = np.random.default_rng(seed)

    def mat(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(*shape: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)

    e, hd = cfg.n_embd, cfg.head_dim
    w = {
        "token_embd.weight": rng.standard_normal((cfg.n_vocab, e)).astype(np.float32),
        "output_norm.weight": norm(e),
        "output.weight": mat(cfg.n_vocab, e),
    }
    for il in range(cfg.n_layer + cfg.n_nextn):
        b = f"blk.{il}."
        if il >= cfg.n_layer:
            w[b + "nextn.eh_proj.weight"] = mat(e, 2 * e)
            w[b + "nextn.enorm.weight"] = norm(e)
            w[b + "nextn.hnorm.weight"] = norm(e)
        w[b + "attn_norm.weight"] = norm(e)
        w[b + "post_attention_norm.weight"] = norm(e)
        if cfg.is_recurrent(il):
            n_v = cfg.n_v_heads
            w[b + "attn_qkv.weight"] = mat(cfg.conv_dim, e)
            w[b + "attn_gate.weight"] = mat(cfg.d_inner, e)
            w[b + "ssm_conv1d.weight"] = (rng.standard_normal((cfg.conv_dim, cfg.d_conv)) * 0.5).astype(np.float32)
            w[b + "ssm_dt.bias"] = rng.uniform(-1.0, 1.0, n_v).astype(np.float32)
            w[b + "ssm_a"] = (-np.exp(rng.uniform(-1.0, 0.5, n_v))).astype(np.float32)
            if cfg.arch == "qwen3next":
                w[b + "ssm_ba.weight"] = mat(2 * n_v, e)
            else:
                w[b + "ssm_beta.weight"] = mat(n_v, e)
                w[b + "ssm_alpha.weight"] = mat(n_v, e)
            w[b + "ssm_norm.weight"] = norm(cfg.d_state)
            w[b + "ssm_out.weight"] = mat(e, cfg.d_inner)
        else:
            w[b + "attn_q.weight"] = mat(2 * hd * cfg.n_head, e)
            w[b + "attn_k.weight"] = mat(hd * cfg.n_head_kv, e)
            w[b + "attn_v.weight"] = mat(hd * cfg.n_head_kv, e)
            w[b + "attn_output.weight"] = mat(e, hd * cfg.n_head)
            w[b + "attn_q_norm.weight"] = norm(hd)
            w[b + "attn_k_norm.weight"] = norm(hd)
        if cfg.moe:
            x, f, s = cfg.n_expert, cfg.n_ff_exp, cfg.n_ff_shexp
            w[b + "ffn_gate_inp.weight"] = mat(x, e)
            w[b + "ffn_gate_exps.weight"] = mat(x, f, e)
            w[b + "ffn_up_exps.weight"] = mat(x, f, e)
            w[b + "ffn_down_exps.weight"] = mat(x, e, f)
            w[b + "ffn_gate_inp_shexp.weight"] = mat(e)
            w[b + "ffn_gate_shexp.weight"] = mat(s, e)
            w[b + "ffn_up_shexp.weight"] = mat(s, e)
            w[b + "ffn_down_shexp.weight"] = mat(e, s)
        else:
            w[b + "ffn_gate.weight"] = mat(cfg.n_ff, e)
            w[b + "ffn_up.weight"] = mat(cfg.n_ff, e)
            w[b + "ffn_down.weight"] = mat(e, cfg.n_ff)
    return w


def write_delta_net_model(path: Path, cfg: DeltaNetConfig, w: dict[str, np.ndarray], wtype: str = "f32") -> Path:
    """A GGUF of ``cfg.arch`` with a placeholder vocabulary; matrices stored as ``wtype`` (f32 or q8_0)."""
    writer = GGUFWriter(str(path), cfg.arch)
    a = cfg.arch
    add_placeholder_vocab(writer, cfg.n_vocab)
    writer.add_uint32(f"{a}.context_length", cfg.n_ctx)
    writer.add_uint32(f"{a}.embedding_length", cfg.n_embd)
    writer.add_uint32(f"{a}.block_count", cfg.n_layer + cfg.n_nextn)
    if cfg.n_nextn:
        writer.add_uint32(f"{a}.nextn_predict_layers", cfg.n_nextn)
    writer.add_uint32(f"{a}.feed_forward_length", cfg.n_ff)
    writer.add_uint32(f"{a}.attention.head_count", cfg.n_head)
    writer.add_uint32(f"{a}.attention.head_count_kv", cfg.n_head_kv)
    writer.add_uint32(f"{a}.attention.key_length", cfg.head_dim)
    writer.add_uint32(f"{a}.attention.value_length", cfg.head_dim)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", cfg.rms_eps)
    writer.add_uint32(f"{a}.rope.dimension_count", cfg.n_rot)
    writer.add_float32(f"{a}.rope.freq_base", 10000.0)
    if a != "qwen3next" and cfg.sections is not None:
        writer.add_array(f"{a}.rope.dimension_sections", list(cfg.sections))
    writer.add_uint32(f"{a}.ssm.conv_kernel", cfg.d_conv)
    writer.add_uint32(f"{a}.ssm.inner_size", cfg.d_inner)
    writer.add_uint32(f"{a}.ssm.state_size", cfg.d_state)
    writer.add_uint32(f"{a}.ssm.time_step_rank", cfg.n_v_heads)
    writer.add_uint32(f"{a}.ssm.group_count", cfg.n_k_heads)
    if cfg.recurrent is not None:
        writer.add_array(f"{a}.attention.recurrent_layers", list(cfg.recurrent) + [False] * cfg.n_nextn)
    else:
        writer.add_uint32(f"{a}.full_attention_interval", cfg.full_attention_interval)
    if cfg.moe:
        writer.add_uint32(f"{a}.expert_count", cfg.n_expert)
        writer.add_uint32(f"{a}.expert_used_count", cfg.n_expert_used)
        writer.add_uint32(f"{a}.expert_feed_forward_length", cfg.n_ff_exp)
        writer.add_uint32(f"{a}.expert_shared_feed_forward_length", cfg.n_ff_shexp)
    return write_gguf(writer, w, wtype, path, lambda name, arr: arr.ndim == 1 or "ssm_conv1d" in name)
