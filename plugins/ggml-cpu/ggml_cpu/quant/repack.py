"""Repacked weights for prompt batches: 16 weight rows interleaved so that one ``vpdpbusd`` advances 16 dot products
(two ``vpmaddubsw`` on AVX2 without VNNI).

ggml's CPU backend has an extra buffer type, ``CPU_REPACK``, that stores Q4_0 / Q4_K / ... weights interleaved for
its batch GEMMs. This module is that for the CPU plugin, made on first use of a weight matrix in a batch product
and kept (bounded, see :data:`CACHE_BYTES`):

* the quants of 16 rows are laid out per sub-block of ``G`` values (32; 16 for Q6_K) as ``G/4`` vectors of 16 rows ×
  4 unsigned bytes (Q4_0 ``q`` in 0..15 with offset 8, Q5_0 0..31 / 16, Q8_0 ``q + 128`` / 128, Q4_K / Q5_K
  ``q`` with their minima, Q6_K 0..63 / 32), one byte per weight;
* each (row, sub-block) has float32 scales ``s1`` (the weight's ``d``, or ``d·scale`` of a K-quant sub-block) and,
  for Q4_K / Q5_K, ``s2 = dmin·min``: a weight is ``s1·(q − c) − s2`` exactly as ggml dequantizes it.

The kernel (:mod:`._lane_tiles`, 8 / 4 / 1 activation rows a call) computes, per output, the exact integer sum
of each sub-block and accumulates ``dx · (s1·isum − s2·Σx)`` in float32 — the integer products are ggml's, with the
activations quantized to the weight type's dot type (Q8_0 / Q8_K) as ggml does; the float steps differ from ggml's
``vec_dot`` (which scales partial sums in a different order) by float rounding only: the tests bound it against a
float64 reference. Each output is one lane's fixed sequence of operations, so results do not depend on the thread
count (threads split the groups of 16 rows).

Weights mapped read-only from a model file (the loader's way) are repacked once per mapping; any other weights are
checked against a copy of their bytes on every use (comparing a copy costs about a fifth of the product), so weights
written in place are repacked again, never used stale. Memory: the repack takes ~1.25 bytes per weight (plus the
copy for writable weights), 2–3× a 4-bit matrix; only matrices multiplied by more than ``vec_rows_limit()``
activation rows are repacked (a model's output matrix, multiplied by one row per prompt, is not).
"""

from __future__ import annotations

import contextlib
import mmap
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from ggml_core import GGMLType
from ggml_core.quants import read_f16, unpack_k4_scales
from ggml_cpu.jit import _jit, _simd
from ggml_cpu.jit._jit import inline, prange
from ggml_cpu.quant import _lane_tiles
from ggml_cpu.quant._act_kernels import DOT_Q8_0, DOT_Q8_K, quantize_into
from ggml_cpu.quant.activations import QActs

__all__ = [
    "CACHE_BYTES",
    "LANES",
    "LAYOUTS",
    "PACKED_TYPES",
    "SPECS",
    "Packed",
    "act_blocks",
    "act_sub_blocks",
    "decode_kernels",
    "dot_code",
    "file_backed",
    "lane_group",
    "pack",
    "packed",
    "packed_ready",
    "packed_supported",
    "release_pages",
]

#: weight types with a repacked layout: (sub-block length, quant offset c, has minima, two quants a byte)
PACKED_TYPES: Final = {
    GGMLType.Q4_0: (32, 8, False, True),
    GGMLType.Q5_0: (32, 16, False, False),
    GGMLType.Q8_0: (32, 128, False, False),
    GGMLType.Q4_K: (32, 0, True, True),
    GGMLType.Q5_K: (32, 0, True, False),
    GGMLType.Q6_K: (16, 32, False, False),
}

#: at most this many bytes of repacked weights (and their check copies) are kept; once full, further matrices are not
#: repacked (they keep the block / tile routes) and nothing is evicted, except repacks of mappings that were closed
CACHE_BYTES: Final = 1 << 30

LANES: Final = 16


@dataclass(frozen=True)
class Packed:
    """One weight matrix repacked: ``q`` uint8 (groups·nsub·G·16, half that with ``nib``), ``s1``/``s2`` float32
    (groups·nsub·16)."""

    wtype: GGMLType
    rows: int
    k: int
    group: int
    offset: int
    has_min: bool
    nib: bool
    q: np.ndarray
    s1: np.ndarray
    s2: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.q.nbytes + self.s1.nbytes + self.s2.nbytes)


def _nibbles(b: np.ndarray) -> np.ndarray:
    """16 bytes per block → 32 values: low nibbles then high nibbles (ggml's legacy layout)."""
    return np.concatenate([b & 15, b >> 4], axis=-1)


def _fields(w: np.ndarray, wtype: GGMLType) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(unsigned quants uint8 (M, K), s1 float32 (M, K/G), s2 float32 (M, K/G) or None) of the byte rows ``w``."""
    m = w.shape[0]
    blocks = np.ascontiguousarray(w).reshape(-1, wtype.type_size)
    if wtype in (GGMLType.Q4_0, GGMLType.Q5_0, GGMLType.Q8_0):
        d = read_f16(blocks, 0)
        if wtype == GGMLType.Q4_0:
            q = _nibbles(blocks[:, 2:18])
        elif wtype == GGMLType.Q5_0:
            high = np.unpackbits(blocks[:, 2:6], axis=1, bitorder="little") << 4  # bit j of the LE uint32: quant j
            q = _nibbles(blocks[:, 6:22]) | high
        else:
            q = blocks[:, 2:34] ^ np.uint8(0x80)  # int8 q + 128
        return q.reshape(m, -1), d.reshape(m, -1), None
    if wtype in (GGMLType.Q4_K, GGMLType.Q5_K):
        d, dmin = read_f16(blocks, 0), read_f16(blocks, 2)
        sc, mn = unpack_k4_scales(blocks[:, 4:16])
        qs_at = 48 if wtype == GGMLType.Q5_K else 16
        qs = blocks[:, qs_at : qs_at + 128].reshape(-1, 4, 1, 32)
        q = (qs >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)) & 15  # (nb, 4, 2, 32): sub-block 2i + half
        if wtype == GGMLType.Q5_K:
            qh = blocks[:, 16:48].reshape(-1, 1, 1, 32)
            bit = np.arange(8, dtype=np.uint8).reshape(1, 4, 2, 1)
            q = q | (((qh >> bit) & 1) << 4)
        s1 = d[:, None] * sc.astype(np.float32)
        s2 = dmin[:, None] * mn.astype(np.float32)
        return q.reshape(m, -1), s1.reshape(m, -1), s2.reshape(m, -1)
    if wtype == GGMLType.Q6_K:
        ql = blocks[:, 0:128].reshape(-1, 2, 2, 1, 32)
        qh = blocks[:, 128:192].reshape(-1, 2, 1, 32)
        low = ((ql >> np.array([0, 4], np.uint8).reshape(1, 1, 1, 2, 1)) & 15).transpose(0, 1, 3, 2, 4)
        high = (qh >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)) & 3
        q = low.reshape(-1, 2, 4, 32) | (high << 4)
        sc = np.ascontiguousarray(blocks[:, 192:208]).view(np.int8).astype(np.float32)
        s1 = read_f16(blocks, 208)[:, None] * sc
        return q.reshape(m, -1), s1.reshape(m, -1), None
    raise ValueError(f"repack: no repacked layout for {wtype.name}")


def pack(w: np.ndarray, wtype: GGMLType) -> Packed | None:
    """The repacked form of the byte rows ``w`` (M, row bytes), or None when a scale is not finite (ggml's
    NaN / inf propagation is left to the other routes)."""
    if wtype not in PACKED_TYPES:
        raise ValueError(f"repack: no repacked layout for {wtype.name}")
    group, offset, has_min, nib = PACKED_TYPES[wtype]
    q, s1, s2 = _fields(w, wtype)
    if not np.isfinite(s1).all() or (s2 is not None and not np.isfinite(s2).all()):
        return None
    m, k = q.shape
    nsub = k // group
    ng = -(-m // LANES)
    mp = ng * LANES
    qp = np.zeros((mp, k), np.uint8)
    qp[:m] = q
    # (group g, lane l, sub-block j, step t, byte) → (g, j, t, l, byte)
    qp = qp.reshape(ng, LANES, nsub, group // 4, 4).transpose(0, 2, 3, 1, 4)
    if nib:  # step t in the low nibbles, step t + steps/2 in the high ones
        half = group // 8
        qp = qp[:, :, :half] | (qp[:, :, half:] << 4)

    def lanes(s: np.ndarray | None) -> np.ndarray:
        out = np.zeros((mp, nsub), np.float32)
        if s is not None:
            out[:m] = s
        return np.ascontiguousarray(out.reshape(ng, LANES, nsub).transpose(0, 2, 1)).reshape(-1)

    q_lanes = np.ascontiguousarray(qp).reshape(-1)
    return Packed(wtype, m, k, group, offset, has_min, nib, q_lanes, lanes(s1), lanes(s2))


# The lane tiles as module globals (None where numba is off), one per (layout, activation rows). The drivers below
# close over integers only: numba's cache key includes a closure's values, and an intrinsic pickles differently in
# every process, so a driver closing over the tiles themselves was compiled again by every process (~3.6 s).
_LANE: dict[tuple[int, bool], dict[int, Any]] = {
    lay: _lane_tiles.LANE_TILES.get(lay, {}) for lay in ((32, False), (32, True), (16, False))
}
_NIB: dict[bool, dict[int, Any]] = {mn: _lane_tiles.NIBBLE_TILES.get((32, mn), {}) for mn in (False, True)}
_L32_8: Any = _LANE[32, False].get(8)
_L32_4: Any = _LANE[32, False].get(4)
_L32_1: Any = _LANE[32, False].get(1)
_L32M_8: Any = _LANE[32, True].get(8)
_L32M_4: Any = _LANE[32, True].get(4)
_L32M_1: Any = _LANE[32, True].get(1)
_L16_8: Any = _LANE[16, False].get(8)
_L16_4: Any = _LANE[16, False].get(4)
_L16_1: Any = _LANE[16, False].get(1)
_N32_8: Any = _NIB[False].get(8)
_N32_4: Any = _NIB[False].get(4)
_N32_1: Any = _NIB[False].get(1)
_N32M_8: Any = _NIB[True].get(8)
_N32M_4: Any = _NIB[True].get(4)
_N32M_1: Any = _NIB[True].get(1)
#: (sub-block length, has minima, two quants a byte) → the layout code :func:`_lane` dispatches on
LAYOUTS: Final = {(32, False, False): 0, (32, True, False): 1, (16, False, False): 2, (32, False, True): 3,
                   (32, True, True): 4}  # fmt: skip


@inline
def _lane(
    layout: int, rows: int, q: np.ndarray, qo: int, s1: np.ndarray, s2: np.ndarray, so: int, xq: np.ndarray, n0: int,
    dx: np.ndarray, sx: np.ndarray, nsub: int, c: int, out: np.ndarray, m0: int,
) -> None:  # fmt: skip  # pragma: no cover - compiled
    """The ``rows``-activation-row lane tile of ``layout`` (:data:`LAYOUTS`: 0 sub-blocks of 32, 1 the same with
    minima, 2 of 16, 3 and 4 as 0 and 1 with two quants a byte)."""
    if layout == 0:
        if rows == 8:
            _L32_8(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
        elif rows == 4:
            _L32_4(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
        else:
            _L32_1(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
    elif layout == 1:
        if rows == 8:
            _L32M_8(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
        elif rows == 4:
            _L32M_4(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
        else:
            _L32M_1(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
    elif layout == 2:
        if rows == 8:
            _L16_8(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
        elif rows == 4:
            _L16_4(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
        else:
            _L16_1(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
    elif layout == 3:
        if rows == 8:
            _N32_8(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
        elif rows == 4:
            _N32_4(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
        else:
            _N32_1(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
    elif rows == 8:
        _N32M_8(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
    elif rows == 4:
        _N32M_4(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
    else:
        _N32M_1(q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)


@inline
def lane_group(
    layout: int, g: int, q: np.ndarray, s1: np.ndarray, s2: np.ndarray, xq: np.ndarray, dx: np.ndarray,
    sx: np.ndarray, nsub: int, c: int, gbytes: int, out: np.ndarray,
) -> None:  # fmt: skip  # pragma: no cover - compiled
    """Group ``g`` of 16 weight rows against every activation row of ``xq``: tiles of 8, then 4, then 1 rows."""
    n_act = xq.shape[0]
    n8 = n_act - n_act % 8
    n4 = n_act - n_act % 4
    qo = g * nsub * gbytes
    so = g * nsub * 16
    m0 = g * 16
    for n0 in range(0, n8, 8):
        _lane(layout, 8, q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
    for n0 in range(n8, n4, 4):
        _lane(layout, 4, q, qo, s1, s2, so, xq, n0, dx, sx, nsub, c, out, m0)
    for n in range(n4, n_act):
        _lane(layout, 1, q, qo, s1, s2, so, xq, n, dx, sx, nsub, c, out, m0)


def _kernel(group: int, has_min: bool, nib: bool) -> Any:
    """The driver for one layout: threads over the groups of 16 rows, 8 / 4 / 1 activation rows per call."""
    layout = LAYOUTS[group, has_min, nib]
    gbytes = group * (8 if nib else 16)  # a sub-block's quant bytes for 16 rows

    def kernel(
        q: np.ndarray, s1: np.ndarray, s2: np.ndarray, xq: np.ndarray, dx: np.ndarray, sx: np.ndarray, c: int,
        out: np.ndarray,
    ) -> None:  # fmt: skip  # pragma: no cover - compiled
        nsub = dx.shape[1]
        for g in prange(out.shape[1] // 16):
            lane_group(layout, g, q, s1, s2, xq, dx, sx, nsub, c, gbytes, out)

    return kernel


def _kernel_name(group: int, has_min: bool, nib: bool) -> str:
    return f"_lanes_{group}{'_min' if has_min else ''}{'_nib' if nib else ''}"


_SIGNATURE: Final = (
    "void(uint8[::1], float32[::1], float32[::1], int8[:, ::1], float32[:, ::1], int32[:, ::1], int64, float32[:, ::1])"
)
SPECS: Final = {lay: _jit.spec_pair(_kernel(*lay), _SIGNATURE, _kernel_name(*lay), ()) for lay in LAYOUTS}


def dot_code(group: int, has_min: bool) -> int:
    """The activations' dot type (:mod:`._act_kernels` code) of a layout: Q8_K for the K-quants, else Q8_0."""
    return DOT_Q8_K if has_min or group == 16 else DOT_Q8_0


@inline
def act_sub_blocks(
    xd: np.ndarray, xsum: np.ndarray, group: int, dx: np.ndarray, sx: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Each activation sub-block's scale ``dx`` and quant sum ``sx`` (N, K/group) from the dot type's block scales
    ``xd`` (per 32 or 256 values) and sums ``xsum`` (per 32 or 16): what the lane tiles read."""
    n_act, nsub = dx.shape
    k = nsub * group
    per = k // xd.shape[1]
    ratio = group // (k // xsum.shape[1])
    for n in range(n_act):
        for j in range(nsub):
            dx[n, j] = xd[n, j * group // per]
            total = 0
            for i in range(ratio):
                total += xsum[n, j * ratio + i]
            sx[n, j] = total


def _decode_kernel(group: int, has_min: bool, nib: bool) -> Any:
    """The few-row driver: quantizes the activations (fused, as :func:`.activations.quantize_activations`), forms
    each sub-block's scale and quant sum, then runs the lane tiles — one compiled call per product, for decode."""
    layout = LAYOUTS[group, has_min, nib]
    gbytes = group * (8 if nib else 16)
    dot = dot_code(group, has_min)

    def kernel(
        x: np.ndarray, quant: bool, q: np.ndarray, s1: np.ndarray, s2: np.ndarray, xq: np.ndarray, xd: np.ndarray,
        xsum: np.ndarray, xs: np.ndarray, lut: np.ndarray, dx: np.ndarray, sx: np.ndarray, c: int, out: np.ndarray,
    ) -> int:  # fmt: skip  # pragma: no cover - compiled
        if quant:
            bad = quantize_into(dot, x, xq, xd, xsum, xs, lut)
            if bad:
                return bad
        k = xq.shape[1]
        nsub = k // group
        act_sub_blocks(xd, xsum, group, dx, sx)
        for g in prange(out.shape[1] // 16):
            lane_group(layout, g, q, s1, s2, xq, dx, sx, nsub, c, gbytes, out)
        return 0

    return kernel


_DECODE_SIGNATURE: Final = (
    "int64(float32[:, ::1], boolean, uint8[::1], float32[::1], float32[::1], int8[:, ::1], float32[:, ::1],"
    " int32[:, ::1], float32[:, ::1], float32[::1], float32[:, ::1], int32[:, ::1], int64, float32[:, ::1])"
)
_DECODE_SPECS: Final = {
    lay: _jit.spec_pair(_decode_kernel(*lay), _DECODE_SIGNATURE, "_decode" + _kernel_name(*lay), (0,))
    for lay in LAYOUTS
}


def decode_kernels(p: Packed) -> tuple[Any, Any] | None:
    """(threads over the row groups, one thread) compiled few-row drivers for ``p``'s layout, or None.

    Arguments of a call: ``x`` float32 (N, K), ``quant`` (False: ``xq``/``xd``/``xsum``/``xs`` already hold the
    quantized rows), ``p.q``, ``p.s1``, ``p.s2``, the activation buffers of a block product (:class:`.product.
    BlockProduct`), the f16 table, ``dx`` float32 and ``sx`` int32 (N, K/group) scratch, ``p.offset``, ``out``
    float32 (N, M) with M a multiple of 16. Returns the number of non-finite activations (then nothing was
    computed: quantize with numpy and call again with ``quant`` False)."""
    fns = tuple(_jit.get(s) for s in _DECODE_SPECS[p.group, p.has_min, p.nib])
    return (fns[0], fns[1]) if fns[0] is not None and fns[1] is not None else None


def packed_supported(wtype: GGMLType) -> bool:
    """True when ``wtype`` has a repacked layout and numba targets 512-bit VNNI or AVX2 without VNNI here (the
    lane tiles of :mod:`._lane_tiles`; on other targets the portable integer sums make the route slower than the
    others, and a CPU with 256-bit VNNI only keeps the block kernels and tiles). Loads no kernel: a model's first
    token, whose prompt is usually too short for this route, does not pay for loading its kernels."""
    return wtype in PACKED_TYPES and _jit.enabled() and (_simd.HAS_VNNI512 or _simd.HAS_AVX2_SUMS)


def packed_ready(wtype: GGMLType) -> bool:
    """True when :func:`packed_supported` and the layout's kernels compile (or load from the cache) here."""
    if not packed_supported(wtype):
        return False
    group, _, has_min, nib = PACKED_TYPES[wtype]
    return all(_jit.get(s) is not None for s in SPECS[group, has_min, nib])


_Entry = tuple[Any, "np.ndarray | None", "Packed | None"]  # (weakref to an immutable owner, or a copy; repack)
_cache: OrderedDict[tuple[int, tuple[int, ...], GGMLType], _Entry] = OrderedDict()
_cache_bytes = [0]
_lock = threading.Lock()


def _immutable_owner(w: np.ndarray) -> mmap.mmap | None:
    """The read-only memory map ``w`` views (a GGUF file mapped ``ACCESS_READ``: its bytes cannot change while it is
    open), or None for any other memory (which may be written, so its repack is checked against a copy)."""
    o: object = w
    while isinstance(o, np.ndarray) and o.base is not None:
        o = o.base
    if isinstance(o, memoryview) and o.readonly and isinstance(o.obj, mmap.mmap):
        return o.obj
    return None


def file_backed(w: np.ndarray) -> bool:
    """True when ``w`` views a read-only file mapping (its repack, once made, stays valid while ``w`` lives)."""
    return _immutable_owner(w) is not None


def _entry_bytes(e: _Entry) -> int:
    return (e[1].nbytes if e[1] is not None else 0) + (e[2].nbytes if e[2] is not None else 0)


def packed(w: np.ndarray, wtype: GGMLType) -> Packed | None:
    """The cached repack of ``w`` (made now when absent, or when the bytes at that address may have changed).

    Weights in a read-only file mapping (the model loader's) are repacked once per mapping — the entry holds a weak
    reference to the map and is valid while that same map is open; any other weights are compared with a copy kept
    for the purpose on every use (exact: changed bytes are always repacked)."""
    key = (int(w.__array_interface__["data"][0]), tuple(w.shape), wtype)
    owner = _immutable_owner(w)
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        ref, copy, p = hit
        if ref is not None and owner is not None and ref() is owner and not owner.closed:
            return p
        if ref is None and copy is not None and np.array_equal(copy, w):
            return p
    size = _packed_bytes(w, wtype) + (0 if owner is not None else int(w.nbytes))
    with _lock:
        old = _cache.pop(key, None)
        if old is not None:
            _cache_bytes[0] -= _entry_bytes(old)
        if _cache_bytes[0] + size > CACHE_BYTES:
            _drop_closed()
        if _cache_bytes[0] + size > CACHE_BYTES:
            # Full: this matrix keeps the other routes. Evicting would make a model whose repacks exceed the cache
            # repack every matrix on every batch (each evicting the next one used), far slower than not repacking.
            return None
    p = pack(w, wtype)
    entry: _Entry = (weakref.ref(owner), None, p) if owner is not None else (None, np.array(w, copy=True), p)
    with _lock:
        if _cache_bytes[0] + _entry_bytes(entry) <= CACHE_BYTES:
            _cache[key] = entry
            _cache_bytes[0] += _entry_bytes(entry)
            if owner is not None and p is not None:
                _release_pages(owner, w)
    return p


def release_pages(w: np.ndarray) -> None:
    """:func:`_release_pages` for weights ``w`` of a read-only file mapping (nothing for other memory)."""
    owner = _immutable_owner(w)
    if owner is not None and not owner.closed:
        _release_pages(owner, w)


def _release_pages(owner: mmap.mmap, w: np.ndarray) -> None:
    """Let the OS drop ``w``'s pages of the read-only file mapping from this process (``MADV_DONTNEED``): the
    repack is what products read from now on, so the file's copy need not stay resident as well (Gemma 3 270M:
    ~75 MB less). Nothing is lost: the mapping is of a file, read-only, and a later read (a product's first calls
    on a new graph, before it switches) faults the bytes back in from the page cache. Only pages wholly inside
    ``w`` are released (a neighbouring tensor may share the edge pages)."""
    advise = getattr(owner, "madvise", None)
    flag = getattr(mmap, "MADV_DONTNEED", None)
    if advise is None or flag is None:
        return
    base = np.frombuffer(owner, np.uint8)  # a view of the whole map, for its address
    start = int(w.__array_interface__["data"][0]) - int(base.__array_interface__["data"][0])
    del base
    page = mmap.PAGESIZE
    first, last = -(-start // page) * page, (start + int(w.nbytes)) // page * page
    if 0 <= first < last <= len(owner):
        with contextlib.suppress(OSError, ValueError):  # advisory only
            advise(flag, first, last - first)


def _packed_bytes(w: np.ndarray, wtype: GGMLType) -> int:
    """What :func:`pack` makes of ``w`` takes, in bytes (quants one byte a weight, or half a byte for 4-bit quants;
    two float32 scales a sub-block)."""
    group, nib = PACKED_TYPES[wtype][0], PACKED_TYPES[wtype][3]
    rows, k = w.shape[0], _row_values(w, wtype)
    mp = -(-rows // LANES) * LANES
    return mp * k // (2 if nib else 1) + 2 * 4 * mp * (k // group)


def _row_values(w: np.ndarray, wtype: GGMLType) -> int:
    """Values in one byte row of ``w``."""
    traits = wtype.traits
    return int(w.shape[1]) // traits.type_size * traits.block_size


def _drop_closed() -> None:
    """Forget repacks of mappings that were closed or collected (their memory can be reused; call with _lock)."""
    for key in [k for k, (ref, _, _) in _cache.items() if ref is not None and (ref() is None or ref().closed)]:
        _cache_bytes[0] -= _entry_bytes(_cache.pop(key))


def act_blocks(acts: QActs, group: int) -> tuple[np.ndarray, np.ndarray]:
    """(scale, quant sum) per activation sub-block of ``group`` values: float32 and int32 (N, K/group)."""
    n, k = acts.q.shape
    per = k // acts.d.shape[1]  # 32 (Q8_0) or 256 (Q8_K)
    dx = acts.d if per == group else np.repeat(acts.d, per // group, axis=1)
    sums = acts.sums  # per 32 (Q8_0) or per 16 (Q8_K)
    per_sum = k // sums.shape[1]
    sx = sums if per_sum == group else sums.reshape(n, k // group, group // per_sum).sum(axis=2, dtype=np.int32)
    return np.ascontiguousarray(dx, dtype=np.float32), np.ascontiguousarray(sx, dtype=np.int32)
