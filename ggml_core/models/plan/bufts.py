"""Which buffer type holds each weight, chosen as llama.cpp's loader chooses it (``select_weight_buft``).

For every weight the op that consumes it in the graph is built on a stand-in of the weight's type and shape, bound
to a zero-size probe buffer of the candidate buffer type, and the candidate's device is asked ``supports_op``. The
candidates of a slot placed on device D are D's buffer type, then D's extra buffer types in their order, then the
host's (the CPU's extra buffer types, then its own); the first that is accepted wins. ``-ot REGEX=BUFT`` overrides
come first (the first pattern found in the weight's name decides; an override to the CPU still tries the CPU's
extra buffer types first, as llama.cpp does). The KV cache of a layer stays on the layer's device only when that
device can write it in place (SET_ROWS of the cache type); else it lives in host memory.

Every choice carries a reason, so ``ggml-core plan`` can say where each weight went and why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from ggml_core import ops
from ggml_core._context import Context
from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.backend.interfaces import Buffer, BufferType, BufferUsage, Device, DeviceType
from ggml_core.backend.registry import get_registry
from ggml_core.ops._enum import GGMLOp

__all__ = [
    "PROBE_TOKENS",
    "BuftOverride",
    "KVInfo",
    "ProbeShapes",
    "WeightChoice",
    "WeightInfo",
    "assign_weights",
    "bind_probe",
    "check_host_kv",
    "consumer_kind",
    "consumer_op",
    "describe_weights",
    "device_bufts",
    "host_bufts",
    "kv_supported",
    "moe_overrides",
    "parse_overrides",
    "select_buft",
]

#: tokens in the stand-in activations of a probe (llama.cpp uses 512)
PROBE_TOKENS: Final = 512


@dataclass(frozen=True)
class BuftOverride:
    """One ``-ot PATTERN=BUFT``: weights whose name contains a match of ``pattern`` go to buffer type ``buft``."""

    pattern: str
    buft: str
    #: where it came from, for the plan's reasons (``-ot``, ``--cpu-moe``, ``--n-cpu-moe``)
    source: str = "-ot"

    def matches(self, name: str) -> bool:
        """``std::regex_search`` semantics: a match anywhere in the name."""
        return re.search(self.pattern, name) is not None


@dataclass(frozen=True)
class WeightChoice:
    """Where one weight went and why."""

    name: str
    slot: int
    buft: BufferType
    device: Device
    nbytes: int
    reason: str

    @property
    def buft_name(self) -> str:
        """The buffer type's name."""
        return self.buft.name


def parse_overrides(text: str, source: str = "-ot") -> list[BuftOverride]:
    """``PATTERN=BUFT,PATTERN=BUFT`` into overrides; ValueError naming the bad item (pattern or missing ``=``)."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        pattern, sep, buft = item.rpartition("=")
        if not sep or not pattern or not buft:
            raise ValueError(f"{source}: {item!r} is not PATTERN=BUFFER_TYPE (e.g. 'ffn_.*_exps=CPU')")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{source}: {pattern!r} is not a valid regular expression: {exc}") from None
        out.append(BuftOverride(pattern, buft.strip(), source))
    return out


def moe_overrides(n_layers: int | None) -> list[BuftOverride]:
    """``--cpu-moe`` (None: every layer) or ``--n-cpu-moe N``: the experts' weights on the CPU, as llama.cpp writes
    them (``\\.ffn_(up|down|gate)_(ch|)exps``, per layer ``blk\\.I`` + that)."""
    exps = r"\.ffn_(up|down|gate)_(ch|)exps"
    if n_layers is None:
        return [BuftOverride(exps, "CPU", "--cpu-moe")]
    if n_layers < 0:
        raise ValueError(f"--n-cpu-moe must be >= 0, got {n_layers}")
    return [BuftOverride(rf"blk\.{i}{exps}", "CPU", f"--n-cpu-moe {n_layers}") for i in range(n_layers)]


def device_bufts(dev: Device) -> list[BufferType]:
    """A device's candidate weight buffer types: its own, then its extra ones in order (never its host buffer)."""
    out = [dev.buffer_type()]
    out += [b for b in dev.extra_buffer_types if b not in out]
    return out


def host_bufts(cpu: Device) -> list[BufferType]:
    """The host's candidates: the CPU's extra buffer types first (repacked layouts), its plain buffer last."""
    extra = [b for b in cpu.extra_buffer_types if b is not cpu.buffer_type()]
    return [*extra, cpu.buffer_type()]


# ------------------------------------------------------------------------------------------------ probes


class _ProbeBuffer(Buffer):
    """ggml's dummy zero-size buffer: lets ``supports_op`` see the buffer type without allocating anything."""

    def _free(self) -> None:
        pass


def bind_probe(t: Tensor, buft: BufferType, usage: BufferUsage = BufferUsage.ANY) -> None:
    """Bind ``t`` to a zero-size stand-in buffer of ``buft`` (ggml's dummy buffers of a ``no_alloc`` model): the
    scheduler places and plans around it as if it were allocated there; nothing may read or write it."""
    buf = _ProbeBuffer(buft, 0)
    buf.set_usage(usage)
    t.buffer, t.data_offset = buf, 0


@dataclass(frozen=True)
class ProbeShapes:
    """The few model numbers the consuming ops' stand-ins need."""

    head_dim: int
    n_head: int
    n_rot: int
    rope_type: int
    n_expert_used: int


#: RWKV's vectors scaling activations (llama.cpp's table: MUL), and those added to them (ADD)
_RWKV_MUL: Final = (
    "norm_2.weight",
    "time_mix_ln.weight",
    "_k_k.weight",
    "_k_a.weight",
    "_r_k.weight",
    "_lerp_k.weight",
)
_RWKV_ADD: Final = ("time_mix_lerp_fused.weight", "time_mix_w0.weight", "time_mix_a0.weight", "time_mix_v0.weight")


def consumer_kind(name: str) -> GGMLOp:
    """The op that reads the weight ``name`` in the LLaMA graph (models/llama.py), as llama.cpp's tensor table."""
    if name == "token_embd.weight":
        return GGMLOp.GET_ROWS
    if name.endswith(("norm.weight", *_RWKV_MUL)):
        return GGMLOp.MUL
    if name.endswith(_RWKV_ADD):
        return GGMLOp.ADD
    if name.endswith("_exps.bias"):
        return GGMLOp.ADD_ID  # gpt-oss's per-expert biases
    if name.endswith("attn_sinks.weight"):
        return GGMLOp.SOFT_MAX  # gpt-oss's sinks: src[2] of SOFT_MAX ext
    if name.endswith(".bias"):
        return GGMLOp.ADD
    if name.endswith("_exps.weight"):
        return GGMLOp.MUL_MAT_ID
    if name.endswith("rope_freqs"):
        return GGMLOp.ROPE
    return GGMLOp.MUL_MAT


def consumer_op(name: str, w: Tensor, shapes: ProbeShapes, n_tokens: int = PROBE_TOKENS) -> Tensor:
    """The op consuming weight ``w`` (a stand-in of its type and shape), on f32 activations of ``n_tokens``."""
    kind = consumer_kind(name)
    f32, i32 = GGMLType.F32, GGMLType.I32
    ctx = Context("probe")
    with ctx:
        if kind == GGMLOp.GET_ROWS:
            return ops.get_rows(w, ctx.new_tensor(i32, (n_tokens,), "probe_ids"))
        if kind in (GGMLOp.MUL, GGMLOp.ADD):
            a = ctx.new_tensor(f32, (w.ne[0], n_tokens, *w.ne[2:]), "probe_x")  # RWKV's stacked [n, 1, 1, 6]
            return ops.mul(a, w) if kind == GGMLOp.MUL else ops.add(a, w)
        if kind == GGMLOp.ADD_ID:  # w [n, n_expert]: rows picked per (slot, token) by the chosen experts
            k = max(1, shapes.n_expert_used)
            a = ctx.new_tensor(f32, (w.ne[0], k, n_tokens), "probe_x")
            return ops.add_id(a, w, ctx.new_tensor(i32, (k, n_tokens), "probe_ids"))
        if kind == GGMLOp.SOFT_MAX:  # w [n_head]: kq [n_kv, n_tokens, n_head]
            kq = ctx.new_tensor(f32, (n_tokens, n_tokens, w.ne[0]), "probe_kq")
            mask = ctx.new_tensor(f32, (n_tokens, n_tokens), "probe_mask")
            return ops.soft_max_add_sinks(ops.soft_max_ext(kq, mask, 1.0, 0.0), w)
        if kind == GGMLOp.MUL_MAT_ID:
            k = max(1, shapes.n_expert_used)
            b = ctx.new_tensor(f32, (w.ne[0], k, n_tokens), "probe_x")
            ids = ctx.new_tensor(i32, (k, n_tokens), "probe_ids")
            return ops.mul_mat_id(w, b, ids)
        if kind == GGMLOp.ROPE:
            a = ctx.new_tensor(f32, (shapes.head_dim, shapes.n_head, n_tokens), "probe_q")
            pos = ctx.new_tensor(i32, (n_tokens,), "probe_pos")
            return ops.rope_ext(a, pos, w, shapes.n_rot, shapes.rope_type, 0, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)
        return ops.mul_mat(w, ctx.new_tensor(f32, (w.ne[0], n_tokens), "probe_x"))


def _accepts(dev: Device, buft: BufferType, w: Tensor, build: Callable[[Tensor], Tensor]) -> bool:
    """Does ``dev`` run the consuming op with ``w`` in ``buft`` memory?"""
    if not dev.supports_buft(buft):
        return False
    w.buffer, w.data_offset = _ProbeBuffer(buft, 0), 0
    try:
        return bool(dev.supports_op(build(w)))
    except Exception:  # noqa: BLE001 - a plugin's predicate failing means "no", as the scheduler treats it
        return False
    finally:
        w.buffer, w.data_offset = None, None


def select_buft(
    name: str,
    w: Tensor,
    candidates: Sequence[tuple[Device, BufferType]],
    shapes: ProbeShapes,
) -> tuple[Device, BufferType] | None:
    """The first candidate whose device runs the weight's consuming op from that buffer type (None: none does)."""
    for dev, buft in candidates:
        if _accepts(dev, buft, w, lambda t: consumer_op(name, t, shapes)):
            return dev, buft
    return None


def kv_supported(dev: Device, kv_type: GGMLType, row_len: int, n_rows: int) -> bool:
    """Can ``dev`` write a cache ``[row_len, n_rows]`` of ``kv_type`` in its own memory (SET_ROWS of f32 rows at
    i64 indices, as the graph writes K and V)?"""
    ctx = Context("probe kv")
    cache = ctx.new_tensor(kv_type, (row_len, n_rows), "probe_cache")

    def build(t: Tensor) -> Tensor:
        with ctx:
            cur = ctx.new_tensor(GGMLType.F32, (row_len, PROBE_TOKENS), "probe_k")
            idx = ctx.new_tensor(GGMLType.I64, (PROBE_TOKENS,), "probe_idx")
            return ops.set_rows(t, cur, idx)

    return _accepts(dev, dev.buffer_type(), cache, build)


def check_host_kv(cpu: Device, kv: KVInfo) -> None:
    """ValueError, one line, unless the host writes the cache's types (the caches no device can keep are there)."""
    v_row, v_rows = (1, kv.n_embd_v * kv.n_ctx) if kv.v_trans else (kv.n_embd_v, kv.n_ctx)
    for flag, t, row, rows in (
        ("--cache-type-k", kv.type, kv.n_embd_k, kv.n_ctx),
        ("--cache-type-v", kv.value_type, v_row, v_rows),
    ):
        if not kv_supported(cpu, t, row, rows):
            raise ValueError(
                f"{flag} {t.traits.name}: {cpu.name} cannot write {t.traits.name} cache rows (SET_ROWS); "
                "use another cache type (q8_0, q4_0, f16, ...)"
            )


# ------------------------------------------------------------------------------------------------ assignment


@dataclass(frozen=True)
class WeightInfo:
    """What assignment needs of one weight: graph name, slot, file type and shape, bytes."""

    name: str
    slot: int
    type: GGMLType
    ne: tuple[int, ...]
    nbytes: int
    #: the file tensor it reads ("": its own name); a tied output matrix reads ``token_embd.weight``
    source: str = ""


@dataclass(frozen=True)
class KVInfo:
    """The KV cache's types and row shapes, for the in-place write probe."""

    #: K's type (and V's when :attr:`type_v` is None)
    type: GGMLType
    n_embd_k: int
    n_embd_v: int
    n_ctx: int
    v_trans: bool
    type_v: GGMLType | None = None

    @property
    def value_type(self) -> GGMLType:
        """V's type."""
        return self.type if self.type_v is None else self.type_v


def _count_shared_once(
    choices: dict[str, WeightChoice], weights: Sequence[WeightInfo], cpu: Device, mapped_in_place: bool
) -> None:
    """Weights reading one file tensor (a tied output matrix and the token embeddings) take its bytes once where
    they are used in place from the mapped file; a copy in any other buffer is memory of its own."""
    if not mapped_in_place:
        return
    mapped = cpu.buffer_type()
    first: dict[str, str] = {}
    for w in weights:
        c = choices[w.name]
        source = w.source or w.name
        if c.buft is not mapped:
            continue
        if source in first:
            reason = f"{c.reason}; the same file data as {first[source]}, counted once"
            choices[w.name] = replace(c, nbytes=0, reason=reason)
        else:
            first[source] = w.name


def _buft_names(devices: Sequence[Device]) -> dict[str, tuple[Device, BufferType]]:
    """Every device's buffer types by name (``-ot`` names them exactly, as llama.cpp's list of ``buft`` names)."""
    out: dict[str, tuple[Device, BufferType]] = {}
    for d in devices:
        for b in device_bufts(d):
            out.setdefault(b.name, (d, b))
    return out


def describe_weights(choices: Sequence[WeightChoice]) -> list[str]:
    """Where the weights went, folded: one line per buffer type and reason, e.g.
    ``CPU: blk.{0-2}.* + token_embd.weight (28 weights, 2.3 MiB): not offloaded``."""
    every: dict[int, set[str]] = {}
    for c in choices:
        m = re.match(r"blk\.(\d+)\.(.+)", c.name)
        if m:
            every.setdefault(int(m.group(1)), set()).add(m.group(2))
    groups: dict[tuple[str, str], list[WeightChoice]] = {}
    for c in choices:
        groups.setdefault((c.buft_name, c.reason), []).append(c)
    out = []
    for (buft, reason), cs in groups.items():
        per_layer: dict[int, set[str]] = {}
        names = []
        for c in cs:
            m = re.match(r"blk\.(\d+)\.(.+)", c.name)
            if m:
                per_layer.setdefault(int(m.group(1)), set()).add(m.group(2))
            else:
                names.append(c.name)
        by_kinds: dict[tuple[str, ...], list[int]] = {}
        for il, kinds in per_layer.items():
            key = ("*",) if kinds == every[il] else tuple(sorted(kinds))
            by_kinds.setdefault(key, []).append(il)
        parts = [
            f"blk.{{{_ranges(ls)}}}." + (kinds[0] if len(kinds) == 1 else "{" + ",".join(kinds) + "}")
            for kinds, ls in by_kinds.items()
        ]
        mib = sum(c.nbytes for c in cs) / 2**20
        out.append(f"{buft}: {' + '.join(parts + names)} ({len(cs)} weights, {mib:.2f} MiB): {reason}")
    return out


def _ranges(xs: Sequence[int]) -> str:
    xs = sorted(set(xs))
    parts, start = [], 0
    for i in range(1, len(xs) + 1):
        if i == len(xs) or xs[i] != xs[i - 1] + 1:
            lo, hi = xs[start], xs[i - 1]
            parts.append(str(lo) if lo == hi else f"{lo}-{hi}")
            start = i
    return ",".join(parts)


def _slot_label(slot: int, n_layer: int) -> str:
    if slot == -1:
        return "the input layer"
    if slot == n_layer:
        return "the output layer"
    return f"layer {slot}"


def assign_weights(
    placement: Any,
    weights: Sequence[WeightInfo],
    shapes: ProbeShapes,
    overrides: Sequence[BuftOverride],
    kv: KVInfo | None,
    *,
    kv_offload: bool = True,
) -> None:
    """Choose every weight's buffer type and every layer's KV device; fills ``placement.weights``, ``kv_device``,
    ``notes``, and moves a slot whose device takes none of its weights back to the host.

    :raises ValueError: an override names an unknown buffer type, or a device that cannot run the weight's op;
        no device (not even the CPU) runs some weight's op
    """
    reg_devs = get_registry().devices()
    cpus = [d for d in reg_devs if d.type == DeviceType.CPU]
    if not cpus:
        raise ValueError("no CPU device: install the ggml-cpu plugin (the host runs what no device can)")
    cpu = cpus[0]
    by_name = _buft_names(reg_devs)
    for o in overrides:  # llama.cpp checks the names when it parses the flag, matched or not
        if o.buft not in by_name:
            known = ", ".join(sorted(by_name))
            raise ValueError(f"{o.source}: unknown buffer type {o.buft!r} (available: {known})")
    host = [(cpu, b) for b in host_bufts(cpu)]
    n_layer = placement.n_layer
    ctx = Context("weights probe")
    choices: dict[str, WeightChoice] = {}
    for w in weights:
        home: Device = placement.slot_device[w.slot]
        stand_in = ctx.new_tensor(w.type, w.ne, w.name)
        ov = next((o for o in overrides if o.matches(w.name)), None)
        if ov is not None:
            odev, obuft = by_name[ov.buft]
            cands = host if odev is cpu else [(odev, obuft)]
            got = select_buft(w.name, stand_in, cands, shapes)
            if got is None:
                raise ValueError(
                    f"{ov.source} {ov.pattern}={ov.buft}: weight {w.name!r} ({w.type.traits.name}) cannot be used "
                    f"from {ov.buft} memory: {odev.name} does not run its {consumer_kind(w.name).name}"
                )
            reason = f"{ov.source} '{ov.pattern}={ov.buft}'"
        else:
            cands = [] if home is cpu else [(home, b) for b in device_bufts(home)]
            got = select_buft(w.name, stand_in, [*cands, *host], shapes)
            if got is None:
                raise ValueError(
                    f"weight {w.name!r} ({w.type.traits.name}): no device runs its {consumer_kind(w.name).name}, "
                    f"not even {cpu.name}; the model needs an op this installation lacks"
                )
            if home is cpu:
                reason = "input layer, on the host as in llama.cpp" if w.slot == -1 else "not offloaded"
            elif got[0] is home:
                reason = f"on its layer's device {home.name}"
            else:
                reason = (
                    f"{home.name} does not run {consumer_kind(w.name).name} on a {w.type.traits.name} weight "
                    f"{list(w.ne)}: host memory"
                )
        choices[w.name] = WeightChoice(w.name, w.slot, got[1], got[0], w.nbytes, reason)
    _count_shared_once(choices, weights, cpu, placement.maps(cpu))
    placement.weights = choices
    # a device that takes none of a slot's weights gets none of it (no KV cache, no layer)
    for slot, dev in list(placement.slot_device.items()):
        if dev is cpu:
            continue
        mine = [c for c in choices.values() if c.slot == slot]
        if mine and not any(c.device is dev for c in mine):
            placement.slot_device[slot] = cpu
            placement.notes.append(f"{dev.name} runs none of {_slot_label(slot, n_layer)}'s ops: kept on the host")
    if kv is None:
        return
    kv_ok: dict[str, bool] = {}
    for il in range(n_layer):
        dev = placement.slot_device[il]
        if dev is cpu:
            continue
        if not kv_offload:
            placement.kv_device[il] = cpu
            continue
        if dev.name not in kv_ok:
            v_row, v_rows = (1, kv.n_embd_v * kv.n_ctx) if kv.v_trans else (kv.n_embd_v, kv.n_ctx)
            tv = kv.value_type
            kv_ok[dev.name] = kv_supported(dev, kv.type, kv.n_embd_k, kv.n_ctx) and kv_supported(dev, tv, v_row, v_rows)
            if not kv_ok[dev.name]:
                types = kv.type.traits.name if tv == kv.type else f"{kv.type.traits.name}/{tv.traits.name}"
                placement.notes.append(
                    f"{dev.name} cannot write a {types} KV cache (SET_ROWS): its layers' caches are in host memory"
                )
        if not kv_ok[dev.name]:
            placement.kv_device[il] = cpu
    if not kv_offload:
        placement.notes.append("--no-kv-offload: every KV cache in host memory")
