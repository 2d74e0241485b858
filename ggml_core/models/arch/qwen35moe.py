"""qwen35moe (``llama_model_qwen35moe``): Qwen3.5's hybrid blocks (:mod:`.qwen35`) with a mixture of experts.

The FFN is llama.cpp's ``build_moe_ffn`` with softmax routing over all experts, the chosen weights renormalised,
plus a shared expert scaled by ``sigmoid(ffn_gate_inp_shexp · x)``; experts are ``expert_feed_forward_length``
wide (else ``feed_forward_length / expert_used_count``), the shared one ``expert_shared_feed_forward_length``
(else ``feed_forward_length``). Qwen3-Next's FFN is the same (:func:`read_moe`).
"""

from __future__ import annotations

from dataclasses import replace

from ggml_core._errors import GGUFError
from ggml_core._tensor import Tensor
from ggml_core.models import blocks
from ggml_core.models.arch._base import Architecture
from ggml_core.models.arch.qwen35 import hybrid_layer, hybrid_weights
from ggml_core.models.arch.qwen35 import read as read_qwen35
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams
from ggml_core.ops import ROPE_TYPE_IMROPE

__all__ = ["ARCH", "moe_weights", "read_moe"]


def read_moe(f: GGUFFile, hp: HParams) -> HParams:
    """The experts' and the shared expert's widths and the fixed routing of these families (experts required)."""
    k = hp.arch + "."
    if not hp.n_expert:
        raise GGUFError(f.path, f"metadata '{k}expert_count'", f"is missing or 0: {hp.arch} models have experts")
    n_ff_exp = f.get_int(k + "expert_feed_forward_length", 0, minimum=0) or hp.n_ff // hp.n_expert_used
    if n_ff_exp < 1:
        raise GGUFError(f.path, f"metadata '{k}expert_feed_forward_length'", "is missing and feed_forward_length is 0")
    n_ff_shexp = f.get_int(k + "expert_shared_feed_forward_length", 0, minimum=0) or hp.n_ff
    if n_ff_shexp < 1:
        raise GGUFError(
            f.path, f"metadata '{k}expert_shared_feed_forward_length'", "is missing and feed_forward_length is 0"
        )
    return replace(hp, n_ff=n_ff_exp, n_ff_shexp=n_ff_shexp, shexp_gate=True, moe_gating="softmax", moe_norm_w=True)


def moe_weights(hp: HParams) -> list[blocks.LayerWeight]:
    """The experts, the router and the gated shared expert behind the post-attention norm."""
    return blocks.moe_weights(hp, norm="post_attention_norm.weight")


def _read(f: GGUFFile, hp: HParams) -> HParams:
    return read_moe(f, read_qwen35(f, hp))


def _layer_weights(hp: HParams, il: int) -> list[blocks.LayerWeight]:
    return hybrid_weights(hp, il, moe_weights, interleaved=False)


def _build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    return hybrid_layer(g, il, x, blocks.moe_ffn, interleaved=False)


ARCH = Architecture(
    name="qwen35moe",
    description="Qwen 3.5 MoE: gated delta-net and gated attention layers, experts with a gated shared expert",
    rope_type=ROPE_TYPE_IMROPE,
    layer_weights=_layer_weights,
    build_layer=_build_layer,
    read=_read,
    moe=True,
    recurrent=True,
)
