"""mamba2 (``llm_build_mamba`` with ``LLM_ARCH_MAMBA2``): every layer a Mamba-2 mixer, no attention, no FFN.

Per layer: ``x += mixer(rms_norm(x)·attn_norm)``; the mixer's convolution window and scan state live in the
recurrent state beside the (empty) KV cache.
"""

from __future__ import annotations

from dataclasses import replace

from ggml_core import ops
from ggml_core._tensor import Tensor
from ggml_core.models import blocks
from ggml_core.models.arch._base import ROPE_TYPE_NONE, Architecture
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams, read_ssm
from ggml_core.models.recurrent.mamba import mamba2_mixer, mamba2_weights

__all__ = ["ARCH"]


def layer_weights(hp: HParams, il: int) -> list[blocks.LayerWeight]:
    return [("attn_norm.weight", (hp.n_embd,), True), *mamba2_weights(hp)]


def build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    h = blocks.rms_norm(g, x, g.layer(il, "attn_norm.weight")).set_name(f"attn_norm-{il}")
    out = g.last_only(il, mamba2_mixer(g, il, h))
    return ops.add(out, g.last_only(il, x)).set_name(f"l_out-{il}")


def _read(f: GGUFFile, hp: HParams) -> HParams:
    hp = read_ssm(f, hp, group_count=True)
    return replace(hp, recurrent_layers=(True,) * hp.n_layer)


ARCH = Architecture(
    name="mamba2",
    description="Mamba-2: selective state-space layers (SSD), no attention",
    rope_type=ROPE_TYPE_NONE,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
    recurrent=True,
)
