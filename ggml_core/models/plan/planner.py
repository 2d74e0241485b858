"""A model's whole plan before anything is allocated: the layer split, each weight's buffer type, the fit to the
devices' memory, and the attention kind.

:func:`plan_model` resolves ``--split-mode auto`` (:mod:`.autosplit`) and ``--fit`` (:mod:`.fit`) into one
:class:`~ggml_core.models.plan.placement.Placement`; each candidate they try is one :func:`plan_once`: the layer split
(:func:`~ggml_core.models.plan.placement.plan_placement`), the buffer type of every weight and where each layer's
cache lives (:func:`~ggml_core.models.plan.bufts.assign_weights`), then every device's share accounted.
``--split-mode tensor`` goes to the meta device's planning (:mod:`ggml_core.models.tensor_parallel`).
"""

from __future__ import annotations

from dataclasses import replace

from ggml_core import ops
from ggml_core._context import Context
from ggml_core._types import as_type
from ggml_core.alloc import pad
from ggml_core.backend.registry import get_registry
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.hparams import HParams
from ggml_core.models.kvcache import check_kv_types, kv_bytes_per_layer, swa_cache_size
from ggml_core.models.params import KV_PAD, ModelParams, default_n_ctx
from ggml_core.models.plan.autosplit import plan_auto
from ggml_core.models.plan.bufts import (
    PROBE_TOKENS,
    KVInfo,
    ProbeShapes,
    WeightInfo,
    assign_weights,
    bind_probe,
    check_host_kv,
)
from ggml_core.models.plan.fit import fit_model
from ggml_core.models.plan.placement import Placement, plan_placement, resolve_devices
from ggml_core.models.weights import WeightSpec, slot_bytes, slot_nbytes

__all__ = ["compute_estimate", "flash_attn_auto", "plan_model", "plan_once"]


def compute_estimate(hp: HParams, n_batch: int, n_ctx: int) -> int:
    """A rough size of one device's compute buffer for a batch of ``n_batch`` tokens (bytes)."""
    n_kv = min(n_ctx, pad(n_ctx, KV_PAD))
    live = 4 * hp.n_embd + 3 * hp.n_ff + hp.n_vocab + 2 * hp.n_head * n_kv
    return 4 * n_batch * live + 4 * 2**20


def flash_attn_auto(hp: HParams, placement: Placement, kv_type: str, type_v: str | None = None) -> bool:
    """llama.cpp's ``--flash-attn auto``: FLASH_ATTN_EXT when the device of every layer runs it on that layer's
    cache (as llama.cpp checks that no FLASH_ATTN_EXT node left its layer's device), else SOFT_MAX attention.

    The op is probed on stand-ins (a 512-token batch over 256 cells, K of ``kv_type``, V of ``type_v`` (None: the
    same), the cache bound to a zero-size
    buffer of its device's buffer type); a device whose ``supports_op`` raises counts as not supporting it. On the
    CPU it is on, as in llama.cpp, whose CPU backend runs FLASH_ATTN_EXT.
    """
    t, tv = as_type(kv_type), as_type(type_v or kv_type)
    n_kv = KV_PAD
    seen: dict[tuple[int, int], bool] = {}
    for il in range(hp.n_layer):
        dev, kv_dev = placement.device_of(il), placement.kv_device_of(il)
        key = (id(dev), id(kv_dev))
        if key not in seen:
            with Context("probe flash_attn") as ctx:
                q = ctx.new_tensor("f32", (hp.head_dim_k, PROBE_TOKENS, hp.n_head), "probe_q")
                k = ctx.new_tensor(t, (hp.head_dim_k, n_kv, hp.n_head_kv), "probe_k")
                v = ctx.new_tensor(tv, (hp.head_dim_v, n_kv, hp.n_head_kv), "probe_v")
                mask = ctx.new_tensor("f16", (n_kv, PROBE_TOKENS), "probe_mask")
                node = ops.flash_attn_ext(q, k, v, mask, 1.0, 0.0, hp.attn_softcap)
            for c in (k, v):
                bind_probe(c, kv_dev.buffer_type())
            try:
                seen[key] = bool(dev.supports_op(node))
            except Exception:  # noqa: BLE001 - a plugin's predicate failing means "no", as the scheduler treats it
                seen[key] = False
        if not seen[key]:
            return False
    return True


def plan_model(f: GGUFFile, hp: HParams, specs: list[WeightSpec], params: ModelParams) -> tuple[ModelParams, Placement]:
    """The placement, fitted to the devices' memory (``--fit``; the chosen context and layers are in the returned
    params), or with ``--fit off`` only checked against it (``check_fit=False``: not even that).

    A placement that names its devices (``--device CPU``) enumerates only the registries that can provide them
    (:meth:`Registry.enumerating_only`): the CPU alone does not import pyopencl or wgpu. Buffer-type overrides
    (``-ot``) may name any device's buffer type, so they keep the full listing.
    """
    names = params.placement.devices if not params.placement.overrides else None
    with get_registry().enumerating_only(names):
        return _plan_scoped(f, hp, specs, params)


def _plan_scoped(
    f: GGUFFile, hp: HParams, specs: list[WeightSpec], params: ModelParams
) -> tuple[ModelParams, Placement]:
    if params.placement.split_mode == "tensor":  # the meta device's shares: --fit does not choose them
        from ggml_core.models.tensor_parallel import plan_tensor  # imported on use: it loads the scheduler

        req = params.placement
        return params, plan_tensor(
            hp,
            req,
            params.flash_attn,
            params.check_fit,
            lambda r: plan_once(f, hp, specs, replace(params, placement=r)),
        )
    auto = None
    if params.placement.split_mode == "auto":  # the split from measured speeds, then fitted like any request
        n_ctx = params.n_ctx or default_n_ctx(hp)
        w = params.workload
        work = replace(w, n_batch=params.batch_size, n_kv=min(n_ctx, pad(w.n_prompt + w.n_gen, KV_PAD)))
        params, auto = plan_auto(f, hp, specs, params, lambda p: plan_once(f, hp, specs, p), work)
    if params.check_fit:  # --fit on adjusts; --fit off only checks, with the same measurements
        params, placement = fit_model(
            f, hp, specs, params, lambda p: plan_once(f, hp, specs, p), layers_open=auto is not None
        )
    else:
        placement = plan_once(f, hp, specs, params)
    if auto is not None:
        placement.auto, placement.split_mode = auto, "auto"
        placement.notes.insert(0, f"--split-mode auto: {auto.describe()}")
    return params, placement


def plan_once(f: GGUFFile, hp: HParams, specs: list[WeightSpec], params: ModelParams) -> Placement:
    """One candidate plan of ``params`` as given (nothing fitted): layer split, buffer types, shares accounted."""
    n_ctx = params.n_ctx or default_n_ctx(hp)
    if n_ctx <= 0:
        raise ValueError(f"--ctx-size must be positive, got {n_ctx}")
    check_kv_types(hp, params.cache_type_k, params.cache_type_v, params.flash_attn)
    # per layer on average: sliding-window layers keep only their window
    swa = n_ctx if params.swa_full else swa_cache_size(hp, n_ctx, min(params.batch_size, n_ctx), KV_PAD)
    n_swa_layers = sum(hp.is_swa(il) for il in range(hp.n_layer))
    cells = (n_ctx * (hp.n_layer - n_swa_layers) + swa * n_swa_layers + hp.n_layer - 1) // hp.n_layer
    kv_layer = kv_bytes_per_layer(hp, cells, params.cache_type_k, params.cache_type_v)
    compute = compute_estimate(hp, min(params.batch_size, n_ctx), n_ctx)
    req = params.placement
    placement = plan_placement(req, hp.n_layer, slot_bytes(f, specs), kv_layer, compute, check_fit=False)
    shapes = ProbeShapes(hp.head_dim_k, hp.n_head, hp.n_rot, hp.rope_type, hp.n_expert_used if hp.is_moe else 1)
    infos = [
        WeightInfo(
            s.name, s.slot, f.tensor_info(s.source).type, f.tensor_info(s.source).ne, slot_nbytes(f, s), s.source
        )
        for s in specs
    ]
    kv = KVInfo(
        as_type(params.cache_type_k),
        hp.n_embd_k_gqa,
        hp.n_embd_v_gqa,
        n_ctx,
        not params.planned_flash_attn,
        as_type(params.cache_type_v),
    )
    assign_weights(placement, infos, shapes, req.overrides, kv, kv_offload=req.kv_offload)
    cpu = placement.slot_device[-1]
    if any(placement.kv_device_of(il) is cpu for il in range(hp.n_layer)):
        check_host_kv(cpu, kv)
    items = [
        (c.device, c.slot, c.nbytes, c.buft is cpu.buffer_type() and placement.maps(cpu))
        for c in placement.weights.values()
    ]
    placement.account(items, kv_layer, compute, resolve_devices(req.devices))
    if placement.split_mode == "tensor":  # the shards and KV heads of each device instead
        from ggml_core.models.tensor_parallel import account  # imported on use: it loads the scheduler

        account(placement, f, hp, specs, kv_layer, compute)
    return placement
