"""The gated delta-net families (qwen35, qwen35moe, qwen3next) against llama.cpp built here
(``ggml_core.testing.llama_cpp``; skipped with the reason where it cannot be built), on tiny random GGUFs with
attention and delta-net layers: logits of a whole prompt, token by token, across calls and across ubatches.

Bounds: f32 weights, state and KV ≤ 1e-4 max |Δlogit|, q8_0 weights ≤ 1e-3.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from delta_net_models import DeltaNetConfig, delta_net_model_weights, write_delta_net_model
from llama_cpp_logits import TOKENS, cpu_params, llama_cpp_prompt_and_steps, max_diffs, prompt_and_steps

from ggml_core import GGUFError
from ggml_core.models import Model
from ggml_core.testing import llama_cpp

#: per family: a file with the layer pattern as an array, and one with full_attention_interval (4 layers, every
#: second one attention)
CONFIGS = {
    "qwen35": DeltaNetConfig(),
    "qwen35moe": DeltaNetConfig(arch="qwen35moe", n_layer=4, recurrent=None),
    "qwen3next": DeltaNetConfig(arch="qwen3next"),
}


def _write(tmp: Path, arch: str, wtype: str = "f32", seed: int = 0) -> Path:
    cfg = CONFIGS[arch]
    return write_delta_net_model(tmp / f"{arch}-{wtype}.gguf", cfg, delta_net_model_weights(cfg, seed), wtype)


@pytest.mark.parametrize("wtype", ["f32", "q8_0"])
@pytest.mark.parametrize("arch", list(CONFIGS))
def test_matches_llama_cpp(tmp_path: Path, llama_cpp_harness: None, arch: str, wtype: str) -> None:
    path = _write(tmp_path, arch, wtype, seed=1)
    want = llama_cpp_prompt_and_steps(path)
    bound = 1e-4 if wtype == "f32" else 1e-3
    with Model.load(path, cpu_params()) as m:
        d_prompt, d_steps = max_diffs(prompt_and_steps(m), want)
    print(f"{arch} {wtype}: prompt {d_prompt:.3g}, steps {d_steps:.3g}")
    assert d_prompt <= bound, f"prompt: max |Δlogit| {d_prompt:.3g}"
    assert d_steps <= bound, f"steps: max |Δlogit| {d_steps:.3g}"


@pytest.mark.parametrize("arch", ["qwen35", "qwen3next"])
def test_state_carries_across_ubatches_and_calls(tmp_path: Path, llama_cpp_harness: None, arch: str) -> None:
    """A prompt in ubatches of 5 (the states and the KV cache carried from one to the next), and the same prompt in
    three calls, give llama.cpp's logits of the whole prompt."""
    path = _write(tmp_path, arch, seed=2)
    want = llama_cpp.LlamaCpp(path, threads=1, kv_type="f32").logits(TOKENS)
    with Model.load(path, cpu_params(batch_size=5)) as m:
        batched = m.process_prompt(TOKENS, all_logits=True)
        m.reset()
        parts = np.concatenate([m.decode(TOKENS[a:b], all_logits=True) for a, b in ((0, 7), (7, 8), (8, 16))])
        kv, hp = m.kv, m.hp
    assert np.abs(batched - want).max() <= 1e-4, f"ubatches: max |Δlogit| {np.abs(batched - want).max():.3g}"
    assert np.abs(parts - want).max() <= 1e-4, f"calls: max |Δlogit| {np.abs(parts - want).max():.3g}"
    # a state per delta-net layer, K/V only for the attention layers
    recurrent = [hp.is_recurrent(il) for il in range(hp.n_layer)]
    assert [t is not None for t in kv.s] == recurrent
    assert recurrent == [CONFIGS[arch].is_recurrent(il) for il in range(hp.n_layer)]


def test_prediction_blocks_are_not_run(tmp_path: Path, llama_cpp_harness: None) -> None:
    """A file with a multi-token-prediction block after the trunk (``nextn_predict_layers``): the trunk's logits,
    as llama.cpp's."""
    cfg = DeltaNetConfig(n_nextn=1)
    path = write_delta_net_model(tmp_path / "mtp.gguf", cfg, delta_net_model_weights(cfg, 3))
    want = llama_cpp.LlamaCpp(path, threads=1, kv_type="f32").logits(TOKENS)
    with Model.load(path, cpu_params()) as m:
        got = m.process_prompt(TOKENS, all_logits=True)
        assert m.hp.n_layer == cfg.n_layer
    assert np.abs(got - want).max() <= 1e-4, f"max |Δlogit| {np.abs(got - want).max():.3g}"


@pytest.mark.parametrize(
    ("cfg", "culprit"),
    [
        (DeltaNetConfig(sections=None), "rope.dimension_sections"),  # llama.cpp requires them
        (DeltaNetConfig(sections=(4, 0, 0, 0)), "rope.dimension_sections"),  # pairs on the 4th position
        (DeltaNetConfig(n_layer=2, recurrent=(True, False), n_head=0), "attention.head_count"),  # attention needs heads
    ],
)
def test_bad_files_are_refused_naming_the_key(tmp_path: Path, cfg: DeltaNetConfig, culprit: str) -> None:
    path = write_delta_net_model(tmp_path / "bad.gguf", cfg, delta_net_model_weights(cfg))
    with pytest.raises(GGUFError, match=culprit):
        Model.load(path, cpu_params())


def test_the_older_qwen3next_layout_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    """The first Qwen3-Next files hold q, k, v and z in one ``ssm_in``: one line saying so, not a missing tensor."""
    cfg = CONFIGS["qwen3next"]
    w = delta_net_model_weights(cfg)
    for il in range(cfg.n_layer):
        if cfg.is_recurrent(il):
            b = f"blk.{il}."
            w[b + "ssm_in.weight"] = np.concatenate([w.pop(b + "attn_qkv.weight"), w.pop(b + "attn_gate.weight")])
    path = write_delta_net_model(tmp_path / "legacy.gguf", cfg, w)
    with pytest.raises(GGUFError, match=r"'blk\.0\.ssm_in\.weight'.*older Qwen3-Next layout"):
        Model.load(path, cpu_params())
