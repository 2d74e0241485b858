"""dots1 (``llm_build_dots1``, rednote's dots.llm1): qwen3's attention (QK-norm, NEOX rope) over a mixture of
SwiGLU experts routed as the file says, plus an ungated shared expert:

- the first ``leading_dense_block_count`` layers have a dense SwiGLU FFN (``feed_forward_length`` wide);
- the others: the router's gating from ``expert_gating_func`` (sigmoid for dots.llm1; llama.cpp aborts without
  it, this refuses the file), an optional selection bias ``exp_probs_b`` (it steers the top-k choice, the weights
  stay unbiased), the chosen weights renormalised if ``expert_weights_norm`` and scaled by
  ``expert_weights_scale``; experts ``expert_feed_forward_length`` wide;
- the shared expert (``ffn_*_shexp``) is ``expert_shared_count`` experts wide and added unscaled.
"""

from __future__ import annotations

from dataclasses import replace

from ggml_core._errors import GGUFError
from ggml_core.models.arch._base import Architecture
from ggml_core.models.arch.llama import build_layer, layer_weights
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.hparams import HParams, read_moe_routing
from ggml_core.ops import ROPE_TYPE_NEOX

__all__ = ["ARCH"]


def _read(f: GGUFFile, hp: HParams) -> HParams:
    k = hp.arch + "."
    if not hp.is_moe:
        raise GGUFError(f.path, f"metadata '{k}expert_count'", "is missing or 0: dots1 needs its experts")
    n_lead = f.get_int(k + "leading_dense_block_count", 0, minimum=0)
    if n_lead > hp.n_layer:
        raise GGUFError(f.path, f"metadata '{k}leading_dense_block_count'", f"{n_lead} is over {hp.n_layer} layers")
    n_ff_exp = f.get_int(k + "expert_feed_forward_length", minimum=1)
    n_shared = f.get_int(k + "expert_shared_count", minimum=0)
    first_moe = f"blk.{n_lead}.exp_probs_b.bias"
    hp = replace(
        hp,
        qk_norm=True,
        n_ff=n_ff_exp,
        n_ff_dense=hp.n_ff,
        n_ff_shexp=n_ff_exp * n_shared,
        n_layer_dense_lead=n_lead,
        moe_probs_bias=n_lead < hp.n_layer and f.has_tensor(first_moe),
    )
    return read_moe_routing(f, hp)


ARCH = Architecture(
    name="dots1",
    description="dots.llm1: qwen3's attention, leading dense layers, sigmoid-routed SwiGLU experts with a "
    "selection bias, a shared expert",
    rope_type=ROPE_TYPE_NEOX,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
    moe=True,
)
