"""qwen3moe (``llm_build_qwen3moe``): qwen3's attention (QK-norm, NEOX rope) with a mixture of SwiGLU experts:
softmax router, top-k, the chosen weights renormalised (as Mixtral); experts ``expert_feed_forward_length`` wide."""

from __future__ import annotations

from dataclasses import replace

from ggml_core._errors import GGUFError
from ggml_core.models.arch._base import Architecture
from ggml_core.models.arch.llama import build_layer, layer_weights
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.hparams import HParams
from ggml_core.ops import ROPE_TYPE_NEOX

__all__ = ["ARCH"]


def _read(f: GGUFFile, hp: HParams) -> HParams:
    if not hp.is_moe:
        raise GGUFError(f.path, f"metadata '{hp.arch}.expert_count'", "is missing or 0: qwen3moe needs its experts")
    n_ff = f.get_int(hp.arch + ".expert_feed_forward_length", hp.n_ff, minimum=1)
    return replace(hp, qk_norm=True, n_ff=n_ff, moe_norm_w=True)


ARCH = Architecture(
    name="qwen3moe",
    description="Qwen 3 MoE: qwen3's attention, softmax-routed SwiGLU experts (top-k renormalised)",
    rope_type=ROPE_TYPE_NEOX,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
    moe=True,
)
