"""rwkv7 (llama.cpp's ``llm_build_rwkv7``): RWKV-7 "Goose", every layer a time mix and a channel mix, no attention.

The frame's norms are LayerNorms with biases: the embeddings go through ``token_embd_norm`` before the first layer
and the output norm has a bias. Per layer::

    a = LN(x, attn_norm);    x += time_mix(a, shift(a))
    f = LN(x, attn_norm_2);  x += channel_mix(f, shift(f))

where ``shift`` is the previous token's row (for the batch's first token, the last one of the batch before, kept
in the layer's rolling state beside the WKV state).
"""

from __future__ import annotations

from dataclasses import replace

from ggml_core import ops
from ggml_core._errors import GGUFError
from ggml_core._tensor import Tensor
from ggml_core.models.arch._base import ROPE_TYPE_NONE, Architecture
from ggml_core.models.blocks import LayerWeight
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams
from ggml_core.models.recurrent import store_state
from ggml_core.models.recurrent.rwkv import (
    channel_mix,
    channel_mix_weights,
    layer_norm,
    shifted,
    time_mix,
    time_mix_weights,
)

__all__ = ["ARCH"]


def layer_weights(hp: HParams, il: int) -> list[LayerWeight]:
    e = hp.n_embd
    norms: list[LayerWeight] = [
        (f"{n}.{p}", (e,), True) for n in ("attn_norm", "attn_norm_2") for p in ("weight", "bias")
    ]
    return [*norms, *time_mix_weights(hp, il), *channel_mix_weights(hp)]


def _norm(g: GraphBuilder, il: int, x: Tensor, name: str) -> Tensor:
    return layer_norm(g, x, g.layer(il, f"{name}.weight"), g.layer(il, f"{name}.bias")).set_name(f"{name}-{il}")


def build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    e, n_t = g.hp.n_embd, g.n_tokens
    shift = g.kv.r[il]  # [att_norm's last row | ffn_norm's last row] of the batch before
    assert shift is not None, f"layer {il} has no recurrent state"
    att_shift = ops.view_2d(shift, e, 1, shift.nb[1], 0)
    ffn_shift = ops.view_2d(shift, e, 1, shift.nb[1], e * shift.nb[0])

    att_norm = _norm(g, il, x, "attn_norm")
    ffn_inp = ops.add(time_mix(g, il, att_norm, shifted(g, att_shift, att_norm)), x)
    ffn_norm = _norm(g, il, ffn_inp, "attn_norm_2")
    x_prev = shifted(g, ffn_shift, ffn_norm)

    def last(t: Tensor) -> Tensor:
        return ops.view_2d(t, e, 1, t.nb[1], (n_t - 1) * t.nb[1])

    new_shift = ops.concat(last(att_norm), last(ffn_norm), 1)
    ffn_inp, ffn_norm, x_prev = (g.last_only(il, t) for t in (ffn_inp, ffn_norm, x_prev))
    out = ops.add(channel_mix(g, il, ffn_norm, x_prev), ffn_inp).set_name(f"l_out-{il}")
    # the channel mix reads the old shift: the new one is written after it
    g.graph.build_forward_expand(out)
    store_state(g, new_shift, shift)
    return out


def frame_norm(g: GraphBuilder, x: Tensor, name: str) -> Tensor:
    return layer_norm(g, x, g.w[f"{name}.weight"], g.w[f"{name}.bias"])


def _read(f: GGUFFile, hp: HParams) -> HParams:
    """RWKV-7's sizes; every norm is a LayerNorm, whose eps (``attention.layer_norm_epsilon``) takes ``rms_eps``'s
    place."""
    k = hp.arch + "."
    head_size = f.get_int(k + "wkv.head_size", minimum=1)
    if hp.n_embd % head_size:
        raise GGUFError(f.path, f"metadata '{k}wkv.head_size'", f"{head_size} does not divide n_embd {hp.n_embd}")
    shifts = f.get_int(k + "token_shift_count", 2, minimum=1)
    if shifts != 2:
        raise GGUFError(f.path, f"metadata '{k}token_shift_count'", f"is {shifts}; RWKV-7 shifts 2 inputs per layer")
    if hp.n_ff < 1:
        raise GGUFError(f.path, f"metadata '{k}feed_forward_length'", "is missing or 0 (the channel mix's width)")
    gate = f.get_int(k + "attention.gate_lora_rank", 0, minimum=0)
    if gate == 0:
        raise GGUFError(f.path, f"metadata '{k}attention.gate_lora_rank'", "is missing or 0 (rwkv7 layers are gated)")
    eps = f.get_float(k + "attention.layer_norm_epsilon", 0.0)
    if not 0.0 <= eps < 1.0:
        raise GGUFError(f.path, f"metadata '{k}attention.layer_norm_epsilon'", f"{eps} is not in [0, 1)")
    return replace(
        hp,
        rms_eps=eps,
        wkv_head_size=head_size,
        token_shift_count=shifts,
        n_lora_decay=f.get_int(k + "attention.decay_lora_rank", minimum=1),
        n_lora_iclr=f.get_int(k + "attention.iclr_lora_rank", minimum=1),
        n_lora_value_res_mix=f.get_int(k + "attention.value_residual_mix_lora_rank", minimum=1),
        n_lora_gate=gate,
        recurrent_layers=(True,) * hp.n_layer,
    )


ARCH = Architecture(
    name="rwkv7",
    description='RWKV-7 "Goose": linear-attention (WKV-7) time mix and channel mix, no attention',
    rope_type=ROPE_TYPE_NONE,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
    recurrent=True,
    frame_norm=frame_norm,
)
