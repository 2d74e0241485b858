"""ggml-core against llama.cpp itself, built on this machine (``ggml_core.testing.llama_cpp``), on the same GGUF.

The embedded default model (LLaMA architecture: GQA, rope, SwiGLU; f32 weights; a SentencePiece vocabulary with
byte fallback) is written once; llama.cpp's logits, greedy continuation and token ids are the reference. Skipped
with the reason when llama.cpp cannot be built here (no compiler, no cmake, no network for the sdist).

Bounds: with f32 weights and an f32 KV cache nothing is rounded to a coarse grid on either side, so the only
differences are float32 summation orders (ggml's SIMD dot products against BLAS): ~1e-6 relative per product,
a few 1e-5 in the logits after 4 layers. The bound is 1e-4 max |Δlogit|, as for every f32 model against llama.cpp.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ggml_core.models import Model, ModelParams, PlacementRequest
from ggml_core.models.default_model import write_default_model
from ggml_core.testing import llama_cpp

CPU_ONLY = PlacementRequest(devices=["CPU"])
PROMPT = "hello world, the ggml core backend device runs a tensor graph"


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_default_model(tmp_path_factory.mktemp("ref") / "default.gguf")


@pytest.fixture(scope="module")
def ref(model_path: Path) -> llama_cpp.LlamaCpp:
    try:
        llama_cpp.harness()
    except llama_cpp.Unavailable as exc:
        pytest.skip(f"llama.cpp cannot be built here: {exc}")
    return llama_cpp.LlamaCpp(model_path, threads=1)


def _ours(path: Path) -> Model:
    return Model.load(path, ModelParams(placement=CPU_ONLY, n_ctx=128, kv_type="f32", progress=False))


def test_tokens_match_llama_cpp(model_path: Path, ref: llama_cpp.LlamaCpp) -> None:
    corpus = [
        PROMPT,
        "  two leading spaces, and   runs   of spaces",
        "digits 1234567890 and 3.14159",
        "unicode: naïve café, Ελληνικά, 日本語, emoji 🦙🚀",
        "code: def f(x):\n\treturn x**2  # tab\n",
        "",
    ]
    with _ours(model_path) as m:
        for text in corpus:
            assert m.tokenizer.encode(text) == ref.tokenize(text), repr(text)


def test_prompt_logits_match_llama_cpp(model_path: Path, ref: llama_cpp.LlamaCpp) -> None:
    tokens = ref.tokenize(PROMPT)
    want = ref.logits(tokens)
    with _ours(model_path) as m:
        got = m.process_prompt(tokens, all_logits=True)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4, f"max |Δlogit| = {np.abs(got - want).max():.3g}"


def test_greedy_continuation_matches_llama_cpp(model_path: Path, ref: llama_cpp.LlamaCpp) -> None:
    tokens = ref.tokenize(PROMPT)
    want = ref.generate(tokens, 12)
    with _ours(model_path) as m:
        logits = m.process_prompt(tokens)
        got = []
        for _ in range(len(want)):
            got.append(int(np.argmax(logits[-1])))
            logits = m.decode([got[-1]])
    assert got == want
