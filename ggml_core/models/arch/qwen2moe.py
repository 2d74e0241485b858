"""qwen2moe (``llm_build_qwen2moe``): qwen2's attention (q/k/v biases, NEOX rope) with a mixture of SwiGLU experts
and a shared expert:

- softmax router over all experts, the top k, their weights **not** renormalised;
- experts ``expert_feed_forward_length`` wide (absent: ``feed_forward_length / expert_used_count``);
- the shared expert (``ffn_{gate,up,down}_shexp``, ``expert_shared_feed_forward_length`` wide, absent:
  ``feed_forward_length``) runs on every token and is scaled by ``sigmoid(ffn_gate_inp_shexp · x)``.
"""

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
    k = hp.arch + "."
    if not hp.is_moe:
        raise GGUFError(f.path, f"metadata '{k}expert_count'", "is missing or 0: qwen2moe needs its experts")
    n_ff_exp = f.get_int(k + "expert_feed_forward_length", 0, minimum=0) or hp.n_ff // hp.n_expert_used
    if n_ff_exp < 1:
        raise GGUFError(f.path, f"metadata '{k}feed_forward_length'", f"{hp.n_ff} is under expert_used_count")
    n_ff_shexp = f.get_int(k + "expert_shared_feed_forward_length", 0, minimum=0) or hp.n_ff
    return replace(hp, qkv_bias=True, n_ff=n_ff_exp, n_ff_shexp=n_ff_shexp, shexp_gate=True)


ARCH = Architecture(
    name="qwen2moe",
    description="Qwen 1.5 / 2 MoE: qwen2's attention, softmax-routed SwiGLU experts plus a sigmoid-gated shared expert",
    rope_type=ROPE_TYPE_NEOX,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
    moe=True,
)
