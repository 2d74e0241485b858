"""Split states of tensor parallelism: how one logical tensor is spread over the devices of a meta device.

A tensor is *mirrored* (every device may read the whole tensor), *split* along one axis (device ``d`` holds
``sizes[d]`` consecutive indices of that axis, in device order) or *partial* (every device holds a tensor of the
full shape, and the logical tensor is their sum). :func:`shard_sizes` divides a count of units (heads, rows,
quantization blocks) by proportions; :func:`llama_split_states` gives a llama-style model's weights (llama.cpp's
tensor names: dense, or with experts) their states: q/k/v/gate/up split by output rows (column-parallel, their
biases alike), o/down by input columns (row-parallel, their products partial), attention sinks by heads, each
expert as a dense FFN, everything else mirrored.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ggml_core._errors import GGMLError
from ggml_core._tensor import Tensor

__all__ = [
    "SplitError",
    "SplitKind",
    "SplitState",
    "delta_net_split_states",
    "llama_split_states",
    "mamba2_split_states",
    "rwkv7_split_states",
    "shard_sizes",
    "shortconv_split_states",
]


class SplitError(GGMLError, ValueError):
    """A tensor cannot be split as asked (a count that does not cover every device, an op whose operands' split
    states do not fit); carries the tensor concerned, or None for a count."""

    def __init__(self, tensor: Tensor | None, message: str) -> None:
        super().__init__(f"tensor {tensor.describe()}: {message}" if tensor is not None else message)
        self.tensor = tensor


class SplitKind(enum.Enum):
    """How a tensor is spread over the devices."""

    MIRRORED = "mirrored"
    SPLIT = "split"
    PARTIAL = "partial"


@dataclass(frozen=True)
class SplitState:
    """One tensor's split state; ``axis`` and ``sizes`` (elements per device along ``axis``) only for SPLIT."""

    kind: SplitKind
    axis: int = -1
    sizes: tuple[int, ...] = ()
    #: a SPLIT axis made of consecutive parts of different kinds (a fused projection's ``z | x | B | C | dt``): per
    #: part, the indices of it each device holds; device ``d`` holds its indices of every part, part after part,
    #: and ``sizes[d]`` is their sum. Empty: one part, ``sizes`` itself.
    segments: tuple[tuple[int, ...], ...] = ()

    @staticmethod
    def mirrored() -> SplitState:
        """Every device reads the whole tensor."""
        return _MIRRORED

    @staticmethod
    def partial() -> SplitState:
        """Every device holds a full-shape partial sum."""
        return _PARTIAL

    @staticmethod
    def split(axis: int, sizes: Sequence[int]) -> SplitState:
        """Device ``d`` holds ``sizes[d]`` consecutive indices of ``axis``."""
        if not 0 <= axis < 4:
            raise ValueError(f"split axis must be 0..3, got {axis}")
        return SplitState(SplitKind.SPLIT, axis, tuple(int(s) for s in sizes))

    @staticmethod
    def segmented(axis: int, segments: Sequence[Sequence[int]]) -> SplitState:
        """Split along ``axis`` made of consecutive parts, each divided over the devices by its own sizes."""
        segs = tuple(tuple(int(x) for x in seg) for seg in segments)
        if len({len(seg) for seg in segs}) != 1:
            raise ValueError(f"every part needs one size per device, got {segs}")
        sizes = tuple(sum(col) for col in zip(*segs, strict=True))
        return replace(SplitState.split(axis, sizes), segments=segs if len(segs) > 1 else ())

    @property
    def parts(self) -> tuple[tuple[int, ...], ...]:
        """The parts of the split axis (one: ``sizes``), each as its per-device sizes."""
        return self.segments or (self.sizes,)

    def scaled(self, axis: int, num: int, den: int) -> SplitState | None:
        """The state on ``axis`` with every size times ``num / den`` (a reshape), None where one is not whole."""
        parts = [[x * num for x in seg] for seg in self.parts]
        if any(x % den for seg in parts for x in seg):
            return None
        return SplitState.segmented(axis, [[x // den for x in seg] for seg in parts])

    def device_order(self) -> list[int]:
        """The indices of the split axis in the order the devices hold them (device 0's of every part, then
        device 1's, ...): the identity without parts."""
        order: list[list[int]] = [[] for _ in self.sizes]
        at = 0
        for seg in self.parts:
            for d, x in enumerate(seg):
                order[d] += range(at, at + x)
                at += x
        return [i for dev in order for i in dev]

    def starts(self) -> list[int]:
        """Where each device's part begins along the axis."""
        out, at = [], 0
        for s in self.sizes:
            out.append(at)
            at += s
        return out

    def describe(self) -> str:
        """``split(axis 1: 3+1)``, ``mirrored``, ``partial``."""
        if self.kind is SplitKind.SPLIT:
            parts = " | ".join("+".join(map(str, seg)) for seg in self.parts)
            return f"split(axis {self.axis}: {parts})"
        return self.kind.value


_MIRRORED = SplitState(SplitKind.MIRRORED)
_PARTIAL = SplitState(SplitKind.PARTIAL)


def shard_sizes(n_units: int, proportions: Sequence[float], what: str = "units") -> tuple[int, ...]:
    """Divide ``n_units`` by ``proportions`` (llama.cpp's ``--tensor-split``): whole units, largest remainders
    first, every device at least one unit (:class:`SplitError` when there are fewer units than devices)."""
    if not proportions or not all(math.isfinite(p) and p >= 0 for p in proportions) or sum(proportions) <= 0:
        raise SplitError(
            None, f"tensor split proportions must be finite, non-negative, with a positive sum; got {list(proportions)}"
        )
    n = len(proportions)
    if n_units < n:
        raise SplitError(
            None,
            f"cannot split {n_units} {what} over {n} devices: every device needs at least one; "
            f"use at most {n_units} devices",
        )
    total = float(sum(proportions))
    exact = [n_units * p / total for p in proportions]
    sizes = [max(1, int(x)) for x in exact]
    while sum(sizes) > n_units:  # the minimum of one unit overshot: take from the largest
        sizes[max(range(n), key=lambda i: sizes[i])] -= 1
    by_remainder = sorted(range(n), key=lambda i: sizes[i] - exact[i])
    for i in by_remainder[: n_units - sum(sizes)]:
        sizes[i] += 1
    return tuple(sizes)


#: weight name (llama.cpp's GGUF names, ``.weight`` or ``.bias``) → (axis, which split): column-parallel
#: projections by output rows (axis 1; their biases along axis 0), row-parallel ones by input columns (axis 0)
_WEIGHTS = {
    ("attn_q", "weight"): (1, "q"),
    ("attn_k", "weight"): (1, "kv"),
    ("attn_v", "weight"): (1, "kv"),
    ("attn_q", "bias"): (0, "q"),
    ("attn_k", "bias"): (0, "kv"),
    ("attn_v", "bias"): (0, "kv"),
    ("attn_output", "weight"): (0, "q"),
    ("attn_sinks", "weight"): (0, "heads"),
    ("ffn_gate", "weight"): (1, "ff"),
    ("ffn_up", "weight"): (1, "ff"),
    ("ffn_down", "weight"): (0, "ff"),
    # a mixture of experts: each expert split as the dense FFN, ``[n_embd, n_ff, n_expert]`` by its n_ff
    ("ffn_gate_exps", "weight"): (1, "ff"),
    ("ffn_up_exps", "weight"): (1, "ff"),
    ("ffn_down_exps", "weight"): (0, "ff"),
    ("ffn_gate_exps", "bias"): (0, "ff"),
    ("ffn_up_exps", "bias"): (0, "ff"),
    ("ffn_gate_shexp", "weight"): (1, "ff"),
    ("ffn_up_shexp", "weight"): (1, "ff"),
    ("ffn_down_shexp", "weight"): (0, "ff"),
}
#: split only with the KV heads (a device holding all of them sees no difference)
_KV_ROLES = ("kv",)
_CACHE = re.compile(r"^cache_[kv]_l\d+$")
_BLOCK_TENSOR = re.compile(r"^blk\.\d+\.(\w+)(?:\.(weight|bias))?$")


def llama_split_states(
    proportions: Sequence[float],
    *,
    n_head: int,
    n_head_kv: int,
    head_dim: int,
    n_ff: int,
    ff_granule: int = 1,
    mirror_kv: bool = False,
    gated_q: bool = False,
) -> Callable[[Tensor], SplitState | None]:
    """The split state of each weight of a llama-style model (llama.cpp's tensor names) over devices in
    ``proportions``.

    KV heads are divided first (each device keeps whole groups of query heads with their KV head, so the KV cache
    splits by KV heads too); with ``mirror_kv`` (one KV head, more devices) K, V and the cache are mirrored and the
    query heads are divided. Feed-forward widths (the dense FFN's ``n_ff``, each expert's, the shared expert's: the
    extent of each tensor) in units of ``ff_granule`` (a quantization block size, so row-parallel ``ffn_down``
    splits at block boundaries). Names: ``blk.<i>.attn_q.weight`` (or without ``.weight``), biases
    ``blk.<i>.attn_q.bias``, attention sinks (one per head), experts ``ffn_{gate,up,down}_exps`` with their biases
    (``ffn_down_exps.bias``, added after the sum, mirrored), shared experts ``*_shexp``; KV caches
    ``cache_k_l<i>``/``cache_v_l<i>``, one row per cell; with ``gated_q`` (Qwen3-Next, Qwen3.5) ``attn_q`` holds
    each head's query then its gate, two head widths of rows per head. Other tensors answer None (mirrored).
    """
    if n_head % n_head_kv:
        raise SplitError(None, f"{n_head} heads are not a multiple of {n_head_kv} KV heads")
    if mirror_kv and n_head_kv != 1:
        raise SplitError(None, f"only a single KV head can be mirrored, this model has {n_head_kv}")
    if n_ff % ff_granule:
        raise SplitError(None, f"feed-forward width {n_ff} is not a multiple of its block size {ff_granule}")
    group = n_head // n_head_kv
    if mirror_kv:
        heads = shard_sizes(n_head, proportions, "heads")
        kv: tuple[int, ...] = ()
    else:
        kv = shard_sizes(n_head_kv, proportions, "KV heads")
        heads = tuple(h * group for h in kv)
    sizes = {
        "q": tuple(h * head_dim for h in heads),
        "kv": tuple(h * head_dim for h in kv),
        "heads": heads,
    }
    q_rows = tuple(h * head_dim * (2 if gated_q else 1) for h in heads)
    ff_sizes: dict[int, tuple[int, ...]] = {}

    def ff(width: int) -> tuple[int, ...]:
        got = ff_sizes.get(width)
        if got is None:
            if width % ff_granule:
                raise SplitError(None, f"feed-forward width {width} is not a multiple of its block size {ff_granule}")
            units = shard_sizes(width // ff_granule, proportions, f"feed-forward blocks of {ff_granule}")
            got = ff_sizes[width] = tuple(u * ff_granule for u in units)
        return got

    def state_of(t: Tensor) -> SplitState | None:
        if _CACHE.match(t.name):
            return None if mirror_kv else SplitState.split(0, sizes["kv"])
        m = _BLOCK_TENSOR.match(t.name)
        role = _WEIGHTS.get((m.group(1), m.group(2) or "weight")) if m else None
        if role is None or (mirror_kv and role[1] in _KV_ROLES):
            return None
        axis, which = role
        if m is not None and m.group(1) == "attn_q" and m.group(2) != "bias":
            return SplitState.split(axis, q_rows)
        return SplitState.split(axis, ff(t.ne[axis]) if which == "ff" else sizes[which])

    return state_of


def _mixer_states(
    states: dict[tuple[str, str], SplitState], names: re.Pattern[str]
) -> Callable[[Tensor], SplitState | None]:
    """The state of a mixer's tensor by (name, ``weight``/``bias``) where ``names`` matches it, of its states
    ``cache_r_l<i>``/``cache_s_l<i>`` by ("r" or "s", "")."""

    def state_of(t: Tensor) -> SplitState | None:
        m = _STATE.match(t.name)
        if m:
            return states[(m.group(1), "")]
        m = names.match(t.name)
        return states.get((m.group(1), m.group(2) or "weight")) if m else None

    return state_of


_MAMBA_TENSOR = re.compile(r"^blk\.\d+\.(ssm_\w+?)(?:\.(weight|bias))?$")
_STATE = re.compile(r"^cache_([rs])_l\d+$")


def mamba2_split_states(
    proportions: Sequence[float], *, d_inner: int, d_state: int, n_group: int, n_head: int, d_conv: int
) -> Callable[[Tensor], SplitState | None]:
    """The split state of each tensor of a Mamba-2 mixer (llama.cpp's names) over devices in ``proportions``: its
    groups divided (each device keeps whole groups with their heads, so the gated norm, one per group, and B and C,
    one per group, stay on the device of their heads).

    ``ssm_in`` by rows, in five parts (``z``, ``x``: the heads' channels; ``B``, ``C``: the groups' states; ``dt``:
    one per head); ``ssm_conv1d`` (weight by rows, bias) over the ``x | B | C`` channels; ``ssm_dt.bias``, ``ssm_a``,
    ``ssm_d`` by head, ``ssm_norm`` by group, ``ssm_out`` by input columns (its products partial); the states
    ``cache_r_l<i>`` (the convolution window, ``d_conv - 1`` values per channel of ``x | B | C``) and
    ``cache_s_l<i>`` (``d_state × head_dim`` per head) alike. Other tensors answer None.
    """
    if n_head % n_group or d_inner % n_head:
        raise SplitError(None, f"{n_head} SSM heads of width {d_inner / n_head} do not fall in {n_group} groups")
    groups = shard_sizes(n_group, proportions, "SSM groups")
    heads = [g * (n_head // n_group) for g in groups]
    head_dim = d_inner // n_head
    ch = [h * head_dim for h in heads]
    bc = [g * d_state for g in groups]
    states = {
        ("ssm_in", "weight"): SplitState.segmented(1, [ch, ch, bc, bc, heads]),
        ("ssm_conv1d", "weight"): SplitState.segmented(1, [ch, bc, bc]),
        ("ssm_conv1d", "bias"): SplitState.segmented(0, [ch, bc, bc]),
        ("ssm_dt", "bias"): SplitState.split(0, heads),
        ("ssm_a", "weight"): SplitState.split(1, heads),
        ("ssm_d", "weight"): SplitState.split(1, heads),
        ("ssm_norm", "weight"): SplitState.split(1, groups),
        ("ssm_out", "weight"): SplitState.split(0, ch),
        ("r", ""): SplitState.segmented(0, [[x * (d_conv - 1) for x in seg] for seg in (ch, bc, bc)]),
        ("s", ""): SplitState.split(0, [x * d_state for x in ch]),
    }
    return _mixer_states(states, _MAMBA_TENSOR)


_DELTA_NET_TENSOR = re.compile(r"^blk\.\d+\.((?:attn_qkv|attn_gate|ssm)\w*?)(?:\.(weight|bias))?$")


def delta_net_split_states(
    proportions: Sequence[float], *, n_k: int, n_v: int, size: int, d_conv: int, interleaved: bool = False
) -> Callable[[Tensor], SplitState | None]:
    """The split state of each tensor of a gated delta net (llama.cpp's names) over devices in ``proportions``.

    Qwen3.5's (value head ``h`` reads key head ``h % n_k``): the value heads divided in runs of ``n_k`` (so that each
    device's first head reads key head 0), the key heads (q, k) whole on the first device. Qwen3-Next's
    (``interleaved``: value head ``h`` reads key head ``h // (n_v / n_k)``): the key heads divided, each with its
    value heads, and ``ssm_ba`` (per key head, its value heads' betas then their alphas) by key head.

    ``attn_qkv`` by rows in three parts (``q``, ``k``; ``v``: by value head), ``ssm_conv1d`` over the same channels,
    ``attn_gate``, ``ssm_beta``, ``ssm_alpha``, ``ssm_dt.bias`` and ``ssm_a`` by value head, ``ssm_out`` by input
    columns (its products partial), the states ``cache_r_l<i>`` (``d_conv - 1`` values per channel) and
    ``cache_s_l<i>`` (``size × size`` per value head) alike. Other tensors answer None.
    """
    if n_v % n_k:
        raise SplitError(None, f"{n_v} value heads are not a multiple of {n_k} key heads")
    per = n_v // n_k
    if interleaved:
        key_heads = shard_sizes(n_k, proportions, "key heads")
        heads = [k * per for k in key_heads]
        keys = [k * size for k in key_heads]
    else:
        heads = [r * n_k for r in shard_sizes(per, proportions, f"runs of {n_k} value heads")]
        keys = [n_k * size, *(0 for _ in heads[1:])]
    v = [h * size for h in heads]
    states = {
        ("attn_qkv", "weight"): SplitState.segmented(1, [keys, keys, v]),
        ("attn_gate", "weight"): SplitState.split(1, v),
        ("ssm_beta", "weight"): SplitState.split(1, heads),
        ("ssm_alpha", "weight"): SplitState.split(1, heads),
        ("ssm_ba", "weight"): SplitState.split(1, [2 * h for h in heads]),
        ("ssm_dt", "bias"): SplitState.split(0, heads),
        ("ssm_a", "weight"): SplitState.split(0, heads),
        ("ssm_conv1d", "weight"): SplitState.segmented(1, [keys, keys, v]),
        ("ssm_out", "weight"): SplitState.split(0, v),
        ("r", ""): SplitState.segmented(0, [[x * (d_conv - 1) for x in seg] for seg in (keys, keys, v)]),
        ("s", ""): SplitState.split(0, [x * size for x in v]),
    }
    return _mixer_states(states, _DELTA_NET_TENSOR)


_SHORTCONV_TENSOR = re.compile(r"^blk\.\d+\.(shortconv\.\w+?)(?:\.(weight|bias))?$")


def shortconv_split_states(
    proportions: Sequence[float], *, n_embd: int, l_cache: int, granule: int = 1
) -> Callable[[Tensor], SplitState | None]:
    """The split state of each tensor of LFM2's short convolution over devices in ``proportions``: its channels
    divided in units of ``granule`` (a quantization block of ``out_proj``, so its columns split at block boundaries).

    ``shortconv.in_proj`` by rows in three parts (``B``, ``C``, ``x``: by channel), ``shortconv.conv`` by channel,
    ``shortconv.out_proj`` by input columns (its products partial), the window state ``cache_r_l<i>`` (``l_cache - 1``
    values per channel) alike. Other tensors answer None.
    """
    if n_embd % granule:
        raise SplitError(None, f"{n_embd} channels are not a multiple of the block size {granule}")
    ch = [u * granule for u in shard_sizes(n_embd // granule, proportions, f"channel blocks of {granule}")]
    states = {
        ("shortconv.in_proj", "weight"): SplitState.segmented(1, [ch, ch, ch]),
        ("shortconv.conv", "weight"): SplitState.split(1, ch),
        ("shortconv.out_proj", "weight"): SplitState.split(0, ch),
        ("r", ""): SplitState.split(0, [x * (l_cache - 1) for x in ch]),
    }
    return _mixer_states(states, _SHORTCONV_TENSOR)


_RWKV_TENSOR = re.compile(r"^blk\.\d+\.((?:time|channel)_mix_\w+?)(?:\.(weight|bias))?$")


def rwkv7_split_states(
    proportions: Sequence[float], *, n_embd: int, head_size: int, n_ff: int, ff_granule: int = 1
) -> Callable[[Tensor], SplitState | None]:
    """The split state of each tensor of RWKV-7's time and channel mixes over devices in ``proportions``: the
    heads of ``head_size`` channels divided, the channel mix's width in units of ``ff_granule``.

    ``time_mix_receptance``/``key``/``value`` and the second matrices of the decay, learning-rate, value-residual and
    gate LoRAs (``time_mix_{w,a,v,g}2``) by rows (the LoRAs' first matrices mirrored), ``time_mix_output`` by input
    columns (partial); ``channel_mix_key`` by rows and ``channel_mix_value`` by columns (partial); the WKV state
    ``cache_s_l<i>`` (``head_size²`` per head) alike. The token-shift state ``cache_r_l<i>`` and the per-channel
    vectors are mirrored (sliced where read).
    """
    heads = shard_sizes(n_embd // head_size, proportions, "WKV heads")
    ch = [h * head_size for h in heads]
    if n_ff % ff_granule:
        raise SplitError(None, f"channel-mix width {n_ff} is not a multiple of its block size {ff_granule}")
    ff = [u * ff_granule for u in shard_sizes(n_ff // ff_granule, proportions, f"channel-mix blocks of {ff_granule}")]
    rows = SplitState.split(1, ch)
    states = {(f"time_mix_{n}", "weight"): rows for n in ("receptance", "key", "value", "w2", "a2", "v2", "g2")}
    states |= {
        ("time_mix_output", "weight"): SplitState.split(0, ch),
        ("channel_mix_key", "weight"): SplitState.split(1, ff),
        ("channel_mix_value", "weight"): SplitState.split(0, ff),
        ("s", ""): SplitState.split(0, [x * head_size for x in ch]),
    }
    mixer = _mixer_states(states, _RWKV_TENSOR)
    # the token shift (``cache_r_l<i>``) holds whole inputs: mirrored
    return lambda t: None if t.name.startswith("cache_r_l") else mixer(t)
