"""qwen3next (``llama_model_qwen3next``): Qwen3-Next, gated delta-net layers between gated full-attention layers,
every FFN a mixture of experts with a gated shared expert.

The blocks are Qwen3.5's (:mod:`.qwen35`, the FFN :mod:`.qwen35moe`'s) but for three things: the rope is NEOX over
``rope.dimension_count`` dims; the delta net's beta and decay come from one ``ssm_ba`` projection; each key head
serves the value heads next to it (head ``h`` reads key head ``h // (time_step_rank / group_count)``).
"""

from __future__ import annotations

from ggml_core._errors import GGUFError
from ggml_core._tensor import Tensor
from ggml_core.models import blocks
from ggml_core.models.arch._base import Architecture
from ggml_core.models.arch.qwen35 import hybrid_layer, hybrid_weights, read_delta_net
from ggml_core.models.arch.qwen35moe import moe_weights, read_moe
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams
from ggml_core.ops import ROPE_TYPE_NEOX

__all__ = ["ARCH"]


def _read(f: GGUFFile, hp: HParams) -> HParams:
    hp = read_moe(f, read_delta_net(f, hp))
    for il in range(hp.n_layer):  # the first files' one ssm_in (q, k, v and z per key head) is not read
        name = f"blk.{il}.ssm_in.weight"
        if hp.is_recurrent(il) and f.has_tensor(name) and not f.has_tensor(f"blk.{il}.attn_qkv.weight"):
            raise GGUFError(
                f.path,
                f"tensor '{name}'",
                "is the older Qwen3-Next layout (attn_qkv and attn_gate in one): not supported; convert the model "
                "again with a current convert_hf_to_gguf.py",
            )
    return hp


def _layer_weights(hp: HParams, il: int) -> list[blocks.LayerWeight]:
    return hybrid_weights(hp, il, moe_weights, interleaved=True)


def _build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    return hybrid_layer(g, il, x, blocks.moe_ffn, interleaved=True)


ARCH = Architecture(
    name="qwen3next",
    description="Qwen3-Next: gated delta-net and gated attention layers, experts with a gated shared expert",
    rope_type=ROPE_TYPE_NEOX,
    layer_weights=_layer_weights,
    build_layer=_build_layer,
    read=_read,
    moe=True,
    recurrent=True,
)
