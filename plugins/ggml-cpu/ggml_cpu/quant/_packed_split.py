"""Repacked products (:mod:`.repack`) split across the calling thread and spinning helper threads.

The weights' groups of 16 rows are cut into parts that whichever thread gets to them first claims
(:class:`ggml_cpu.threads.RowSplit`, the synchronisation of :mod:`ggml_cpu.jit._spin`): the caller never waits for a
helper that has not started, and a helper spinning between products joins within a microsecond where numba's OpenMP
pool, sleeping between kernels so as not to starve BLAS, takes ~75 µs to wake (measured here: a 512 × 512 Q4_0 decode
product, 5 µs on one thread, took 78 µs on numba's two threads). Each group is the same lane tile on the same operands
as on one thread, so the bits do not depend on the split.

The helpers stay in one compiled loop (:func:`_serve`) for a whole model: each job names, in its descriptor, the
compiled function that runs one of its parts (:func:`part_address`: a repacked layout's groups of rows, an
activation quantizer's rows, a row kernel's rows), called through its address. Each such function is compiled the
first time a job needs it, so a model compiles the parts of its own types and ops only (one loop inlining every
layout, quantizer and row kernel took minutes to compile, for an f32 model too).

Descriptor (int64, the helpers' ``desc``): the addresses and sizes below, then per part its first and last group.
Imported only once numba is loaded (see :mod:`ggml_cpu.jit._jit`).
"""

from __future__ import annotations

import os
import platform
import sys
import threading
from collections.abc import Callable
from typing import Any, Final

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

from ggml_core import GGMLType
from ggml_cpu.jit import _jit, _spin
from ggml_cpu.jit._spin import (
    atomic_add,
    atomic_load,
    atomic_store,
    f32_at,
    futex_wait,
    futex_wake,
    i8_at,
    i32_at,
    i64_at,
    pause,
    timestamp,
    u8_at,
)  # fmt: skip
from ggml_cpu.jit.halves import F16_VALUES
from ggml_cpu.quant import repack
from ggml_cpu.quant._act_kernels import DOT_Q8_0, DOT_Q8_1, DOT_Q8_K, quantize_into
from ggml_cpu.quant.activations import QActs, act_buffers
from ggml_cpu.quant.repack import LAYOUTS, Packed, act_sub_blocks, lane_group

__all__ = [
    "PackedSplit",
    "add_part_kind",
    "jobs",
    "nudge",
    "packed_product",
    "part_address",
    "pool",
    "quantize_rows",
    "running",
]

X, XQ, XD, XD_COLS, XSUM, XSUM_COLS, XS, LUT, DX, SX, N, K, NSUB, C, LAYOUT, GBYTES = range(16)
Q, Q_LEN, S1, S_LEN, S2, OUT, M, DOT, N_PARTS, MODE = range(16, 26)
#: addresses of compiled functions (:func:`part_address`): the job's part, a product's quantizer of activation rows
#: (:data:`QUANTIZE_ROWS`) and the part of its quantizing phase (a :data:`QUANTIZE` job)
PART_FN, QUANT_FN, QUANT_PART_FN = 26, 27, 28
#: ``desc[MODE]``: the parts are groups of 16 weight rows of a product, or rows of activations to quantize
PRODUCT, QUANTIZE = 0, 1
PART0, PART_FIELDS = 32, 2
MAX_PARTS: Final = 255
#: activations of at least this many values are quantized by every thread (measured: 128 × 512 to Q8_K takes
#: ~40 µs on one thread, a posted job ~2 µs); fewer, as a decode step's one row, by the caller alone
SPLIT_QUANTIZE: Final = 16384
#: parts of rows in that quantizing phase
QUANTIZE_PARTS: Final = 8
DESC_SIZE: Final = PART0 + PART_FIELDS * MAX_PARTS
assert DESC_SIZE <= _spin.DESC_SIZE  # the helpers' shared descriptor holds either kind of job

_claim = _jit.inline(_spin.claim)


def _call_typer(typingctx: Any, fn: Any, a: Any, b: Any, c: Any) -> Any:
    """``fn(a, b, c)`` for the address ``fn`` of a compiled ``int64(int64, int64, int64)`` function."""

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        i64 = ir.IntType(64)
        ptr = builder.inttoptr(args[0], ir.FunctionType(i64, [i64, i64, i64]).as_pointer())
        return builder.call(ptr, list(args[1:]))

    return types.int64(types.int64, types.int64, types.int64, types.int64), codegen


def _data_typer(typingctx: Any, a: Any) -> Any:
    """The address of an array's first element."""

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        return builder.ptrtoint(data, ir.IntType(64))

    return types.int64(a), codegen


_call: Any = intrinsic(_call_typer)
_data: Any = intrinsic(_data_typer)


@_jit.inline
def _part(ctl: np.ndarray, desc: np.ndarray, p: int) -> None:  # pragma: no cover - compiled
    """Part ``p`` of the job in ``desc``: its compiled part function (``desc[PART_FN]``)."""
    _call(desc[PART_FN], _data(ctl), _data(desc), p)


def _product_part(layout: int) -> Any:
    """The part function of repacked products of ``layout``: groups of 16 weight rows against every activation row
    (8 / 4 / 1 rows a tile)."""

    def part(ctl_at: int, desc_at: int, p: int) -> int:  # pragma: no cover - compiled
        desc = numba.carray(i64_at(desc_at), DESC_SIZE)
        n, k, nsub = desc[N], desc[K], desc[NSUB]
        q = numba.carray(u8_at(desc[Q]), desc[Q_LEN])
        s1 = numba.carray(f32_at(desc[S1]), desc[S_LEN])
        s2 = numba.carray(f32_at(desc[S2]), desc[S_LEN])
        xq = numba.carray(i8_at(desc[XQ]), (n, k))
        dx = numba.carray(f32_at(desc[DX]), (n, nsub))
        sx = numba.carray(i32_at(desc[SX]), (n, nsub))
        out = numba.carray(f32_at(desc[OUT]), (n, desc[M]))
        c, gbytes = desc[C], desc[GBYTES]
        at = PART0 + PART_FIELDS * p
        for g in range(desc[at], desc[at + 1]):
            lane_group(layout, g, q, s1, s2, xq, dx, sx, nsub, c, gbytes, out)
        return 0

    return part


def _quantize_part(dot: int) -> Any:
    """The part function of a :data:`QUANTIZE` job to the activation type ``dot``: its rows quantized
    (:func:`_quantize_rows`); non-finite inputs are counted in ``ctl[BAD]``."""

    def part(ctl_at: int, desc_at: int, p: int) -> int:  # pragma: no cover - compiled
        desc = numba.carray(i64_at(desc_at), DESC_SIZE)
        at = PART0 + PART_FIELDS * p
        bad = _quantize_rows(desc, desc[at], desc[at + 1], dot)
        if bad:
            atomic_add(numba.carray(i64_at(ctl_at), _spin.CTL_SIZE), _spin.BAD, bad)
        return 0

    return part


def _quantizer(dot: int) -> Any:
    """Rows ``r0 .. r1`` of a product's activations (descriptor at ``desc_at``) quantized to ``dot`` on this
    thread: the count of non-finite inputs."""

    def quantize(desc_at: int, r0: int, r1: int) -> int:  # pragma: no cover - compiled
        return _quantize_rows(numba.carray(i64_at(desc_at), DESC_SIZE), r0, r1, dot)

    return quantize


#: the kinds of :func:`part_address`: the function making the kernel of one value, and the kernel's name (more
#: kinds join with :func:`add_part_kind`)
_PART_KINDS: Final[dict[str, tuple[Callable[[int], Any], str]]] = {
    "product": (_product_part, "spin_part_lanes"),
    "quantize": (_quantize_part, "spin_part_quantize"),
    "quantizer": (_quantizer, "spin_quantize_rows"),
}


def add_part_kind(kind: str, make: Callable[[int], Any], name: str) -> None:
    """Let jobs of ``kind`` run on the helpers: ``make(value)`` returns the part function of ``value`` (in the numba
    subset, ``int64(ctl address, desc address, part)``), compiled as ``name_value`` by :func:`part_address`."""
    _PART_KINDS.setdefault(kind, (make, name))


_part_specs: dict[tuple[str, int], _jit.KernelSpec] = {}


def part_address(kind: str, value: int) -> int | None:
    """The address of the compiled part function of ``kind`` for ``value`` (compiled on first use): ``product`` of
    the repacked layout ``value`` (:data:`.repack.LAYOUTS`), ``quantize`` to the activation code ``value``
    (:data:`._act_kernels.DOT_Q8_0` ...), a kind added by :func:`add_part_kind` (the row kernels' ``rows``), or
    ``quantizer`` (a product's activations on one thread, ``int64(desc, r0, r1)``); None where it fails to
    build (logged once by :mod:`ggml_cpu.jit._jit`)."""
    spec = _part_specs.get((kind, value))
    if spec is None:
        make, name = _PART_KINDS[kind]
        sig = "int64(int64, int64, int64)"
        spec = _part_specs[kind, value] = _jit.KernelSpec(make(value), sig, name=f"{name}_{value}", cfunc=True)
    fn: Any = _jit.get(spec)
    return None if fn is None else int(fn.address)


@_jit.inline
def _prep(desc: np.ndarray) -> int:  # pragma: no cover - compiled
    """Quantize every activation row on this thread, with the sub-block scales and sums; the count of non-finite
    inputs."""
    return _call(desc[QUANT_FN], _data(desc), 0, desc[N])


@_jit.inline
def _quantize_rows(desc: np.ndarray, r0: int, r1: int, dot: int) -> int:  # pragma: no cover - compiled
    """Rows ``r0 .. r1`` of ``x`` quantized to ``dot`` (:func:`._act_kernels.quantize_into`), with their sub-block
    scales and sums when ``desc[NSUB]`` is set (a product's); the count of non-finite inputs (then no sums are
    formed)."""
    k, rows, cd, cs = desc[K], r1 - r0, desc[XD_COLS], desc[XSUM_COLS]
    x = numba.carray(f32_at(desc[X] + 4 * r0 * k), (rows, k))
    xq = numba.carray(i8_at(desc[XQ] + r0 * k), (rows, k))
    xd = numba.carray(f32_at(desc[XD] + 4 * r0 * cd), (rows, cd))
    xsum = numba.carray(i32_at(desc[XSUM] + 4 * r0 * cs), (rows, cs))
    xs = numba.carray(f32_at(desc[XS] + 4 * r0 * cd), (rows, cd))
    lut = numba.carray(f32_at(desc[LUT]), 65536)
    bad = quantize_into(dot, x, xq, xd, xsum, xs, lut)
    if bad:
        return bad
    nsub = desc[NSUB]
    if nsub > 0:
        dx = numba.carray(f32_at(desc[DX] + 4 * r0 * nsub), (rows, nsub))
        sx = numba.carray(i32_at(desc[SX] + 4 * r0 * nsub), (rows, nsub))
        act_sub_blocks(xd, xsum, k // nsub, dx, sx)
    return 0


def _serve(ctl: np.ndarray, desc: np.ndarray, cycles: int) -> int:
    """A helper, for good (without the GIL): spin up to ``cycles`` time-stamp ticks for a job, run the parts it
    claims, and when none came sleep on the futex word ``ctl[WAKE]`` until the caller posts one. Returns when a
    job of number −1 is posted (the pool is replaced)."""
    seen = atomic_load(ctl, _spin.SEQ) >> 16  # pragma: no cover - compiled
    if seen < 0:  # stopped before this helper began
        return 0
    while True:
        t0 = timestamp()
        job = atomic_load(ctl, _spin.SEQ) >> 16
        while job == seen and timestamp() - t0 <= cycles:
            job = atomic_load(ctl, _spin.SEQ) >> 16
        if job != seen:
            if job < 0:
                return 0
            seen = job
            done = 0
            while True:
                p = _claim(ctl, job)
                if p < 0:
                    break
                _part(ctl, desc, p)
                done += 1
            if done:
                atomic_add(ctl, _spin.DONE, done)
            continue
        word = atomic_load(ctl, _spin.WAKE)
        atomic_add(ctl, _spin.ASLEEP, 1)
        if atomic_load(ctl, _spin.SEQ) >> 16 == seen:  # checked after counting itself asleep: no post goes unseen
            futex_wait(ctl, _spin.WAKE, word)
        atomic_add(ctl, _spin.ASLEEP, -1)


def _run(ctl: np.ndarray, desc: np.ndarray, mine: np.ndarray, job: int, kind: int, quant: bool) -> int:
    """The caller: with ``quant`` quantize the activations first (−1, nothing posted, when they hold NaN or
    infinity), a prompt's rows split across the threads as job ``job − 1``; post ``mine`` as job ``job`` (waking
    sleeping helpers), run the parts nobody claimed first, wait for the rest; returns 0, or −1 when quantizing
    parts met non-finite inputs. (``kind`` is :class:`ggml_cpu.threads.RowSplit`'s; this pool serves one kind.)"""
    if quant:  # pragma: no cover - compiled
        if mine[N] * mine[K] < SPLIT_QUANTIZE:
            if _prep(mine):
                return -1
        elif _quantize_phase(ctl, desc, mine, job - 1):
            return -1
    return _post(ctl, desc, mine, job, True)


@_jit.inline
def _quantize_phase(ctl: np.ndarray, desc: np.ndarray, mine: np.ndarray, job: int) -> int:  # pragma: no cover
    """A product's activations quantized by every thread as job ``job`` (parts of rows, :data:`QUANTIZE` mode):
    the bytes of :func:`_prep`, which quantizes the same rows with the same code on one thread; non-zero when they
    hold NaN or infinity."""
    for i in range(PART0):
        desc[i] = mine[i]
    n = mine[N]
    n_parts = min(n, QUANTIZE_PARTS)
    desc[MODE], desc[N_PARTS], desc[PART_FN] = QUANTIZE, n_parts, mine[QUANT_PART_FN]
    for i in range(n_parts):
        desc[PART0 + PART_FIELDS * i] = n * i // n_parts
        desc[PART0 + PART_FIELDS * i + 1] = n * (i + 1) // n_parts
    return _post(ctl, desc, desc, job, False)


@_jit.inline
def _post(ctl: np.ndarray, desc: np.ndarray, mine: np.ndarray, job: int, copy: bool) -> int:  # pragma: no cover
    """Post ``mine`` (with ``copy`` first copied into ``desc``, else ``desc`` itself) as job ``job``, run the
    parts nobody claimed first, wait for the rest; 0, or −1 when quantizing parts met non-finite inputs."""
    if copy:
        for i in range(PART0 + PART_FIELDS * mine[N_PARTS]):
            desc[i] = mine[i]
    n, done = mine[N_PARTS], 0
    atomic_store(ctl, _spin.BAD, 0)
    atomic_store(ctl, _spin.DONE, job << 16)
    atomic_store(ctl, _spin.SEQ, job << 16 | n << 8)
    if atomic_load(ctl, _spin.ASLEEP) > 0:
        atomic_add(ctl, _spin.WAKE, 1)
        futex_wake(ctl, _spin.WAKE, 1 << 30)
    while True:
        p = _claim(ctl, job)
        if p < 0:
            break
        _part(ctl, desc, p)
        done += 1
    atomic_add(ctl, _spin.DONE, done)
    want = job << 16 | n
    while atomic_load(ctl, _spin.DONE) != want:
        pause()
    return -1 if atomic_load(ctl, _spin.BAD) else 0


def _stop(ctl: np.ndarray) -> int:
    """Post job −1 (the helpers return) and wake them."""
    atomic_store(ctl, _spin.SEQ, -(1 << 16))  # pragma: no cover - compiled
    atomic_add(ctl, _spin.WAKE, 1)
    return futex_wake(ctl, _spin.WAKE, 1 << 30)


def _nudge(ctl: np.ndarray) -> int:
    """Wake the sleeping helpers without a job: they spin for the next one (posted within their spin time)."""
    if atomic_load(ctl, _spin.ASLEEP) > 0:  # pragma: no cover - compiled
        atomic_add(ctl, _spin.WAKE, 1)
        return futex_wake(ctl, _spin.WAKE, 1 << 30)
    return 0


_ARR: Final = "int64[::1]"
_SPECS: Final = (
    _jit.KernelSpec(_serve, f"int64({_ARR}, {_ARR}, int64)", name="spin_serve_packed"),
    _jit.KernelSpec(_run, f"int64({_ARR}, {_ARR}, {_ARR}, int64, int64, boolean)", name="spin_run_packed"),
    _jit.KernelSpec(_stop, f"int64({_ARR})", name="spin_stop_packed"),
)
_NUDGE_SPEC: Final = _jit.KernelSpec(_nudge, f"int64({_ARR})", name="spin_nudge_packed")


def jobs() -> tuple[Any, Any, Any] | None:
    """The compiled (helper loop, caller's run, stop) of repacked products, or None where they fail to build."""
    if not _FUTEX:  # the inline futex call is Linux x86-64's system call: elsewhere numba's pool runs these
        return None
    fns = tuple(_jit.get(spec) for spec in _SPECS)
    return (fns[0], fns[1], fns[2]) if all(fn is not None for fn in fns) else None


_FUTEX: Final = sys.platform == "linux" and platform.machine().lower() in ("x86_64", "amd64")


class _Pool:
    """``n`` helper threads serving repacked products. Each runs :func:`_serve` for good: it spins
    :attr:`SPIN_CYCLES` ticks after a job (a decode step's products come 10-50 µs apart), then sleeps on a futex
    that the next caller wakes — no GIL and no Python event on either side (waking a helper through the GIL cost
    ~100 µs of the caller's time on a 2-core VM: the GIL's hand-over waits for a halted virtual CPU)."""

    SPIN_CYCLES: Final = 1_000_000

    def __init__(self, n: int, fns: tuple[Any, Any, Any]) -> None:
        self.n, self.pid = n, os.getpid()
        self.ctl = np.zeros(_spin.CTL_SIZE, np.int64)
        self.desc = np.zeros(DESC_SIZE, np.int64)
        self.job = 0
        self.lock = threading.Lock()  # one job at a time: another caller meanwhile runs its product alone
        #: a batch product (repacked, the quantizer, the f32 tiles) uses this pool, so a batch's row kernels may
        #: too (see :func:`running`)
        self.batch = False
        self._stop = fns[2]
        for i in range(n):
            args = (self.ctl, self.desc, self.SPIN_CYCLES)
            threading.Thread(target=fns[0], args=args, name=f"ggml-cpu-packed-{i}", daemon=True).start()

    def kind(self, serve: Any) -> int:
        """:class:`ggml_cpu.threads.RowSplit`'s job kind: this pool serves one."""
        return 1

    def run(self, run: Any, mine: np.ndarray, kind: int, quant: bool) -> int | None:
        """Post the job ``mine`` and run it with the helpers: 0, or −1 when the activations are not finite
        (nothing run); None (nothing run) when another caller has the helpers."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            self.job += 2  # a product may post two jobs: its quantizing phase (job − 1), then itself
            return int(run(self.ctl, self.desc, mine, self.job, kind, quant))
        finally:
            self.lock.release()

    def nudge(self) -> None:
        """Wake sleeping helpers ahead of a job this thread posts soon (a few hundred µs of its own work first),
        so that they spin for it instead of waking when it is posted (~100 µs on a 2-core VM, which the caller
        spends alone)."""
        fn = _jit.get(_NUDGE_SPEC)
        if fn is not None:
            fn(self.ctl)

    def close(self) -> None:
        """Stop the helpers (they return from :func:`_serve`)."""
        self._stop(self.ctl)


_pools: dict[int, _Pool] = {}
_pools_lock = threading.Lock()


def pool(n: int, *, batch: bool = False) -> _Pool | None:
    """The pool of ``n`` helpers (started on first use, again after a fork), or None without the kernels;
    ``batch``: for a batch product (repacked, the quantizer, the f32 tiles), which lets a batch's row kernels use
    it too (:func:`running`)."""
    p = _pools.get(n)
    if p is None or p.pid != os.getpid():
        fns = jobs()
        if fns is None:
            return None
        with _pools_lock:
            p = _pools.get(n)
            if p is None or p.pid != os.getpid():
                p = _pools[n] = _Pool(n, fns)
    if batch:
        p.batch = True
    return p


def running(threads: int) -> bool:
    """True when the pool serving ``threads`` threads runs in this process for a batch product (repacked, the
    quantizer, the f32 tiles of :mod:`._gemm_kernels`).

    A pool that only f32 decode products started (:func:`ggml_cpu.ops.matmul.bind_f32_product`) does not
    count: a prompt whose products run on OpenBLAS's threads (which spin after each product) loses 25-30 % when its
    row jobs go to helpers spinning beside them (AMD EPYC, Zen 5, a 128-token f32 prompt on two threads: 3,600-4,100
    against 2,770 tokens/s, measured when f32 prompts multiplied through OpenBLAS)."""
    p = _pools.get(threads - 1)
    return p is not None and p.pid == os.getpid() and p.batch


def nudge(threads: int) -> None:
    """:meth:`_Pool.nudge` of the pool serving ``threads`` threads, when it is running."""
    p = _pools.get(threads - 1)
    if p is not None and p.pid == os.getpid():
        p.nudge()


class PackedSplit:
    """``out = acts · W`` from the repacked ``p`` with the row groups split across threads.

    :meth:`bind` sets the arrays ``(x, xq, xd, xsum, xs, dx, sx, out)``: the float32 rows (read only when
    quantizing), their quantized buffers, the sub-block buffers and ``out`` (N, M with M a multiple of 16), read and
    written in place on every call until the next :meth:`bind`; the object keeps them alive (the descriptor holds
    their addresses). ``serial`` is the one-thread repacked driver (:func:`.repack.decode_kernels`): it runs the
    product when the helpers are busy or backing off.
    """

    __slots__ = ("_full", "_keep", "_n", "_rows", "_serial", "_threads", "p")

    def __init__(
        self, p: Packed, arrays: tuple[np.ndarray, ...], lut: np.ndarray, dot: int, threads: int, serial: Any,
    ) -> None:  # fmt: skip
        from ggml_cpu.threads import RowSplit

        fns = jobs()
        helpers = pool(threads - 1, batch=True)
        layout = LAYOUTS[p.group, p.has_min, p.nib]
        addresses = [part_address("product", layout), part_address("quantizer", dot), part_address("quantize", dot)]
        if fns is None or helpers is None or None in addresses:
            raise RuntimeError("ggml-cpu: the repacked row split's kernels did not compile here")
        k = p.k
        desc = np.zeros(DESC_SIZE, np.int64)
        desc[LUT], desc[K], desc[NSUB], desc[C] = lut.ctypes.data, k, k // p.group, p.offset
        desc[LAYOUT], desc[GBYTES] = layout, p.group * (8 if p.nib else 16)
        desc[PART_FN : QUANT_PART_FN + 1] = [a or 0 for a in addresses]
        desc[Q], desc[Q_LEN], desc[S1], desc[S_LEN], desc[S2] = (
            p.q.ctypes.data, p.q.size, p.s1.ctypes.data, p.s1.size, p.s2.ctypes.data,
        )  # fmt: skip
        desc[DOT] = dot
        self.p, self._serial, self._threads, self._n = p, serial, threads, -1
        self._keep: tuple[Any, ...] = (lut,)
        self._full: tuple[Any, ...] = ()
        self._rows = RowSplit((fns[0], fns[1]), desc, [], threads, helpers=helpers)
        self.bind(arrays)

    def bind(self, arrays: tuple[np.ndarray, ...]) -> None:
        """Use these arrays from now on (a few µs: only their addresses and the row count are rewritten)."""
        x, xq, xd, xsum, xs, dx, sx, out = arrays
        desc = self._rows._desc
        n = xq.shape[0]
        desc[X], desc[XQ], desc[XD], desc[XD_COLS] = _addr(x), _addr(xq), _addr(xd), xd.shape[1]
        desc[XSUM], desc[XSUM_COLS], desc[XS] = _addr(xsum), xsum.shape[1], _addr(xs)
        desc[DX], desc[SX], desc[N], desc[OUT], desc[M] = _addr(dx), _addr(sx), n, _addr(out), out.shape[1]
        if n != self._n:
            ng = out.shape[1] // 16
            per = 4 if n < 8 else 8  # parts per thread: a claim costs ~0.1 µs, a group of 16 rows 0.2 µs and up
            n_parts = max(1, min(ng, per * self._threads, MAX_PARTS))
            cuts = [ng * i // n_parts for i in range(n_parts + 1)]
            desc[N_PARTS] = n_parts
            for i in range(n_parts):
                desc[PART0 + PART_FIELDS * i : PART0 + PART_FIELDS * (i + 1)] = (cuts[i], cuts[i + 1])
            self._n = n
        p = self.p
        tail = (p.q, p.s1, p.s2, xq, xd, xsum, xs, self._keep[0], dx, sx, p.offset)
        self._full = (x, tail, out)
        # without helpers RowSplit runs these in turn: quantize (the driver on no rows), then the whole product
        self._rows._parts = [(self._serial, (x, True, *tail, out[:, :0])), (self._serial, (x, False, *tail, out))]

    def __call__(self, quant: bool) -> int:
        """Run the product (quantizing ``x`` first with ``quant``): 0, or non-zero when the activations are not
        finite (then nothing was computed)."""
        res = self._rows(quant)
        if res is None:
            x, tail, out = self._full
            return int(self._serial(x, quant, *tail, out))
        return res


def _addr(a: np.ndarray) -> int:
    """The address of ``a``'s first element."""
    return int(a.__array_interface__["data"][0])


def quantize_rows(x: np.ndarray, dot: GGMLType, threads: int) -> QActs | None:
    """Activation rows ``x`` (N, K) quantized to ``dot`` by the calling thread and ``threads − 1`` helpers, parts
    of rows each: the bytes of :func:`.activations.quantize_activations` (the same compiled quantizer per row).
    None when the helpers are busy or backing off, or the rows hold NaN or infinity (the numpy quantizer defines
    those bytes): then quantize on this thread."""
    from ggml_cpu.threads import RowSplit

    fns, helpers = jobs(), pool(threads - 1, batch=True)
    code = {GGMLType.Q8_0: DOT_Q8_0, GGMLType.Q8_1: DOT_Q8_1, GGMLType.Q8_K: DOT_Q8_K}[dot]
    part = part_address("quantize", code)
    if fns is None or helpers is None or part is None:
        return None
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, k = x.shape
    q, d, sums, s = act_buffers(n, k, dot)
    n_parts = min(n, 4 * threads, MAX_PARTS)
    cuts = [n * i // n_parts for i in range(n_parts + 1)]
    desc = np.zeros(DESC_SIZE, np.int64)
    desc[X], desc[XQ], desc[XD], desc[XD_COLS] = _addr(x), _addr(q), _addr(d), d.shape[1]
    desc[XSUM], desc[XSUM_COLS], desc[XS], desc[LUT] = _addr(sums), sums.shape[1], _addr(s), _addr(F16_VALUES)
    desc[K], desc[DOT], desc[N_PARTS], desc[MODE], desc[PART_FN] = k, code, n_parts, QUANTIZE, part
    for i in range(n_parts):
        desc[PART0 + PART_FIELDS * i : PART0 + PART_FIELDS * (i + 1)] = (cuts[i], cuts[i + 1])
    alone: list[bool] = []  # RowSplit's fallback (the helpers busy) marks it: nothing was quantized
    parts: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [(_none, ()), (alone.append, (True,))]
    split = RowSplit((fns[0], fns[1]), desc, parts, threads, helpers=helpers)
    if split(False) != 0 or alone:  # None (backing off), −1 (non-finite), or not run
        return None
    return QActs(dot, q, d, sums, s if dot == GGMLType.Q8_1 else np.zeros(0, np.float32))


def _none() -> int:
    return 0


def packed_product(p: Packed, acts: QActs, out: np.ndarray, threads: int) -> None:
    """``out (N, M) = acts · W`` from the repacked ``p`` (``acts`` quantized to the weight type's dot type)."""
    dx, sx = repack.act_blocks(acts, p.group)
    n, mp = acts.q.shape[0], -(-p.rows // repack.LANES) * repack.LANES
    direct = mp == p.rows and out.flags.c_contiguous and out.dtype == np.float32
    target = out if direct else np.empty((n, mp), np.float32)
    xq = np.ascontiguousarray(acts.q)
    split = _split(p, xq, acts, dx, sx, target, threads) if threads > 1 else None
    if split is not None:
        split(False)
    else:
        fns = repack.SPECS[p.group, p.has_min, p.nib]
        fn = _jit.get(fns[1] if threads <= 1 else fns[0])
        if fn is None:
            raise RuntimeError(f"repack: the {p.wtype.name} kernels are not compiled here")
        fn(p.q, p.s1, p.s2, xq, dx, sx, p.offset, target)
    if not direct:
        out[...] = target[:, : p.rows]


def _split(
    p: Packed, xq: np.ndarray, acts: QActs, dx: np.ndarray, sx: np.ndarray, out: np.ndarray, threads: int
) -> Any:
    """A row split of this prompt product over the spinning helper threads, or None where its kernels are not
    compiled here (then numba's threads run it)."""
    xd, xsum = np.ascontiguousarray(acts.d, np.float32), np.ascontiguousarray(acts.sums, np.int32)
    arrays = (dx, xq, xd, xsum, xd, dx, sx, out)  # x and xs are not read: the activations are quantized
    key = (id(p), threads, threading.get_ident())  # per calling thread: bind() rewrites the split's descriptor
    split = _splits.get(key)
    if split is not None and split.p is p:
        split.bind(arrays)
        return split
    drivers = repack.decode_kernels(p)
    if drivers is None:
        return None
    if jobs() is None or pool(threads - 1) is None:
        return None
    split = PackedSplit(p, arrays, F16_VALUES, repack.dot_code(p.group, p.has_min), threads, drivers[1])
    if len(_splits) >= 1024:  # bounded: the matrices of the models in use
        _splits.clear()
    _splits[key] = split
    return split


#: the prompt products' splits, one per (repack, thread count, calling thread), re-bound to each call's arrays
_splits: dict[tuple[int, int, int], Any] = {}
