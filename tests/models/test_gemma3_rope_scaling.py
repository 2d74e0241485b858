"""Gemma 3 as the 4B / 12B / 27B releases are written, against llama.cpp built here (``ggml_core.testing.llama_cpp``):
the global layers carry ``rope.scaling.type = linear`` with factor 8 on base 1e6, the sliding-window layers stay on
base 10,000 unscaled (llama.cpp's ``rope_freq_base_train_swa`` / ``rope_freq_scale_train_swa`` for gemma3), MQA, a
head width other than n_embd / n_head; and files whose ``attention.sliding_window_pattern`` replaces the default
five-local-one-global pattern (as a period or as one bool per layer). Gemma 2 reads the pattern and the local base
the same way (its local layers keep the file's scaling).

Tiny random GGUFs written with gguf-py; logits of a whole prompt and token by token, f32 weights and KV cache,
bound 1e-4 max |Δlogit| (the bound for f32). Every FFN gate is zero: ggml's GELU reads an f16 table on both sides,
and a gate value that float32 summation order moves across a table step moves the logits of these models (|logit|
up to 40) by ~1e-4 on its own; GELU(0) = 0 exactly, so the attention (what this file is about) is compared alone.
GEGLU against llama.cpp is ``tests/models/test_families_vs_llama_cpp.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter
from llama_cpp_logits import cpu_params, llama_cpp_prompt_and_steps, max_diffs, prompt_and_steps
from tiny_models import TinyConfig, llama_cpp_built, random_weights, write_model  # noqa: F401 (fixture "built")

from ggml_core.models import Model

TOKENS = [1, 5, 9, 3, 7, 2, 11, 4, 8, 60, 33, 17, 25, 40, 12, 6, 19, 44, 51, 23]  # well past the windows of 4
#: 4B-style: six layers (five local, one global), one KV head, head width 32 with n_embd / n_head = 16
GLOBAL_BASE, FACTOR = 1e6, 8.0
RELEASE = TinyConfig(
    arch="gemma3",
    n_vocab=64,
    n_layer=6,
    n_head=4,
    n_head_kv=1,
    key_length=32,
    n_swa=4,
    freq_base=GLOBAL_BASE,
    tied_output=True,
)


def _write(tmp_path: Path, name: str, cfg: TinyConfig, extra: Callable[[GGUFWriter], None]) -> Path:
    w = random_weights(cfg, 0)
    for il in range(cfg.n_layer):
        w[f"blk.{il}.ffn_gate.weight"] = np.zeros_like(w[f"blk.{il}.ffn_gate.weight"])
    return write_model(tmp_path / name, cfg, w, "f32", vocab=True, extra=extra)


def _max_diffs(path: Path) -> tuple[float, float, Model]:
    """max |Δlogit| against llama.cpp over the prompt in one batch and token by token; the model (closed)."""
    want = llama_cpp_prompt_and_steps(path, TOKENS)
    with Model.load(path, cpu_params()) as m:
        d_prompt, d_steps = max_diffs(prompt_and_steps(m, TOKENS), want)
    return d_prompt, d_steps, m


def _scaling(w: GGUFWriter) -> None:
    w.add_string("gemma3.rope.scaling.type", "linear")
    w.add_float32("gemma3.rope.scaling.factor", FACTOR)


def test_release_style_gemma3_matches_llama_cpp(tmp_path: Path, built: None) -> None:
    """Six layers, default pattern: layers 0-4 local (base 10,000, unscaled), layer 5 global (base 1e6, /8)."""
    path = _write(tmp_path, "gemma3-release.gguf", RELEASE, _scaling)
    prompt, steps, m = _max_diffs(path)
    hp = m.hp
    assert [hp.is_swa(il) for il in range(6)] == [True] * 5 + [False]
    assert [(hp.rope_base(il), hp.rope_scale(il)) for il in (0, 5)] == [(10000.0, 1.0), (GLOBAL_BASE, 1 / FACTOR)]
    assert prompt <= 1e-4, f"prompt: max |Δlogit| = {prompt:.3g}"
    assert steps <= 1e-4, f"token by token: max |Δlogit| = {steps:.3g}"


def _pattern_period(w: GGUFWriter) -> None:
    _scaling(w)
    w.add_uint32("gemma3.attention.sliding_window_pattern", 2)


def _pattern_bools(w: GGUFWriter) -> None:
    _scaling(w)
    w.add_array("gemma3.attention.sliding_window_pattern", [False, True])
    w.add_float32("gemma3.rope.freq_base_swa", 50000.0)


@pytest.mark.parametrize(
    ("extra", "local", "swa_base"),
    [(_pattern_period, [True, False], 10000.0), (_pattern_bools, [False, True], 50000.0)],
    ids=["period", "bools"],
)
def test_explicit_sliding_window_pattern_matches_llama_cpp(
    tmp_path: Path, built: None, extra: Callable[[GGUFWriter], None], local: list[bool], swa_base: float
) -> None:
    """Two layers (the default period 6 would make both local): the file's pattern as a period of 2 (local, global)
    and as bools (global, local, with its own ``rope.freq_base_swa``)."""
    cfg = RELEASE.with_(n_layer=2)
    prompt, steps, m = _max_diffs(_write(tmp_path, "gemma3-pattern.gguf", cfg, extra))
    assert [m.hp.is_swa(il) for il in range(2)] == local
    assert m.hp.rope_base(local.index(True)) == swa_base
    assert m.hp.rope_scale(local.index(True)) == 1.0 and m.hp.rope_scale(local.index(False)) == 1 / FACTOR
    assert prompt <= 1e-4, f"prompt: max |Δlogit| = {prompt:.3g}"
    assert steps <= 1e-4, f"token by token: max |Δlogit| = {steps:.3g}"


@pytest.mark.parametrize(("scaling_type", "scale"), [(None, 1 / FACTOR), ("none", 1.0)], ids=["absent", "none"])
def test_rope_scaling_factor_without_linear_type_as_llama_cpp(
    tmp_path: Path, built: None, scaling_type: str | None, scale: float
) -> None:
    """A factor with no ``rope.scaling.type`` scales (llama.cpp's default type is linear); type "none" never
    scales, whatever the factor."""

    def keys(w: GGUFWriter) -> None:
        if scaling_type is not None:
            w.add_string("gemma3.rope.scaling.type", scaling_type)
        w.add_float32("gemma3.rope.scaling.factor", FACTOR)
        w.add_uint32("gemma3.attention.sliding_window_pattern", 2)

    prompt, steps, m = _max_diffs(_write(tmp_path, "gemma3-factor.gguf", RELEASE.with_(n_layer=2), keys))
    assert m.hp.rope_scale(1) == scale
    assert prompt <= 1e-4, f"prompt: max |Δlogit| = {prompt:.3g}"
    assert steps <= 1e-4, f"token by token: max |Δlogit| = {steps:.3g}"


def test_gemma2_reads_the_pattern_and_local_rope_as_llama_cpp(tmp_path: Path, built: None) -> None:
    """Gemma 2 shares the reading: the file's pattern (bools: global, local), ``rope.freq_base_swa`` on the local
    layer; unlike Gemma 3 its local layers take the file's rope scaling too (llama.cpp copies the global scale)."""
    cfg = TinyConfig(arch="gemma2", n_vocab=64, n_swa=4, attn_softcap=3.0, final_softcap=5.0, tied_output=True)

    def keys(w: GGUFWriter) -> None:
        w.add_string("gemma2.rope.scaling.type", "linear")
        w.add_float32("gemma2.rope.scaling.factor", FACTOR)
        w.add_array("gemma2.attention.sliding_window_pattern", [False, True])
        w.add_float32("gemma2.rope.freq_base_swa", 50000.0)

    prompt, steps, m = _max_diffs(_write(tmp_path, "gemma2-pattern.gguf", cfg, keys))
    assert [m.hp.is_swa(il) for il in range(2)] == [False, True]
    assert (m.hp.rope_base(1), m.hp.rope_scale(1), m.hp.rope_scale(0)) == (50000.0, 1 / FACTOR, 1 / FACTOR)
    assert prompt <= 1e-4, f"prompt: max |Δlogit| = {prompt:.3g}"
    assert steps <= 1e-4, f"token by token: max |Δlogit| = {steps:.3g}"
