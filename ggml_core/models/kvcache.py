"""The KV cache: one K and one V tensor per layer on that layer's device, of llama.cpp's cache types (``-ctk``,
``-ctv``: f16, its default, f32, bf16, or quantized q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1; K and V may differ).

SET_ROWS quantizes the new rows as it writes them. A quantized K is read by MUL_MAT (``kq``) or FLASH_ATTN_EXT; a
quantized V only by FLASH_ATTN_EXT (V is stored transposed without it, one value per row, which no block type
holds), as llama.cpp requires. A quantized type's block must divide the head dimension (:func:`check_kv_types`).

One sequence. K is ``[n_embd_k_gqa, size]`` (a token's keys are one row). V is stored the same way for flash
attention, and *transposed* otherwise (``v_trans``, as llama.cpp does), so that the ``kq · v`` product reads rows of
one value dimension across positions. New keys and values are written with SET_ROWS at row indices given as graph
inputs, so the graph of a decode step does not change from token to token.

Layers come in two groups, as llama.cpp's iSWA cache: ``"full"`` layers attend over every past position and keep
``kv_size`` cells; ``"swa"`` (sliding-window) layers see only the last ``n_swa`` positions and keep a ring of
``swa_size`` cells (position p in cell ``p % swa_size``), so their memory stays bounded however long the context.
The ring holds ``n_swa + batch - 1`` cells at least: a batch's own writes never evict a key one of its tokens still
sees. Each group has its own cell → position table, from which its mask is made (:meth:`KVCache.mask`).

Recurrent layers (Mamba-2 and the other state-space or linear-attention mixers, llama.cpp's recurrent memory) keep
no cells: their K and V are empty, and each holds two f32 states of the sequence instead, ``r`` (``n_embd_r``
floats: Mamba's convolution window) and ``s`` (``n_embd_s`` floats: the scan state), on the layer's device beside
the other layers' K and V. A hybrid model has both kinds. The states are cleared with the cache, so a new sequence
starts from zero; they cannot be rewound to an earlier position (a prefix is recomputed instead).
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
from ggml_core.models.plan.placement import Placement
from ggml_core.ops import cont, reshape_2d, set_rows, transpose, view_3d

__all__ = [
    "GROUPS",
    "KV_TYPES",
    "KVCache",
    "check_kv_types",
    "kv_bytes_per_layer",
    "state_bytes_per_layer",
    "swa_cache_size",
]

#: llama.cpp's cache types (``-ctk``/``-ctv``), in its order
KV_TYPES: Final = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
#: the layer groups of a cache
GROUPS: Final = ("full", "swa")


def check_kv_types(hp: HParams | None, type_k: str, type_v: str, flash_attn: bool | None) -> None:
    """ValueError, one line, unless the cache can have these types: llama.cpp's names, a quantized V only with
    flash attention (``flash_attn`` None: not decided yet, checked again once it is), and a quantized type's block
    dividing its head dimension (``hp`` None: not checked)."""
    for flag, name in (("--cache-type-k", type_k), ("--cache-type-v", type_v)):
        if name not in KV_TYPES:
            raise ValueError(f"{flag}: unsupported cache type {name!r} (one of {', '.join(KV_TYPES)})")
    if flash_attn is False and as_type(type_v).is_quantized:
        raise ValueError(
            f"V cache quantization requires flash_attn: --cache-type-v {type_v} needs --flash-attn on "
            "(or a float V cache: f16, bf16, f32)"
        )
    if hp is None:
        return
    for flag, name, dim, what in (
        ("--cache-type-k", type_k, hp.head_dim_k, "n_embd_head_k"),
        ("--cache-type-v", type_v, hp.head_dim_v, "n_embd_head_v"),
    ):
        blck = as_type(name).block_size
        if dim % blck:
            raise ValueError(
                f"{flag} {name}: its block of {blck} values does not divide {what}={dim} of this model; "
                "use f16 or a type of a smaller block"
            )


def kv_bytes_per_layer(hp: HParams, kv_size: int, type_k: str, type_v: str | None = None) -> int:
    """Bytes of one layer's K and V (V of ``type_k`` when ``type_v`` is None), or of its recurrent states: the
    larger kind where a hybrid has both."""
    tk, tv = as_type(type_k), as_type(type_v or type_k)
    attn = row_size(tk, hp.n_embd_k_gqa) * kv_size + row_size(tv, hp.n_embd_v_gqa) * kv_size
    if not hp.has_recurrent:
        return attn
    states = state_bytes_per_layer(hp)
    return max(states, attn) if not all(hp.recurrent_layers) else states


def state_bytes_per_layer(hp: HParams) -> int:
    """Bytes of one recurrent layer's states (``r`` and ``s``, f32, one sequence)."""
    return 4 * (hp.n_embd_r + hp.n_embd_s)


def swa_cache_size(hp: HParams, kv_size: int, n_batch: int, pad: int = 256) -> int:
    """Cells of a sliding-window layer: the window plus one batch, padded, at most ``kv_size`` (llama.cpp's rule)."""
    if not hp.has_swa:
        return kv_size
    need = hp.n_swa + n_batch - 1
    return min(kv_size, (need + pad - 1) // pad * pad)


@dataclass
class KVCache:
    """Per-layer K/V tensors, allocated on their layer's device and cleared to zero."""

    hp: HParams
    kv_size: int
    #: the K cache type (and V's when :attr:`type_v` is None)
    type: GGMLType
    v_trans: bool
    #: cells of the sliding-window layers (``kv_size`` when they keep everything)
    swa_size: int = 0
    #: the V cache type (None: :attr:`type`)
    type_v: GGMLType | None = None
    #: V stored by rows like K (``v_trans`` False) but read as ``[n_kv, head_dim, n_head_kv]`` through a contiguous
    #: transpose, as llama.cpp's attention without flash attention does (``-sm tensor``: rows split by KV heads)
    v_read_transposed: bool = False
    k: list[Tensor] = field(default_factory=list)
    v: list[Tensor] = field(default_factory=list)
    #: per layer, the recurrent states (None for an attention layer): ``r`` ``[n_embd_r, 1]``, ``s`` ``[n_embd_s, 1]``
    r: list[Tensor | None] = field(default_factory=list)
    s: list[Tensor | None] = field(default_factory=list)
    buffers: list[Buffer] = field(default_factory=list)
    #: number of positions processed (= the next position)
    n_past: int = 0
    #: per group: the position each cell holds (-1: empty)
    cell_pos: dict[str, np.ndarray] = field(default_factory=dict)
    _v_base: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _groups: tuple[str, ...] | None = field(default=None, repr=False)

    @classmethod
    def create(
        cls,
        hp: HParams,
        placement: Placement,
        kv_size: int,
        kv_type: str,
        *,
        v_trans: bool,
        type_v: str | None = None,
        swa_size: int | None = None,
        alloc: bool = True,
        deferred: bool = False,
    ) -> KVCache:
        """Allocate the cache on the layers' devices: K of ``kv_type``, V of ``type_v`` (None: ``kv_type``);
        ``swa_size``: cells of the sliding-window layers.

        ``alloc=False`` allocates nothing: the tensors are bound to zero-size stand-ins of their devices' buffer
        types, so that graphs over the cache can be planned and measured (``--fit``), never computed.
        ``deferred``: the tensors are made without memory, for the meta device to allocate by KV heads (``-sm
        tensor``; the owner appends the buffers to :attr:`buffers`); V is read through a transpose.
        """
        # V read by rows (flash attention) is the only reading of a quantized V
        check_kv_types(hp, kv_type, type_v or kv_type, not v_trans and not deferred)
        if kv_size <= 0:
            raise ValueError(f"the KV cache needs at least one cell, got kv_size={kv_size}")
        swa = kv_size if swa_size is None or not hp.has_swa else min(swa_size, kv_size)
        if hp.has_swa and swa < min(hp.n_swa, kv_size):
            raise ValueError(f"the sliding-window cache needs at least the window ({hp.n_swa} cells), got {swa}")
        cache = cls(hp, kv_size, as_type(kv_type), v_trans, swa, as_type(type_v or kv_type))
        ctxs: dict[str, Context] = {}
        devs = {}
        for il in range(hp.n_layer):
            dev = placement.kv_device_of(il)
            ctx = ctxs.setdefault(dev.name, Context(f"kv:{dev.name}"))
            devs[dev.name] = dev
            recurrent = hp.is_recurrent(il)
            n = cache.size(il) if hp.has_attention(il) else 0  # a recurrent (or FFN-only) layer keeps no cells
            cache.k.append(ctx.new_tensor_2d(cache.type, hp.n_embd_k_gqa, n, f"cache_k_l{il}"))
            cache.v.append(ctx.new_tensor_2d(cache.value_type, hp.n_embd_v_gqa, n, f"cache_v_l{il}"))
            cache.r.append(ctx.new_tensor_2d("f32", hp.n_embd_r, 1, f"cache_r_l{il}") if recurrent else None)
            has_s = recurrent and hp.n_embd_s > 0  # LFM2 keeps only its window
            cache.s.append(ctx.new_tensor_2d("f32", hp.n_embd_s, 1, f"cache_s_l{il}") if has_s else None)
        if deferred:
            cache.v_read_transposed = not v_trans
            cache.clear_positions()
            return cache
        if not alloc:
            from ggml_core.models.plan.bufts import bind_probe

            for name, ctx in ctxs.items():
                for t in ctx:
                    bind_probe(t, devs[name].buffer_type())
            cache.clear_positions()
            return cache
        try:
            for name, ctx in ctxs.items():
                buf = alloc_ctx_tensors(ctx, devs[name].buffer_type())
                # masked cells must hold finite numbers: 0 · garbage could be NaN
                buf.clear(0)
                cache.buffers.append(buf)
        except BaseException:
            cache.free()
            raise
        cache.clear_positions()
        return cache

    @property
    def value_type(self) -> GGMLType:
        """The V cache type."""
        return self.type if self.type_v is None else self.type_v

    # --------------------------------------------------------------------------------------------- cells

    def group(self, il: int) -> str:
        """``"swa"`` for a sliding-window layer, else ``"full"``."""
        return "swa" if self.hp.is_swa(il) else "full"

    def group_size(self, group: str) -> int:
        """Cells of the layers of ``group``."""
        return self.swa_size if group == "swa" else self.kv_size

    def size(self, il: int) -> int:
        """Cells of layer ``il``."""
        return self.group_size(self.group(il))

    @property
    def groups(self) -> tuple[str, ...]:
        """The groups this model's layers fall in (a group without layers has no inputs in the graph)."""
        got = self._groups
        if got is None:
            hp = self.hp
            attn = [il for il in range(hp.n_layer) if hp.has_attention(il)]
            present = (any(not hp.is_swa(il) for il in attn), any(hp.is_swa(il) for il in attn))
            got = self._groups = tuple(g for g, on in zip(GROUPS, present, strict=True) if on)
        return got

    def n_kv(self, group: str, n_kv_full: int) -> int:
        """The cells a graph attends over in ``group`` when the full layers attend over ``n_kv_full``."""
        return min(self.group_size(group), n_kv_full)

    def cells(self, group: str, pos: np.ndarray) -> np.ndarray:
        """The cells positions ``pos`` are written to (int64)."""
        return np.asarray(pos, dtype=np.int64) % self.group_size(group)

    def record(self, pos: np.ndarray) -> None:
        """Note that positions ``pos`` were written (call before building the masks of the batch)."""
        if len(pos) == 1:  # a decode step: one cell per group, no index arrays
            p = int(pos[0])
            for g in self.groups:
                self.cell_pos[g][p % self.group_size(g)] = p
            return
        for g in self.groups:
            self.cell_pos[g][self.cells(g, pos)] = pos

    def mask(self, group: str, pos: np.ndarray, n_kv: int) -> np.ndarray:
        """``[n_tokens, n_kv]`` float32: 0 where the cell's key is visible to the token at ``pos``, -inf else.

        Visible: a position at most the token's own, and for ``"swa"`` fewer than ``n_swa`` positions back
        (llama.cpp's ``LLAMA_SWA_TYPE_STANDARD``).
        """
        cp = self.cell_pos[group][:n_kv][None, :]
        p = np.asarray(pos, dtype=np.int64)[:, None]
        ok = (cp >= 0) & (cp <= p)
        if group == "swa":
            ok &= p - cp < self.hp.n_swa
        return np.where(ok, 0.0, -np.inf).astype(np.float32)

    def mask_into(self, out: np.ndarray, group: str, pos: np.ndarray) -> None:
        """:meth:`mask` written into ``out`` ``[n_tokens, n_kv]`` (float32 or float16; 0 and -inf are exact in
        both), without the intermediate float32 array. Kept apart from :meth:`mask`, the definition, which the
        ``set_data`` path uses: tests/models/test_models_decode_inputs.py compares the two paths bit for bit."""
        if len(pos) == 1 and group != "swa" and pos[0] >= 0:  # a decode step: one comparison, one row
            row = out.reshape(-1)
            visible = self.cell_pos[group][: row.size].view(np.uint64) <= np.uint64(pos[0])  # empty (−1) is never
            row.fill(-np.inf)
            row[visible] = 0.0
            return
        cp = self.cell_pos[group][: out.shape[1]][None, :]
        p = np.asarray(pos, dtype=np.int64)[:, None]
        ok = (cp >= 0) & (cp <= p)
        if group == "swa":
            ok &= p - cp < self.hp.n_swa
        out.fill(-np.inf)
        out[ok] = 0.0

    def clear_positions(self) -> None:
        """Every cell empty."""
        self.cell_pos = {g: np.full(self.group_size(g), -1, dtype=np.int64) for g in self.groups}

    @property
    def nbytes(self) -> int:
        """Total bytes of K and V and of the recurrent states."""
        states = sum(t.nbytes for t in (*self.r, *self.s) if t is not None)
        return sum(t.nbytes for t in self.k) + sum(t.nbytes for t in self.v) + states

    def clear(self) -> None:
        """Forget every entry (the memory is zeroed again)."""
        for b in self.buffers:
            b.clear(0)
        self.n_past = 0
        self.clear_positions()

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
        """Values of the first ``n_kv`` cells: ``[n_kv, head_dim, n_head_kv]`` when transposed (or read
        transposed), else like keys."""
        v, hp = self.v[il], self.hp
        es = v.type.type_size
        if self.v_trans:
            size = self.size(il)
            return view_3d(v, n_kv, hp.head_dim_v, hp.n_head_kv, size * es, size * hp.head_dim_v * es, 0)
        rows = view_3d(
            v, hp.head_dim_v, n_kv, hp.n_head_kv, row_size(v.type, hp.n_embd_v_gqa), row_size(v.type, hp.head_dim_v), 0
        )
        return cont(transpose(rows)) if self.v_read_transposed else rows

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

    def v_indices(self, slots: np.ndarray, group: str = "full") -> np.ndarray:
        """Row indices for :meth:`write_v`: the slots themselves, or for the transposed layout, element
        ``(token t, dim j)`` of ``v_cur`` goes to row ``j * size + slot_t``."""
        slots = np.asarray(slots, dtype=np.int64)
        if not self.v_trans:
            return slots
        return (self._v_rows(group)[None, :] + slots[:, None]).reshape(-1)

    def v_indices_into(self, out: np.ndarray, slots: np.ndarray, group: str = "full") -> None:
        """:meth:`v_indices` (transposed layout) written into ``out`` ``[n_tokens, n_embd_v_gqa]`` (int64)."""
        np.add(self._v_rows(group)[None, :], np.asarray(slots, dtype=np.int64)[:, None], out=out)

    def _v_rows(self, group: str) -> np.ndarray:
        # row of value dimension j's cell 0 in the transposed layout: j * size (made once per group)
        got = self._v_base.get(group)
        if got is None:
            got = self._v_base[group] = np.arange(self.hp.n_embd_v_gqa, dtype=np.int64) * self.group_size(group)
        return got
