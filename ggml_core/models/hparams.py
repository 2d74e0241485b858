"""Hyperparameters of a model, read from GGUF metadata (``{arch}.*`` keys) and checked.

The keys every family shares (sizes, heads, rope, norm epsilon) are read here (:func:`read_shared_hparams`); what a
family adds (biases, QK-norm, sliding-window layers, softcapping, embedding scale) its module in
:mod:`ggml_core.models.arch` reads through :meth:`~ggml_core.models.arch.Architecture.read` and passes back as
overrides of :class:`HParams`' defaults. :func:`ggml_core.models.arch.read_hparams` finds a file's family and does
both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from ggml_core._errors import GGUFError
from ggml_core.models.gguf_file import GGUFFile

__all__ = [
    "GATING_FUNCS",
    "MAX_LAYERS",
    "HParams",
    "get_f32",
    "read_moe_routing",
    "read_shared_hparams",
    "read_ssm",
    "swa_pattern",
    "yarn_attn_factor",
]

#: a sanity bound: no real model has more layers than this, and a corrupt count must not drive allocations
MAX_LAYERS: Final = 4096
#: ggml passes float hyperparameters to its ops as float32 (op_params): larger values would become inf
F32_MAX: Final = float(np.finfo(np.float32).max)


def get_f32(f: GGUFFile, key: str, default: float) -> float:
    """Float metadata ``key`` (``default`` when absent) that ggml will use as a float32: GGUFError where it cannot."""
    return _f32(f, key, f.get_float(key, default))


def yarn_attn_factor(factor: float, rope_attn_factor: float = 1.0) -> float:
    """llama.cpp's ``cparams.yarn_attn_factor`` for YaRN with ``factor`` (float32 arithmetic as there):
    ``get_mscale(factor) · 1/(1 + 0.1·ln factor) · rope_attn_factor``, ``get_mscale`` being 1 for factor ≤ 1."""
    one, tenth = np.float32(1.0), np.float32(0.1)
    log = np.float32(np.log(np.float32(factor)))
    mscale = one if factor <= 1.0 else np.float32(tenth * log + one)
    return float(mscale * (one / (one + tenth * log)) * np.float32(rope_attn_factor))


def _f32(f: GGUFFile, key: str, value: float) -> float:
    """``value`` of metadata ``key``, which ggml will use as a float32: GGUFError where float32 cannot hold it."""
    if not abs(value) <= F32_MAX:
        raise GGUFError(f.path, f"metadata '{key}'", f"{value:g} does not fit a float32 (ggml's op parameters)")
    return value


@dataclass(frozen=True)
class HParams:
    """What the graph builder needs to know about a model."""

    arch: str
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_rot: int
    rope_type: int
    rope_freq_base: float
    rope_freq_scale: float
    rms_eps: float
    n_expert: int = 0
    n_expert_used: int = 0
    qkv_bias: bool = False
    #: RMS norms of q and k over each head (``attn_q_norm`` / ``attn_k_norm``), before rope
    qk_norm: bool = False
    #: extra RMS norms after attention and after the FFN (``post_attention_norm`` / ``post_ffw_norm``)
    post_norms: bool = False
    #: the gated FFN's activation: "silu" (SwiGLU) or "gelu" (GEGLU, tanh approximation)
    ffn_act: str = "silu"
    #: the token embeddings are multiplied by this (Gemma: sqrt(n_embd))
    embd_scale: float = 1.0
    #: q is multiplied by this before q·kᵀ and the softmax scale is 1 (Gemma); 0: softmax scale 1/sqrt(head_dim)
    q_scale: float = 0.0
    #: attention logits pass through ``c·tanh(x/c)`` (Gemma 2); 0: off
    attn_softcap: float = 0.0
    #: output logits pass through ``c·tanh(x/c)``; 0: off
    final_softcap: float = 0.0
    #: sliding-window attention: the window (keys at most n_swa - 1 positions back), 0: none
    n_swa: int = 0
    #: per layer: True where the layer attends over the sliding window (empty: no such layer)
    swa_layers: tuple[bool, ...] = ()
    #: rope base of the sliding-window layers (0: rope_freq_base)
    rope_freq_base_swa: float = 0.0
    #: rope frequency scale of the sliding-window layers (0: rope_freq_scale; Gemma 3: 1, its local layers are
    #: never scaled, as llama.cpp's ``rope_freq_scale_train_swa``)
    rope_freq_scale_swa: float = 0.0
    #: YaRN (``rope.scaling.type = yarn``): extrapolation mix 1, the original context, ramp bounds
    rope_ext_factor: float = 0.0
    n_ctx_orig: int = 0
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    #: ROPE's attn_factor (llama.cpp's ``yarn_attn_factor``: ``rope.scaling.attn_factor``, for YaRN times
    #: ``get_mscale(factor) / (1 + 0.1·ln factor)``, which is 1 for factor > 1 as ggml's rope applies the mscale)
    rope_attn_factor: float = 1.0
    #: per-head learned sink logits (``attn_sinks.weight``) join each softmax denominator (gpt-oss)
    attn_sinks: bool = False
    #: the attention output projection has a bias (``attn_output.bias``)
    attn_out_bias: bool = False
    #: how router logits become expert weights (llama.cpp's ``expert_gating_func``): "softmax" (over all experts,
    #: then top-k), "sigmoid" (per expert, then top-k), "softmax_weight" (top-k of the logits, then a softmax over
    #: the k chosen: gpt-oss)
    moe_gating: str = "softmax"
    #: the k chosen weights are divided by their sum (``expert_weights_norm``; Mixtral and qwen3moe: always)
    moe_norm_w: bool = False
    #: the chosen weights are multiplied by this (``expert_weights_scale``; 0 or 1: not scaled)
    moe_w_scale: float = 0.0
    #: the experts' activation: "silu" (SwiGLU) or "swiglu_oai" (gpt-oss: alpha 1.702, limit 7)
    moe_act: str = "silu"
    #: the router and every expert matrix have biases (``ffn_gate_inp.bias``, ``ffn_*_exps.bias``: gpt-oss)
    moe_biases: bool = False
    #: width of the shared expert that every token also goes through (``ffn_*_shexp``; 0: none)
    n_ff_shexp: int = 0
    #: the shared expert's output is scaled by ``sigmoid(ffn_gate_inp_shexp · x)`` (qwen2moe)
    shexp_gate: bool = False
    #: a per-expert bias added to the router's probabilities for the choice only (``exp_probs_b.bias``)
    moe_probs_bias: bool = False
    #: the first this many layers have a dense FFN instead of experts (``leading_dense_block_count``)
    n_layer_dense_lead: int = 0
    #: the dense FFN's width in a model whose ``n_ff`` is the experts' (0: ``n_ff``)
    n_ff_dense: int = 0
    #: per layer, True where the layer is recurrent (a state-space or linear-attention mixer with a state per
    #: sequence instead of K/V cells: llama.cpp's ``recurrent_layer_arr``); empty: none is
    recurrent_layers: tuple[bool, ...] = ()
    #: per layer, True where the layer attends (empty: every layer that is not recurrent); Nemotron-H also has
    #: layers that are only an FFN
    attention_layers: tuple[bool, ...] = ()
    #: per-layer FFN widths where the file gives an array (``feed_forward_length``, llama.cpp's ``n_ff_arr``; 0: the
    #: layer has no FFN); empty when it gives one width
    n_ff_layers: tuple[int, ...] = ()
    #: Mamba's sizes (``{arch}.ssm.*``): convolution kernel, inner width, state size, heads (``time_step_rank``) and
    #: groups of B/C
    ssm_d_conv: int = 0
    ssm_d_inner: int = 0
    ssm_d_state: int = 0
    ssm_dt_rank: int = 0
    ssm_n_group: int = 0
    #: Granite's scales (``residual_scale``: each block's output before it joins the residual stream;
    #: ``logit_scale``: logits divided by it; ``attention.scale``: the softmax scale instead of 1/sqrt(head_dim);
    #: 0: absent)
    residual_scale: float = 0.0
    logit_scale: float = 0.0
    attn_scale: float = 0.0
    #: LFM2's short convolution: the window it caches is ``shortconv_l_cache - 1`` inputs (``shortconv.l_cache``)
    shortconv_l_cache: int = 0
    #: RWKV: the WKV head size (``wkv.head_size``; 0: not RWKV), the token shifts a layer keeps, the LoRA ranks of
    #: decay, in-context learning rate, value residual mix and gate (``attention.*_lora_rank``)
    wkv_head_size: int = 0
    token_shift_count: int = 2
    n_lora_decay: int = 0
    n_lora_iclr: int = 0
    n_lora_value_res_mix: int = 0
    n_lora_gate: int = 0

    @property
    def n_embd_k_gqa(self) -> int:
        """Width of one token's keys over all KV heads."""
        return self.head_dim_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        """Width of one token's values over all KV heads."""
        return self.head_dim_v * self.n_head_kv

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model."""
        return self.n_expert > 0

    def layer_is_moe(self, il: int) -> bool:
        """True when layer ``il`` has experts (not one of the leading dense layers)."""
        return self.is_moe and il >= self.n_layer_dense_lead

    def is_recurrent(self, il: int) -> bool:
        """True when layer ``il`` keeps a recurrent state instead of K/V cells."""
        return bool(self.recurrent_layers) and self.recurrent_layers[il]

    def has_attention(self, il: int) -> bool:
        """True when layer ``il`` attends (keeps K/V cells)."""
        return self.attention_layers[il] if self.attention_layers else not self.is_recurrent(il)

    @property
    def has_recurrent(self) -> bool:
        """True when some layer is recurrent."""
        return any(self.recurrent_layers)

    @property
    def n_embd_r(self) -> int:
        """Floats of one recurrent layer's rolling state per sequence (llama.cpp's ``n_embd_r``): RWKV's token
        shifts, LFM2's convolution window, else Mamba's (and the delta nets') convolution window."""
        if self.wkv_head_size:
            return self.token_shift_count * self.n_embd
        if self.shortconv_l_cache:
            return self.n_embd * (self.shortconv_l_cache - 1)
        return max(0, self.ssm_d_conv - 1) * (self.ssm_d_inner + 2 * self.ssm_n_group * self.ssm_d_state)

    @property
    def n_embd_s(self) -> int:
        """Floats of one recurrent layer's state per sequence (llama.cpp's ``n_embd_s``): RWKV's WKV state, else
        Mamba's ``d_state`` per inner channel (0 for LFM2, which keeps only its window)."""
        if self.wkv_head_size:
            return self.n_embd * self.wkv_head_size
        return self.ssm_d_state * self.ssm_d_inner

    @property
    def has_swa(self) -> bool:
        """True when some layer attends over a sliding window."""
        return self.n_swa > 0 and any(self.swa_layers)

    def is_swa(self, il: int) -> bool:
        """True when layer ``il`` attends over the sliding window."""
        return self.n_swa > 0 and bool(self.swa_layers) and self.swa_layers[il]

    def rope_base(self, il: int) -> float:
        """The rope frequency base of layer ``il``."""
        return self.rope_freq_base_swa if self.is_swa(il) and self.rope_freq_base_swa else self.rope_freq_base

    def rope_scale(self, il: int) -> float:
        """The rope frequency scale of layer ``il``."""
        return self.rope_freq_scale_swa if self.is_swa(il) and self.rope_freq_scale_swa else self.rope_freq_scale

    def describe(self) -> str:
        """One line for the CLI."""
        moe = f", {self.n_expert} experts ({self.n_expert_used} used)" if self.is_moe else ""
        swa = f", sliding window {self.n_swa} on {sum(self.swa_layers)} layers" if self.has_swa else ""
        n_rec = sum(self.recurrent_layers)
        if self.wkv_head_size:
            kind = f"WKV head size {self.wkv_head_size}"
        elif self.shortconv_l_cache:
            kind = f"short convolution of {self.shortconv_l_cache}"
        else:
            kind = (
                f"d_inner {self.ssm_d_inner}, d_state {self.ssm_d_state}, {self.ssm_dt_rank} heads, "
                f"{self.ssm_n_group} groups, conv {self.ssm_d_conv}"
            )
        ssm = f", {n_rec} recurrent layers ({kind})" if n_rec else ""
        attn = (
            f"{self.n_head} heads ({self.n_head_kv} KV), head dim {self.head_dim_k}" if self.n_head else "no attention"
        )
        return (
            f"{self.arch}: {self.n_layer} layers, n_embd {self.n_embd}, n_ff {self.n_ff}, {attn}, "
            f"vocab {self.n_vocab}{moe}{swa}{ssm}"
        )


def swa_pattern(f: GGUFFile, hp: HParams, n_pattern: int) -> tuple[bool, ...]:
    """Which layers attend over the sliding window, as llama.cpp's ``load_swa_pattern``: the file's
    ``attention.sliding_window_pattern`` as one bool per layer, or as a period ``n`` (layer ``il`` is local when
    ``il % n < n - 1``: 0 makes every layer local, 1 none), else the family's ``n_pattern``."""
    key = f"{hp.arch}.attention.sliding_window_pattern"
    value = f.get(key, None)
    if isinstance(value, np.ndarray):
        if value.dtype != bool or value.shape != (hp.n_layer,):
            raise GGUFError(f.path, f"metadata '{key}'", f"must be {hp.n_layer} bools (one per layer) or an integer")
        return tuple(bool(b) for b in value)
    if value is not None:
        n_pattern = f.get_int(key, minimum=0)
    return tuple(n_pattern == 0 or il % n_pattern < n_pattern - 1 for il in range(hp.n_layer))


#: llama.cpp's ``llama_expert_gating_func_type`` values (``{arch}.expert_gating_func``) → ``HParams.moe_gating``
GATING_FUNCS: Final = {1: "softmax", 2: "sigmoid", 3: "softmax_weight"}


def read_moe_routing(f: GGUFFile, hp: HParams) -> HParams:
    """The routing keys llama.cpp reads for the families that take them from the file: ``expert_gating_func``
    (required: llama.cpp aborts without it), ``expert_weights_norm``, ``expert_weights_scale``."""
    k = hp.arch + "."
    gating = f.get_int(k + "expert_gating_func")
    if gating not in GATING_FUNCS:
        known = ", ".join(f"{v} ({n})" for v, n in GATING_FUNCS.items())
        raise GGUFError(f.path, f"metadata '{k}expert_gating_func'", f"{gating} is not supported (known: {known})")
    scale = _f32(f, k + "expert_weights_scale", f.get_float(k + "expert_weights_scale", 0.0))
    return replace(
        hp,
        moe_gating=GATING_FUNCS[gating],
        moe_norm_w=f.get_bool(k + "expert_weights_norm", False),
        moe_w_scale=scale,
    )


def _ff_widths(f: GGUFFile, key: str, n_layer: int, least: int) -> tuple[int, tuple[int, ...]]:
    """FFN width from ``feed_forward_length``: one width, or one per layer (0: no FFN; Nemotron-H). Returns the
    widest and, for a per-layer array, every layer's."""
    value = f.get(key, None)
    if value is None or isinstance(value, int):
        return f.get_int(key, 0 if least == 0 else None, minimum=least), ()
    widths = [int(v) for v in np.asarray(value).reshape(-1)] if not isinstance(value, list) else []
    if len(widths) != n_layer or any(w < 0 for w in widths):
        raise GGUFError(f.path, f"metadata '{key}'", f"must be one width or {n_layer} widths (one per layer)")
    return max(widths, default=0), tuple(widths)


def _kv_heads(f: GGUFFile, key: str, n_head: int, n_layer: int, recurrent: bool) -> tuple[int, tuple[bool, ...]]:
    """KV heads from ``attention.head_count_kv``: one count, or (hybrid families) one per layer, where 0 marks a
    recurrent layer as llama.cpp reads it (granitehybrid, lfm2). Returns the attention layers' count and, for a
    per-layer array, which layers are recurrent."""
    value = f.get(key, None)
    if value is None or isinstance(value, int):
        return f.get_int(key, n_head, minimum=0 if recurrent else 1), ()
    counts = [int(v) for v in np.asarray(value).reshape(-1)] if not isinstance(value, list) else []
    if len(counts) != n_layer:
        raise GGUFError(f.path, f"metadata '{key}'", f"must be one integer or {n_layer} (one per layer)")
    heads = sorted({c for c in counts if c})
    if len(heads) > 1 or any(c < 0 for c in counts):
        raise GGUFError(f.path, f"metadata '{key}'", f"per-layer counts {counts} vary; one count is supported")
    if not recurrent and 0 in counts:
        raise GGUFError(f.path, f"metadata '{key}'", "0 KV heads marks a recurrent layer, which this family has not")
    return (heads[0] if heads else 0), tuple(c == 0 for c in counts)


def read_ssm(f: GGUFFile, hp: HParams, *, group_count: bool) -> HParams:
    """Mamba's ``{arch}.ssm.*`` sizes (``group_count``: Mamba-2's groups of B and C, else one group); GGUFError
    naming the key when one is missing or inconsistent."""
    k = hp.arch + ".ssm."
    d_conv = f.get_int(k + "conv_kernel", minimum=1)
    d_inner = f.get_int(k + "inner_size", minimum=1)
    d_state = f.get_int(k + "state_size", minimum=1)
    dt_rank = f.get_int(k + "time_step_rank", minimum=1)
    n_group = f.get_int(k + "group_count", minimum=1) if group_count else 1
    if d_inner % dt_rank:
        raise GGUFError(f.path, f"metadata '{k}time_step_rank'", f"{dt_rank} heads do not divide inner_size {d_inner}")
    if d_inner % n_group or dt_rank % n_group:
        raise GGUFError(f.path, f"metadata '{k}group_count'", f"{n_group} does not divide inner_size and heads")
    return replace(
        hp, ssm_d_conv=d_conv, ssm_d_inner=d_inner, ssm_d_state=d_state, ssm_dt_rank=dt_rank, ssm_n_group=n_group
    )


def read_shared_hparams(f: GGUFFile, arch_name: str, *, rope_type: int, recurrent: bool, moe: bool) -> HParams:
    """Read and check the keys every family shares; GGUFError naming the file and key on anything missing or absurd.

    :param arch_name: the file's ``general.architecture`` (the prefix of its keys)
    :param rope_type: the family's rope mode
    :param recurrent: the family has recurrent layers (attention heads and FFN width may then be 0)
    :param moe: the family has a mixture-of-experts variant (else ``expert_count`` must be 0)
    """
    k = arch_name + "."
    n_embd = f.get_int(k + "embedding_length", minimum=1)
    n_layer = f.get_int(k + "block_count", minimum=1)
    if n_layer > MAX_LAYERS:
        raise GGUFError(f.path, f"metadata '{k}block_count'", f"{n_layer} layers is over the limit of {MAX_LAYERS}")
    # a recurrent family may have no attention and no FFN (mamba2: head_count and feed_forward_length are 0)
    least = 0 if recurrent else 1
    n_ff, ff_layers = _ff_widths(f, k + "feed_forward_length", n_layer, least)
    n_head = f.get_int(k + "attention.head_count", 0 if recurrent else None, minimum=least)
    n_head_kv, recurrent_layers = _kv_heads(f, k + "attention.head_count_kv", n_head, n_layer, recurrent)
    if n_head == 0:  # no attention anywhere: no heads to check
        n_head_kv = 0
    if n_head and n_head % n_head_kv:
        raise GGUFError(
            f.path, f"metadata '{k}attention.head_count_kv'", f"{n_head_kv} does not divide head_count {n_head}"
        )
    if n_head and n_embd % n_head and not f.has(k + "attention.key_length"):
        raise GGUFError(f.path, f"metadata '{k}attention.head_count'", f"{n_head} does not divide n_embd {n_embd}")
    head_dim_k = f.get_int(k + "attention.key_length", n_embd // max(n_head, 1), minimum=1)
    head_dim_v = f.get_int(k + "attention.value_length", head_dim_k, minimum=1)
    n_rot = f.get_int(k + "rope.dimension_count", head_dim_k, minimum=2)
    if n_head and (n_rot > head_dim_k or n_rot % 2):
        raise GGUFError(
            f.path, f"metadata '{k}rope.dimension_count'", f"{n_rot} must be even and <= head dim {head_dim_k}"
        )
    rms_eps = f.get_float(k + "attention.layer_norm_rms_epsilon", 1e-5)
    if not 0.0 <= rms_eps < 1.0:
        raise GGUFError(f.path, f"metadata '{k}attention.layer_norm_rms_epsilon'", f"{rms_eps} is not in [0, 1)")
    freq_base = _f32(f, k + "rope.freq_base", f.get_float(k + "rope.freq_base", 10000.0))
    if freq_base <= 1.0:
        raise GGUFError(f.path, f"metadata '{k}rope.freq_base'", f"{freq_base} must be > 1")
    freq_scale, ext_factor = 1.0, 0.0
    n_ctx_train = f.get_int(k + "context_length", 2048, minimum=1)
    n_ctx_orig = n_ctx_train
    # as llama.cpp: no type means linear (a factor without a type scales), "none" never scales; the factor's older
    # key is rope.scale_linear
    scaling = f.get_str(k + "rope.scaling.type", "linear")
    if scaling in ("linear", "yarn"):
        factor_key = k + "rope.scaling.factor" if f.has(k + "rope.scaling.factor") else k + "rope.scale_linear"
        factor = f.get_float(factor_key, 1.0) or 1.0  # llama.cpp: 0 is unscaled
        if factor < 0:
            raise GGUFError(f.path, f"metadata '{factor_key}'", f"{factor} must be >= 0")
        _f32(f, factor_key, factor)
        freq_scale = _f32(f, factor_key, 1.0 / factor)
    # llama.cpp's rope_attn_factor, read whatever the scaling type; it multiplies ROPE's attn_factor
    attn_factor = _f32(f, k + "rope.scaling.attn_factor", f.get_float(k + "rope.scaling.attn_factor", 1.0))
    if scaling == "yarn":  # llama.cpp: ext_factor 1, the original context from the file, ggml's rope does the rest
        ext_factor = 1.0
        n_ctx_orig = f.get_int(k + "rope.scaling.original_context_length", n_ctx_train, minimum=1)
        attn_factor = yarn_attn_factor(1.0 / freq_scale, attn_factor)
    elif scaling not in ("none", "", "linear"):
        raise GGUFError(
            f.path, f"metadata '{k}rope.scaling.type'", f"{scaling!r} is not supported (none, linear, yarn)"
        )
    n_expert = f.get_int(k + "expert_count", 0, minimum=0)
    n_expert_used = f.get_int(k + "expert_used_count", 0, minimum=0)
    if n_expert and not 0 < n_expert_used <= n_expert:
        raise GGUFError(f.path, f"metadata '{k}expert_used_count'", f"{n_expert_used} must be in 1..{n_expert}")
    if n_expert and not moe:
        raise GGUFError(f.path, f"metadata '{k}expert_count'", f"mixture of experts is not supported for {arch_name}")
    if not f.has_tensor("token_embd.weight"):
        raise GGUFError(f.path, "tensor 'token_embd.weight'", "is missing (every model needs its token embeddings)")
    embd = f.tensor_info("token_embd.weight")
    if len(embd.ne) != 2 or embd.ne[0] != n_embd:
        raise GGUFError(f.path, "tensor 'token_embd.weight'", f"has ne={list(embd.ne)}, expected [{n_embd}, n_vocab]")
    n_vocab = f.get_int(k + "vocab_size", embd.ne[1], minimum=1)
    if n_vocab < 1:
        raise GGUFError(f.path, "tensor 'token_embd.weight'", "has 0 rows: the vocabulary is empty")
    if n_vocab != embd.ne[1]:
        raise GGUFError(f.path, f"metadata '{k}vocab_size'", f"{n_vocab} differs from token_embd's {embd.ne[1]} rows")
    return HParams(
        arch=arch_name,
        n_vocab=n_vocab,
        n_ctx_train=n_ctx_train,
        n_embd=n_embd,
        n_layer=n_layer,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        n_rot=n_rot,
        rope_type=rope_type,
        rope_freq_base=freq_base,
        rope_freq_scale=freq_scale,
        rope_ext_factor=ext_factor,
        n_ctx_orig=n_ctx_orig,
        # llama.cpp 0c1e570 does not read rope.scaling.yarn_beta_fast / _slow: its context defaults 32 and 1
        yarn_beta_fast=32.0,
        yarn_beta_slow=1.0,
        rope_attn_factor=attn_factor,
        rms_eps=rms_eps,
        n_expert=n_expert,
        n_expert_used=n_expert_used,
        recurrent_layers=recurrent_layers,
        n_ff_layers=ff_layers,
    )
