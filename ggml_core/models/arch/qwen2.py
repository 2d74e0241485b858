"""qwen2 (``llm_build_qwen2``): llama's block with biases on q, k and v, and NEOX rope."""

from __future__ import annotations

from dataclasses import replace

from ggml_core.models.arch._base import Architecture
from ggml_core.models.arch.llama import build_layer, layer_weights
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.hparams import HParams
from ggml_core.ops import ROPE_TYPE_NEOX

__all__ = ["ARCH"]


def _read(f: GGUFFile, hp: HParams) -> HParams:
    return replace(hp, qkv_bias=True)


ARCH = Architecture(
    name="qwen2",
    description="Qwen 2 / 2.5: llama's block with q/k/v biases, NEOX rope",
    rope_type=ROPE_TYPE_NEOX,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
)
