"""What a family module provides: :class:`Architecture`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ggml_core._tensor import Tensor
from ggml_core.models.blocks import LayerWeight
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams

__all__ = ["ROPE_TYPE_NONE", "Architecture"]

#: ``rope_type`` of a family without rope (llama.cpp's ``LLAMA_ROPE_TYPE_NONE``)
ROPE_TYPE_NONE: Final = -1


def _keep(f: GGUFFile, hp: HParams) -> HParams:
    return hp


@dataclass(frozen=True)
class Architecture:
    """One model family.

    :param name: the GGUF ``general.architecture``
    :param description: one line for ``ggml-core models``
    :param rope_type: ``ROPE_TYPE_NORMAL``, ``ROPE_TYPE_NEOX`` or :data:`ROPE_TYPE_NONE` (llama.cpp's
        ``llama_model_rope_type``)
    :param layer_weights: the tensors of layer ``il`` (names inside ``blk.{il}.``, ggml shapes)
    :param build_layer: the graph of layer ``il``: residual stream in, residual stream out
    :param read: the family's own hyperparameters, as a replaced :class:`HParams`
    :param moe: the family has a mixture-of-experts variant (``{arch}.expert_count`` > 0)
    :param recurrent: some layers are recurrent (:attr:`HParams.recurrent_layers`); the file may then have no
        attention heads and no FFN width
    :param frame_norm: the frame's norm where it is not ``rms_norm(x)·output_norm``: ``(g, x, name)`` gives ``x``
        normed with the weights ``{name}.weight`` and ``{name}.bias`` (RWKV's LayerNorm); the frame then also norms
        the embeddings with ``token_embd_norm`` before the first layer, as llama.cpp's ``tok_norm``
    :param output_norm: the file's name of the final norm's weight (LFM2: ``token_embd_norm.weight``)
    """

    name: str
    description: str
    rope_type: int
    layer_weights: Callable[[HParams, int], list[LayerWeight]]
    build_layer: Callable[[GraphBuilder, int, Tensor], Tensor]
    read: Callable[[GGUFFile, HParams], HParams] = _keep
    moe: bool = False
    recurrent: bool = False
    frame_norm: Callable[[GraphBuilder, Tensor, str], Tensor] | None = None
    output_norm: str = "output_norm.weight"
