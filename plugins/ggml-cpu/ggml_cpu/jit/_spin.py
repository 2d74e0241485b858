"""Compiled synchronisation for :class:`ggml_cpu.threads.RowSplit`: atomics on a small int64 control array, and
bounded spin-waits that run without the GIL.

A decode step's quantized products are 10-100 µs each; waking a sleeping thread (numba's OpenMP pool under
``OMP_WAIT_POLICY=PASSIVE``, or a Python ``Event``) costs a good part of that, and a pool that spins without
bound (OpenMP's default) stalls every product when the machine is busy and a worker is not scheduled. So the
helper threads here spin for a bounded time (a few hundred microseconds of the time-stamp counter) and then sleep,
and every part of a job is *claimed* (a compare-and-swap on the control word) by whichever thread gets to it first:
the calling thread never waits for a helper that has not started.

Control array ``ctl`` (int64, :data:`CTL_SIZE` elements; the fields 64 bytes apart):

* ``ctl[SEQ]`` = ``job << 16 | parts << 8 | parts claimed``: the caller's ``run`` posts a job, every thread
  takes parts with :func:`claim`;
* ``ctl[DONE]`` = ``job << 16 | parts finished``: the caller waits for all of them;
* ``ctl[ASLEEP]`` = how many helpers sleep (the caller then wakes them);
* ``ctl[KIND]`` = the job's kernel (a helper's loop serves one kernel, and returns to switch);
* ``ctl[WAKE]`` = a counter whose low 32 bits are the futex word sleeping helpers of :mod:`._packed_split` wait on
  (:func:`futex_wait` / :func:`futex_wake`: Linux x86-64 system calls, so those helpers sleep and wake without
  ever taking the GIL);
* ``ctl[BAD]`` = non-finite inputs met by a job's quantizing parts (:mod:`._packed_split`).

Imported only once numba is loaded (see :mod:`._jit`); :func:`compiled` gives None where these fail to build.
"""

from __future__ import annotations

from typing import Any, Final

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

from ggml_cpu.jit import _jit

__all__ = ["ASLEEP", "CTL_SIZE", "DESC_SIZE", "DONE", "KIND", "MAX_PARTS", "SEQ", "block_jobs", "compiled"]

SEQ, DONE, ASLEEP, KIND, WAKE, BAD = 0, 8, 16, 24, 32, 40
CTL_SIZE: Final = 48
#: the descriptor of a block-product job (int64): the activation row's and its quantized buffers' addresses and
#: widths, then
#: per part (from :data:`PART0`, :data:`PART_FIELDS` each) its first weight row's address, its rows, and the
#: address of its first output element
XQ, K, XD, XD_COLS, XSUM, XSUM_COLS, XS, XS_COLS, LUT, ROW_BYTES, N_PARTS, X = range(12)
PART0, PART_FIELDS = 16, 3
#: most parts of one job
MAX_PARTS: Final = 255
DESC_SIZE: Final = PART0 + PART_FIELDS * MAX_PARTS
_I64 = ir.IntType(64)


def _ptr(context: Any, builder: ir.IRBuilder, aryty: Any, ary: Any, idx: Any) -> Any:
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.gep(data, [idx], inbounds=True)


def _load_typer(typingctx: Any, a: Any, i: Any) -> Any:
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return builder.load_atomic(_ptr(context, builder, sig.args[0], args[0], args[1]), "seq_cst", 8)

    return types.int64(a, i), codegen


def _store_typer(typingctx: Any, a: Any, i: Any, v: Any) -> Any:
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        builder.store_atomic(args[2], _ptr(context, builder, sig.args[0], args[0], args[1]), "seq_cst", 8)
        return context.get_dummy_value()

    return types.void(a, i, v), codegen


def _cas_typer(typingctx: Any, a: Any, i: Any, old: Any, new: Any) -> Any:
    """1 when ``a[i]`` held ``old`` and now holds ``new``, else 0."""

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        res = builder.cmpxchg(ptr, args[2], args[3], "seq_cst", "seq_cst")
        return builder.zext(builder.extract_value(res, 1), _I64)

    return types.int64(a, i, old, new), codegen


def _add_typer(typingctx: Any, a: Any, i: Any, v: Any) -> Any:
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return builder.atomic_rmw("add", _ptr(context, builder, sig.args[0], args[0], args[1]), args[2], "seq_cst")

    return types.int64(a, i, v), codegen


def _pause_typer(typingctx: Any) -> Any:
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        fn = builder.module.declare_intrinsic("llvm.x86.sse2.pause", fnty=ir.FunctionType(ir.VoidType(), []))
        builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen


def _cycles_typer(typingctx: Any) -> Any:
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        fn = builder.module.declare_intrinsic("llvm.readcyclecounter", fnty=ir.FunctionType(_I64, []))
        return builder.call(fn, [])

    return types.int64(), codegen


def _address_typer(dtype: Any) -> Any:
    def typer(typingctx: Any, addr: Any) -> Any:
        def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
            return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

        return types.CPointer(dtype)(types.int64), codegen

    return typer


#: Linux x86-64: the futex system call and its private wait / wake operations
SYS_FUTEX, FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 202, 128, 129


def _futex_typer(op: int) -> Any:
    """``futex(&a[i] (its low 32 bits), op, v, NULL, NULL, 0)`` as an inline ``syscall`` (no libc call, so the
    kernels that use it stay cacheable); returns the system call's result."""

    def typer(typingctx: Any, a: Any, i: Any, v: Any) -> Any:
        def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
            addr = builder.ptrtoint(_ptr(context, builder, sig.args[0], args[0], args[1]), _I64)
            fnty = ir.FunctionType(_I64, [_I64] * 6)
            asm = ir.InlineAsm(
                fnty, "syscall", "={rax},{rax},{rdi},{rsi},{rdx},{r10},{r8},~{rcx},~{r11},~{memory}",
                side_effect=True,
            )  # fmt: skip
            zero = ir.Constant(_I64, 0)
            val = builder.and_(args[2], ir.Constant(_I64, 0xFFFFFFFF))
            return builder.call(asm, [ir.Constant(_I64, SYS_FUTEX), addr, ir.Constant(_I64, op), val, zero, zero])

        return types.int64(a, i, v), codegen

    return typer


futex_wait: Any = intrinsic(_futex_typer(FUTEX_WAIT_PRIVATE))  # sleep while the word equals ``v``
futex_wake: Any = intrinsic(_futex_typer(FUTEX_WAKE_PRIVATE))  # wake up to ``v`` sleepers
u8_at: Any = intrinsic(_address_typer(types.uint8))
i8_at: Any = intrinsic(_address_typer(types.int8))
i32_at: Any = intrinsic(_address_typer(types.int32))
f32_at: Any = intrinsic(_address_typer(types.float32))
u16_at: Any = intrinsic(_address_typer(types.uint16))
i64_at: Any = intrinsic(_address_typer(types.int64))
f64_at: Any = intrinsic(_address_typer(types.float64))
atomic_load: Any = intrinsic(_load_typer)
atomic_store: Any = intrinsic(_store_typer)
atomic_cas: Any = intrinsic(_cas_typer)
atomic_add: Any = intrinsic(_add_typer)
pause: Any = intrinsic(_pause_typer)
timestamp: Any = intrinsic(_cycles_typer)


def claim(ctl: np.ndarray, job: int) -> int:  # pragma: no cover - compiled
    """The next unclaimed part of job ``job`` (now claimed by the caller), or −1 when none is left (or that job is
    over: the part count travels in the same word as the job, so a late claim can never take a later job's part)."""
    while True:
        v = atomic_load(ctl, SEQ)
        if v >> 16 != job or v & 0xFF >= (v >> 8) & 0xFF:
            return -1
        if atomic_cas(ctl, SEQ, v, v + 1):
            return v & 0xFF


def _next_job(ctl: np.ndarray, last: int, cycles: int) -> int:  # pragma: no cover - compiled
    """Spin until a job other than ``last`` is posted (returns it) or ``cycles`` time-stamp ticks passed (−1)."""
    t0 = timestamp()
    while True:
        job = atomic_load(ctl, SEQ) >> 16
        if job != last:
            return job
        if timestamp() - t0 > cycles:
            return -1
        for _ in range(8):
            pause()


def _sleepy(ctl: np.ndarray, delta: int) -> int:  # pragma: no cover - compiled
    """Add ``delta`` (+1 going to sleep, −1 awake) to the sleeping helpers' count; returns the job posted last."""
    atomic_add(ctl, ASLEEP, delta)
    return atomic_load(ctl, SEQ) >> 16


def _block_jobs(kernel: Any, name: str) -> tuple[_jit.KernelSpec, _jit.KernelSpec]:
    """The helpers' loop and the caller's run for one block kernel (its one-thread variant, quantization off):
    every part is ``kernel`` on arrays made from the descriptor's addresses, so neither needs the GIL."""

    def part(desc: np.ndarray, p: int) -> None:  # pragma: no cover - compiled
        xq = numba.carray(i8_at(desc[XQ]), (1, desc[K]))
        xd = numba.carray(f32_at(desc[XD]), (1, desc[XD_COLS]))
        xsum = numba.carray(i32_at(desc[XSUM]), (1, desc[XSUM_COLS]))
        xs = numba.carray(f32_at(desc[XS]), (1, desc[XS_COLS]))
        lut = numba.carray(f32_at(desc[LUT]), 65536)
        at = PART0 + PART_FIELDS * p
        rows = desc[at + 1]
        w = numba.carray(u8_at(desc[at]), (rows, desc[ROW_BYTES]))
        wi = numba.carray(i8_at(desc[at]), (rows, desc[ROW_BYTES]))
        out = numba.carray(f32_at(desc[at + 2]), (1, rows))
        kernel(xd, False, w, wi, xq, xd, xsum, xs, lut, out)  # ``x`` unread: quantization is off

    def quantize(desc: np.ndarray) -> int:  # pragma: no cover - compiled
        """The kernel on no weight rows: quantizes the activation row; the count of non-finite inputs."""
        x = numba.carray(f32_at(desc[X]), (1, desc[K]))
        xq = numba.carray(i8_at(desc[XQ]), (1, desc[K]))
        xd = numba.carray(f32_at(desc[XD]), (1, desc[XD_COLS]))
        xsum = numba.carray(i32_at(desc[XSUM]), (1, desc[XSUM_COLS]))
        xs = numba.carray(f32_at(desc[XS]), (1, desc[XS_COLS]))
        lut = numba.carray(f32_at(desc[LUT]), 65536)
        w = numba.carray(u8_at(desc[PART0]), (0, desc[ROW_BYTES]))
        wi = numba.carray(i8_at(desc[PART0]), (0, desc[ROW_BYTES]))
        out = numba.carray(f32_at(desc[PART0 + 2]), (1, 0))
        return kernel(x, True, w, wi, xq, xd, xsum, xs, lut, out)

    part_fn = _jit.inline(part)
    quantize_fn = _jit.inline(quantize)
    claim_fn = _jit.inline(claim)

    def serve(ctl: np.ndarray, desc: np.ndarray, state: np.ndarray, kind: int, cycles: int) -> int:
        """A helper: run the claimed parts of every job of ``kind`` posted after ``state[0]`` (updated), spinning
        up to ``cycles`` ticks for each; returns 0 after that long without a job, 1 at a job of another kind."""
        t0 = timestamp()  # pragma: no cover - compiled
        while True:
            job = atomic_load(ctl, SEQ) >> 16
            if job != state[0]:
                if atomic_load(ctl, KIND) != kind:
                    return 1
                state[0] = job
                done = 0
                while True:
                    p = claim_fn(ctl, job)
                    if p < 0:
                        break
                    part_fn(desc, p)
                    done += 1
                if done:
                    atomic_add(ctl, DONE, done)
                t0 = timestamp()
            elif timestamp() - t0 > cycles:
                return 0
            else:
                for _ in range(8):
                    pause()

    def run(ctl: np.ndarray, desc: np.ndarray, mine: np.ndarray, job: int, kind: int, quant: bool) -> int:
        """The caller: with ``quant`` quantize the activation row first (−1, nothing posted, when it holds NaN or
        infinity); post ``mine`` as job ``job`` of ``kind``, run the parts nobody claimed first, wait for the
        rest; returns how many helpers sleep (the caller wakes them for the next job)."""
        if quant and quantize_fn(mine):  # pragma: no cover - compiled
            return -1
        for i in range(PART0 + PART_FIELDS * mine[N_PARTS]):
            desc[i] = mine[i]
        n, done = mine[N_PARTS], 0
        atomic_store(ctl, KIND, kind)
        atomic_store(ctl, DONE, job << 16)
        atomic_store(ctl, SEQ, job << 16 | n << 8)
        while True:
            p = claim_fn(ctl, job)
            if p < 0:
                break
            part_fn(desc, p)
            done += 1
        atomic_add(ctl, DONE, done)
        want = job << 16 | n
        while atomic_load(ctl, DONE) != want:
            pause()
        return atomic_load(ctl, ASLEEP)

    arr = "int64[::1]"
    return (
        _jit.KernelSpec(serve, f"int64({arr}, {arr}, {arr}, int64, int64)", name=f"spin_serve_{name}"),
        _jit.KernelSpec(run, f"int64({arr}, {arr}, {arr}, int64, int64, boolean)", name=f"spin_run_{name}"),
    )


_jobs: dict[str, tuple[Any, Any] | None] = {}


def block_jobs(kernel: Any, name: str) -> tuple[Any, Any] | None:
    """Compiled (serve, run) for the one-thread block kernel ``kernel`` named ``name``, or None where they fail
    to build (logged once by :mod:`._jit`)."""
    if name not in _jobs:
        serve, run = (_jit.get(spec) for spec in _block_jobs(kernel, name))
        _jobs[name] = (serve, run) if serve is not None and run is not None else None
    return _jobs[name]


_ARR: Final = "int64[::1]"
_SPECS: Final = {
    "next_job": _jit.KernelSpec(_next_job, f"int64({_ARR}, int64, int64)", name="spin_next_job"),
    "sleepy": _jit.KernelSpec(_sleepy, f"int64({_ARR}, int64)", name="spin_sleepy"),
}


def compiled() -> dict[str, Any] | None:
    """The helpers' compiled waits by name, or None when they failed to build here (logged by :mod:`._jit`)."""
    fns = {name: _jit.get(spec) for name, spec in _SPECS.items()}
    return None if any(fn is None for fn in fns.values()) else fns
