"""qwen35 (``llama_model_qwen35``): Qwen3.5 dense, gated delta-net layers between full-attention layers.

Per layer: ``x += mixer(rms_norm(x)·attn_norm)``, then ``x += ffn(rms_norm(x)·post_attention_norm)`` (SwiGLU). The
mixer is a gated delta net (:mod:`ggml_core.models.recurrent.delta_net`) on the recurrent layers
(``attention.recurrent_layers``, else every layer but each ``full_attention_interval``-th), elsewhere gated
attention: ``attn_q`` gives each head's query and its output gate side by side, q and k are RMS-normed per head and
roped, the attention's output is multiplied by ``sigmoid(gate)`` before ``attn_output``.

Qwen3.5's rope is llama.cpp's IMROPE with ``rope.dimension_sections``; a text token's positions are ``(p, p, p,
0)``, so where the sections give every rotated pair one of the first three positions (Qwen3.5's files: ``[11, 11,
10, 0]`` over 64 rotated dims) this is NEOX rope at ``p``, which the attention layers use. The functions here are
shared with qwen3next and qwen35moe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ggml_core import ops
from ggml_core._errors import GGUFError
from ggml_core._tensor import Tensor
from ggml_core.models import blocks
from ggml_core.models.arch._base import Architecture
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams, read_ssm
from ggml_core.models.recurrent.delta_net import delta_net_mixer, delta_net_weights
from ggml_core.ops import ROPE_TYPE_IMROPE, ROPE_TYPE_NEOX

__all__ = ["ARCH", "dense_ffn_weights", "hybrid_layer", "hybrid_weights", "read", "read_delta_net"]

_ES = 4  # f32 activations
_POST_NORM = "post_attention_norm.weight"

#: one layer's FFN: its graph on the post-attention-normed input, and its tensors
FfnGraph = Callable[[GraphBuilder, int, Tensor], Tensor]
FfnWeights = Callable[[HParams], list[blocks.LayerWeight]]


def _recurrent_layers(f: GGUFFile, hp: HParams, n_layer_all: int) -> tuple[bool, ...]:
    """llama.cpp's ``is_recr`` per layer: ``attention.recurrent_layers`` (one bool per block), else every layer but
    each ``full_attention_interval``-th (default 4)."""
    key = f"{hp.arch}.attention.recurrent_layers"
    value = f.get(key, None)
    if value is None:
        interval = f.get_int(f"{hp.arch}.full_attention_interval", 4, minimum=1)
        return tuple((il + 1) % interval != 0 for il in range(hp.n_layer))
    if not isinstance(value, np.ndarray) or value.shape != (n_layer_all,):
        raise GGUFError(f.path, f"metadata '{key}'", f"must be an array of {n_layer_all} bools (one per block)")
    return tuple(bool(b) for b in value[: hp.n_layer])


def read_delta_net(f: GGUFFile, hp: HParams) -> HParams:
    """What the Qwen3-Next / Qwen3.5 families read beyond the common keys: the delta net's sizes (``ssm.*``: value
    heads ``time_step_rank``, key heads ``group_count``, head size ``state_size``), the layer pattern, QK-norm. The
    multi-token-prediction blocks after the trunk (``nextn_predict_layers``) are not run, as in llama.cpp."""
    k = hp.arch + "."
    hp = read_ssm(f, hp, group_count=True)
    if hp.ssm_d_inner != hp.ssm_d_state * hp.ssm_dt_rank:
        raise GGUFError(
            f.path,
            f"metadata '{k}ssm.inner_size'",
            f"{hp.ssm_d_inner} must be state_size × time_step_rank ({hp.ssm_d_state} × {hp.ssm_dt_rank}): the value "
            "heads are state_size wide",
        )
    n_nextn = f.get_int(k + "nextn_predict_layers", 0, minimum=0)
    if n_nextn >= hp.n_layer:
        raise GGUFError(f.path, f"metadata '{k}nextn_predict_layers'", f"{n_nextn} leaves no layer of {hp.n_layer}")
    n_layer_all = hp.n_layer
    hp = replace(hp, n_layer=n_layer_all - n_nextn, qk_norm=True)
    hp = replace(hp, recurrent_layers=_recurrent_layers(f, hp, n_layer_all))
    if not all(hp.recurrent_layers):
        if hp.n_head == 0:
            raise GGUFError(f.path, f"metadata '{k}attention.head_count'", "is 0, but some layers are attention")
        if hp.head_dim_v != hp.head_dim_k:
            raise GGUFError(
                f.path, f"metadata '{k}attention.value_length'", f"{hp.head_dim_v} must equal key_length here"
            )
    return hp


def _imrope_pair_positions(sections: tuple[int, ...], n_rot: int) -> list[int]:
    """Which of a token's four IMROPE positions (t, h, w, e) each rotated pair takes, as ggml's
    ``ggml_mrope_cache_init``."""
    total = sum(sections)
    which = []
    for pair in range(n_rot // 2):
        s = pair % total
        if s % 3 == 1 and s < 3 * sections[1]:
            which.append(1)
        elif s % 3 == 2 and s < 3 * sections[2]:
            which.append(2)
        elif s % 3 == 0 and s < 3 * sections[0]:
            which.append(0)
        else:
            which.append(3)
    return which


def read(f: GGUFFile, hp: HParams) -> HParams:
    """Qwen3.5's keys: :func:`read_delta_net`'s and the rope sections (required, as llama.cpp), which must give
    a text token NEOX rope."""
    hp = read_delta_net(f, hp)
    key = f"{hp.arch}.rope.dimension_sections"
    raw = np.atleast_1d(np.asarray(f.get(key)))  # required, as llama.cpp: four section sizes, or one for all
    if raw.dtype.kind not in "iu" or raw.size not in (1, 4):
        raise GGUFError(f.path, f"metadata '{key}'", "must be 4 integers (or one for all four)")
    sections = tuple(int(s) for s in np.broadcast_to(raw, (4,)))
    if min(sections) < 0 or not 0 < sum(sections) <= hp.head_dim_k:
        raise GGUFError(f.path, f"metadata '{key}'", f"must be 4 sizes ≥ 0 summing to 1..{hp.head_dim_k}")
    if 3 in _imrope_pair_positions(sections, hp.n_rot):
        raise GGUFError(
            f.path,
            f"metadata '{key}'",
            f"{list(sections)} leave some of the {hp.n_rot} rotated dims on the fourth position, which text does "
            "not use: not supported",
        )
    return replace(hp, rope_type=ROPE_TYPE_NEOX)  # a text token's IMROPE is NEOX rope (module docstring)


def gated_attn_weights(hp: HParams) -> list[blocks.LayerWeight]:
    """The attention layer's tensors: the common ones with QK-norm, ``attn_q`` twice as wide (query and gate)."""
    q_out = hp.n_head * hp.head_dim_k
    return [(n, (hp.n_embd, 2 * q_out) if n == "attn_q.weight" else ne, vec) for n, ne, vec in blocks.attn_weights(hp)]


def gated_attention(g: GraphBuilder, il: int, h: Tensor) -> Tensor:
    """llama.cpp's ``build_layer_attn`` of these families: the query and its gate from one projection (per head,
    query then gate), QK-norm, rope, attention, ``· sigmoid(gate)``, the output projection."""
    hp, n_t = g.hp, g.n_tokens
    d, n_head = hp.head_dim_k, hp.n_head
    qg = ops.mul_mat(g.layer(il, "attn_q.weight"), h)  # [2·d·n_head, n_t]
    q = ops.view_3d(qg, d, n_head, n_t, 2 * d * _ES, qg.nb[1], 0)
    gate = ops.cont_2d(ops.view_3d(qg, d, n_head, n_t, 2 * d * _ES, qg.nb[1], d * _ES), d * n_head, n_t)
    k = ops.reshape_3d(ops.mul_mat(g.layer(il, "attn_k.weight"), h), d, hp.n_head_kv, n_t)
    v = ops.mul_mat(g.layer(il, "attn_v.weight"), h)
    q = blocks.rms_norm(g, q, g.layer(il, "attn_q_norm.weight"))
    k = blocks.rms_norm(g, k, g.layer(il, "attn_k_norm.weight"))
    q = blocks.rope(g, il, q).set_name(f"Qcur-{il}")
    k = blocks.rope(g, il, k).set_name(f"Kcur-{il}")
    out = ops.mul(blocks.attention(g, il, q, k, v), ops.sigmoid(gate))
    return ops.mul_mat(g.layer(il, "attn_output.weight"), out).set_name(f"attn_out-{il}")


def hybrid_layer(g: GraphBuilder, il: int, x: Tensor, ffn: FfnGraph, *, interleaved: bool) -> Tensor:
    """One block: the mixer (delta net or gated attention) and ``ffn``, each with its residual."""
    h = blocks.rms_norm(g, x, g.layer(il, "attn_norm.weight")).set_name(f"attn_norm-{il}")
    recurrent = g.hp.is_recurrent(il)
    cur = delta_net_mixer(g, il, h, interleaved=interleaved) if recurrent else gated_attention(g, il, h)
    cur = ops.add(g.last_only(il, cur), g.last_only(il, x))
    out = ffn(g, il, blocks.rms_norm(g, cur, g.layer(il, _POST_NORM)))
    return ops.add(out, cur).set_name(f"l_out-{il}")


def hybrid_weights(hp: HParams, il: int, ffn: FfnWeights, *, interleaved: bool) -> list[blocks.LayerWeight]:
    """One block's tensors: the norms, the mixer's, the FFN's (which name the post-attention norm)."""
    if hp.is_recurrent(il):
        mixer = [("attn_norm.weight", (hp.n_embd,), True), *delta_net_weights(hp, interleaved=interleaved)]
    else:
        mixer = gated_attn_weights(hp)
    return [*mixer, *ffn(hp)]


def dense_ffn_weights(hp: HParams) -> list[blocks.LayerWeight]:
    """The SwiGLU FFN's tensors behind the post-attention norm."""
    return [(_POST_NORM, (hp.n_embd,), True), *(w for w in blocks.ffn_weights(hp) if w[0] != "ffn_norm.weight")]


def _layer_weights(hp: HParams, il: int) -> list[blocks.LayerWeight]:
    return hybrid_weights(hp, il, dense_ffn_weights, interleaved=False)


def _build_layer(g: GraphBuilder, il: int, x: Tensor) -> Tensor:
    return hybrid_layer(g, il, x, blocks.glu_ffn, interleaved=False)


ARCH = Architecture(
    name="qwen35",
    description="Qwen 3.5 (dense): gated delta-net layers between gated full-attention layers",
    rope_type=ROPE_TYPE_IMROPE,
    layer_weights=_layer_weights,
    build_layer=_build_layer,
    read=read,
    recurrent=True,
)
