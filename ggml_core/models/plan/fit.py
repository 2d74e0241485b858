"""``--fit``: offloaded layers and context chosen so that every device's share fits its free memory, before anything
is allocated (llama.cpp's ``llama_params_fit``).

What a device needs is measured, not estimated: its weights (each in its chosen buffer type, padded as that buffer
type pads), its KV cache, and its compute buffer, which comes from the scheduler planning the worst-case graph in
measure mode (:meth:`~ggml_core.sched.Scheduler.reserve_size`, ggml's ``ggml_backend_sched_reserve_size``) over
weights and caches bound to zero-size stand-in buffers, as llama.cpp measures a ``no_alloc`` model. Every offload
device must keep ``--fit-target`` MiB free (default 1024, llama.cpp's ``-fitt``). Without an offload device there
is nothing to fit: host memory gets the estimate-based check of ``--fit off``.

Only what the user left unset is changed, as llama.cpp does:

1. the context, when none was given (``ModelParams.n_ctx`` None): the largest multiple of 256 cells down to
   ``--fit-ctx`` (default 4096, llama.cpp's ``-fitc``) with which everything fits;
2. then the offloaded layers, when ``-ngl`` was not given: with one device (or ``-ts`` given, or ``-sm none``) the
   largest ``-ngl`` that fits; with several and no ``-ts``, the last device is filled from the output layer down,
   then the one before it, and so on (the layer ranges stay contiguous, as ``-ts`` makes them), then checked by
   measuring again, one layer fewer on a device that still overflows.

When nothing the user left open can make it fit, :class:`~ggml_core.AllocationError` names the device, what it
needs, what it has, and what would fit (``-ngl K``, ``--ctx-size C``). ``--fit off`` changes nothing and keeps
nothing free, but still measures and refuses a placement that cannot be allocated, before allocating anything. The
chosen values are in the placement's notes, which ``ggml-core run`` and ``ggml-core plan`` print.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from ggml_core._context import Context
from ggml_core._errors import AllocationError
from ggml_core.alloc import pad
from ggml_core.backend.interfaces import Backend, BufferUsage, Device, DeviceType
from ggml_core.models.arch import get_architecture
from ggml_core.models.executor import pin_attention
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.graph import build_graph, graph_size_for
from ggml_core.models.hparams import HParams
from ggml_core.models.kvcache import KVCache, swa_cache_size
from ggml_core.models.params import KV_PAD, ModelParams, default_n_ctx
from ggml_core.models.plan.bufts import bind_probe
from ggml_core.models.plan.placement import INPUT_SLOT, Placement, fit_check, resolve_devices
from ggml_core.models.weights import ModelWeights, WeightSpec

__all__ = ["Measured", "fit_model", "measure"]

#: context sizes --fit chooses are multiples of this (the KV window padding)
_CTX_STEP: Final = 256
_MIB: Final = 2**20


@dataclass
class Measured:
    """One placement measured: per device name the bytes it needs and has; per slot the offload bytes."""

    placement: Placement
    params: ModelParams
    n_ctx: int
    #: device name -> (weights + KV cache + compute buffer bytes, free bytes less the margin)
    need: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: device name -> compute buffer bytes measured
    compute: dict[str, int] = field(default_factory=dict)
    #: slot -> bytes its weights and KV cache take on offload devices
    slot_cost: dict[int, int] = field(default_factory=dict)

    def over(self) -> list[str]:
        """Devices whose share does not fit, in placement order."""
        return [n for n, (need, avail) in self.need.items() if need > avail]

    @property
    def fits(self) -> bool:
        """True when every device's share fits."""
        return not self.over()

    def ngl(self) -> int:
        """Offloaded slots (layers + output) of this placement."""
        cpu = self.placement.slot_device[INPUT_SLOT]
        return sum(1 for s, d in self.placement.slot_device.items() if s != INPUT_SLOT and d is not cpu)


class _Backends:
    """One backend per device for the measurements (created on first use, freed at the end)."""

    def __init__(self) -> None:
        self._by_name: dict[str, Backend] = {}

    def get(self, dev: Device) -> Backend:
        be = self._by_name.get(dev.name)
        if be is None:
            be = self._by_name[dev.name] = dev.init_backend()
        return be

    def free(self) -> None:
        for be in self._by_name.values():
            be.free()
        self._by_name.clear()


def measure(
    f: GGUFFile,
    hp: HParams,
    specs: Sequence[WeightSpec],
    placement: Placement,
    params: ModelParams,
    margins: dict[str, int] | None = None,
    backends: _Backends | None = None,
) -> Measured:
    """What each device of ``placement`` needs, exactly as :meth:`Model.load` would allocate it, allocating nothing.

    Sets every share's ``weight_bytes``, ``kv_bytes`` and ``compute_bytes`` to the measured values.
    """
    from ggml_core.sched import Scheduler  # imported on use, as the executor does: loading the models stays light

    n_ctx = params.n_ctx or default_n_ctx(hp)
    cpu = placement.slot_device[INPUT_SLOT]
    weights = ModelWeights({})
    ctx = Context("fit: weights")
    dev_bytes: dict[str, int] = {}
    slot_cost: dict[int, int] = {}
    for s in specs:
        info = f.tensor_info(s.source)
        t = ctx.new_tensor(info.type, info.ne, name=s.name)
        choice = placement.weights.get(s.name)
        dev = choice.device if choice is not None else placement.device_of(s.slot)
        buft = choice.buft if choice is not None else dev.buffer_type()
        bind_probe(t, buft, BufferUsage.WEIGHTS)
        weights.tensors[s.name] = t
        if buft is dev.buffer_type() and placement.maps(dev):
            continue  # used in place from the file's mapping
        nbytes = pad(buft.alloc_size(t), buft.alignment)
        dev_bytes[dev.name] = dev_bytes.get(dev.name, 0) + nbytes
        if dev is not cpu:
            slot_cost[s.slot] = slot_cost.get(s.slot, 0) + nbytes
    swa = n_ctx if params.swa_full else swa_cache_size(hp, n_ctx, min(params.batch_size, n_ctx), KV_PAD)
    fa = params.planned_flash_attn
    kv = KVCache.create(
        hp, placement, n_ctx, params.cache_type_k, type_v=params.cache_type_v, v_trans=not fa, swa_size=swa, alloc=False
    )
    kv_dev: dict[str, int] = {}
    for il in range(hp.n_layer):
        dev = placement.kv_device_of(il)
        buft = dev.buffer_type()
        cache = (kv.k[il], kv.v[il], kv.r[il], kv.s[il])  # K and V, or a recurrent layer's states
        nbytes = sum(pad(buft.alloc_size(t), buft.alignment) for t in cache if t is not None)
        kv_dev[dev.name] = kv_dev.get(dev.name, 0) + nbytes
        if dev is not cpu:
            slot_cost[il] = slot_cost.get(il, 0) + nbytes
    bg = build_graph(
        get_architecture(hp.arch),
        hp,
        weights,
        kv,
        min(params.batch_size, n_ctx),
        n_ctx,
        all_logits=True,
        flash_attn=fa,  # auto (None) is resolved after the fit: sized as soft_max unless V is quantized
    )
    own = backends is None
    pool = backends or _Backends()
    devs = [d for d in placement.devices if d.type != DeviceType.CPU] + [cpu]
    try:
        sched = Scheduler([pool.get(d) for d in devs], graph_size=graph_size_for(hp) * 2, op_offload=params.op_offload)
        if not params.placement.kv_offload and len(devs) > 1:
            pin_attention(sched, bg, pool.get(cpu))
        try:
            compute = sched.reserve_size(bg.graph)
        finally:
            sched.free()
    finally:
        if own:
            pool.free()
    margins = margins or {}
    out = Measured(placement, params, n_ctx, compute=compute, slot_cost=slot_cost)
    for share in placement.shares:
        share.weight_bytes = dev_bytes.get(share.name, 0)
        share.kv_bytes = kv_dev.get(share.name, 0)
        share.compute_bytes = compute.get(share.name, 0)
        free, _total = share.device.memory()
        out.need[share.name] = (share.total_bytes, free - margins.get(share.name, 0))
    return out


# ------------------------------------------------------------------------------------------------ fitting


class _Fitter:
    """Plans and measures variants of one request."""

    def __init__(
        self,
        f: GGUFFile,
        hp: HParams,
        specs: Sequence[WeightSpec],
        params: ModelParams,
        plan_once: Callable[[ModelParams], Placement],
    ) -> None:
        self.f, self.hp, self.specs, self.params, self.plan_once = f, hp, specs, params, plan_once
        self.req = params.placement
        self.devices = resolve_devices(self.req.devices)
        self.offload = [d for d in self.devices if d.type != DeviceType.CPU]
        # --fit off: the same measured check, with nothing kept free and nothing changed
        self.margins = params.fit.margins(self.offload) if params.fit.enabled else {}
        self.backends = _Backends()
        self.n_slots = hp.n_layer + 1

    def variant(self, n_ctx: int | None, ngl: int | None, ts: Sequence[float] | None) -> ModelParams:
        req = replace(self.req, n_gpu_layers=ngl, tensor_split=None if ts is None else tuple(ts))
        return replace(self.params, n_ctx=n_ctx, placement=req)

    def evaluate(self, params: ModelParams) -> Measured:
        placement = self.plan_once(params)
        return measure(self.f, self.hp, self.specs, placement, params, self.margins, self.backends)

    def largest(self, lo: int, hi: int, fits: Callable[[int], Measured | None]) -> tuple[int, Measured] | None:
        """The largest k in [lo, hi] with fits(k) not None (fits monotone: true up to some k), and its measure."""
        best = None
        m = fits(lo)
        if m is None:
            return None
        best = (lo, m)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            m = fits(mid)
            if m is not None:
                lo, best = mid, (mid, m)
            else:
                hi = mid - 1
        return best

    def greedy(self, full: Measured, n_ctx: int | None) -> Measured:
        """Several devices, no -ts: fill the last device from the output layer down, then the one before it."""
        comp_all = [full.compute.get(d.name, 0) for d in self.offload]
        fallback = max(comp_all, default=0)
        rem = []
        for d in self.offload:
            free, _ = d.memory()
            comp = full.compute.get(d.name) or fallback
            rem.append(free - self.margins.get(d.name, 0) - comp)
        counts = [0] * len(self.offload)
        k, slot = len(self.offload) - 1, self.hp.n_layer
        while slot >= 0 and k >= 0:
            cost = full.slot_cost.get(slot, 0)
            if cost <= rem[k]:
                rem[k] -= cost
                counts[k] += 1
                slot -= 1
            else:
                k -= 1
        while True:
            m = self.evaluate(self.variant(n_ctx, sum(counts), self._ts(counts)))
            over = [i for i, d in enumerate(self.offload) if d.name in m.over()]
            if not over or not sum(counts):
                return m
            counts[over[-1]] -= 1

    def _ts(self, counts: Sequence[int]) -> list[float] | None:
        if not sum(counts):
            return None
        by_name = {d.name: c for d, c in zip(self.offload, counts, strict=True)}
        return [float(by_name.get(d.name, 0)) for d in self.devices]


def fit_model(
    f: GGUFFile,
    hp: HParams,
    specs: Sequence[WeightSpec],
    params: ModelParams,
    plan_once: Callable[[ModelParams], Placement],
    *,
    layers_open: bool = False,
) -> tuple[ModelParams, Placement]:
    """The params (context, ``-ngl``, ``-ts``) --fit chose and their placement, measured; see the module docstring.

    ``layers_open``: ``-ngl``/``-ts`` were chosen automatically (``--split-mode auto``), so --fit may still lower
    ``-ngl`` (keeping the ``-ts`` proportions).

    :raises AllocationError: nothing the user left unset makes it fit (the message says what would)
    """
    fit = _Fitter(f, hp, specs, params, plan_once)
    try:
        return _fit(fit, params, default_n_ctx(hp), layers_open)
    finally:
        fit.backends.free()


def _fit(fit: _Fitter, params: ModelParams, default_ctx: int, layers_open: bool) -> tuple[ModelParams, Placement]:
    req = params.placement
    if not fit.offload:  # everything on the host: nothing to fit (as llama.cpp), the estimate checks host memory
        placement = fit.plan_once(params)
        fit_check(placement, params.fit.ctx_flag)
        return params, placement
    first = fit.evaluate(params)
    if first.fits:
        if params.fit.enabled:
            _note(first, "the requested placement fits", fit)
        return first.params, first.placement
    if not params.fit.enabled:
        _refuse(fit, first, params.n_ctx, [])
    ctx0 = params.n_ctx or default_ctx
    n_ctx: int | None = params.n_ctx
    changed = []
    if params.n_ctx is None and ctx0 > params.fit.min_ctx:
        lo = min(max(params.fit.min_ctx, 1), ctx0)
        steps = sorted({lo, *range(_ceil(lo, _CTX_STEP), ctx0, _CTX_STEP), ctx0})

        def ctx_fits(i: int) -> Measured | None:
            m = fit.evaluate(fit.variant(steps[i], req.n_gpu_layers, req.tensor_split))
            return m if m.fits else None

        got = fit.largest(0, len(steps) - 1, ctx_fits)
        if got is not None:
            m = got[1]
            _note(m, f"context {ctx0} -> {m.n_ctx} cells (--fit-ctx {params.fit.min_ctx})", fit)
            return m.params, m.placement
        n_ctx = lo
        changed.append(f"context {ctx0} -> {lo} cells (the --fit-ctx minimum)")
    if req.n_gpu_layers is not None and not layers_open:
        _refuse(fit, first, n_ctx, changed)
    if len(fit.offload) > 1 and req.tensor_split is None and req.split_mode != "none":
        full = fit.evaluate(fit.variant(n_ctx, None, None))
        m = fit.greedy(full, n_ctx)
    else:

        def ngl_fits(k: int) -> Measured | None:
            m = fit.evaluate(fit.variant(n_ctx, k, req.tensor_split))
            return m if m.fits else None

        got = fit.largest(0, fit.n_slots, ngl_fits)
        m = got[1] if got is not None else fit.evaluate(fit.variant(n_ctx, 0, req.tensor_split))
    if not m.fits:
        _refuse(fit, m, n_ctx, changed)
    per_dev = ", ".join(
        f"{s.name} {len(s.layers) + s.has_output}" for s in m.placement.shares if s.device.type != DeviceType.CPU
    )
    changed.append(
        f"-ngl {m.ngl()} of {fit.n_slots}" + (f" ({per_dev})" if per_dev else "") + _why_fewer(m, fit, n_ctx)
    )
    _note(m, "; ".join(changed), fit)
    return m.params, m.placement


def _why_fewer(m: Measured, fit: _Fitter, n_ctx: int | None) -> str:
    """Why --fit offloaded fewer than every slot: what one more would need on each device it overflows, the memory
    --fit-target keeps free there, and the flags that change the choice."""
    k = m.ngl()
    if k >= fit.n_slots:
        return ""
    ts = fit.req.tensor_split
    more = fit.evaluate(fit.variant(n_ctx, k + 1, ts if ts is not None or len(fit.offload) < 2 else None))
    parts = []
    for name in more.over():
        need, avail = more.need[name]
        margin = fit.margins.get(name, 0)
        kept = f" after the {margin / _MIB:.0f} MiB --fit-target keeps free" if margin else ""
        parts.append(
            f"-ngl {k + 1} would need {need / _MIB:.1f} MiB on {name}, {max(avail, 0) / _MIB:.1f} MiB left{kept}"
        )
    if not parts:
        return ""
    lower = "; a smaller --fit-target (-fitt MiB) keeps less free" if any(fit.margins.values()) else ""
    return f" ({'; '.join(parts)}{lower}; -ngl N sets the count, --fit off turns the choice off)"


def _ceil(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def _usage(m: Measured, fit: _Fitter) -> str:
    parts = []
    for s in m.placement.shares:
        need, avail = m.need[s.name]
        margin = fit.margins.get(s.name, 0)
        keep = f", {margin / _MIB:.0f} MiB kept free" if margin else ""
        parts.append(
            f"{s.name} {need / _MIB:.1f} MiB (weights {s.weight_bytes / _MIB:.1f} + KV {s.kv_bytes / _MIB:.1f} + "
            f"compute {s.compute_bytes / _MIB:.1f}) of {(avail + margin) / _MIB:.1f} MiB free{keep}"
        )
    return "; ".join(parts)


def _note(m: Measured, what: str, fit: _Fitter) -> None:
    m.placement.notes.append(f"--fit: {what}: {_usage(m, fit)}")


def _refuse(fit: _Fitter, m: Measured, n_ctx: int | None, changed: list[str]) -> None:
    """Raise AllocationError for the first overflowing device, saying what would fit."""
    name = (m.over() or [s.name for s in m.placement.shares])[0]
    share = next(s for s in m.placement.shares if s.name == name)
    need, avail = m.need[name]
    hints = []
    req = fit.req
    if fit.offload and share.device.type != DeviceType.CPU:

        def ngl_fits(k: int) -> Measured | None:
            v = fit.evaluate(fit.variant(n_ctx, k, req.tensor_split))
            return v if v.fits else None

        got = fit.largest(0, fit.n_slots, ngl_fits)
        if got is not None:
            left_out = " (leave -ngl out to let --fit choose)" if req.n_gpu_layers is not None else ""
            hints.append(f"-ngl {got[0]} would fit{left_out}")
    if fit.params.n_ctx is not None:
        hints.append(f"a smaller {fit.params.fit.ctx_flag} needs less")
    if fit.params.fit.enabled and fit.margins.get(name, 0):
        hints.append("a smaller --fit-target keeps less free")
    elif not fit.params.fit.enabled:
        hints.append("--fit on chooses what fits")
    done = f" after {'; '.join(changed)}" if changed else ""
    margin = fit.margins.get(name, 0)
    raise AllocationError(
        name,
        need,
        avail + margin,
        f"{'--fit' if fit.params.fit.enabled else '--fit off'}: the model does not fit{done}: {_usage(m, fit)}"
        + (f" (--fit-target keeps {margin / _MIB:.0f} MiB free)" if margin else "")
        + f"; {', '.join(hints)}",
    )
