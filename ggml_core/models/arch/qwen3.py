"""qwen3 (``llm_build_qwen3``): llama's block with per-head RMS norms of q and k before rope, NEOX rope, no biases."""

from __future__ import annotations

from dataclasses import replace

from ggml_core.models.arch._base import Architecture
from ggml_core.models.arch.llama import build_layer, layer_weights
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.hparams import HParams
from ggml_core.ops import ROPE_TYPE_NEOX

__all__ = ["ARCH"]


def _read(f: GGUFFile, hp: HParams) -> HParams:
    return replace(hp, qk_norm=True)


ARCH = Architecture(
    name="qwen3",
    description="Qwen 3 (dense): QK-norm, NEOX rope, SwiGLU",
    rope_type=ROPE_TYPE_NEOX,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
)
