"""Shared blocks of the recurrent layers, one module per kind of mixer, over the recurrent state the cache keeps
beside K and V (:class:`~ggml_core.models.kvcache.KVCache`: ``r`` and ``s`` per recurrent layer).

- :mod:`.mamba`: the Mamba-2 mixer (SSM_CONV, SSM_SCAN), llama.cpp's ``build_mamba2_layer``
- :mod:`.delta_net`: the gated delta net of Qwen3-Next and Qwen3.5 (SSM_CONV, GATED_DELTA_NET), llama.cpp's
  ``build_layer_attn_linear`` over ``llm_build_delta_net_base``
- :mod:`.rwkv`: RWKV-7's time mix (RWKV_WKV7) and channel mix over the token shift, llama.cpp's
  ``llm_build_rwkv7_base``

Every layer serves one sequence: it reads its states, computes, and writes the new states back in the same graph
(:func:`store_state`).
"""

from __future__ import annotations

from ggml_core import ops
from ggml_core._tensor import Tensor
from ggml_core.models.graph import GraphBuilder

__all__ = ["store_state"]


def store_state(g: GraphBuilder, src: Tensor, state: Tensor) -> None:
    """Copy ``src`` over the whole of ``state`` (same element count) as a node of the batch's graph: the state a
    later batch reads. Nodes that read the old state come before it in the graph (they are ``src``'s ancestors)."""
    g.graph.build_forward_expand(ops.cpy(src, state))
