"""``--split-mode auto``: the layer split (and whether to use a device at all) that minimises the predicted time of
a run, from each candidate device's measured speed on one layer of this very model.

Per candidate (the host CPU, then the offload devices in device-list order):

- **one layer timed** at the batch sizes that matter, a prompt batch (``--batch-size`` tokens, at most the prompt)
  and a decode step (one token): layer 0's real weights (in the buffer types the device takes them in, the rest in
  host memory, as a load would put them), a KV cache of the run's context, the family's own layer graph, run through
  the scheduler (so ops the device lacks fall back to the CPU, as in the real run): one warm-up run (kernels
  compiled, memory planned; not counted), then the median of repeats within about two seconds for everything;
- **transfer cost**: a host → device → host round trip of a small and of a large tensor gives latency and bandwidth
  (an RPC device's network latency included); the CPU has none;
- **memory**: each device's exact need per layer and its compute buffer, measured as ``--fit`` does.

The timings are cached per device, layer shape and batch in ``$GGML_CORE_CACHE`` (else ``~/.cache/ggml-core``),
``autosplit.json``; an unreadable or malformed cache is ignored with a warning and rewritten.

The prediction: a slot on device *d* costs its layer time (the output layer: the layer time scaled by its weight
bytes over a layer's), each change of device between consecutive slots costs moving the activations out of one and
into the other, and the logits come back to the host. A run of P prompt tokens in batches of B and G generated
tokens costs ``ceil(P/B)·T(B) + G·T(1)``. Slots are contiguous per device in list order (the CPU first, holding the
layers not offloaded, as ``-ngl`` does); a dynamic programme over (slot, device) finds the cheapest assignment that
fits every device's memory, which may leave a device out. The choice is given back as ``-ngl`` and ``-ts``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, cast

import numpy as np

from ggml_core._context import Context
from ggml_core._errors import GGMLError
from ggml_core._types import as_type
from ggml_core.alloc import alloc_ctx_tensors
from ggml_core.backend.interfaces import BufferUsage, Device, DeviceType
from ggml_core.backend.registry import get_registry
from ggml_core.models.arch import get_architecture
from ggml_core.models.executor import Executor
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import BuiltGraph, GraphBuilder, graph_size_for
from ggml_core.models.hparams import HParams
from ggml_core.models.kvcache import KVCache, swa_cache_size
from ggml_core.models.params import KV_PAD, ModelParams, Workload
from ggml_core.models.plan.bufts import ProbeShapes, device_bufts, host_bufts, kv_supported, select_buft
from ggml_core.models.plan.fit import measure
from ggml_core.models.plan.placement import Placement, resolve_devices
from ggml_core.models.weights import ModelWeights, WeightSpec

__all__ = [
    "TIME_BUDGET_S",
    "AutoChoice",
    "DeviceSpeed",
    "choose_split",
    "plan_auto",
    "timing_cache_path",
]

#: seconds all the layer timings of one choice may take (cached ones cost nothing)
TIME_BUDGET_S: Final = 2.0
_CACHE_VERSION: Final = 1
#: bytes of the small and the large transfer probes
_SMALL, _LARGE = 4096, 1 << 20


@dataclass(frozen=True)
class DeviceSpeed:
    """One candidate's measured (or cached) speed."""

    name: str
    #: seconds for one layer over one prompt batch, and for one layer over one token
    prompt_s: float
    decode_s: float
    #: one host <-> device copy: fixed seconds and bytes per second (0 and inf for the CPU)
    latency_s: float = 0.0
    bytes_per_s: float = math.inf
    #: False when the layer timings came from the cache
    measured: bool = True

    def xfer(self, nbytes: int) -> float:
        """Seconds to move ``nbytes`` between this device and the host."""
        return 0.0 if nbytes <= 0 else self.latency_s + nbytes / self.bytes_per_s


@dataclass
class AutoChoice:
    """The split chosen: slots per device (in candidate order, the CPU first) and the prediction."""

    devices: list[Device]
    counts: list[int]
    #: predicted prompt and generation tokens per second of the choice
    pp_tok_s: float
    tg_tok_s: float
    speeds: dict[str, DeviceSpeed] = field(default_factory=dict)
    #: (label, pp tok/s, tg tok/s) of each device alone (what the choice was compared with)
    alone: list[tuple[str, float, float]] = field(default_factory=list)

    def describe(self) -> str:
        """E.g. ``CPU 3 + OpenCL0 16 slots: predicted pp 812.4 tok/s, tg 61.2 tok/s (CPU alone: ...)``."""
        used = " + ".join(f"{d.name} {c}" for d, c in zip(self.devices, self.counts, strict=True) if c)
        parts = [f"{used} slots: predicted pp {self.pp_tok_s:.1f} tok/s, tg {self.tg_tok_s:.1f} tok/s"]
        for label, pp, tg in self.alone:
            parts.append(f"{label} alone {pp:.1f} / {tg:.1f}")
        speeds = ", ".join(
            f"{s.name} layer {s.prompt_s * 1e3:.2f} ms/batch, {s.decode_s * 1e3:.3f} ms/token"
            + ("" if s.measured else " (cached)")
            for s in self.speeds.values()
        )
        compared = f" ({'; '.join(parts[1:])})" if parts[1:] else ""
        return f"{parts[0]}{compared}" + (f"; measured {speeds}" if speeds else "")


# ------------------------------------------------------------------------------------------------ the choice


#: (device index, slot) -> bytes that slot needs on that device; devices without a limit are absent
Capacity = Mapping[int, tuple[int, Sequence[int]]]


def choose_split(
    devices: Sequence[Device],
    speeds: Sequence[DeviceSpeed],
    n_slots: int,
    out_scale: float,
    work: Workload,
    n_embd: int,
    n_vocab: int,
    capacity: Capacity,
) -> AutoChoice:
    """The cheapest contiguous assignment of ``n_slots`` slots (the last is the output layer) to ``devices`` in order.

    :param speeds: one per device (the first device is the host CPU: it takes the slots not offloaded)
    :param out_scale: the output layer's time over a layer's
    :param capacity: device index -> (bytes available for slots, bytes of each slot there); absent: no limit
    """
    nd = len(devices)
    w_pp = math.ceil(work.n_prompt / work.batch) if work.n_prompt else 0
    w_tg = work.n_gen

    def slot_cost(j: int, s: int, pp: bool) -> float:
        sp = speeds[j]
        t = sp.prompt_s if pp else sp.decode_s
        return t * (out_scale if s == n_slots - 1 else 1.0)

    def move(a: int, b: int, n: int) -> float:
        """Activations of ``n`` tokens from device a to device b (a = -1: the input layer, on the host)."""
        act = n_embd * n * 4
        mask = work.n_kv * n * 4 + n * 16  # each device's own inputs: mask, positions, cache indices
        src = speeds[a].xfer(act) if a >= 0 else 0.0
        return src + speeds[b].xfer(act + mask)

    def final(j: int) -> float:
        return speeds[j].xfer(n_vocab * 4)

    def moved(a: int, b: int) -> float:
        """A device change, over the whole run."""
        return w_pp * move(a, b, work.batch) + w_tg * move(a, b, 1)

    prefix = [[0.0] * (n_slots + 1) for _ in range(nd)]
    for j in range(nd):
        for s in range(n_slots):
            prefix[j][s + 1] = prefix[j][s] + w_pp * slot_cost(j, s, True) + w_tg * slot_cost(j, s, False)

    def fits(j: int, s0: int, s1: int) -> bool:
        cap = capacity.get(j)
        return cap is None or sum(cap[1][s0:s1]) <= cap[0]

    inf = math.inf
    # best[j][s]: cheapest cost with slots [0, s) placed and device j holding the last non-empty segment
    best = [[inf] * (n_slots + 1) for _ in range(nd)]
    back: dict[tuple[int, int], tuple[int, int]] = {}
    for j in range(nd):
        for s in range(1, n_slots + 1):
            if fits(j, 0, s):
                c = prefix[j][s] + moved(-1, j)
                if c < best[j][s]:
                    best[j][s], back[(j, s)] = c, (-1, 0)
    for s0 in range(1, n_slots):
        for j in range(nd):
            if best[j][s0] == inf:
                continue
            for k in range(j + 1, nd):
                for s in range(s0 + 1, n_slots + 1):
                    if not fits(k, s0, s):
                        break
                    c = best[j][s0] + prefix[k][s] - prefix[k][s0] + moved(j, k)
                    if c < best[k][s]:
                        best[k][s], back[(k, s)] = c, (j, s0)
    ends = [(best[j][n_slots] + (w_pp + w_tg) * final(j), j) for j in range(nd)]
    cost, last = min(ends)
    if cost == inf:
        raise ValueError("--split-mode auto: no assignment of the layers fits the devices' memory")
    counts = [0] * nd
    j, s = last, n_slots
    while j >= 0:
        pj, ps = back[(j, s)]
        counts[j] += s - ps
        j, s = pj, ps
    pp_s, tg_s = _times(counts, slot_cost, move, final, work)
    choice = AutoChoice(list(devices), counts, work.batch / pp_s if pp_s else 0.0, 1.0 / tg_s if tg_s else 0.0)
    choice.speeds = {sp.name: sp for sp in speeds}
    for j, d in enumerate(devices):
        alone = [0] * nd
        alone[j] = n_slots
        if alone != counts and fits(j, 0, n_slots):
            a_pp, a_tg = _times(alone, slot_cost, move, final, work)
            choice.alone.append((d.name, work.batch / a_pp, 1.0 / a_tg))
    return choice


def _times(
    counts: Sequence[int],
    slot_cost: Callable[[int, int, bool], float],
    move: Callable[[int, int, int], float],
    final: Callable[[int], float],
    work: Workload,
) -> tuple[float, float]:
    """Predicted seconds of one prompt batch and of one decode step for ``counts``."""
    out = []
    for pp in (True, False):
        n = work.batch if pp else 1
        t, prev, s = 0.0, -1, 0
        for j, c in enumerate(counts):
            if not c:
                continue
            t += move(prev, j, n) + sum(slot_cost(j, s + i, pp) for i in range(c))
            prev, s = j, s + c
        out.append(t + final(prev))
    return out[0], out[1]


# ------------------------------------------------------------------------------------------------ timing


def timing_cache_path() -> Path:
    """``$GGML_CORE_CACHE``, else ``$XDG_CACHE_HOME/ggml-core``, else ``~/.cache/ggml-core``: ``autosplit.json``."""
    if os.environ.get("GGML_CORE_CACHE"):
        base = Path(os.environ["GGML_CORE_CACHE"])
    elif os.environ.get("XDG_CACHE_HOME"):
        base = Path(os.environ["XDG_CACHE_HOME"]) / "ggml-core"
    else:
        base = Path.home() / ".cache" / "ggml-core"
    return base / "autosplit.json"


def _load_cache(path: Path) -> dict[str, Any]:
    empty: dict[str, Any] = {"version": _CACHE_VERSION, "layers": {}, "xfer": {}}
    if not path.exists():
        return empty
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION:
            raise ValueError("not a version-1 timing cache")
        for sect, width in (("layers", 2), ("xfer", 2)):
            entries = data.get(sect)
            if not isinstance(entries, dict):
                raise ValueError(f"{sect!r} is not an object")
            for key, val in entries.items():
                ok = isinstance(val, list) and len(val) == width
                if not ok or not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in val):
                    raise ValueError(f"{sect}[{key!r}] is not {width} finite non-negative numbers")
        return data
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        print(f"ggml-core: warning: ignoring the timing cache {path} ({exc}); timing again", file=sys.stderr)
        return empty


def _save_cache(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".autosplit-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        print(f"ggml-core: warning: cannot save the timing cache {path} ({exc})", file=sys.stderr)


def _layer_key(f: GGUFFile, hp: HParams, specs: Sequence[WeightSpec], params: ModelParams) -> str:
    types = ",".join(f"{s.name[len('blk.0.') :]}:{f.tensor_info(s.source).type.traits.name}" for s in specs)
    shape = (
        f"{hp.arch} e{hp.n_embd} ff{hp.n_ff} h{hp.n_head}/{hp.n_head_kv} d{hp.head_dim_k} x{hp.n_expert_used}/"
        f"{hp.n_expert}"
    )
    attn = "fa" if params.planned_flash_attn else "sm"
    kv = (
        params.cache_type_k
        if params.cache_type_k == params.cache_type_v
        else f"{params.cache_type_k}/{params.cache_type_v}"
    )
    return f"{shape} {types} kv:{kv} {attn} t{params.n_threads or 0}"


class _Timer:
    """Real timings of layer 0 on a device, through the scheduler, within a shared budget."""

    def __init__(self, f: GGUFFile, hp: HParams, specs: Sequence[WeightSpec], params: ModelParams) -> None:
        self.f, self.hp, self.params = f, hp, params
        self.specs = [s for s in specs if s.slot == 0]
        self.deadline = time.perf_counter() + TIME_BUDGET_S

    def layer(self, dev: Device, n_tokens: int, n_kv: int, share: float) -> float:
        """Median seconds of one layer over ``n_tokens`` attending over ``n_kv`` cells (``share``: of the budget)."""
        hp = replace(self.hp, n_layer=1)
        cpu = get_registry().devices_by_type(DeviceType.CPU)[0]
        shapes = ProbeShapes(hp.head_dim_k, hp.n_head, hp.n_rot, hp.rope_type, hp.n_expert_used if hp.is_moe else 1)
        cands = ([] if dev is cpu else [(dev, b) for b in device_bufts(dev)]) + [(cpu, b) for b in host_bufts(cpu)]
        wctx = Context("autosplit: layer 0")
        weights = ModelWeights({})
        groups: dict[int, tuple[Any, list[Any]]] = {}
        for s in self.specs:
            info = self.f.tensor_info(s.source)
            t = wctx.new_tensor(info.type, info.ne, name=s.name)
            got = select_buft(s.name, t, cands, shapes)
            buft = got[1] if got is not None else cpu.buffer_type()
            groups.setdefault(id(buft), (buft, []))[1].append((t, s))
            weights.tensors[s.name] = t
        kv_dev = (
            dev
            if dev is not cpu
            and kv_supported(dev, as_type(self.params.cache_type_k), hp.n_embd_k_gqa, n_kv)
            and kv_supported(dev, as_type(self.params.cache_type_v), hp.n_embd_v_gqa, n_kv)
            else cpu
        )
        executor = None
        kv = None
        try:
            for buft, items in groups.values():
                buf = alloc_ctx_tensors([t for t, _ in items], buft)
                buf.set_usage(BufferUsage.WEIGHTS)
                weights.buffers.append(buf)
                for t, s in items:
                    t.set_bytes(bytes(self.f.tensor_bytes(s.source)))
            swa = swa_cache_size(hp, n_kv, n_tokens, KV_PAD)
            kv = KVCache.create(
                hp,
                cast(Any, _KVAt(kv_dev)),
                n_kv,
                self.params.cache_type_k,
                type_v=self.params.cache_type_v,
                v_trans=not self.params.planned_flash_attn,
                swa_size=swa,
            )
            with Context("autosplit: graph") as ctx:
                g = GraphBuilder(
                    ctx,
                    hp,
                    weights,
                    kv,
                    n_tokens,
                    n_kv,
                    all_logits=True,
                    flash_attn=self.params.planned_flash_attn,
                    graph_size=graph_size_for(hp),
                )
                x = ctx.new_tensor("f32", (hp.n_embd, n_tokens), "autosplit_x").set_input()
                y = get_architecture(hp.arch).build_layer(g, 0, x)
                g.graph.build_forward_expand(y)
                used = {t.id for t in g.graph.leafs}  # a recurrent layer reads no positions nor mask
                bg = BuiltGraph(
                    g.graph, ctx, y, n_tokens, n_kv, True, {n: t for n, t in g.inputs.items() if t.id in used}
                )
            executor = Executor(
                [dev],
                n_threads=self.params.n_threads,
                graph_size=graph_size_for(hp) * 2,
                use_scheduler=True,
                op_offload=self.params.op_offload,
            )
            rng = np.random.default_rng(0)
            xs = rng.standard_normal((n_tokens, hp.n_embd)).astype(np.float32)
            group = kv.group(0)
            n_kv_g = kv.n_kv(group, n_kv)
            pos = np.arange(n_kv - n_tokens, n_kv, dtype=np.int32) if n_kv >= n_tokens else np.arange(n_tokens)
            cells = kv.cells(group, pos)
            mask = np.zeros((n_tokens, n_kv_g), dtype=np.float16 if self.params.planned_flash_attn else np.float32)
            sfx = "" if group == "full" else "_" + group

            values = {
                "pos": pos.astype(np.int32),
                "mask" + sfx: mask,
                "k_idxs" + sfx: cells,
                "s_ids": np.zeros(1, np.int32),
            }
            if kv.v_trans:
                values["v_idxs" + sfx] = kv.v_indices(cells, group)

            def set_inputs(b: BuiltGraph) -> None:
                x.set_data(xs)
                for name, value in values.items():
                    if name in b.inputs:
                        b.inputs[name].set_data(value)

            executor.compute(bg, set_inputs)  # warm-up: compiles kernels, plans memory (not timed)
            end = min(self.deadline, time.perf_counter() + share * TIME_BUDGET_S)
            runs: list[float] = []
            # at least one timed run, then repeats while this timing's share of the budget lasts (at most 50)
            while not runs or (len(runs) < 50 and time.perf_counter() + runs[-1] < end):
                t0 = time.perf_counter()
                executor.compute(bg, set_inputs)
                runs.append(time.perf_counter() - t0)
            return statistics.median(runs)
        finally:
            if executor is not None:
                executor.free()
            if kv is not None:
                kv.free()
            weights.free()

    @staticmethod
    def xfer(dev: Device) -> tuple[float, float]:
        """(latency seconds, bytes per second) of one host <-> device copy."""
        ctx = Context("autosplit: transfer")
        small = ctx.new_tensor("i8", (_SMALL,), "small")
        large = ctx.new_tensor("i8", (_LARGE,), "large")
        buf = alloc_ctx_tensors(ctx, dev.buffer_type())
        try:
            data = {t.name: np.zeros(t.nbytes, dtype=np.uint8) for t in (small, large)}

            def trip(t: Any) -> float:
                best = math.inf
                for _ in range(3):
                    t0 = time.perf_counter()
                    t.buffer.set_tensor(t, data[t.name].data)
                    t.buffer.get_tensor(t, data[t.name].data)
                    best = min(best, time.perf_counter() - t0)
                return best

            ts, tl = trip(small), trip(large)
        finally:
            buf.free()
        latency = ts / 2
        bw = 2 * (_LARGE - _SMALL) / max(tl - ts, 1e-9)
        return latency, bw


@dataclass
class _KVAt:
    """The one-layer cache's placement: layer 0's cache on ``dev``."""

    dev: Device

    def kv_device_of(self, layer: int) -> Device:
        return self.dev


#: ``timer(device, workload) -> DeviceSpeed``: tests inject known speeds here
SpeedSource = Callable[[Device, Workload], DeviceSpeed]


def _unusable(dev: Device, why: str) -> DeviceSpeed:
    """Warn that ``dev`` cannot be timed (``why``) and give it infinite times, so the split never chooses it."""
    print(f"ggml-core: warning: --split-mode auto: {why}", file=sys.stderr)
    return DeviceSpeed(dev.name, math.inf, math.inf, math.inf, 1.0, True)


def measured_speeds(
    f: GGUFFile, hp: HParams, specs: Sequence[WeightSpec], params: ModelParams, devices: Sequence[Device]
) -> SpeedSource:
    """The real timer, with the on-disk cache."""
    timer = _Timer(f, hp, specs, params)
    key = _layer_key(f, hp, timer.specs, params)
    path = timing_cache_path()
    cache = _load_cache(path)
    n_dev = max(len(devices), 1)
    dirty = [False]

    def speed(dev: Device, work: Workload) -> DeviceSpeed:
        dkey = f"{dev.name}|{dev.description}"
        lkey = f"{dkey}|{key}|b{work.batch}|kv{work.n_kv}"
        hit = cache["layers"].get(lkey)
        measured = hit is None
        if hit is None:
            share = 1.0 / (2 * n_dev)
            try:
                hit = [timer.layer(dev, work.batch, work.n_kv, share), timer.layer(dev, 1, work.n_kv, share)]
            except (GGMLError, RuntimeError, OSError, ValueError, MemoryError) as exc:
                # a device that cannot run the layer (or hold it) is never chosen; not cached: it may be transient
                return _unusable(dev, f"{dev.name} could not run a layer ({exc})")
            cache["layers"][lkey] = hit
            dirty[0] = True
        if dev.type == DeviceType.CPU:
            lat, bw = 0.0, math.inf
        else:
            x = cache["xfer"].get(dkey)
            if x is None:
                try:
                    x = list(timer.xfer(dev))
                except (GGMLError, RuntimeError, OSError, ValueError, MemoryError) as exc:
                    return _unusable(dev, f"copying to {dev.name} failed ({exc})")
                cache["xfer"][dkey] = x
                dirty[0] = True
            lat, bw = x
        if dirty[0]:
            _save_cache(path, cache)
            dirty[0] = False
        return DeviceSpeed(dev.name, float(hit[0]), float(hit[1]), float(lat), float(bw), measured)

    return speed


# ------------------------------------------------------------------------------------------------ the model


def plan_auto(
    f: GGUFFile,
    hp: HParams,
    specs: Sequence[WeightSpec],
    params: ModelParams,
    plan_once: Callable[[ModelParams], Placement],
    work: Workload,
    speed: SpeedSource | None = None,
) -> tuple[ModelParams, AutoChoice | None]:
    """``--split-mode auto`` resolved into ``-sm layer`` with ``-ngl`` and ``-ts`` (None choice: nothing to choose,
    every layer on the CPU because there is no offload device)."""
    req = params.placement
    if req.n_gpu_layers is not None or req.tensor_split is not None:
        raise ValueError("--split-mode auto chooses -ngl and -ts itself: leave them out, or use --split-mode layer")
    listed = resolve_devices(req.devices)
    offload = [d for d in listed if d.type != DeviceType.CPU]
    layer = replace(params, placement=replace(req, split_mode="layer"))
    if not offload:
        return layer, None
    cpu = get_registry().devices_by_type(DeviceType.CPU)[0]
    devices = [cpu, *offload]
    margins = params.fit.margins(offload) if params.fit.enabled else {}
    n_slots = hp.n_layer + 1
    capacity: dict[int, tuple[int, list[int]]] = {}
    for j, d in enumerate(offload, start=1):
        one = replace(layer, placement=replace(layer.placement, devices=[d.name]))
        m = measure(f, hp, specs, plan_once(one), one, margins)
        free, _ = d.memory()
        avail = free - margins.get(d.name, 0) - m.compute.get(d.name, 0)
        capacity[j] = (avail, [m.slot_cost.get(s, 0) for s in range(n_slots)])
    src = speed or measured_speeds(f, hp, specs, params, devices)
    speeds = [src(d, work) for d in devices]
    layer_bytes = sum(f.tensor_info(s.source).nbytes for s in specs if s.slot == 0)
    out_bytes = sum(f.tensor_info(s.source).nbytes for s in specs if s.slot == hp.n_layer)
    choice = choose_split(
        devices, speeds, n_slots, out_bytes / max(layer_bytes, 1), work, hp.n_embd, hp.n_vocab, capacity
    )
    ngl = sum(choice.counts[1:])
    by_name = {d.name: c for d, c in zip(devices[1:], choice.counts[1:], strict=True)}
    ts = [float(by_name.get(d.name, 0)) for d in listed] if ngl else None
    chosen = replace(layer.placement, n_gpu_layers=ngl, tensor_split=ts)
    return replace(layer, placement=chosen), choice
