"""numba plumbing for the quantized kernels: lazy, cached compilation with SLP vectorisation, and a clean fallback.

Every kernel is plain Python compiled by numba on first use, with an explicit signature (so a wrong dtype or layout
is refused instead of compiling a slow generic version) and ``cache=True`` (so later processes load machine code from
disk in milliseconds instead of compiling for a second or more).

* **Vectorisation.** The block kernels are short fixed-length loops (16 or 32 lanes per block). LLVM's loop
  vectoriser leaves those alone (they are fully unrolled first); its SLP vectoriser packs them into SIMD, which
  makes the Q4_0 matrix-vector product about 2.8× faster here (4.1 ms → 1.5 ms on one core). numba turns SLP off
  by default after miscompilations with old LLVM versions, so it is enabled only while *these* kernels compile,
  and every kernel is checked against the numpy reference in ``tests/test_speed_paths.py``.
* **Cache directory.** ``$NUMBA_CACHE_DIR/ggml-cpu`` when set, else ``~/.cache/ggml-cpu``, else the package's
  ``__pycache__``, with one folder per set of sources a kernel depends on (:mod:`._kernel_cache`: edits of other
  files keep it). When no location is writable the kernels compile without a cache (about a second per kernel at
  first use, same results).
* **Announced.** Before a kernel compiles (its index is not in numba's cache), one line on stderr names what it is
  for (a weight type or an op) and about how long it takes: its last compile's seconds, recorded in the cache root,
  else a fixed guess by kind; the process's exit prints the kernels and seconds. Nothing is said when every kernel
  loads from the cache.
* **Loading.** A cache hit does not refresh numba's target context (its typing and lowering registries, ~0.2 CPU
  s, needed only to compile): see :func:`_load_without_refresh`.
* **Fallback.** ``GGML_CPU_NUMBA=0`` disables the compiled kernels. Without numba, or when a kernel fails to
  compile, :func:`get` returns ``None`` and the caller uses the numpy path; the reason is logged once.
* **Lazy import.** numba itself (0.14 s and 65 MB of resident memory) is imported by the first quantized product,
  not when the plugin loads: processes that never multiply quantized weights do not pay for it. The kernel modules
  (``_simd``, ``legacy``, ``kquants``, ``dequant``, ``_act_kernels``) are imported only after :func:`enabled`.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import logging
import os
import re
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any, Final

__all__ = [
    "NOT_INSTALLED",
    "NUMPY_PATH",
    "KernelSpec",
    "cache_dir",
    "callee",
    "compile_ahead",
    "compile_log",
    "compile_seconds",
    "current_threads",
    "disabled_reason",
    "enabled",
    "estimate",
    "get",
    "import_seconds",
    "inline",
    "kernel_label",
    "max_threads",
    "note_failure",
    "numba_loaded",
    "prange",
    "set_threads",
    "spec_pair",
]

_LOG: Final = logging.getLogger("ggml_cpu")

#: why compiled kernels are off when numba is missing, with the fix (as ``ggml-core devices`` shows it)
NOT_INSTALLED: Final = "numba is not installed: pip install numba"
#: what running without the compiled kernels means
NUMPY_PATH: Final = "running the numpy kernels (the same results, 10-100x slower on quantized models)"

_numba: Any = None
_reason: str | None = None
_loaded = False

#: the parallel loop of the kernels: ``numba.prange`` once numba is loaded (the kernel modules import it after)
prange: Callable[..., Any] = range


def _env_disabled() -> bool:
    return os.environ.get("GGML_CPU_NUMBA", "1").strip().lower() in ("0", "false", "no", "off")


def _load() -> None:
    """Import numba (once); on failure remember why."""
    global _numba, _reason, _loaded, prange
    with _lock:
        if _loaded:
            return
        if _env_disabled():
            _reason = "disabled by GGML_CPU_NUMBA=0"
        else:
            if not any(v in os.environ for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")):
                # numba's OpenMP workers otherwise spin after every parallel kernel and starve BLAS's threads (and
                # BLAS's spinning starves them): on 2 cores a BLAS call followed by a small kernel took 8 ms instead
                # of 0.3. Read when numba first launches its pool, after this point.
                os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
            t0 = time.perf_counter()
            try:
                import numba
            except Exception as exc:  # noqa: BLE001 - any import failure means: no compiled kernels
                missing = isinstance(exc, ModuleNotFoundError) and exc.name == "numba"
                _reason = NOT_INSTALLED if missing else f"numba is not importable ({type(exc).__name__}: {exc})"
            else:
                _numba, prange = numba, numba.prange
                try:  # inline assembly (the futex calls of ``_spin``) needs LLVM's assembly parser
                    import llvmlite.binding

                    llvmlite.binding.initialize_native_asmparser()
                except Exception as exc:  # noqa: BLE001 - only the row split's sleeping helpers need it
                    _log_once("asmparser", logging.DEBUG, f"ggml-cpu: no LLVM assembly parser ({exc})")
            _import_time.append(time.perf_counter() - t0)
        _loaded = True
    wanted = getattr(_wanted, "n", None)
    if wanted is not None:
        set_threads(wanted)


_lock = threading.RLock()
_wanted = threading.local()  # the thread count asked for by the calling thread, applied once numba is loaded
_logged: set[str] = set()
_compiled: dict[str, Callable[..., Any] | None] = {}
_compile_seconds: dict[str, float] = {}
_compile_log: list[dict[str, Any]] = []
_import_time: list[float] = []


def _log_once(key: str, level: int, msg: str) -> None:
    if key not in _logged:
        _logged.add(key)
        _LOG.log(level, msg)


def note_failure(what: str, exc: BaseException) -> None:
    """Log once that ``what`` could not be built (its kernels then fall back to numpy)."""
    _log_once(what, logging.WARNING, f"ggml-cpu: {what} unavailable ({type(exc).__name__}: {exc}); using numpy")


def enabled() -> bool:
    """True when numba is importable and not disabled (imports it on first call; kernels may still fail)."""
    if not _loaded:
        _load()
    if _numba is None:
        # switched off on purpose: a note for those who ask; missing or broken: said where it is seen
        level = logging.INFO if _env_disabled() else logging.WARNING
        _log_once("numba", level, f"ggml-cpu: compiled kernels off: {_reason}; {NUMPY_PATH}")
        return False
    return True


def numba_loaded() -> bool:
    """True once numba has been imported (by the first quantized product or :func:`enabled`)."""
    return _numba is not None


def disabled_reason() -> str | None:
    """Why compiled kernels are off (None when numba is usable); does not import numba."""
    if _loaded:
        return _reason
    if _env_disabled():
        return "disabled by GGML_CPU_NUMBA=0"
    try:
        found = importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # a broken or blocked install
        found = False
    return None if found else NOT_INSTALLED


def import_seconds() -> float:
    """Seconds this process spent importing numba (0 before the first quantized product, or without numba)."""
    return sum(_import_time)


def compile_seconds() -> dict[str, float]:
    """Seconds spent compiling or loading each kernel from the cache in this process (first-call cost)."""
    return dict(_compile_seconds)


def compile_log() -> list[dict[str, Any]]:
    """Each kernel built in this process, in order: ``name``, ``start`` (``time.perf_counter()`` when it began),
    ``seconds`` (compiling, or loading from the cache), ``cpu_seconds`` (the process's CPU time meanwhile),
    ``cached`` (loaded from numba's cache: nothing compiled) and ``stack`` (the calling functions, innermost
    first, as ``module.function``)."""
    return [dict(entry) for entry in _compile_log]


def _callers(limit: int = 40) -> list[str]:
    frame = sys._getframe(2)
    out: list[str] = []
    while frame is not None and len(out) < limit:
        module = str(frame.f_globals.get("__name__", "?"))
        out.append(f"{module}.{frame.f_code.co_name}")
        frame = frame.f_back  # type: ignore[assignment]
    return out


_max_threads: list[int] = []


def max_threads() -> int:
    """The most threads the compiled kernels can use (numba's pool size: the CPUs, unless NUMBA_NUM_THREADS)."""
    if _numba is not None:
        return int(_numba.config.NUMBA_NUM_THREADS)
    if not _max_threads:  # asked on every compute: no system call after the first (one costs BLAS ~50 µs here)
        env = os.environ.get("NUMBA_NUM_THREADS", "")
        _max_threads.append(int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1))
    return _max_threads[0]


def current_threads() -> int:
    """The thread count for kernels launched from the calling thread (what :func:`set_threads` asked for).

    Read from this module's thread-local record when the thread set one: asking numba (``get_num_threads``, which
    takes a lock and checks its pool) cost ~3 µs, once per product, ~0.1 ms of a bench-model token."""
    wanted = getattr(_wanted, "n", None)
    if wanted is not None:
        return int(wanted)
    if _numba is not None:
        return int(_numba.get_num_threads())
    return 1


def set_threads(n: int) -> None:
    """Threads for the compiled kernels launched from the calling thread (numba's setting is per thread).

    numba is asked only when this thread's count changes: its ``get_num_threads`` takes a lock and checks its pool
    (~14 µs of every decode step's host work on a 2-core VM, where the engine applies its count per graph). Only
    this module sets numba's threads, so the thread-local record stays true."""
    want = max(1, min(int(n), max_threads()))
    _wanted.n = want
    if _numba is not None and getattr(_wanted, "applied", None) != want:
        if _numba.get_num_threads() != want:
            _numba.set_num_threads(want)
        _wanted.applied = want


def _tag() -> str:
    """Hash of what the compiled code depends on besides the sources: numba's and llvmlite's versions, the target
    CPU and the VNNI switch."""
    try:
        import llvmlite

        llvm = llvmlite.__version__
    except ImportError:  # pragma: no cover - numba needs llvmlite
        llvm = "?"
    cpu = getattr(_numba.config, "CPU_NAME", None)
    text = f"{_numba.__version__} {llvm} {cpu} vnni={os.environ.get('GGML_CPU_VNNI', '')}"
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def cache_dir() -> str | None:
    """The folder holding the compiled kernels' cache folders (:mod:`._kernel_cache`; None: no writable
    location)."""
    from ggml_cpu.jit import _kernel_cache

    found = _kernel_cache.root()
    if found is None:
        _log_once("cache", logging.WARNING, "ggml-cpu: no writable directory for numba's cache; compiling each run")
    return None if found is None else str(found)


def inline(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A helper the kernels call, inlined into them by numba (returned unchanged when numba is off). Loads numba
    when it is not yet: a kernel module that decorates its helpers is being imported."""
    if not enabled():
        return fn
    return _numba.njit(inline="always", nogil=True, error_model="numpy", cache=False)(fn)


def callee(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A function the kernels call without inlining it into their numba IR (LLVM may still inline its machine
    code); returned unchanged when numba is off.

    numba inlines an ``inline="always"`` helper by deep-copying its IR, scope included, once per block: a kernel
    that inlines a tree of large helpers spends most of its compile time copying (8 CPU seconds for a row-split
    part that inlined every row kernel before its constant mode pruned all but one). A called function is typed
    and compiled only where a live branch calls it. Loads numba when it is not yet, as :func:`inline`."""
    if not enabled():
        return fn
    return _numba.njit(nogil=True, error_model="numpy", boundscheck=False, cache=False)(fn)


@contextlib.contextmanager
def _compile_settings(module: str) -> Iterator[str | None]:
    """SLP vectorisation on, and the cache folder of kernels of ``module`` with our locator (yielded; None: no
    cache), while compiling (numba reads them when it needs them)."""
    from ggml_cpu.jit import _kernel_cache

    cfg = _numba.config
    old = cfg.SLP_VECTORIZE, cfg.CACHE_DIR, cfg.CACHE_LOCATOR_CLASSES
    folder = _kernel_cache.kernel_dir(module, _tag()) if cache_dir() is not None else None
    cfg.SLP_VECTORIZE = 1
    cfg.CACHE_DIR, cfg.CACHE_LOCATOR_CLASSES = folder or "", _kernel_cache.LOCATOR if folder else old[2]
    try:
        yield folder
    finally:
        cfg.SLP_VECTORIZE, cfg.CACHE_DIR, cfg.CACHE_LOCATOR_CLASSES = old


class KernelSpec:
    """A Python function, its numba signature and options: compiled by :func:`get` on first use.

    :param fn: the kernel, written in the numba subset (``prange`` for the parallel loop)
    :param signature: numba signature string, e.g. ``"void(uint8[::1], float32[:, ::1])"``
    :param parallel: compile with ``parallel=True`` (threads over the ``prange`` loop)
    :param name: unique name (default: module.function); one function may back several specs
    :param readonly: positions of array arguments that may be read-only (weights mapped from a file)
    :param fastmath: LLVM fast-math flags for this kernel (e.g. ``{"reassoc"}`` to vectorise a float sum; the
        sum order then depends on the SIMD width, and the kernel's tests state the bound)
    :param cfunc: compile a C-callable function (``numba.cfunc``, its ``address`` called by other compiled code)
        instead of a dispatcher
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        signature: str,
        *,
        parallel: bool = False,
        name: str | None = None,
        readonly: tuple[int, ...] = (),
        fastmath: frozenset[str] = frozenset(),
        cfunc: bool = False,
    ) -> None:
        if name is not None and name != fn.__name__:
            # numba's cache index keys on the function's name and bytecode, not on ``parallel``: a variant of the
            # same function needs a function object of its own name, or it would load the other variant's code
            fn = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
            fn.__qualname__ = name
        self.fn = fn
        self.signature = signature
        self.readonly = readonly
        self.parallel = parallel
        self.fastmath = fastmath
        self.cfunc = cfunc
        self.name = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"


def spec_pair(
    fn: Callable[..., Any], signature: str, name: str, readonly: tuple[int, ...] = (0, 1)
) -> tuple[KernelSpec, KernelSpec]:
    """A block kernel's two compiled variants: threads over the weight rows (``name``), and one thread for small
    products (``name + "_serial"``); the arguments at ``readonly`` (the weights, their int8 view) may be read-only."""
    return (
        KernelSpec(fn, signature, parallel=True, readonly=readonly, name=name),
        KernelSpec(fn, signature, readonly=readonly, name=f"{name}_serial"),
    )


def _signature(spec: KernelSpec) -> Any:
    """The numba signature, with the ``readonly`` arguments marked (writable arrays convert to them safely)."""
    from numba.core import sigutils

    sig = sigutils._parse_signature_string(spec.signature)
    args = [a.copy(readonly=True) if i in spec.readonly else a for i, a in enumerate(sig.args)]
    return sig.return_type(*args)


@contextlib.contextmanager
def _load_without_refresh() -> Iterator[None]:
    """numba's cache loads an entry with the runtime (NRT) initialised but without refreshing the target context
    (``Cache.load_overload`` calls ``refresh``, which imports and registers every typing and lowering
    implementation numba has: 0.2 CPU s, a sixth of a warm Gemma 3 270M run, needed only to compile). A miss still
    compiles with refreshed contexts: numba's ``compile_extra`` refreshes both itself."""
    from numba.core import caching
    from numba.core.runtime import rtsys

    cls = caching.Cache
    original = cls.load_overload

    def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
        rtsys.initialize(target_context)  # what ``refresh`` does first: the machine code links to NRT's symbols
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    setattr(cls, "load_overload", load_overload)  # noqa: B010 - a method of a class without type hints
    try:
        yield
    finally:
        setattr(cls, "load_overload", original)  # noqa: B010


def _build(spec: KernelSpec) -> Callable[..., Any]:
    opts: dict[str, Any] = {"parallel": spec.parallel, "nogil": True, "error_model": "numpy", "boundscheck": False}
    if spec.fastmath:
        opts["fastmath"] = set(spec.fastmath)
    sig = _signature(spec)
    if spec.cfunc:
        del opts["parallel"]
    compiler = _numba.cfunc if spec.cfunc else _numba.njit
    with _compile_settings(spec.fn.__module__) as folder, _load_without_refresh():
        cache = folder is not None
        try:
            return compiler(sig, cache=cache, **opts)(spec.fn)
        except RuntimeError as exc:  # "cannot cache function ...: no locator available"
            if not cache or "cache" not in str(exc):
                raise
            msg = f"ggml-cpu: numba cannot cache kernels here ({exc}); compiling each run"
            _log_once("cache", logging.WARNING, msg)
            return compiler(sig, **opts)(spec.fn)


_compiled_here: list[tuple[str, float]] = []
_announced: list[bool] = []
#: a kernel's compile seconds when none is recorded (the first compiles measured on a 2-core AMD EPYC: a threaded
#: block product 2.6 s, its one-thread variant 1.0, a row kernel 0.5)
_GUESS_PARALLEL: Final = 2.6
_GUESS: Final = 1.0
#: the weight type in a kernel's name (``_dot_q4_k_serial``, ``_deq_q8_0``)
_TYPE: Final = re.compile(r"(?<![a-z0-9])(i?q\d_(?:k|[01]|xxs|xs|s|m|nl)|tq\d_0|mxfp4|bf16|f16)(?![a-z0-9])")


def kernel_label(name: str) -> str:
    """What a kernel is for, as the compile notice says it: the weight type of a block product or dequantizer
    (``kquants._dot_q4_k_serial`` -> ``q4_K``), else the op (``_norm_kernels._rms_norm`` -> ``rms_norm``)."""
    short = name.rsplit(".", 1)[-1].strip("_")
    found = _TYPE.search(short)
    if found is None:
        return re.sub(r"_(serial|par)$", "", short)
    kind = found.group(1)
    return kind[:-2] + "_K" if kind.endswith("_k") else kind


def estimate(spec: KernelSpec) -> float:
    """Seconds ``spec`` is expected to take to compile: its last compile's, recorded in the cache, else a fixed
    guess by kind."""
    from ggml_cpu.jit import _kernel_cache

    recorded = _kernel_cache.recorded_seconds().get(spec.name)
    if recorded is not None:
        return recorded
    return _GUESS_PARALLEL if spec.parallel else _GUESS


def _will_compile(spec: KernelSpec) -> bool:
    """True when numba's cache has no entry for ``spec`` (or there is no cache): building it compiles."""
    from ggml_cpu.jit import _kernel_cache

    if cache_dir() is None:
        return True
    folder = _kernel_cache.kernel_dir(spec.fn.__module__, _tag())
    return folder is None or not _kernel_cache.cached(folder, spec.fn)


_ahead: list[str] = []
_worker: list[str] = []


def compile_ahead(type_names: list[str], worker: str) -> None:
    """The weight types (``GGMLType`` names, in the order a graph needs them) whose block kernels a worker process
    compiles, last type first, once this process starts compiling: numba compiles one function at a time in a
    process, and the worker fills the shared cache meanwhile, so that this process loads what it finds there
    (:func:`_will_compile` checks before each kernel). ``worker`` is its Python source, run as ``python -c worker
    NAME ...``. Nothing starts when every kernel loads from the cache, for fewer than two types, with one CPU,
    without a writable cache, or with ``GGML_CPU_COMPILE_WORKER=0``."""
    _ahead[:] = type_names
    _worker[:] = [worker]


def _start_worker() -> None:
    off = os.environ.get("GGML_CPU_COMPILE_WORKER", "1").strip().lower() in ("0", "false", "no", "off")
    if off or not _worker or len(_ahead) < 2 or (os.cpu_count() or 1) < 2 or cache_dir() is None:
        return
    with contextlib.suppress(OSError):
        proc = subprocess.Popen(
            [sys.executable, "-c", _worker[0], *reversed(_ahead)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        atexit.register(_stop_worker, proc)


def _stop_worker(proc: subprocess.Popen[bytes]) -> None:
    """End the worker with this process (numba writes each cache entry whole: what it finished stays)."""
    if proc.poll() is None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


def _announce(spec: KernelSpec) -> None:
    """Say on stderr, before a kernel compiles, what it is for and about how long it takes (the first one also
    where later runs find it); at exit, which compiled and how long in all. Nothing is said when every kernel
    loads from the cache."""
    where = ""
    if not _announced:
        _announced.append(True)
        found = cache_dir()
        where = f"; later runs load them from {found}" if found else "; no writable cache: every run compiles them"
        atexit.register(_summary)
        _start_worker()
    what = kernel_label(spec.name) + (", threaded" if spec.parallel else "")
    line = f"ggml-cpu: compiling CPU kernels for {what} (once, ~{estimate(spec):.1f} s{where})"
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def _note_compiled(spec: KernelSpec, seconds: float) -> None:
    from ggml_cpu.jit import _kernel_cache

    _compiled_here.append((kernel_label(spec.name), seconds))
    _kernel_cache.record_seconds(spec.name, seconds)


def _summary() -> None:
    if not _compiled_here:  # announced, but the compile failed (logged)
        return
    labels = ", ".join(dict.fromkeys(label for label, _ in _compiled_here))
    total = sum(seconds for _, seconds in _compiled_here)
    with contextlib.suppress(OSError, ValueError):  # stderr closed at exit
        print(f"ggml-cpu: compiled {len(_compiled_here)} CPU kernels in {total:.1f} s (for {labels})", file=sys.stderr)


def _from_cache(fn: Any) -> bool:
    """True when numba loaded every signature of ``fn`` from its cache (no compile in this process)."""
    stats = getattr(fn, "stats", None)
    if stats is None:  # a cfunc: its hits only
        return bool(getattr(fn, "cache_hits", None))
    return bool(stats.cache_hits and not stats.cache_misses)


def get(spec: KernelSpec) -> Callable[..., Any] | None:
    """The compiled kernel, or None when compiled kernels are off or this one failed (logged once)."""
    fn = _compiled.get(spec.name, _compiled)
    if fn is not _compiled:
        return fn  # type: ignore[return-value]
    if not enabled():
        return None
    with _lock:
        if spec.name in _compiled:
            return _compiled[spec.name]
        compiles = _will_compile(spec)
        if compiles:
            _announce(spec)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            built: Callable[..., Any] | None = _build(spec)
        except Exception as exc:  # noqa: BLE001 - a compile failure must never take the backend down
            built = None
            _log_once(
                spec.name,
                logging.WARNING,
                f"ggml-cpu: compiling {spec.name} failed ({type(exc).__name__}: {exc}); using the numpy path",
            )
        seconds = time.perf_counter() - t0
        _compile_seconds[spec.name] = seconds
        cpu = time.process_time() - c0
        cached = _from_cache(built)
        _compile_log.append(
            {"name": spec.name, "start": t0, "seconds": seconds, "cpu_seconds": cpu, "cached": cached,
             "stack": _callers()}
        )  # fmt: skip
        if built is not None and not cached:
            if not compiles:  # an index without this signature: compiled after all
                _announce(spec)
            _note_compiled(spec, seconds)
        _compiled[spec.name] = built
        return built
