"""Per-device tuning of the MUL_MAT kernels (``k_gemm`` and ``k_mv`` in ``kernels/matmul_tuned.cl``), as CLBlast does.

Kernel shapes that suit one machine are slow on another (SGEMM 1024³ on PoCL: 0.9× numpy on one CPU, 0.36× on
another with the same defaults). So on first use of a kernel kind on a device, a handful of configurations (tile,
vector width, K unroll, rows per work-group, work-group size) are each built, run once to warm up (PoCL compiles a
kernel for each work-group size at its first launch), then timed in interleaved rounds — every round runs every
candidate once, in a rotating order, so that all see the same machine load — and each candidate is scored by the
median over the rounds of its time divided by the default's time in the same round (a paired comparison: a
round slowed by other work slows both). The lowest score wins; ties and near-ties (within 3 %) go to the
device's default shape. Timing stops after ``BUDGET_S`` seconds (at least three rounds), so tuning one kernel
kind costs about 1–2 s plus the candidates' builds (no candidate is built after ``BUILD_BUDGET_S``; PoCL caches
builds on disk, so they are fast the second time).

Results are kept per device in ``$GGML_OPENCL_TUNING_DIR`` (default ``~/.cache/ggml-core/opencl-tuning/``), one
JSON file per platform + device name + driver version + device version, entries keyed by kernel kind and shape
class (``gemm/n<=64``, ``gemm/n>64``, ``mv/Q4_0/n=1``, ``mv/Q4_0/n<=16``, …) and by a digest of the kernel source,
so an edited kernel is tuned anew. ``GGML_OPENCL_TUNE``: ``1`` (default) uses the cache and tunes what is
missing, ``0`` uses the device's default shapes without tuning or cache, ``force`` tunes again once per process
and rewrites the cache.

The configurations and shape classes are in :mod:`ggml_opencl._tuning_configs`, the notices on stderr in
:mod:`ggml_opencl._notices`.

Every configuration computes the same dot products over the same elements; only the order of the float additions
differs, so a tuned result equals the default one to float rounding (the tests run every candidate).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any, Final

import numpy as np

from ggml_core import GGMLType
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl._notices import announce_tuning, device_label, record_tuning
from ggml_opencl._tuning_configs import (
    ENV_MODE,
    GEMM_SMALL_N,
    SOURCE_DIGEST,
    Config,
    GemmConfig,
    MvConfig,
    cache_dir,
    config_from_dict,
    forced_config,
    gemm_candidates,
    gemm_class,
    mv_candidates,
    mv_class,
    tuned_source,
    tuning_mode,
)

__all__ = ["BUDGET_S", "BUILD_BUDGET_S", "Tuner", "tuner_for"]

#: seconds of timing rounds per kernel kind and shape class (builds and warm-up runs come on top)
BUDGET_S: Final = 1.5
#: a candidate must beat the default by this fraction to replace it (measurements are noisy)
_MARGIN: Final = 0.03
#: seconds after which no further candidate is built (slow compilers): the ones built so far compete
BUILD_BUDGET_S: Final = 10.0
_MIN_ROUNDS: Final = 3
_MAX_ROUNDS: Final = 15


# ------------------------------------------------------------------------------------------------ the tuner


class Tuner:
    """Tuned MUL_MAT kernels of one OpenCL device (one per context, device and default shapes)."""

    def __init__(self, context: Any, cl_device: Any, info: DeviceInfo, environ: Mapping[str, str] | None = None):
        self.context = context
        self.cl_device = cl_device
        self.info = info
        self._environ = os.environ if environ is None else environ
        self._lock = threading.RLock()
        self._programs: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._chosen: dict[str, Config] = {}
        #: medians (ms) of the last tuning per shape class, for reports: {class: {label: ms}}
        self.timings: dict[str, dict[str, float]] = {}
        #: per shape class, each candidate's median time ratio to the default's in the same rounds
        self.ratios: dict[str, dict[str, float]] = {}
        #: the configuration in use per shape class (tuned, cached or default), for reports
        self.chosen: dict[str, Config] = {}
        driver = str(getattr(cl_device, "driver_version", "")).strip()
        self.device_key = f"{info.platform}|{info.name}|{driver}|{info.version}"
        digest = hashlib.sha256(self.device_key.encode()).hexdigest()[:12]
        slug = re.sub(r"[^A-Za-z0-9]+", "-", info.name).strip("-")[:48] or "device"
        self.cache_file = cache_dir(self._environ) / f"{slug}-{digest}.json"

    # ---- public --------------------------------------------------------------------------------------------

    def gemm(self, n_cols: int) -> tuple[GemmConfig, Any]:
        """(configuration, ``cl.Kernel``) of ``k_gemm`` for ``n_cols`` activation rows (a new kernel object)."""
        cfg = forced_config("gemm")
        if not isinstance(cfg, GemmConfig):
            cfg = self._choose("gemm", gemm_class(n_cols), gemm_candidates(self.info), None)
        return cfg, self._kernel("gemm", cfg, None)

    def mv(self, a_type: GGMLType, n_cols: int) -> tuple[MvConfig, Any]:
        """(configuration, ``cl.Kernel``) of ``k_mv`` for ``a_type`` weights and ``n_cols`` ≤ 16 columns."""
        cfg = forced_config("mv")
        if not isinstance(cfg, MvConfig):
            cfg = self._choose("mv", mv_class(a_type, n_cols), mv_candidates(self.info, n_cols), a_type)
        k = self._kernel("mv", cfg, a_type)
        while cfg.ls > 1 and self.max_local(k) < cfg.ls:  # only an untuned default can exceed the kernel's limit
            cfg = replace(cfg, ls=cfg.ls // 2)
            k = self._kernel("mv", cfg, a_type)
        return cfg, k

    def max_local(self, kernel: Any) -> int:
        """The most work-items per group ``kernel`` allows on this device."""
        import pyopencl as cl

        return int(kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.cl_device))

    # ---- programs ------------------------------------------------------------------------------------------

    def _options(self, cfg: Config, a_type: GGMLType | None) -> tuple[str, ...]:
        base = [o for o in self.info.build_options() if not o.startswith("-DGEMM_")]
        extra = [f"-DMV_T={int(a_type)}"] if a_type is not None else []
        return (*base, *cfg.defines(), *extra)

    def _kernel(self, kind: str, cfg: Config, a_type: GGMLType | None) -> Any:
        import pyopencl as cl

        opts = self._options(cfg, a_type)
        with self._lock:
            prog = self._programs.get((kind, opts))
            if prog is None:
                try:
                    prog = cl.Program(self.context, tuned_source(kind)).build(
                        options=list(opts), devices=[self.cl_device]
                    )
                except cl.Error as exc:
                    raise RuntimeError(
                        f"{self.info.description}: the {kind} kernel does not build with {cfg.label()}: {exc}"
                    ) from exc
                self._programs[(kind, opts)] = prog
        return cl.Kernel(prog, "k_gemm" if kind == "gemm" else "k_mv")

    # ---- choosing ------------------------------------------------------------------------------------------

    def _choose(self, kind: str, shape: str, candidates: list[Any], a_type: GGMLType | None) -> Any:
        mode = tuning_mode(self._environ)
        default = candidates[0]
        if mode == "off":
            self.chosen[shape] = default
            return default
        key = f"{shape}/default {default.label()}/src {SOURCE_DIGEST}"
        with self._lock:
            hit = self._chosen.get(key)
            if hit is not None:
                return hit
            cfg = None if mode == "force" else self._cached(kind, key, candidates)
            if cfg is None:
                label = device_label(self.cl_device, self.info.description)
                announce_tuning(
                    label,
                    f"ggml-opencl: tuning {label}'s matrix kernels (once per kernel shape, ~{BUDGET_S:.0f}-"
                    f"{BUDGET_S + BUILD_BUDGET_S:.0f} s each; kept in {self.cache_file.parent}; {ENV_MODE}=0 skips "
                    "it)",
                )
                t0 = time.perf_counter()
                cfg, medians = self._tune(kind, candidates, a_type, shape)
                record_tuning(label, shape, time.perf_counter() - t0)
                self.timings[shape] = medians
                if medians:  # an untimed fallback to the default is not remembered
                    self._store(key, cfg, medians)
            self._chosen[key] = self.chosen[shape] = cfg
            return cfg

    def _cached(self, kind: str, key: str, candidates: list[Any]) -> Any:
        entry = self._read().get("entries", {}).get(key)
        if not isinstance(entry, dict):
            return None
        try:
            cfg = config_from_dict(kind, entry["config"])
        except (KeyError, TypeError, ValueError, IndexError):
            return None
        return cfg if cfg in candidates else None  # a configuration no longer offered is tuned anew

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.cache_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            warnings.warn(f"{self.cache_file}: unreadable OpenCL tuning cache, tuning anew ({exc})", stacklevel=3)
            return {}
        return data if isinstance(data, dict) else {}

    def _store(self, key: str, cfg: Config, medians: dict[str, float]) -> None:
        data = self._read()
        old = data.get("entries")
        entries: dict[str, Any] = old if isinstance(old, dict) else {}
        entries[key] = {
            "config": asdict(cfg),
            "label": cfg.label(),
            "medians_ms": medians,
            "vs_default": self.ratios.get(key.split("/default ")[0], {}),
            "time": time.time(),
        }
        data = {"device": self.device_key, "entries": entries}
        tmp = self.cache_file.with_suffix(f".{os.getpid()}.tmp")
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.cache_file)  # atomic: concurrent processes never see half a file
        except OSError as exc:
            warnings.warn(f"{self.cache_file}: cannot save the OpenCL tuning results ({exc})", stacklevel=3)

    # ---- timing --------------------------------------------------------------------------------------------

    def _tune(self, kind: str, candidates: list[Any], a_type: GGMLType | None, shape: str) -> tuple[Any, dict]:
        import pyopencl as cl

        queue = cl.CommandQueue(self.context, self.cl_device)
        try:
            bench = _GemmBench(self, queue, shape) if kind == "gemm" else _MvBench(self, queue, a_type, shape)
        except cl.Error as exc:  # no room for the synthetic problem: keep the default, say why
            warnings.warn(f"{self.info.description}: cannot tune {shape} ({exc}); using the default", stacklevel=4)
            return candidates[0], {}
        runs: list[tuple[Any, Any]] = []
        t_build = time.perf_counter()
        for cfg in candidates:
            if runs and time.perf_counter() - t_build > BUILD_BUDGET_S:
                break
            try:
                k = self._kernel(kind, cfg, a_type)
                if self.max_local(k) < bench.group_items(cfg):
                    continue
                run = bench.runner(k, cfg)
                run()  # warm-up: the first launch of a work-group size compiles it
                queue.finish()
            except (cl.Error, RuntimeError):
                if cfg == candidates[0]:
                    raise
                continue  # a configuration this device cannot build or launch is not a candidate
            runs.append((cfg, run))
        if not runs:
            bench.release()
            return candidates[0], {}
        times: dict[Any, list[float]] = {cfg: [] for cfg, _ in runs}
        start = time.perf_counter()
        for rnd in range(_MAX_ROUNDS):
            if rnd >= _MIN_ROUNDS and time.perf_counter() - start > BUDGET_S:
                break
            shift = rnd % len(runs)
            for cfg, run in runs[shift:] + runs[:shift]:  # rotating order: every candidate sees the same load
                t0 = time.perf_counter()
                run()
                queue.finish()
                times[cfg].append(time.perf_counter() - t0)
        bench.release()
        # each candidate against the default run next to it in the same round (the same machine load), then the
        # median over the rounds: robust to a core taken away for part of the run
        default = runs[0][0]
        ref = times[default]
        ratio = {cfg: statistics.median(t / r for t, r in zip(ts, ref, strict=True)) for cfg, ts in times.items()}
        best = min(ratio, key=lambda c: ratio[c])
        if ratio[best] >= 1 - _MARGIN:
            best = default
        self.ratios[shape] = {cfg.label(): round(x, 3) for cfg, x in ratio.items()}
        medians = {cfg: statistics.median(ts) for cfg, ts in times.items()}
        return best, {cfg.label(): round(ms * 1e3, 4) for cfg, ms in medians.items()}


class _GemmBench:
    """A synthetic product of the shape class: packed f32 panels, f32 activations, f32 result."""

    def __init__(self, tuner: Tuner, queue: Any, shape: str) -> None:
        import pyopencl as cl

        self.m, self.k = 1024, 1024
        self.n = 32 if shape.endswith(f"<={GEMM_SMALL_N}") else 256
        rng = np.random.default_rng(0)
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        self.a = cl.Buffer(tuner.context, flags, hostbuf=rng.uniform(-1, 1, self.m * self.k).astype(np.float32))
        self.b = cl.Buffer(tuner.context, flags, hostbuf=rng.uniform(-1, 1, self.n * self.k).astype(np.float32))
        self.d = cl.Buffer(tuner.context, cl.mem_flags.READ_WRITE, self.m * self.n * 4)
        self.queue = queue

    def group_items(self, cfg: GemmConfig) -> int:
        return cfg.ls[0] * cfg.ls[1]

    def runner(self, kernel: Any, cfg: GemmConfig) -> Any:
        m, n, k = self.m, self.n, self.k
        gs = (_roundup(-(-n // cfg.tn), cfg.ls[0]), _roundup(m // cfg.tm, cfg.ls[1]), 1)
        i32, i64 = np.int32, np.int64
        args = [
            self.a,
            i32(k),
            i32(m),
            i32(m),
            i32(1),
            i32(1),
            i32(1),
            self.b,
            np.uint64(0),
            i64(k),
            i64(0),
            i64(0),
            i32(n),
            i32(1),
            self.d,
            np.uint64(0),
            i64(m),
            i64(0),
            i64(0),
            i32(0),
        ]
        queue, ls = self.queue, (cfg.ls[0], cfg.ls[1], 1)
        return lambda: kernel(queue, gs, ls, *args)

    def release(self) -> None:
        for buf in (self.a, self.b, self.d):
            buf.release()


class _MvBench:
    """A synthetic 4096 × 4096 matrix-vector product (or 4 columns) with ``a_type`` weights."""

    def __init__(self, tuner: Tuner, queue: Any, a_type: GGMLType | None, shape: str) -> None:
        import pyopencl as cl

        assert a_type is not None
        self.m = self.k = 4096
        self.n = 1 if shape.endswith("n=1") else 4
        t = a_type.traits
        row = self.k // t.block_size * t.type_size
        rng = np.random.default_rng(0)
        if a_type == GGMLType.F32:
            weights = rng.uniform(-1, 1, self.m * self.k).astype(np.float32).view(np.uint8)
        else:  # 0x3C bytes: f16 scales of about 1.06, mid-range quants (no NaN, no subnormal slow paths)
            weights = np.full(self.m * row, 0x3C, np.uint8)
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        self.a = cl.Buffer(tuner.context, flags, hostbuf=weights)
        self.b = cl.Buffer(tuner.context, flags, hostbuf=rng.uniform(-1, 1, self.n * self.k).astype(np.float32))
        self.d = cl.Buffer(tuner.context, cl.mem_flags.READ_WRITE, self.m * self.n * 4)
        self.ne = np.array((self.k, self.m, 1, 1), dtype=_INT4)
        self.nb = np.array((t.type_size, row, row * self.m, row * self.m), dtype=_LONG4)
        self.queue = queue

    def group_items(self, cfg: MvConfig) -> int:
        return cfg.ls

    def runner(self, kernel: Any, cfg: MvConfig) -> Any:
        import pyopencl as cl

        i32, i64 = np.int32, np.int64
        args = [
            self.a,
            np.uint64(0),
            self.ne,
            self.nb,
            i32(1),
            i32(1),
            self.b,
            np.uint64(0),
            i64(self.k),
            i64(0),
            i64(0),
            i32(self.n),
            i32(1),
            self.d,
            np.uint64(0),
            i64(self.m),
            i64(0),
            i64(0),
            cl.LocalMemory(4 * cfg.ls),
        ]
        gs, ls, queue = (-(-self.m // cfg.rows_per_group) * cfg.ls, 1), (cfg.ls, 1), self.queue
        return lambda: kernel(queue, gs, ls, *args)

    def release(self) -> None:
        for buf in (self.a, self.b, self.d):
            buf.release()


_INT4: Final = np.dtype({"names": ["s0", "s1", "s2", "s3"], "formats": ["<i4"] * 4})
_LONG4: Final = np.dtype({"names": ["s0", "s1", "s2", "s3"], "formats": ["<i8"] * 4})


def _roundup(n: int, m: int) -> int:
    return (n + m - 1) // m * m


_TUNERS: dict[tuple[int, int, DeviceInfo], Tuner] = {}
_TUNERS_LOCK = threading.Lock()


def tuner_for(context: Any, cl_device: Any, info: DeviceInfo) -> Tuner:
    """The process-wide tuner of this device (per context, device and default shapes)."""
    key = (int(context.int_ptr), int(cl_device.int_ptr), info)
    with _TUNERS_LOCK:
        t = _TUNERS.get(key)
        if t is None:
            t = _TUNERS[key] = Tuner(context, cl_device, info)
        return t
