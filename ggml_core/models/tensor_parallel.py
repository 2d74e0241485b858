"""``--split-mode tensor``: one model's weights split over several devices through the meta device
(:class:`ggml_core.sched.MetaDevice`), each device computing its share of every layer.

The families of :data:`FAMILIES` (attention and FFN or mixture-of-experts blocks, and the hybrids of
:data:`RECURRENT_FAMILIES`, whose Mamba-2 mixers split by groups of heads and whose other recurrent mixers stay
whole on the first device;
:func:`check_supported` names the family of any other model, such as the purely recurrent ones). The weights take
the states of :func:`ggml_core.sched.llama_split_states`: ``attn_q``/``attn_k``/``attn_v`` (and their biases) and
``ffn_gate``/``ffn_up`` split by output rows, ``attn_output`` and ``ffn_down`` by input columns (their products are
partial sums, all-reduced once after the attention and once after the FFN), attention sinks by head; each expert of
a mixture of experts split as a dense FFN (``ffn_{gate,up}_exps`` by rows, ``ffn_down_exps`` by columns, the
per-expert biases alike), the shared expert too; the rest (embeddings, norms, routers, the output matrix) mirrored:
loaded once, on the first device. KV heads are divided by ``--tensor-split`` (each device keeps its query heads' group
with their KV head; a count that does not divide gives an uneven split; a single KV head is mirrored, cache and
all, and the query heads divided instead), the feed-forward widths in whole quantization blocks of ``ffn_down``.

The KV cache splits by KV heads as well (sliding-window layers' rings alike): its tensors are made without memory
and the meta device allocates each device's heads of every row on that device. V is stored by rows as K (not
transposed: a transposed row mixes every head, which no device could hold alone), read through a contiguous
transpose as llama.cpp does without flash attention; attention is the SOFT_MAX path (the meta device has no
FLASH_ATTN_EXT rule).

Each batch shape's graph is split once (:meth:`TensorParallel.split`) and cached with the graph; the first split
allocates the shards, and every later one reuses them (``split_graph(..., reuse=)``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Final, TextIO

import numpy as np

from ggml_core._context import Context
from ggml_core._errors import AllocationError
from ggml_core._tensor import Tensor
from ggml_core.backend.interfaces import Backend, Buffer, Device
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import BuiltGraph
from ggml_core.models.hparams import HParams
from ggml_core.models.kvcache import KVCache
from ggml_core.models.params import PlacementRequest
from ggml_core.models.plan.placement import INPUT_SLOT, Placement
from ggml_core.models.progress import Progress
from ggml_core.models.weights import ModelWeights, UploadStat, WeightSpec, slot_nbytes
from ggml_core.sched import (
    MetaDevice,
    SplitError,
    SplitKind,
    SplitState,
    StateOf,
    TensorParallelGraph,
    delta_net_split_states,
    llama_split_states,
    mamba2_split_states,
    rwkv7_split_states,
    shortconv_split_states,
)

__all__ = [
    "DELTA_NET_FAMILIES",
    "FAMILIES",
    "GATED_Q",
    "MAMBA2_FAMILIES",
    "RECURRENT_FAMILIES",
    "SUPPORTED",
    "TensorParallel",
    "account",
    "check_supported",
    "fit_check",
    "fit_shares",
    "plan_tensor",
    "split_states",
]

#: the recurrent and hybrid families ``-sm tensor`` runs: their attention and FFN layers split as the others', their
#: Mamba-2 mixers by groups of heads (:data:`MAMBA2_FAMILIES`), their other recurrent mixers (gated delta net, short
#: convolution) computed whole on the first device, their states kept there
RECURRENT_FAMILIES: Final = (
    "mamba2",
    "granitehybrid",
    "nemotron_h",
    "lfm2",
    "qwen35",
    "qwen35moe",
    "qwen3next",
    "rwkv7",
)
#: the families ``-sm tensor`` runs: their graphs use only ops with tensor-parallel rules (attention by heads, FFNs
#: and each expert by width), each checked against the one-device logits (tests/sched/test_split_tensor_families.py)
FAMILIES: Final = (
    "llama",
    "qwen2",
    "qwen3",
    "qwen2moe",
    "qwen3moe",
    "dots1",
    "gemma2",
    "gemma3",
    "gpt-oss",
    *RECURRENT_FAMILIES,
)
SUPPORTED: Final = ", ".join(FAMILIES)
#: the families whose Mamba-2 mixers split by groups of heads (where they have at least as many groups as devices)
MAMBA2_FAMILIES: Final = frozenset(("mamba2", "granitehybrid", "nemotron_h"))
#: the families whose gated delta nets split by value heads (qwen3next's: by key heads with their value heads)
DELTA_NET_FAMILIES: Final = frozenset(("qwen35", "qwen35moe", "qwen3next"))
#: the families whose ``attn_q`` gives each head's query then its gate
GATED_Q: Final = frozenset(("qwen35", "qwen35moe", "qwen3next"))


def check_supported(hp: HParams, flags: dict[str, bool]) -> None:
    """SplitError naming the model's family unless ``-sm tensor`` runs it, or naming a flag it cannot honour
    (``flags``: flag → whether it was given)."""
    kind = hp.arch
    if hp.is_moe:
        kind += " (mixture of experts)"
    elif hp.has_recurrent:
        kind += " (recurrent layers)"
    elif hp.has_swa:
        kind += " (sliding-window layers)"
    if hp.arch not in FAMILIES:
        raise SplitError(None, f"-sm tensor supports: {SUPPORTED}; this model is {kind}")
    for flag, given in flags.items():
        if given:
            raise SplitError(None, f"-sm tensor does not support {flag} yet")


def plan_tensor(
    hp: HParams,
    req: PlacementRequest,
    flash_attn: bool | None,
    check_fit: bool,
    plan_once: Callable[[PlacementRequest], Placement],
) -> Placement:
    """The ``-sm tensor`` placement (``plan_once``: the runner's planning of a request), after
    :func:`check_supported`; with ``check_fit`` (``--fit on``) and no ``--tensor-split``, shares that fit each
    device's free memory (:func:`fit_shares`), then every device's share checked against it (:func:`fit_check`)."""
    given = {"--flash-attn on": flash_attn is True, "--no-kv-offload": not req.kv_offload}
    check_supported(hp, given | {"-ot, --cpu-moe or --n-cpu-moe": bool(req.overrides)})
    placement = plan_once(req)
    if check_fit:
        if req.tensor_split is None:
            placement = fit_shares(placement, req, plan_once)
        fit_check(placement)
    return placement


def _over(placement: Placement) -> bool:
    return any(s.total_bytes > s.device.memory()[0] for s in placement.shares)


def fit_shares(
    placement: Placement, req: PlacementRequest, plan_once: Callable[[PlacementRequest], Placement]
) -> Placement:
    """``placement`` if every device's share fits its free memory; else the shares re-chosen from each device's
    room: a second plan with the overfull devices' shares halved gives, per device, the bytes that grow with
    its share (shards and KV heads) and those that do not (mirrored weights, compute), and the new shares are the
    devices' capacities ``(free - fixed) / growing``, in proportion. Rounding to whole heads and blocks may still
    leave a device over: :func:`fit_check` says so."""
    if not _over(placement):
        return placement
    devs = placement.tensor_devices
    free = [d.memory()[0] for d in devs]

    def fractions(p: Placement) -> list[float]:
        total = sum(p.tensor_shares)
        return [w / total for w in p.tensor_shares]

    def totals(p: Placement) -> list[int]:
        by_name = {s.name: s.total_bytes for s in p.shares}
        return [by_name.get(d.name, 0) for d in devs]

    fa, ta = fractions(placement), totals(placement)
    scaled = [f / 2 if t > fr else f for f, fr, t in zip(fa, free, ta, strict=True)]  # a step of whole units
    second = plan_once(replace(req, tensor_split=scaled))
    fb, tb = fractions(second), totals(second)
    caps = []
    for a, b, x, y, fr in zip(fa, fb, ta, tb, free, strict=True):
        growing = (x - y) / (a - b) if a != b else 0.0
        if growing <= 0:  # its bytes do not follow its share here: no estimate, no change
            caps.append(a)
            continue
        caps.append(max(0.0, (fr - (x - a * growing)) / growing))
    if sum(caps) <= 0:
        return placement
    refit = plan_once(replace(req, tensor_split=caps))
    split = ", ".join(f"{d.name} {f:.2f}" for d, f in zip(devs, fractions(refit), strict=True))
    refit.notes.append(f"--fit: tensor split shares from each device's free memory: {split}")
    return refit


#: the row-parallel FFN matrices: their columns (the FFN's width) split in whole quantization blocks
_DOWN = ("ffn_down", "ffn_down_exps", "ffn_down_shexp")


def split_states(f: GGUFFile, hp: HParams, proportions: Sequence[float]) -> StateOf:
    """Each weight's (and KV cache's) split state over devices in ``proportions``; the feed-forward width is split
    in whole blocks of ``ffn_down``'s quantization type."""
    granule = 1
    for il in range(hp.n_layer):
        for name in _DOWN:
            if f.has_tensor(key := f"blk.{il}.{name}.weight"):
                granule = math.lcm(granule, f.tensor_info(key).type.block_size)
    mixer = (
        _mamba2_states(f, hp, proportions)
        or _delta_net_states(f, hp, proportions)
        or _shortconv_states(f, hp, proportions)
        or _rwkv7_states(f, hp, proportions)
    )
    if hp.n_head_kv == 0:  # no attention layer
        return lambda t: mixer(t) if mixer is not None else None
    if hp.head_dim_k != hp.head_dim_v:
        raise SplitError(None, f"-sm tensor needs equal K and V head widths, got {hp.head_dim_k} and {hp.head_dim_v}")
    # one KV head: every device computes it and reads the one cache (on the first device); the query heads split
    mirror_kv = hp.n_head_kv == 1 < len(proportions)
    layers = llama_split_states(
        proportions,
        n_head=hp.n_head,
        n_head_kv=hp.n_head_kv,
        head_dim=hp.head_dim_k,
        n_ff=hp.n_ff,
        ff_granule=granule,
        mirror_kv=mirror_kv,
        gated_q=hp.arch in GATED_Q,
    )
    if mixer is None:
        return layers
    return lambda t: layers(t) if (got := mixer(t)) is None else got


def _delta_net_states(f: GGUFFile, hp: HParams, proportions: Sequence[float]) -> StateOf | None:
    """The gated delta nets' states (:func:`ggml_core.sched.delta_net_split_states`: by value heads in runs of the
    key heads, qwen3next's by key heads), or None where they stay whole on the first device: another mixer, fewer
    units than devices, or an ``ssm_out`` whose quantization blocks would cut a device's columns."""
    if hp.arch not in DELTA_NET_FAMILIES:
        return None
    n_k, n_v, size = hp.ssm_n_group, hp.ssm_dt_rank, hp.ssm_d_state
    interleaved = hp.arch == "qwen3next"
    if n_v % n_k:
        return None
    # the unit a device takes: a key head with its value heads, or a run of n_k value heads
    units, unit_width = (n_k, n_v // n_k * size) if interleaved else (n_v // n_k, n_k * size)
    if units < len(proportions):
        return None
    for il in range(hp.n_layer):
        if f.has_tensor(key := f"blk.{il}.ssm_out.weight") and unit_width % f.tensor_info(key).type.block_size:
            return None
    return delta_net_split_states(
        proportions, n_k=n_k, n_v=n_v, size=size, d_conv=hp.ssm_d_conv, interleaved=interleaved
    )


def _shortconv_states(f: GGUFFile, hp: HParams, proportions: Sequence[float]) -> StateOf | None:
    """LFM2's short convolutions' states (:func:`ggml_core.sched.shortconv_split_states`: by channel, in whole blocks
    of ``out_proj``), or None for another family or fewer blocks than devices (then they stay on the first device)."""
    if hp.arch != "lfm2":
        return None
    granule = 1
    for il in range(hp.n_layer):
        if f.has_tensor(key := f"blk.{il}.shortconv.out_proj.weight"):
            granule = math.lcm(granule, f.tensor_info(key).type.block_size)
    if hp.n_embd % granule or hp.n_embd // granule < len(proportions):
        return None
    return shortconv_split_states(proportions, n_embd=hp.n_embd, l_cache=hp.shortconv_l_cache, granule=granule)


def _rwkv7_states(f: GGUFFile, hp: HParams, proportions: Sequence[float]) -> StateOf | None:
    """RWKV-7's states (:func:`ggml_core.sched.rwkv7_split_states`: by WKV head, the channel mix by width in blocks
    of ``channel_mix_value``), or None for another family or fewer heads than devices (then it stays whole on the
    first device)."""
    if hp.arch != "rwkv7" or hp.n_embd // hp.wkv_head_size < len(proportions):
        return None
    granule = 1
    for il in range(hp.n_layer):
        for name in ("time_mix_output", "channel_mix_value"):
            if f.has_tensor(key := f"blk.{il}.{name}.weight"):
                granule = math.lcm(granule, f.tensor_info(key).type.block_size)
    if hp.wkv_head_size % granule or hp.n_ff % granule:
        return None
    return rwkv7_split_states(
        proportions, n_embd=hp.n_embd, head_size=hp.wkv_head_size, n_ff=hp.n_ff, ff_granule=granule
    )


def _mamba2_states(f: GGUFFile, hp: HParams, proportions: Sequence[float]) -> StateOf | None:
    """The Mamba-2 mixers' states (:func:`ggml_core.sched.mamba2_split_states`: by groups of heads), or None where
    they stay whole on the first device: another mixer, fewer groups than devices, or an ``ssm_out`` whose quantization
    blocks would cut a device's columns."""
    if hp.arch not in MAMBA2_FAMILIES or hp.ssm_n_group < len(proportions):
        return None
    group_width = hp.ssm_d_inner // hp.ssm_n_group
    for il in range(hp.n_layer):
        if f.has_tensor(key := f"blk.{il}.ssm_out.weight") and group_width % f.tensor_info(key).type.block_size:
            return None
    return mamba2_split_states(
        proportions,
        d_inner=hp.ssm_d_inner,
        d_state=hp.ssm_d_state,
        n_group=hp.ssm_n_group,
        n_head=hp.ssm_dt_rank,
        d_conv=hp.ssm_d_conv,
    )


def account(
    placement: Placement,
    f: GGUFFile,
    hp: HParams,
    specs: Sequence[WeightSpec],
    kv_layer: int,
    compute: int,
) -> None:
    """Each device's share of a ``-sm tensor`` placement: its shards of every split weight and its KV heads of every
    layer's cache; the mirrored weights where :func:`~ggml_core.models.plan.bufts.assign_weights` put them."""
    state_of = split_states(f, hp, placement.tensor_shares)
    devs = placement.tensor_devices
    cpu = placement.slot_device[INPUT_SLOT]
    ctx = Context("tensor-split sizes")  # stand-ins named as the weights, never allocated
    items: list[tuple[Device, int, int, bool]] = []
    for s in specs:
        info = f.tensor_info(s.source)
        st = state_of(ctx.new_tensor(info.type, info.ne, s.name))
        nbytes = slot_nbytes(f, s)
        if st is None:
            c = placement.weights.get(s.name)
            dev = c.device if c is not None else placement.device_of(s.slot)
            mapped = c is not None and c.buft is cpu.buffer_type() and placement.maps(cpu)
            items.append((dev, s.slot, nbytes, mapped))
        else:  # its shards, listed by the meta device (``plan``), not as one weight in one buffer type
            items += [(d, s.slot, nbytes * n // info.ne[st.axis], False) for d, n in zip(devs, st.sizes, strict=True)]
            placement.weights.pop(s.name, None)
    placement.account(items, kv_layer, compute, devs)
    # the KV heads' widths per device (a model without attention: its scan states'); a mirrored cache (one KV head,
    # a recurrent state kept whole) is the first device's
    name, full = ("cache_k_l0", hp.n_embd_k_gqa) if hp.n_embd_k_gqa else ("cache_s_l0", max(1, hp.n_embd_s))
    kv = state_of(ctx.new_tensor("f32", (full, 1), name))
    widths = kv.sizes if kv is not None else (full, *(0 for _ in devs[1:]))
    by_name = dict(zip((d.name for d in devs), widths, strict=True))
    for share in placement.shares:
        if share.name not in by_name:
            share.kv_layers, share.layers, share.kv_bytes = [], [], 0
            continue
        width = by_name[share.name]
        share.kv_layers = list(range(hp.n_layer)) if width else []
        share.layers = list(range(hp.n_layer))  # a part of every layer
        share.kv_bytes = kv_layer * hp.n_layer * width // full


def fit_check(placement: Placement) -> None:
    """AllocationError naming the first device whose ``-sm tensor`` share exceeds its free memory."""
    mib = 2**20
    for s in placement.shares:
        free, _total = s.device.memory()
        if s.total_bytes > free:
            raise AllocationError(
                s.name,
                s.total_bytes,
                free,
                f"its -sm tensor share does not fit: weights {s.weight_bytes / mib:.1f} MiB + KV cache "
                f"{s.kv_bytes / mib:.1f} MiB + compute {s.compute_bytes / mib:.1f} MiB; give it a smaller "
                "--tensor-split share, use a smaller --ctx-size, or add a device",
            )


def _device_order(t: Tensor, st: SplitState, data: np.ndarray) -> memoryview:
    """A weight's bytes with the indices of its split axis in the order the devices hold them (a fused projection's
    parts: each device's rows of every part together), so that each shard is one region."""
    if not st.segments:
        return data.data
    per_index = t.nb[st.axis] if st.axis else t.type.type_size
    if st.axis == 0 and t.type.block_size != 1:
        raise SplitError(t, "a quantized tensor cannot be reordered within its rows")
    outer = math.prod(t.ne[st.axis + 1 :])
    arr = np.asarray(data, np.uint8).reshape(outer, t.ne[st.axis], per_index)
    return np.ascontiguousarray(arr[:, st.device_order(), :]).data


class TensorParallel:
    """The meta device over a model's devices and the split of each of its graphs."""

    def __init__(self, backends: Sequence[Backend], state_of: StateOf, host: Backend | None = None) -> None:
        self.meta = MetaDevice(backends, host=host)
        self.state_of = state_of
        #: the first split: it holds the shards every later split reuses
        self.owner: TensorParallelGraph | None = None

    def split(self, bg: BuiltGraph) -> TensorParallelGraph:
        """``bg`` split over the devices (once per graph): ``bg.graph`` and ``bg.logits`` become the split graph's,
        so running and reading it is as for any graph. The first split allocates the shards and the caches."""
        got = bg.state.get("tensor_parallel")
        if isinstance(got, TensorParallelGraph):
            return got
        tp = self.meta.split_graph(bg.graph, self.state_of, reuse=self.owner)
        if self.owner is None:
            tp.alloc_weights()
            self.owner = tp
        bg.state["tensor_parallel"] = tp
        bg.graph = tp.graph
        bg.logits = tp.tensor(bg.logits)
        return tp

    def release(self, bg: BuiltGraph) -> None:
        """Free the compute buffers of ``bg``'s split (the first split's shards stay)."""
        tp = bg.state.get("tensor_parallel")
        if isinstance(tp, TensorParallelGraph):
            tp.scheduler.allocator.free()

    @property
    def buffers(self) -> tuple[list[Buffer], list[Buffer]]:
        """(the weights' shard buffers, the KV cache's shard buffers) of the first split."""
        if self.owner is None:
            return [], []
        caches = {id(b) for b in self.owner.cache_buffers}
        return [b for b in self.owner.buffers if id(b) not in caches], list(self.owner.cache_buffers)

    def attach(
        self,
        f: GGUFFile,
        specs: Sequence[WeightSpec],
        weights: ModelWeights,
        kv: KVCache,
        upload: bool = True,
        progress: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        """After the first :meth:`split`: the shard buffers join the weights' and the cache's (freed and cleared
        with them), and every split weight is written from the file into its shards (one 2-D write per shard;
        ``upload=False``: allocated only, for planning)."""
        owner = self.owner
        if owner is None:
            raise RuntimeError("split a graph before loading the shards")
        shard_bufs, cache_bufs = self.buffers
        weights.buffers.extend(shard_bufs)
        kv.buffers.extend(cache_bufs)
        # the worst-case graph was allocated to show missing memory at load; each batch shape's split allocates its
        # own compute buffers, so these would only double them
        owner.scheduler.allocator.free()
        if upload:
            self._write_shards(owner, f, specs, weights, progress, stream)

    def _write_shards(
        self,
        owner: TensorParallelGraph,
        f: GGUFFile,
        specs: Sequence[WeightSpec],
        weights: ModelWeights,
        progress: bool,
        stream: TextIO | None,
    ) -> None:
        split = [s for s in specs if owner.states[weights[s.name].id].kind is SplitKind.SPLIT]
        total = sum(weights[s.name].nbytes for s in split)
        start = time.perf_counter()
        with Progress(total, self.meta.name, enabled=progress, stream=stream or sys.stderr) as bar:
            for s in split:
                t = weights[s.name]
                owner.set_weight_bytes(t, _device_order(t, owner.states[t.id], f.tensor_bytes(s.source)))
                bar.advance(t.nbytes)
        weights.uploads.append(UploadStat(self.meta.name, total, time.perf_counter() - start))

    def describe(self, bg: BuiltGraph) -> str:
        """Text: ``bg``'s split (:meth:`split` first): the shard bytes per device, each split tensor's state, the
        all-reduces per compute."""
        return self.split(bg).describe()

    def as_dict(self, bg: BuiltGraph) -> dict[str, object]:
        """:meth:`describe` as data, for ``--json``."""
        tp = self.split(bg)
        return {
            "meta_device": self.meta.name,
            "n_all_reduces": tp.n_all_reduces,
            "shard_bytes": {
                dev.name: sum(tp.shards[t.id][d].nbytes for t in tp.split_weights)
                for d, dev in enumerate(self.meta.devices)
            },
            "split_tensors": {t.name: tp.states[t.id].describe() for t in tp.split_weights},
        }
