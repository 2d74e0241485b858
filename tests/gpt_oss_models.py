"""gpt-oss test models: the weights of a tiny gpt-oss and the GGUF llama.cpp's converter writes for it (MXFP4
experts), shared by the family's tests and the tensor-parallel tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf import quants as gguf_quants
from tiny_models import add_placeholder_vocab, write_and_close

ARCH = "gpt-oss"
N_VOCAB, N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, HEAD_DIM = 64, 64, 2, 4, 2, 16
N_FF, N_EXPERT, N_USED, N_SWA = 64, 4, 2, 4
FREQ_BASE, RMS_EPS = 10000.0, 1e-5
YARN_FACTOR, YARN_ORIG_CTX, BETA_FAST, BETA_SLOW = 4.0, 8, 32.0, 1.0  # TOKENS: 16 positions, past window and 8
ALPHA, LIMIT = 1.702, 7.0
#: the weights' seeds (see the module doc): the widest margins of the first 24 (40) seeds for the layer patterns
#: local/full and full/local
SEED, SEED_FULL_FIRST = 18, 4
EXPERTS = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")


def gpt_oss_weights(seed: int) -> dict[str, np.ndarray]:
    """Numpy layout (rows = output features). Every 8th gate/up bias is ±9, so SWIGLU_OAI's clamps at 7 engage."""
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int, *lead: int) -> np.ndarray:
        return (rng.uniform(-1, 1, (*lead, rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def vec(lo: float, hi: float, *shape: int) -> np.ndarray:
        return rng.uniform(lo, hi, shape).astype(np.float32)

    q, kv = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    w = {
        "token_embd.weight": vec(-1, 1, N_VOCAB, N_EMBD),
        "output_norm.weight": vec(0.5, 1.5, N_EMBD),
        "output.weight": mat(N_VOCAB, N_EMBD),
    }
    for il in range(N_LAYER):
        b = f"blk.{il}."
        w |= {
            b + "attn_norm.weight": vec(0.5, 1.5, N_EMBD),
            b + "attn_q.weight": mat(q, N_EMBD),
            b + "attn_k.weight": mat(kv, N_EMBD),
            b + "attn_v.weight": mat(kv, N_EMBD),
            b + "attn_q.bias": vec(-0.5, 0.5, q),
            b + "attn_k.bias": vec(-0.5, 0.5, kv),
            b + "attn_v.bias": vec(-0.5, 0.5, kv),
            b + "attn_output.weight": mat(N_EMBD, q),
            b + "attn_output.bias": vec(-0.5, 0.5, N_EMBD),
            b + "attn_sinks.weight": vec(0.0, 2.0, N_HEAD),
            b + "post_attention_norm.weight": vec(0.5, 1.5, N_EMBD),
            b + "ffn_gate_inp.weight": mat(N_EXPERT, N_EMBD) * 4,
            b + "ffn_gate_inp.bias": vec(-1, 1, N_EXPERT),
            b + "ffn_gate_exps.weight": mat(N_FF, N_EMBD, N_EXPERT),
            b + "ffn_up_exps.weight": mat(N_FF, N_EMBD, N_EXPERT),
            b + "ffn_down_exps.weight": mat(N_EMBD, N_FF, N_EXPERT),
            b + "ffn_down_exps.bias": vec(-0.5, 0.5, N_EXPERT, N_EMBD),
        }
        for name in ("gate", "up"):
            bias = vec(-1, 1, N_EXPERT, N_FF)
            bias[:, ::8] = rng.choice([-9.0, 9.0], (N_EXPERT, N_FF // 8))
            w[b + f"ffn_{name}_exps.bias"] = bias
    return w


def write_gpt_oss(
    path: Path, w: dict[str, np.ndarray], *, pattern: list[bool] | None = None, drop: tuple[str, ...] = (), **keys: int
) -> Path:
    """The GGUF llama.cpp's converter writes for gpt-oss (its keys and tensor names), experts in MXFP4;
    ``pattern``: an ``attention.sliding_window_pattern`` bool per layer; ``drop``: keys left out; ``keys``: uint32
    keys overridden (``rope_dimension_count=8`` for ``rope.dimension_count``)."""
    writer = GGUFWriter(str(path), ARCH)
    add_placeholder_vocab(writer, N_VOCAB)
    a = ARCH + "."
    for key, value in {
        "context_length": 64,
        "embedding_length": N_EMBD,
        "block_count": N_LAYER,
        "feed_forward_length": N_FF,
        "expert_feed_forward_length": N_FF,
        "expert_count": N_EXPERT,
        "expert_used_count": N_USED,
        "attention.head_count": N_HEAD,
        "attention.head_count_kv": N_HEAD_KV,
        "attention.key_length": HEAD_DIM,
        "attention.value_length": HEAD_DIM,
        "attention.sliding_window": N_SWA,
        "rope.dimension_count": HEAD_DIM,
        "rope.scaling.original_context_length": YARN_ORIG_CTX,
    }.items():
        if key not in drop:
            writer.add_uint32(a + key, keys.get(key.replace(".", "_"), value))
    if pattern is not None:
        writer.add_array(a + "attention.sliding_window_pattern", pattern)
    writer.add_float32(a + "attention.layer_norm_rms_epsilon", RMS_EPS)
    writer.add_float32(a + "rope.freq_base", FREQ_BASE)
    writer.add_string(a + "rope.scaling.type", "yarn")
    writer.add_float32(a + "rope.scaling.factor", YARN_FACTOR)
    for name, arr in w.items():
        if name.endswith(EXPERTS):
            data = gguf_quants.quantize(arr, GGMLQuantizationType.MXFP4)
            writer.add_tensor(name, data, raw_dtype=GGMLQuantizationType.MXFP4)
        else:
            writer.add_tensor(name, arr)
    write_and_close(writer)
    return path
