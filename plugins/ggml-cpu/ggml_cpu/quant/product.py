"""Quantized weight rows times float activations, without a full float32 copy of the weights.

:func:`qmatmul` computes ``out = x · dequant(W)ᵀ`` with ggml's CPU numerics (activations quantized to the weight
type's dot type first) by one of three routes:

* **block kernels** (few activation rows, the decode case): integer dot products on the quantized blocks
  themselves (:mod:`.legacy`, :mod:`.kquants`) — the weights are read once, as they are stored;
* **repacked weights** (many rows, the prompt case, for Q4_0 / Q5_0 / Q8_0 / Q4_K / Q5_K / Q6_K where numba
  targets 512-bit VNNI or AVX2 without VNNI): the weights interleaved 16 rows to a vector once (:mod:`.repack`,
  ggml's CPU_REPACK idea), one ``vpdpbusd`` (or two ``vpmaddubsw`` on AVX2) advancing 16 dot products — about 3–5×
  the other routes at 128 rows with VNNI, about 2× on AVX2 (measured: docs/performance.md);
* **tiles** (many rows, other types or machines): a tile of weight rows is dequantized into a reused float32 buffer
  (:mod:`.dequant`, a few MB) and multiplied by BLAS, tile after tile; with several threads each worker of
  :func:`ggml_cpu.threads.parallel_for` dequantizes and multiplies its own tiles with single-threaded BLAS.

Without numba (or for types without compiled kernels) the tile route runs with ``ggml_core.quants``' numpy
dequantizers: slower, same numbers, same bounded memory.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from typing import Any, Final

import numpy as np

from ggml_core import GGMLType
from ggml_core.quants import can_dequantize, dequantize
from ggml_cpu.jit import _jit
from ggml_cpu.jit.halves import F16_VALUES
from ggml_cpu.quant.activations import (
    QActs,
    act_buffers,
    numpy_into,
    quantize_activations,
)
from ggml_cpu.threads import Faster, RowSplit, current_threads, parallel_for, single_threaded_blas

__all__ = [
    "BLOCK_KERNEL_TYPES",
    "DOT_TYPE",
    "BlockProduct",
    "block_kernels_ready",
    "block_product",
    "check_operands",
    "compile_ahead",
    "dequantize_rows",
    "dequantizer_ready",
    "packed_ready",
    "qmatmul",
    "split_of",
    "splits_itself",
    "tile_rows",
    "vec_rows_limit",
]

#: the activation dot type per weight type (ggml's ``vec_dot_type``)
DOT_TYPE: Final = {
    GGMLType.Q4_0: GGMLType.Q8_0,
    GGMLType.Q4_1: GGMLType.Q8_1,
    GGMLType.Q5_0: GGMLType.Q8_0,
    GGMLType.Q5_1: GGMLType.Q8_1,
    GGMLType.Q8_0: GGMLType.Q8_0,
    GGMLType.Q2_K: GGMLType.Q8_K,
    GGMLType.Q3_K: GGMLType.Q8_K,
    GGMLType.Q4_K: GGMLType.Q8_K,
    GGMLType.Q5_K: GGMLType.Q8_K,
    GGMLType.Q6_K: GGMLType.Q8_K,
    # gpt-oss's experts: no block kernel, dequantized tiles (exact: E2M1 values times a power of two) + SGEMM
    GGMLType.MXFP4: GGMLType.Q8_0,
    # an iq4_nl KV cache (or weights): dequantized tiles (d·grid value, exact in float32) + SGEMM, as MXFP4
    GGMLType.IQ4_NL: GGMLType.Q8_0,
}

#: weight types with compiled block kernels (:mod:`.legacy`, :mod:`.kquants`)
BLOCK_KERNEL_TYPES: Final = frozenset(
    {
        GGMLType.Q4_0,
        GGMLType.Q4_1,
        GGMLType.Q5_0,
        GGMLType.Q5_1,
        GGMLType.Q8_0,
        GGMLType.Q4_K,
        GGMLType.Q5_K,
        GGMLType.Q6_K,
    }
)

#: the compile worker (:func:`compile_ahead`): the block kernels of the weight types named on its command line, in
#: that order, into the shared cache
_WORKER: Final = (
    "import sys\nfrom ggml_core import GGMLType\nfrom ggml_cpu import quant\n"
    "for name in sys.argv[1:]:\n    quant.block_kernels_ready(GGMLType[name])\n"
)


def compile_ahead(type_names: list[str]) -> None:
    """The weight types (``GGMLType`` names, in the order a graph needs them) whose block kernels a worker process
    compiles into the shared cache while this process compiles (:func:`ggml_cpu.jit._jit.compile_ahead`)."""
    _jit.compile_ahead(type_names, _WORKER)


_specs: list[tuple[dict[GGMLType, Any], dict[GGMLType, Any], bool, bool]] = []


def _kernels() -> tuple[dict[GGMLType, Any], dict[GGMLType, Any], bool, bool]:
    """(block-kernel specs, tile-dequantizer specs, VNNI?, AVX2 pair sums without VNNI?) — importing the kernel
    modules, and numba, on first use."""
    if not _specs:
        if _jit.enabled():
            from ggml_cpu.jit import _simd
            from ggml_cpu.quant import dequant, fp4, kquants, legacy

            block, tiles = {**legacy.SPECS, **kquants.SPECS}, {**dequant.SPECS, **fp4.SPECS}
            _specs.append((block, tiles, _simd.HAS_VNNI, _simd.HAS_AVX2_SUMS))
        else:
            _specs.append(({}, {}, False, False))
    return _specs[0]


#: weight types whose VNNI 4×4 block tiles (:mod:`.legacy`) beat dequantized tiles + SGEMM up to 512 activation
#: rows (measured here, one thread, 512 × 512 / 1536 × 512 / 512 × 1536, ms; 128 rows: Q4_0 0.80 / 2.25 / 2.17
#: against 1.14 / 3.07 / 3.38, Q5_0 0.85 / 2.48 / 1.83 against 1.00 / 2.98 / 3.24, Q8_0 0.73 / 1.92 / 1.89 against
#: 1.06 / 2.52 / 3.16; 512 rows: Q4_0 2.26 / 6.39 / 6.38 against 3.18 / 8.58 / 9.02, Q8_0 2.09 / 5.70 / 6.19
#: against 3.28 / 8.36 / 9.20)
_TILED_BLOCK_TYPES: Final = frozenset({GGMLType.Q4_0, GGMLType.Q5_0, GGMLType.Q8_0})

#: weight types whose VNNI block kernels still beat dequantized tiles + SGEMM at a prompt batch of 128 rows
#: (measured here, one thread, same shapes: Q4_K 0.73 / 2.10 / 2.21 against 0.90 / 2.49 / 2.74; Q6_K
#: 0.72 / 2.24 / 2.80 against 1.04 / 3.41 / 3.90); at 256 rows tiles win. Q4_1, Q5_1 and Q5_K lose at 128 rows.
_WIDE_BLOCK_TYPES: Final = frozenset({GGMLType.Q4_K, GGMLType.Q6_K})

#: weight types without a repacked layout whose block kernels, on AVX2's ``vpmaddubsw`` sums without VNNI, still
#: beat dequantized tiles + SGEMM at 32 activation rows (Zen 3 guest, one thread, ``bench_qroutes.py --rows 32``:
#: Q4_1 1.20–1.37× faster than tiles; Q5_1 0.74–0.87×). Q4_0 / Q8_0 / Q4_K are so too, but their repacked
#: weights beat both from 8 rows (:data:`_PACKED_ABOVE`)
_AVX2_BLOCK_TYPES: Final = frozenset({GGMLType.Q4_1})


def vec_rows_limit(wtype: GGMLType | None = None) -> int:
    """Up to this many activation rows the block kernels run for ``wtype`` weights; above it, the repacked weights
    where they are ready (:data:`_PACKED_ABOVE` rows: they win from about 8 rows, ``benchmarks/bench_qroutes.py``),
    else dequantized tiles and BLAS. Fixed per type and machine (never measured at run time), so a product's bits do
    not depend on the machine's load.

    With VNNI the integer kernels (4 rows per unpacked block) beat dequantize + SGEMM up to a few dozen rows (Q4_K
    at 32 rows: 4.4 ms against 20 ms on 2 cores), up to 128 rows for :data:`_WIDE_BLOCK_TYPES` and 512 for
    :data:`_TILED_BLOCK_TYPES`; without VNNI the partial sums are slower and tiles win sooner: from 9 rows with the
    portable sums. Types with a repacked layout hand over to it above :data:`_PACKED_ABOVE` rows, on 512-bit VNNI
    and on AVX2's pair sums alike.
    """
    if wtype is not None and _packed_supported(wtype):
        return _PACKED_ABOVE
    _, _, vnni, avx2_sums = _kernels()
    if not vnni:
        return 32 if avx2_sums and wtype in _AVX2_BLOCK_TYPES else 8
    if wtype in _TILED_BLOCK_TYPES:
        return 512
    return 128 if wtype in _WIDE_BLOCK_TYPES else 32


#: above this many activation rows the repacked weights (:mod:`.repack`) take over from the block kernels, where
#: they are ready (measured here, one thread, ``benchmarks/bench_qroutes.py``: see docs/performance.md)
_PACKED_ABOVE: Final = 8


def _packed_supported(wtype: GGMLType) -> bool:
    """True when ``wtype`` has a repacked layout for this machine (:func:`.repack.packed_supported`; loads nothing)."""
    if not _jit.enabled():
        return False
    from ggml_cpu.quant import repack

    return repack.packed_supported(wtype)


def packed_ready(wtype: GGMLType) -> bool:
    """True when ``wtype`` has a repacked layout compiled here (:func:`.repack.packed_ready`)."""
    if not _jit.enabled():
        return False
    from ggml_cpu.quant import repack

    return repack.packed_ready(wtype)


def splits_itself(wtype: GGMLType, n_rows: int) -> bool:
    """True when :func:`qmatmul` of ``n_rows`` activation rows over ``wtype`` weights runs on the repacked weights
    split over the spinning helpers (:mod:`._packed_split`). That split backs off to one thread by itself when a
    helper stalls (:class:`ggml_cpu.threads.RowSplit`), so a caller should not also choose between threaded and
    one-thread runs by timing them: :class:`ggml_cpu.threads.Faster`'s probe alternates *different* products of
    one shape, and of a layer's Q, K, V, O only Q and O quantize their activations (K and V reuse Q's), so its
    threaded samples held more quantizations than its one-thread samples and it picked one thread about half the
    time (measured: the 16 attention projections of a 128-token q4_K prompt, 7.6 ms against 3.5 ms split)."""
    if n_rows <= vec_rows_limit(wtype) or not packed_ready(wtype):
        return False
    from ggml_cpu.quant import _packed_split

    return _packed_split.jobs() is not None


#: types whose dot product adds ``m · s`` (their dequantization splits into ``q·d`` and the block minima)
_MIN_TYPES: Final = frozenset({GGMLType.Q4_1, GGMLType.Q5_1})

#: bytes of float32 weights per dequantized tile (the tile stays in the last-level cache)
_TILE_BYTES: Final = 4 << 20

_local = threading.local()


def _scratch(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A per-thread reusable float32 array (grown on demand): tiles are not re-allocated on every call."""
    size = int(np.prod(shape))
    pool: dict[str, np.ndarray] = getattr(_local, "pool", None) or {}
    _local.pool = pool
    buf = pool.get(name)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, 1), np.float32)
        pool[name] = buf
    return buf[:size].reshape(shape)


#: below this much work (weights × activation rows) a product runs on the calling thread: waking a thread pool
#: costs more (about 35 µs here) than the work
_SERIAL_WORK: Final = 1 << 20

#: one activation row (decode) from this much work (weights) up: the weight rows are cut into parts that the
#: calling thread and spinning helper threads claim (:class:`ggml_cpu.threads.RowSplit`, a few µs a product
#: instead of numba's pool waking), when that measures faster than one thread (:class:`Faster`)
_SPLIT_WORK: Final = 1 << 17
#: the row split is opt-in (``GGML_CPU_ROW_SPLIT=1``): on the shared 2-core machine no end-to-end gain could be
#: shown (the second core was rarely free), and Gemma 3 270M at 2 threads measured no better (docs/performance.md)
_ROW_SPLIT: Final = os.environ.get("GGML_CPU_ROW_SPLIT", "0").strip() == "1"


class _SplitProduct:
    """A one-row block product as parts of whole weight rows (multiples of 4, so each row takes the same tile and
    gives the same bits as on one thread), quantizing the activations first (the kernel on no weight rows)."""

    __slots__ = ("_keep", "_rows", "_serial")

    def __init__(self, serial: Any, jobs: tuple[Any, Any], args: tuple[Any, ...], threads: int) -> None:
        from ggml_cpu.jit import _spin

        x, _, w, wi, xq, xd, xsum, xs, lut, out = args
        m = w.shape[0]
        n_parts = min(threads * (4 if w.nbytes >= 1 << 24 else 1), (m + 3) // 4, _spin.MAX_PARTS)
        cuts = sorted({(m * i // n_parts + 3) // 4 * 4 for i in range(n_parts)} | {m})
        spans = list(itertools.pairwise(cuts))
        desc = np.zeros(_spin.DESC_SIZE, np.int64)
        desc[: _spin.X + 1] = (
            xq.ctypes.data, xq.shape[1], xd.ctypes.data, xd.shape[1], xsum.ctypes.data, xsum.shape[1],
            xs.ctypes.data, xs.shape[1], lut.ctypes.data, w.shape[1], len(spans), x.ctypes.data,
        )  # fmt: skip
        for i, (r0, r1) in enumerate(spans):
            at = _spin.PART0 + _spin.PART_FIELDS * i
            desc[at : at + 3] = (w[r0:].ctypes.data, r1 - r0, out[:, r0:].ctypes.data)
        parts = [(serial, (x, True, w[:0], wi[:0], xq, xd, xsum, xs, lut, out[:, :0]))]  # quantizes, no rows
        parts += [(serial, (x, False, w[r0:r1], wi[r0:r1], xq, xd, xsum, xs, lut, out[:, r0:r1])) for r0, r1 in spans]
        self._keep = args  # the arrays whose addresses ``desc`` holds
        self._serial = serial
        self._rows = RowSplit(jobs, desc, parts, threads)

    def __call__(self, x: Any, quant: bool, *rest: Any) -> int:
        res = self._rows(quant)
        return int(self._serial(x, quant, *rest)) if res is None else res


def split_of(p: Any, arrays: tuple[np.ndarray, ...], lut: np.ndarray, dot: int, threads: int, serial: Any) -> Any:
    """The repacked product split over the spinning helpers (:class:`._packed_split.PackedSplit`), or None where
    their kernels do not compile here."""
    from ggml_cpu.quant import _packed_split

    if _packed_split.jobs() is None or _packed_split.pool(threads - 1) is None:
        return None
    return _packed_split.PackedSplit(p, arrays, lut, dot, threads, serial)


class _QuantFlag:
    """A :class:`._packed_split.PackedSplit` called with a block product's argument tuple (it holds the arrays)."""

    __slots__ = ("_split",)

    def __init__(self, split: Any) -> None:
        self._split = split

    def __call__(self, x: Any, quant: bool, *rest: Any) -> int:
        return int(self._split(quant))


def block_kernels_ready(wtype: GGMLType) -> bool:
    """True when ``wtype`` has compiled block kernels and they compile here (compiles on first call)."""
    specs = _kernels()[0].get(wtype)
    return specs is not None and all(_jit.get(spec) is not None for spec in specs)


def dequantizer_ready(wtype: GGMLType) -> bool:
    """True when ``wtype`` has a compiled row dequantizer here (:func:`dequantize_rows` then runs compiled code)."""
    spec = _kernels()[1].get(wtype)
    return spec is not None and _jit.get(spec) is not None


def tile_rows(k: int, m: int) -> int:
    """Weight rows per dequantized tile for rows of ``k`` elements: at most 4 MiB of float32, and at most a quarter
    of the ``m`` rows (rounded up to 16), so that there are tiles to share among workers. Fixed by the shape alone,
    never by the thread count: every tile is one single-threaded SGEMM, so the bits do not depend on threads."""
    quarter = (m + 63) // 64 * 16  # ⌈m/4⌉ rounded up to 16
    return max(16, min(m, _TILE_BYTES // (4 * max(k, 1)), quarter))


def dequantize_rows(w: np.ndarray, wtype: GGMLType, r0: int, r1: int, out: np.ndarray, mins: np.ndarray) -> None:
    """Rows ``r0:r1`` of the byte rows ``w`` into ``out[: r1-r0]`` (Q4_1/Q5_1: ``q·d`` here and ``m`` in ``mins``)."""
    spec = _kernels()[1].get(wtype)
    fn = _jit.get(spec) if spec is not None else None
    if fn is not None:
        fn(w, w.view(np.int8), r0, r1, F16_VALUES, out, mins)
        return
    rows = dequantize(w[r0:r1], wtype)
    if wtype in _MIN_TYPES:
        blocks = np.ascontiguousarray(w[r0:r1]).reshape(r1 - r0, -1, wtype.type_size)
        m = np.ascontiguousarray(blocks[..., 2:4]).view("<f2")[..., 0].astype(np.float32)
        mins[: r1 - r0] = m
        rows -= np.repeat(m, 32, axis=1)
    out[: r1 - r0] = rows


class BlockProduct:
    """``out = x · dequant(W)ᵀ`` on fixed arrays by the block kernels, prepared once and run many times.

    Everything is resolved here — the compiled kernels, the activation-quantization buffers, the argument tuples —
    so a call is one call into compiled code that quantizes the rows of ``x`` (fused, bit for bit as
    :func:`.activations.quantize_activations`) and runs the block dot products: no allocation, no Python per
    block. A MUL_MAT node binds one per weight slice (``ggml_cpu.ops.matmul``); :func:`qmatmul` makes one per
    call. Rows holding NaN or infinity are quantized by the numpy reference instead (the kernel reports them).

    Build with :func:`block_product`; ``x`` and ``out`` are read and written in place on every call.
    """

    __slots__ = (
        "_acts", "_args", "_calls", "_dot", "_faster", "_key", "_pack_split", "_pack_w", "_pre", "_repacked", "_serial",
        "_small", "_split", "_tiny", "_x",
    )  # fmt: skip

    def __init__(self, fns: tuple[Any, Any], w: np.ndarray, wtype: GGMLType, x: np.ndarray, out: np.ndarray) -> None:
        n, k = x.shape
        dot = DOT_TYPE[wtype]
        xq, xd, xsum, xs = act_buffers(n, k, dot)
        parallel, self._serial = fns
        self._key = (wtype, w.shape, x.shape)
        self._split: tuple[int, Any] | None = None  # (threads, split or one thread) for one activation row
        self._small = out.size * k < (_SPLIT_WORK if n == 1 and _ROW_SPLIT else _SERIAL_WORK)
        self._faster = Faster(parallel, self._serial, key=self._key)
        self._x, self._dot, self._acts = x, dot, (xq, xd, xsum, xs)
        tail = (w, w.view(np.int8), xq, xd, xsum, xs, F16_VALUES, out)
        self._args: tuple[Any, ...] = (x, True, *tail)
        self._pre: tuple[Any, ...] = (x, False, *tail)
        # weights mapped read-only from a file switch to their repacked form after a few calls (see _repack)
        self._calls, self._repacked = 0, False
        self._pack_split: Any = None  # once repacked: the PackedSplit for a thread count
        self._tiny = out.size * k < _SPLIT_WORK  # too little work to split even over spinning helpers
        self._pack_w = w if _decode_packable(w, wtype, n, out) else None

    def _repack(self) -> None:
        """From now on read the repacked weights (:mod:`.repack`): 4-bit types at half a byte a weight in 16-row
        vectors, about twice the speed of the block kernels for one activation row (the block kernels are bound by
        unpacking, the repacked ones by memory). Done after :data:`_PACK_AFTER` calls, so that a one-off product
        (a model's first token) does not pay for the repack; the repack is shared with prompt batches (one cache).
        Nothing changes when the repack cannot be made (the cache is full, a scale is not finite)."""
        from ggml_cpu.quant import repack

        w, self._pack_w = self._pack_w, None
        if w is None:
            return
        p = repack.packed(w, self._key[0])
        fns = repack.decode_kernels(p) if p is not None else None
        if p is None or fns is None:
            return
        x, _, _, _, xq, xd, xsum, xs, lut, out = self._args
        nsub = p.k // p.group
        dx, sx = np.empty((x.shape[0], nsub), np.float32), np.empty((x.shape[0], nsub), np.int32)
        tail = (p.q, p.s1, p.s2, xq, xd, xsum, xs, lut, dx, sx, p.offset, out)
        self._args, self._pre = (x, True, *tail), (x, False, *tail)
        self._serial = fns[1]
        self._faster = Faster(fns[0], fns[1], key=("packed", *self._key))
        self._repacked = True
        self._split = None
        repack.release_pages(w)  # this product's first calls read the file's pages again: let them go
        arrays = (x, xq, xd, xsum, xs, dx, sx, out)
        self._pack_split = functools.partial(split_of, p, arrays, lut, repack.dot_code(p.group, p.has_min))

    def _packed_split_for(self, threads: int) -> Any:
        """The repacked product split over the spinning helpers (numba's pool where they do not compile).

        Not chosen against one thread by :class:`Faster`: its few timed calls mislead here (a part's weights sit in
        whichever core's cache ran it last, so short probes measure cache placement), and measured end to end
        the split always on is the faster (q4_0 bench model, 2 threads: 1,350 tok/s against 1,090 with the
        probe, 1,000 on one thread). A helper that stalls makes the split back off to one thread by itself."""
        split = self._split
        if split is None or split[0] != threads:
            parts = self._pack_split(threads, self._serial)
            split = self._split = (threads, _QuantFlag(parts) if parts is not None else self._faster)
        return split[1]

    def _split_for(self, threads: int) -> Any:
        split = self._split
        if split is None or split[0] != threads:
            from ggml_cpu.jit import _spin

            wtype = self._key[0]
            jobs = _spin.block_jobs(self._serial, wtype.name.lower())
            if jobs is None:
                self._split = (threads, self._faster)
                return self._faster
            parts = _SplitProduct(self._serial, jobs, self._args, threads)
            split = self._split = (threads, Faster(parts, self._serial, key=("split", threads, *self._key)))
        return split[1]

    def __call__(self) -> None:
        if self._pack_w is not None:
            self._calls += 1
            if self._calls > _PACK_AFTER:
                self._repack()
        threads = _jit.current_threads()
        if self._repacked:
            fn = self._serial if threads == 1 or self._tiny else self._packed_split_for(threads)
        elif self._small or threads == 1:
            fn = self._serial
        elif _ROW_SPLIT and self._x.shape[0] == 1:
            fn = self._split_for(threads)
        else:
            fn = self._faster
        if fn(*self._args):  # non-finite activations: the numpy quantizer defines their bytes
            numpy_into(self._x, self._dot, *self._acts)
            # the one-thread repacked driver forms the sub-block sums from these itself (the split does so only
            # when it quantizes)
            (self._serial if self._repacked else fn)(*self._pre)


#: a block product over file-mapped weights reads their repacked form from this many calls on
_PACK_AFTER: Final = 2
#: weight matrices larger than this keep the block kernels for few-row products: they stream from memory on every
#: call whatever the layout, and the repacked form of Q8_0 / Q5_0 / Q6_K has more bytes (measured here, one thread:
#: Gemma 3's 262144 × 640 Q8_0 output, 14.3 ms from its blocks against 16.3 ms repacked, 1.6 s to repack)
_DECODE_REPACK_MAX_BYTES: Final = 32 << 20


def _decode_packable(w: np.ndarray, wtype: GGMLType, n: int, out: np.ndarray) -> bool:
    """True when a block product of ``n`` activation rows may switch to the repacked weights: the type has a
    repacked layout on this machine, the rows fill whole 16-row groups, the matrix is at most
    :data:`_DECODE_REPACK_MAX_BYTES`, and the weights are mapped read-only from a
    file (their repack cannot go stale; weights in writable memory keep the block kernels, which read them as they
    are on every call)."""
    if n > _PACKED_ABOVE or out.shape[1] % 16 or w.nbytes > _DECODE_REPACK_MAX_BYTES or not _packed_supported(wtype):
        return False
    from ggml_cpu.quant import repack

    return repack.file_backed(w)


def block_product(w: np.ndarray, wtype: GGMLType, x: np.ndarray, out: np.ndarray) -> BlockProduct | None:
    """A :class:`BlockProduct` for these arrays, or None when ``wtype`` has no compiled block kernels here.

    :param w: the weight rows, uint8 ``(M, row_bytes)`` C-contiguous (may be read-only)
    :param x: float32 activations ``(N, K)`` C-contiguous (may be read-only)
    :param out: float32 ``(N, M)`` C-contiguous
    """
    check_operands(w, wtype, x, out)
    if wtype not in BLOCK_KERNEL_TYPES or x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    if out.dtype != np.float32 or not out.flags.c_contiguous or not w.flags.c_contiguous:
        return None
    specs = _kernels()[0].get(wtype)
    fns = tuple(_jit.get(spec) for spec in specs) if specs is not None else ()
    if len(fns) != 2 or fns[0] is None or fns[1] is None:
        return None
    return BlockProduct((fns[0], fns[1]), w, wtype, x, out)


def _tile_product(w: np.ndarray, wtype: GGMLType, acts: QActs, out: np.ndarray) -> None:
    m, k = out.shape[1], acts.q.shape[1]
    xd = acts.dequantized()
    step = tile_rows(k, m)
    s = acts.s.reshape(acts.d.shape) if wtype in _MIN_TYPES else None
    n_tiles = -(-m // step)
    workers = min(current_threads(), n_tiles)

    def work(first: int) -> None:
        tile = _scratch("tile", (step, k))
        mins = _scratch("mins", (step, k // 32))
        for r0 in range(first * step, m, workers * step):
            r1 = min(m, r0 + step)
            dequantize_rows(w, wtype, r0, r1, tile, mins)
            np.matmul(xd, tile[: r1 - r0].T, out=out[:, r0:r1])
            if s is not None:
                out[:, r0:r1] += s @ mins[: r1 - r0].T

    with single_threaded_blas():
        parallel_for(work, workers)


def qmatmul(w: np.ndarray, wtype: GGMLType, x: np.ndarray, out: np.ndarray, *, route: str = "auto") -> None:
    """``out[n, m] = Σ_k x[n, k] · W[m, k]`` with ggml's numerics for quantized weights.

    :param w: the weight rows, uint8 ``(M, row_bytes)`` C-contiguous
    :param wtype: their type (any with a dot type and a dequantizer)
    :param x: float32 activations ``(N, K)``
    :param out: float32 ``(N, M)`` C-contiguous, written
    :param route: ``"auto"``, ``"block"`` (block kernels, when compiled), ``"packed"`` (repacked weights,
        :mod:`.repack`, where compiled with 512-bit VNNI or AVX2) or ``"tile"`` (dequantized tiles + SGEMM)
    """
    n = x.shape[0]
    if n == 0 or out.size == 0:
        return
    check_operands(w, wtype, x, out)
    use_block = route == "block" or (route == "auto" and n <= vec_rows_limit(wtype))
    if use_block:
        product = block_product(w, wtype, np.ascontiguousarray(x, dtype=np.float32), out)
        if product is not None:
            product()
            return
    acts = _batch_activations(x, DOT_TYPE[wtype])
    if route in ("auto", "packed") and packed_ready(wtype):
        from ggml_cpu.quant import _packed_split, repack

        packed = repack.packed(w, wtype)
        if packed is not None:
            # threads: split over the spinning helpers (same bits: the lanes do not depend on the split)
            _packed_split.packed_product(packed, acts, out, current_threads())
            return
    _tile_product(w, wtype, acts, out)


#: the latest batch's activations per dot type: ``dot -> (a copy of x, its QActs)``. A layer multiplies the same
#: normed activations by Q, K, V (and gate, up): they are quantized once; a copy of x is compared on each use (a few
#: µs against ~0.1 ms for quantizing 128 × 512 rows), so changed activations are always quantized again.
_last_acts: dict[GGMLType, tuple[np.ndarray, QActs]] = {}


#: from this many activation rows a batch is quantized by the calling thread and the spinning helpers together
#: (128 × 512 rows: 0.09 ms on one thread)
_SPLIT_QUANT_ROWS: Final = 16


def _batch_activations(x: np.ndarray, dot: GGMLType) -> QActs:
    """``quantize_activations(x, dot)``, reusing the previous call's result when ``x`` holds the same values."""
    hit = _last_acts.get(dot)
    if hit is not None and hit[0].shape == x.shape and np.array_equal(hit[0], x):
        return hit[1]
    acts = None
    threads = current_threads()
    if threads > 1 and x.shape[0] >= _SPLIT_QUANT_ROWS and _jit.enabled():
        from ggml_cpu.quant import _packed_split

        acts = _packed_split.quantize_rows(x, dot, threads)
    if acts is None:
        acts = quantize_activations(x, dot)
    if x.size >= 4096:  # worth keeping: a batch's rows, not a decode step's
        _last_acts[dot] = (np.array(x, dtype=np.float32, copy=True), acts)
    return acts


def check_operands(w: np.ndarray, wtype: GGMLType, x: np.ndarray, out: np.ndarray) -> None:
    n, k = x.shape
    if k % wtype.block_size or w.shape[1] != k // wtype.block_size * wtype.type_size or out.shape != (n, w.shape[0]):
        raise ValueError(f"qmatmul: weights {w.shape} of {wtype.name}, activations {x.shape}, out {out.shape} disagree")
    if not can_dequantize(wtype) or wtype not in DOT_TYPE:
        raise ValueError(f"qmatmul: no dot product for {wtype.name} weights")
