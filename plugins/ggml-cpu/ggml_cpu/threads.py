"""Thread control for the CPU backend: one setting for BLAS, numba's kernels and the plugin's own worker pool.

Two thread pools that wait by spinning (OpenMP's under numba's ``parallel=True`` kernels, OpenBLAS's) fight over
the cores when their work interleaves: on 2 cores, dequantizing a tile with numba's threads and then multiplying it
with OpenBLAS's made a batch-32 product 8× slower than one thread. So each route keeps to one pool:

* the block kernels (few activation rows) run on numba's pool (``parallel=True``);
* large products run tile by tile on :func:`parallel_for`'s workers, each dequantizing *and* multiplying its own
  tiles with single-threaded BLAS (:func:`single_threaded_blas`) — like ggml, one pool does everything;
* plain f32 products are one BLAS call on BLAS's own threads.

:class:`Threads` applies the backend's ``n_threads`` to numba (per calling thread) and to BLAS (process-wide, through
``threadpoolctl`` when it is installed, else OpenBLAS's ``*_set_num_threads`` found in the loaded libraries).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Final

from ggml_cpu.jit import _jit

__all__ = [
    "Faster",
    "RowSplit",
    "Threads",
    "blas_threads_control",
    "current_threads",
    "default_threads",
    "one_thread",
    "openblas_function",
    "parallel_for",
    "single_threaded_blas",
]

_LOG: Final = logging.getLogger("ggml_cpu")


def default_threads() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ------------------------------------------------------------------------------------------------ BLAS


def _int_caller(fn: Any) -> Callable[[int], None]:
    def call(n: int) -> None:
        fn(int(n))

    return call


def openblas_function(stem: str) -> Any:
    """OpenBLAS's ``openblas_<stem>`` (under any of its wheels' prefixes and suffixes) from the library numpy
    loaded (Linux: found in /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    names = (f"scipy_openblas_{stem}64_", f"scipy_openblas_{stem}", f"openblas_{stem}64_", f"openblas_{stem}")
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in names:
            fn = getattr(lib, name, None)
            if fn is not None:
                return fn
    return None


def _openblas_setter() -> Callable[[int], None] | None:
    """OpenBLAS's ``*_set_num_threads`` from the library numpy loaded."""
    fn = openblas_function("set_num_threads")
    if fn is None:
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], None
    return _int_caller(fn)


def blas_threads_control() -> tuple[str, Callable[[int], None] | None]:
    """How BLAS threads are set here: (description, setter or None)."""
    try:
        from threadpoolctl import ThreadpoolController  # optional; used when the user has it
    except ImportError:
        setter = _openblas_setter()
        return ("OpenBLAS set_num_threads", setter) if setter else ("none (BLAS keeps its own setting)", None)
    controller = ThreadpoolController()

    def limit(n: int) -> None:
        controller.limit(limits=int(n), user_api="blas")

    return "threadpoolctl", limit


_blas: tuple[str, Callable[[int], None] | None] | None = None
_blas_lock = threading.RLock()  # re-entrant: a one-thread run may contain single-threaded sections
_blas_current: list[int | None] = [None]


def _blas_control() -> tuple[str, Callable[[int], None] | None]:
    global _blas
    if _blas is None:
        _blas = blas_threads_control()
        if _blas[1] is None:
            _LOG.info("ggml-cpu: cannot set BLAS threads here (%s)", _blas[0])
    return _blas


def _set_blas(n: int) -> None:
    setter = _blas_control()[1]
    if setter is not None and _blas_current[0] != n:
        try:
            setter(n)
        except Exception as exc:  # noqa: BLE001 - thread control is best effort
            _LOG.info("ggml-cpu: setting BLAS threads failed: %s", exc)
        _blas_current[0] = n


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """BLAS on one thread inside the block (the workers of :func:`parallel_for` are the parallelism)."""
    with _blas_lock:
        before = _blas_current[0] or default_threads()
        _set_blas(1)
        try:
            yield
        finally:
            _set_blas(before)


# ------------------------------------------------------------------------------------------------ pool


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def current_threads() -> int:
    """The thread count the engine set for the calling thread (numba's setting; 1 without numba)."""
    return _jit.current_threads()


def parallel_for(fn: Callable[[int], None], n_tasks: int) -> None:
    """``fn(i)`` for every ``i < n_tasks``: task 0 on the calling thread, the others on the plugin's worker pool."""
    global _pool
    if n_tasks <= 1:
        if n_tasks == 1:
            fn(0)
        return
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, default_threads() - 1), thread_name_prefix="ggml-cpu")
        pool = _pool
    futures = [pool.submit(fn, i) for i in range(1, n_tasks)]
    try:
        fn(0)
    finally:
        for f in futures:
            f.result()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Everything on the calling thread inside the block: numba's kernels, the worker pool's tasks, BLAS."""
    before = _jit.current_threads()
    _jit.set_threads(1)
    try:
        with single_threaded_blas():
            yield
    finally:
        _jit.set_threads(before)


# ------------------------------------------------------------------------------------------------ row splits


class _Helpers:
    """The process's helper threads for :class:`RowSplit` (daemons, started on first use; the compiled side is
    :mod:`.jit._spin`). A helper spins without the GIL, runs the parts it claims, and after
    :attr:`SPIN_CYCLES` time-stamp ticks without a job (a decode step's products come 10-50 µs apart) sleeps on
    an event until the next job is posted."""

    #: how long an idle helper spins before it sleeps (time-stamp-counter ticks: ~0.3 ms at 3 GHz)
    SPIN_CYCLES: Final = 1_000_000

    def __init__(self, n: int, fns: dict[str, Any]) -> None:
        import numpy as np

        from ggml_cpu.jit import _spin

        self.n = n
        self.fns = fns
        self.ctl = np.zeros(_spin.CTL_SIZE, np.int64)
        self.desc = np.zeros(_spin.DESC_SIZE, np.int64)
        self.kind_at = _spin.KIND
        self.job = 0
        #: kind id (≥ 1) → the helpers' compiled loop for that kernel
        self.serves: dict[int, Callable[..., int]] = {}
        self.event = threading.Event()
        self.lock = threading.Lock()  # one job at a time: another caller meanwhile runs its product alone
        self.pid = os.getpid()
        for i in range(n):
            threading.Thread(target=self._loop, name=f"ggml-cpu-rows-{i}", daemon=True).start()

    def kind(self, serve: Callable[..., int]) -> int:
        """The id of a kernel's helper loop (registered on first use)."""
        for k, fn in self.serves.items():
            if fn is serve:
                return k
        k = len(self.serves) + 1
        self.serves[k] = serve
        return k

    def _loop(self) -> None:
        import numpy as np

        ctl, desc, fns = self.ctl, self.desc, self.fns
        state = np.zeros(1, np.int64)  # the last job this helper looked at
        while True:
            kind = int(ctl[self.kind_at])
            serve = self.serves.get(kind)
            if serve is None:  # nothing posted yet
                busy = fns["next_job"](ctl, state[0], self.SPIN_CYCLES) >= 0
            else:
                busy = serve(ctl, desc, state, kind, self.SPIN_CYCLES) != 0
            if not busy:
                if fns["sleepy"](ctl, 1) == state[0]:
                    self.event.wait(0.5)  # the timeout only bounds a missed wake-up
                    self.event.clear()
                fns["sleepy"](ctl, -1)

    def run(self, run: Callable[..., int], mine: Any, kind: int, quant: bool) -> int | None:
        """Post the job described by ``mine`` and run it with the helpers (compiled ``run``): 0, or −1 when the
        activations are not finite (nothing run); None (nothing run) when another caller has the helpers."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            self.job += 1
            asleep = run(self.ctl, self.desc, mine, self.job, kind, quant)
            if asleep > 0:
                self.event.set()
            return min(asleep, 0)
        finally:
            self.lock.release()


_helpers: list[_Helpers] = []
_helpers_lock = threading.Lock()


def _get_helpers(n: int) -> _Helpers | None:
    """``n`` helper threads (restarted after a fork), or None without the compiled primitives."""
    h = _helpers[0] if _helpers else None
    if h is not None and h.n >= n and h.pid == os.getpid():
        return h
    if not _jit.enabled():
        return None
    from ggml_cpu.jit import _spin

    fns = _spin.compiled()
    if fns is None:
        return None
    with _helpers_lock:
        h = _helpers[0] if _helpers else None
        if h is None or h.n < n or h.pid != os.getpid():
            h = _Helpers(n, fns)  # an older, smaller set spins out and then sleeps for good
            _helpers[:] = [h]
    return h


class RowSplit:
    """A block product of one activation row cut into parts of whole weight rows, run by the calling thread and
    ``n_threads − 1`` helper threads at once (see :mod:`.jit._spin`).

    Each part goes to whichever thread claims it first, so a helper that is late (descheduled on a busy machine)
    costs at most the part it took, never a wait for one it has not started; without helpers the caller runs every
    part. Each part is the same kernel on the same rows as on one thread: the results do not depend on who ran it.

    :param jobs: the kernel's compiled (helper loop, caller's run) from :func:`.jit._spin.block_jobs`
    :param desc: the job descriptor (int64, :data:`.jit._spin.DESC_SIZE`), kept alive by the caller's
        arrays
    :param parts: the fallback when the helpers are busy: ``(fn, args)`` run in turn, the first quantizing the
        activations (its result, non-zero for non-finite activations, stops the rest), the others the row ranges
    :param helpers: the helper threads (``kind`` / ``run`` as :class:`_Helpers`); default the process's shared ones
    """

    #: after a job that took far longer than this split's fastest (a helper descheduled while it held a part: the
    #: caller waits for the OS to run it again, often milliseconds), every split runs on one thread for a while,
    #: then the helpers are tried again: first for ``BACKOFF_FIRST`` calls, doubling while the first split after a
    #: backoff stalls again (a busy machine), up to ``BACKOFF_CALLS``; a split that does not stall starts over. A
    #: fixed 1024 calls made one rare stall (one in thousands of products on a quiet 2-core VM) cost ~30 decode
    #: steps on one thread.
    BACKOFF_FIRST: Final = 16
    BACKOFF_CALLS: Final = 1024
    #: "far longer": over ``SLOW_FACTOR`` × the fastest run of this split + ``SLOW_MARGIN_S``. The margin is
    #: an OS-scheduler stall (a helper preempted for a time slice), not the ~0.1 ms hiccups a quiet VM shows now
    #: and then: backing off on those (50 µs) kept 2-thread decode on one thread a third of the time
    SLOW_FACTOR: Final = 4.0
    SLOW_MARGIN_S: Final = 0.5e-3
    #: [calls left on one thread, the next backoff's length], shared by every split (they share the helpers)
    _backoff: ClassVar[list[int]] = [0, 16]
    #: [splits run with the helpers, of those that stalled, calls run on one thread while backing off], for every
    #: split of the process (read by ``benchmarks/bench_e2e.py``: how often two threads were really two)
    counts: ClassVar[list[int]] = [0, 0, 0]

    __slots__ = ("_best", "_desc", "_helpers", "_kind", "_parts", "_run")

    def __init__(
        self,
        jobs: tuple[Any, Any],
        desc: Any,
        parts: list[tuple[Callable[..., Any], tuple[Any, ...]]],
        n_threads: int,
        helpers: Any = None,
    ) -> None:
        self._desc, self._parts, self._run = desc, parts, jobs[1]
        if helpers is None and n_threads > 1:
            helpers = _get_helpers(n_threads - 1)
        self._helpers = helpers
        self._kind = self._helpers.kind(jobs[0]) if self._helpers is not None else 0
        self._best = float("inf")

    def __call__(self, quant: bool) -> int | None:
        """Run every part (quantizing the activations first with ``quant``): 0, or non-zero, with nothing
        computed, when the activations are not finite; None (nothing run: run the computation on one thread)
        while backing off after a stalled helper."""
        h = self._helpers
        if h is not None:
            backoff = RowSplit._backoff
            counts = RowSplit.counts
            if backoff[0] > 0:
                backoff[0] -= 1
                counts[2] += 1
                return None
            t0 = time.perf_counter()
            res = h.run(self._run, self._desc, self._kind, quant)
            if res is not None:
                dt = time.perf_counter() - t0
                counts[0] += 1
                if dt > self.SLOW_FACTOR * self._best + self.SLOW_MARGIN_S:
                    counts[1] += 1
                    backoff[0] = backoff[1]
                    backoff[1] = min(2 * backoff[1], self.BACKOFF_CALLS)
                else:
                    backoff[1] = self.BACKOFF_FIRST
                self._best = min(self._best, dt)
                return res
        first, *rest = self._parts
        if quant and first[0](*first[1]):
            return -1
        for fn, args in rest:
            fn(*args)
        return 0


# ------------------------------------------------------------------------------------------------ choosing


class Faster:
    """Runs the faster of two variants of one computation, measured now and then on the machine as it is.

    Threads pay off on idle cores, but on busy ones (a machine shared with other work) waking a second thread and
    waiting for it can cost more than the work: measured on a shared 2-core machine, the 4096 × 512 Q8_0
    matrix-vector product took several times longer threaded, and a 128 × 512 × 1536 SGEMM's median was 5× longer
    on two OpenBLAS threads than on one. So a product bound once keeps both variants: every :attr:`PERIOD` calls
    the next ``2 · PROBES`` alternate them, timed, and the one with the lower median runs until the next probe.

    The variants must compute the same bits. Where that is not known by construction, pass ``out``: the first call
    runs both on the same inputs and compares ``out``; if they differ, only ``first`` ever runs. (Our block
    kernels compute each element with the same code either way; BLAS partitions its work by shape and thread count,
    never by value, so one comparison per shape settles it.)

    :param first: the default variant (threaded)
    :param second: the alternative (one thread)
    :param out: the array both write, to compare on the first call (None: identical by construction)
    :param key: products with the same key (kind and shapes) share their measurements and choice
    """

    PERIOD: Final = 256
    PROBES: Final = 3

    __slots__ = ("_fns", "_off", "_out", "_probe")

    def __init__(
        self, first: Callable[..., Any], second: Callable[..., Any], out: Any = None, key: object = None
    ) -> None:
        self._fns = (first, second)
        self._out = out
        self._off = False
        self._probe = _shared_probe(key) if key is not None else _Probe()

    def __call__(self, *args: Any) -> Any:
        if self._off:
            return self._fns[0](*args)
        if self._out is not None:
            return self._compare(args)
        p = self._probe
        phase = p.n % self.PERIOD
        p.n += 1
        if phase >= 2 * self.PROBES:
            return self._fns[p.pick](*args)
        which = phase & 1
        t0 = time.perf_counter()
        res = self._fns[which](*args)
        p.times[which].append(time.perf_counter() - t0)
        if phase == 2 * self.PROBES - 1 and all(p.times):
            a, b = (sorted(t)[len(t) // 2] for t in p.times)
            p.pick = 0 if a <= b else 1
            p.times = ([], [])
        return res

    def _compare(self, args: tuple[Any, ...]) -> Any:
        import numpy as np

        self._fns[1](*args)
        alt = np.array(self._out, copy=True)
        res = self._fns[0](*args)  # the default runs last: its result is the one left in ``out``
        if not np.array_equal(alt, self._out, equal_nan=True):
            _LOG.info("ggml-cpu: threaded and one-thread results differ for a product here; keeping threads")
            self._off = True
        self._out = None
        return res


class _Probe:
    """The probe state of one :class:`Faster`, or shared by all of one ``key`` (products of one shape: the 16
    attention projections of a prompt settle after one probe round instead of each probing on its own)."""

    __slots__ = ("n", "pick", "times")

    def __init__(self) -> None:
        self.n = 0
        self.pick = 0
        self.times: tuple[list[float], list[float]] = ([], [])


_probes: dict[object, _Probe] = {}


def _shared_probe(key: object) -> _Probe:
    if len(_probes) >= 4096:  # bounded: shapes of the models in use
        _probes.clear()
    return _probes.setdefault(key, _Probe())


# ------------------------------------------------------------------------------------------------ setting


class Threads:
    """Applies one thread count to numba's kernels and to BLAS, only when it changed."""

    def __init__(self, n_threads: int) -> None:
        self.n_threads = n_threads

    @staticmethod
    def blas_description() -> str:
        """How BLAS threads are controlled here."""
        return _blas_control()[0]

    def apply(self) -> None:
        """Set numba's threads for the calling thread and BLAS's (process-wide) to ``n_threads``."""
        _jit.set_threads(self.n_threads)
        if _blas_current[0] != self.n_threads:
            with _blas_lock:
                _set_blas(self.n_threads)
