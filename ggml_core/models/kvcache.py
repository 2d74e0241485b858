"""The KV cache: one K and one V tensor per layer on that layer's device, f16 (llama.cpp's default) or f32.

One sequence; cell ``i`` holds position ``i``. K is ``[n_embd_k_gqa, kv_size]`` (a token's keys are one row). V is
stored the same way for flash attention, and *transposed* otherwise (``v_trans``, as llama.cpp does), so that the
``kq · v`` product reads rows of one value dimension across positions. New keys and values are written with
SET_ROWS at row indices given as graph inputs, so the graph of a decode step does not change from token to token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from ggml_core._context import Context
from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType, as_type, row_size
from ggml_core.alloc import alloc_ctx_tensors
from ggml_core.backend.interfaces import Buffer
from ggml_core.models.hparams import HParams
from ggml_core.models.placement import Placement
from ggml_core.ops import reshape_2d, set_rows, view_3d

__all__ = ["KV_TYPES", "KVCache", "kv_bytes_per_layer"]

KV_TYPES: Final = ("f16", "f32")


def kv_bytes_per_layer(hp: HParams, kv_size: int, kv_type: str) -> int:
    """Bytes of one layer's K and V."""
    t = as_type(kv_type)
    return row_size(t, hp.n_embd_k_gqa) * kv_size + row_size(t, hp.n_embd_v_gqa) * kv_size


@dataclass
class KVCache:
    """Per-layer K/V tensors, allocated on their layer's device and cleared to zero."""

    hp: HParams
    kv_size: int
    type: GGMLType
    v_trans: bool
    k: list[Tensor] = field(default_factory=list)
    v: list[Tensor] = field(default_factory=list)
    buffers: list[Buffer] = field(default_factory=list)
    #: number of cells holding valid entries (= the next position)
    n_past: int = 0

    @classmethod
    def create(cls, hp: HParams, placement: Placement, kv_size: int, kv_type: str, *, v_trans: bool) -> KVCache:
        """Allocate the cache on the layers' devices."""
        if kv_type not in KV_TYPES:
            raise ValueError(f"--kv-type must be one of {', '.join(KV_TYPES)}, got {kv_type!r}")
        if kv_size <= 0:
            raise ValueError(f"the KV cache needs at least one cell, got kv_size={kv_size}")
        cache = cls(hp, kv_size, as_type(kv_type), v_trans)
        ctxs: dict[str, Context] = {}
        devs = {}
        for il in range(hp.n_layer):
            dev = placement.kv_device_of(il)
            ctx = ctxs.setdefault(dev.name, Context(f"kv:{dev.name}"))
            devs[dev.name] = dev
            cache.k.append(ctx.new_tensor_2d(cache.type, hp.n_embd_k_gqa, kv_size, f"cache_k_l{il}"))
            cache.v.append(ctx.new_tensor_2d(cache.type, hp.n_embd_v_gqa, kv_size, f"cache_v_l{il}"))
        try:
            for name, ctx in ctxs.items():
                buf = alloc_ctx_tensors(ctx, devs[name].buffer_type())
                # masked cells must hold finite numbers: 0 · garbage could be NaN
                buf.clear(0)
                cache.buffers.append(buf)
        except BaseException:
            cache.free()
            raise
        return cache

    @property
    def nbytes(self) -> int:
        """Total bytes of K and V."""
        return sum(t.nbytes for t in self.k) + sum(t.nbytes for t in self.v)

    def clear(self) -> None:
        """Forget every entry (the memory is zeroed again)."""
        for b in self.buffers:
            b.clear(0)
        self.n_past = 0

    def free(self) -> None:
        """Release the buffers."""
        for b in self.buffers:
            b.free()
        self.buffers.clear()

    # --------------------------------------------------------------------------------------------- graph parts

    def k_view(self, il: int, n_kv: int) -> Tensor:
        """Keys of the first ``n_kv`` cells as ``[head_dim, n_kv, n_head_kv]``."""
        k, hp = self.k[il], self.hp
        return view_3d(
            k, hp.head_dim_k, n_kv, hp.n_head_kv, row_size(k.type, hp.n_embd_k_gqa), row_size(k.type, hp.head_dim_k), 0
        )

    def v_view(self, il: int, n_kv: int) -> Tensor:
        """Values of the first ``n_kv`` cells: ``[n_kv, head_dim, n_head_kv]`` when transposed, else like keys."""
        v, hp = self.v[il], self.hp
        es = v.type.type_size
        if self.v_trans:
            return view_3d(
                v, n_kv, hp.head_dim_v, hp.n_head_kv, self.kv_size * es, self.kv_size * hp.head_dim_v * es, 0
            )
        return view_3d(
            v, hp.head_dim_v, n_kv, hp.n_head_kv, row_size(v.type, hp.n_embd_v_gqa), row_size(v.type, hp.head_dim_v), 0
        )

    def write_k(self, il: int, k_cur: Tensor, k_idxs: Tensor) -> Tensor:
        """SET_ROWS of ``k_cur`` ``[n_embd_k_gqa, n_tokens]`` into the cells ``k_idxs``."""
        return set_rows(self.k[il], k_cur, k_idxs)

    def write_v(self, il: int, v_cur: Tensor, v_idxs: Tensor) -> Tensor:
        """SET_ROWS of ``v_cur`` ``[n_embd_v_gqa, n_tokens]``; transposed: one element per row (see v_idxs)."""
        v = self.v[il]
        if not self.v_trans:
            return set_rows(v, v_cur, v_idxs)
        n = v_cur.ne[0] * v_cur.ne[1]
        return set_rows(reshape_2d(v, 1, v.nelements), reshape_2d(v_cur, 1, n), v_idxs)

    def v_indices(self, slots: np.ndarray) -> np.ndarray:
        """Row indices for :meth:`write_v`: the slots themselves, or for the transposed layout, element
        ``(token t, dim j)`` of ``v_cur`` goes to row ``j * kv_size + slot_t``."""
        slots = np.asarray(slots, dtype=np.int64)
        if not self.v_trans:
            return slots
        dims = np.arange(self.hp.n_embd_v_gqa, dtype=np.int64)
        return (dims[None, :] * self.kv_size + slots[:, None]).reshape(-1)
