"""Each family of the registry against llama.cpp itself (built on this machine by ``ggml_core.testing.llama_cpp``;
skipped with the reason where it cannot be built), on tiny random GGUFs written here: same file, same token ids,
logits of every position in one batch and token by token.

gpt-oss (MXFP4 experts, sinks, biases, its own GGUF writer and numpy definition) is in ``tests/models/test_gpt_oss.py``.

Bounds: f32 weights with an f32 KV cache ≤ 1e-4 max |Δlogit|, where nothing rounds to a coarse grid on
either side. Gemma's GEGLU reads ggml's f16 GELU table on both sides, a coarse grid: see the test for how the Gemma
models keep their margins wide.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from llama_cpp_logits import TOKENS, assert_within, cpu_params, llama_cpp_prompt_and_steps, prompt_and_steps
from tiny_models import (  # noqa: F401 (fixture "built")
    TinyConfig,
    fuse_phi3,
    llama_cpp_built,
    random_weights,
    write_model,
)

from ggml_core.models import Model
from ggml_core.testing import llama_cpp

CONFIGS = {
    "llama": TinyConfig(arch="llama", n_vocab=64),
    # Llama 3's rope scaling as llama.cpp takes it: per-pair frequency divisors from the rope_freqs tensor
    "llama-rope-freqs": TinyConfig(arch="llama", n_vocab=64, rope_freqs=True),
    "mixtral": TinyConfig(arch="llama", n_vocab=64, n_expert=4, n_expert_used=2),
    "qwen2": TinyConfig(arch="qwen2", n_vocab=64),
    "qwen3": TinyConfig(arch="qwen3", n_vocab=64),
    "qwen3moe": TinyConfig(arch="qwen3moe", n_vocab=64, n_expert=4, n_expert_used=2),
    # shared expert with its sigmoid gate, chosen weights not renormalised, q/k/v biases
    "qwen2moe": TinyConfig(arch="qwen2moe", n_vocab=64, n_expert=4, n_expert_used=2),
    # sigmoid routing with a selection bias, weights renormalised and scaled, a leading dense layer, shared expert
    # (llama.cpp expects k and v as wide as q for dots1: no GQA)
    "dots1": TinyConfig(arch="dots1", n_vocab=64, n_layer=3, n_head_kv=4, n_expert=4, n_expert_used=2, n_dense_lead=1),
    "gemma2": TinyConfig(arch="gemma2", n_vocab=64, n_swa=4, attn_softcap=3.0, final_softcap=5.0, tied_output=True),
    "gemma3": TinyConfig(arch="gemma3", n_vocab=64, n_layer=6, n_head_kv=1, n_swa=4, tied_output=True),
}
#: quantized weights: (family, weight type) → a config; bound 1e-3 (activations rounded to Q8 on both sides)
QUANTIZED = {
    ("gemma3", "q8_0"): TinyConfig(arch="gemma3", n_vocab=64, n_layer=1, n_swa=4, tied_output=True),
    ("llama", "q8_0"): TinyConfig(arch="llama", n_vocab=64),
    # QK-norm between the q8_0 products and the rope
    ("qwen3", "q8_0"): TinyConfig(arch="qwen3", n_vocab=64),
}


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_family_logits_match_llama_cpp(tmp_path: Path, built: None, arch: str) -> None:
    cfg = CONFIGS[arch]
    w = random_weights(cfg, 0)
    if cfg.gemma:
        # GEGLU reads ggml's f16 GELU table on both sides: one gate value that float32 summation order lands across
        # an f16 rounding step moves its output by one f16 step and cascades through later layers. Zero gates after
        # layer 0 give GELU(0) = 0 exactly (no lookup can flip) while every layer's attention still runs (gemma3's
        # global layer 5 with its own rope base included); layer 0's FFN carries the GELU check.
        for il in range(1, cfg.n_layer):
            w[f"blk.{il}.ffn_gate.weight"] = np.zeros_like(w[f"blk.{il}.ffn_gate.weight"])
    path = write_model(tmp_path / f"{arch}.gguf", cfg, w, "f32", vocab=True)
    want = llama_cpp_prompt_and_steps(path)
    with Model.load(path, cpu_params()) as m:
        got = prompt_and_steps(m)
    assert_within(got, want, 1e-4, f"{arch}: ")


@pytest.mark.parametrize(("arch", "wtype"), sorted(QUANTIZED))
def test_quantized_weights_match_llama_cpp(tmp_path: Path, built: None, arch: str, wtype: str) -> None:
    """q8_0 weights (Gemma 3's tied embeddings as lm_head included): activations rounded to q8_0 on both sides."""
    cfg = QUANTIZED[(arch, wtype)]
    path = write_model(tmp_path / f"{arch}-{wtype}.gguf", cfg, random_weights(cfg, 3), wtype, vocab=True)
    want = llama_cpp.LlamaCpp(path, threads=1, kv_type="f32").logits(TOKENS)
    with Model.load(path, cpu_params()) as m:
        got = m.process_prompt(TOKENS, all_logits=True)
    assert np.abs(got - want).max() <= 1e-3, f"{arch} {wtype}: max |Δlogit| = {np.abs(got - want).max():.3g}"


def test_q8_0_activation_ties_round_half_to_even_as_llama_cpp(tmp_path: Path, built: None) -> None:
    """ggml-cpu's x86 Q8_0 activation quantizer multiplies by 127/amax and rounds half to even (not the reference
    quantizer's roundf): this q8_0 model (tests/models/test_models_llama.py's seed 1) has an activation exactly on a tie
    in float32, where rounding it away from zero put the logits 0.014 from llama.cpp's (NMSE 8e-6) instead of
    2.4e-7; a float64 reference, a float32 ulp away from the tie, cannot see it."""
    cfg = TinyConfig()
    path = write_model(tmp_path / "llama-q8_0-tie.gguf", cfg, random_weights(cfg, 1), "q8_0", vocab=True)
    tokens = TOKENS[:14]
    want = llama_cpp.LlamaCpp(path, threads=1, kv_type="f32").logits(tokens)
    with Model.load(path, cpu_params()) as m:
        got = m.process_prompt(tokens, all_logits=True)
    assert np.abs(got - want).max() <= 1e-4, f"max |Δlogit| = {np.abs(got - want).max():.3g}"


def test_phi3_fused_projections_match_llama_cpp_and_the_definition(tmp_path: Path, built: None) -> None:
    """phi3's fused q/k/v and gate/up, against llama.cpp and against the numpy definition of the unfused model
    (the same function: q·kᵀ/√d with NEOX rope, SwiGLU)."""
    from tiny_models import reference_logits

    cfg = TinyConfig(arch="phi3", n_vocab=64)
    w = random_weights(cfg, 0)
    path = write_model(tmp_path / "phi3.gguf", cfg, fuse_phi3(cfg, w), "f32", vocab=True)
    want = llama_cpp.LlamaCpp(path, threads=1, kv_type="f32").logits(TOKENS)
    with Model.load(path, cpu_params()) as m:
        got, steps = prompt_and_steps(m)
    assert np.abs(got - want).max() <= 1e-4, f"phi3: max |Δlogit| = {np.abs(got - want).max():.3g}"
    assert np.abs(steps - want).max() <= 1e-4
    ref = reference_logits(cfg, w, TOKENS)
    assert np.abs(got - ref).max() / np.abs(ref).max() < 2e-6


@pytest.mark.parametrize("attn_factor", [None, 0.8])
def test_yarn_rope_scaling_matches_llama_cpp(tmp_path: Path, built: None, attn_factor: float | None) -> None:
    """YaRN (``rope.scaling.type = yarn``, factor 4 over an original context of 8): positions past it, where the
    ramp between interpolated and extrapolated frequencies matters. With ``rope.scaling.attn_factor`` (llama.cpp's
    rope_attn_factor, ROPE's attn_factor); ``yarn_beta_fast`` 16 in the file, which llama.cpp does not read."""
    cfg = TinyConfig(arch="qwen2", n_vocab=64)

    def yarn(w: object) -> None:
        w.add_string("qwen2.rope.scaling.type", "yarn")  # type: ignore[attr-defined]
        w.add_float32("qwen2.rope.scaling.factor", 4.0)  # type: ignore[attr-defined]
        w.add_uint32("qwen2.rope.scaling.original_context_length", 8)  # type: ignore[attr-defined]
        w.add_float32("qwen2.rope.scaling.yarn_beta_fast", 16.0)  # type: ignore[attr-defined]
        if attn_factor is not None:
            w.add_float32("qwen2.rope.scaling.attn_factor", attn_factor)  # type: ignore[attr-defined]

    path = write_model(tmp_path / "yarn.gguf", cfg, random_weights(cfg, 0), "f32", vocab=True, extra=yarn)
    want = llama_cpp.LlamaCpp(path, threads=1, kv_type="f32").logits(TOKENS)
    with Model.load(path, cpu_params()) as m:
        assert m.hp.rope_ext_factor == 1.0 and m.hp.n_ctx_orig == 8 and m.hp.rope_freq_scale == 0.25
        assert abs(m.hp.rope_attn_factor - (attn_factor or 1.0)) < 1e-6
        got = m.process_prompt(TOKENS, all_logits=True)
    plain = write_model(tmp_path / "plain.gguf", cfg, random_weights(cfg, 0), "f32", vocab=True)
    assert np.abs(got - want).max() <= 1e-4, f"yarn: max |Δlogit| = {np.abs(got - want).max():.3g}"
    unscaled = llama_cpp.LlamaCpp(plain, threads=1, kv_type="f32").logits(TOKENS)
    assert np.abs(unscaled - want).max() > 1e-2  # the scaling is in play
