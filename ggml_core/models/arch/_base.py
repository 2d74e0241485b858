"""What a family module provides: :class:`Architecture`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ggml_core._tensor import Tensor
from ggml_core.models.blocks import LayerWeight
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams

__all__ = ["Architecture"]


def _keep(f: GGUFFile, hp: HParams) -> HParams:
    return hp


@dataclass(frozen=True)
class Architecture:
    """One model family.

    :param name: the GGUF ``general.architecture``
    :param description: one line for ``ggml-core models``
    :param rope_type: ``ROPE_TYPE_NORMAL`` or ``ROPE_TYPE_NEOX`` (llama.cpp's ``llama_model_rope_type``)
    :param layer_weights: the tensors of layer ``il`` (names inside ``blk.{il}.``, ggml shapes)
    :param build_layer: the graph of layer ``il``: residual stream in, residual stream out
    :param read: the family's own hyperparameters, as a replaced :class:`HParams`
    :param moe: the family has a mixture-of-experts variant (``{arch}.expert_count`` > 0)
    """

    name: str
    description: str
    rope_type: int
    layer_weights: Callable[[HParams, int], list[LayerWeight]]
    build_layer: Callable[[GraphBuilder, int, Tensor], Tensor]
    read: Callable[[GGUFFile, HParams], HParams] = _keep
    moe: bool = False
