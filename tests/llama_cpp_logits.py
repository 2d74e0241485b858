"""Our logits next to llama.cpp's for the same GGUF: the prompt in one call, and token by token after a reset.

Both sides run on the CPU with an f32 KV cache of 64 cells (``cpu_params``), so what differs is arithmetic order
only; the tests name their bound.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ggml_core.models import Model, ModelParams, PlacementRequest
from ggml_core.testing import llama_cpp

TOKENS = [1, 5, 9, 3, 7, 2, 11, 4, 8, 60, 33, 17, 25, 40, 12, 6]  # longer than the windows of 4


def cpu_params(**kw: object) -> ModelParams:
    """CPU only, 64 cells of f32 KV cache, no progress output; ``kw`` overrides any of them."""
    base: dict[str, object] = {"placement": PlacementRequest(devices=["CPU"]), "n_ctx": 64, "kv_type": "f32"}
    return ModelParams(**{**base, "progress": False, **kw})  # type: ignore[arg-type]


def prompt_and_steps(m: Model, tokens: list[int] = TOKENS) -> tuple[np.ndarray, np.ndarray]:
    """The logits of every position of ``tokens`` as one prompt, and of each token decoded alone after a reset."""
    prompt = m.process_prompt(tokens, all_logits=True)
    m.reset()
    return prompt, np.stack([m.decode([t])[-1] for t in tokens])


def llama_cpp_prompt_and_steps(path: Path, tokens: list[int] = TOKENS) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp's logits of the same two runs (one thread, f32 KV cache)."""
    ref = llama_cpp.LlamaCpp(path, threads=1, kv_type="f32")
    return ref.logits(tokens), ref.logits(tokens, steps=True)


def max_diffs(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> tuple[float, float]:
    """max |Δlogit| of the prompt run and of the token-by-token run (the shapes must agree)."""
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape, f"logits of shape {a.shape}, expected {b.shape}"
    return float(np.abs(got[0] - want[0]).max()), float(np.abs(got[1] - want[1]).max())


def assert_within(
    got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray], bound: float, what: str = ""
) -> None:
    """Both runs' logits within ``bound`` (max |Δlogit|) of llama.cpp's; ``what`` starts the failure messages."""
    d_prompt, d_steps = max_diffs(got, want)
    assert d_prompt <= bound, f"{what}prompt: max |Δlogit| {d_prompt:.3g}"
    assert d_steps <= bound, f"{what}steps: max |Δlogit| {d_steps:.3g}"
