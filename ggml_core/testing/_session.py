"""Running many cases on one device: serially or in ``-j N`` worker processes, with a progress callback.

Workers address cases by their index in the full, deterministic case list (:func:`all_cases` with perf cases),
so nothing but names and numbers crosses process boundaries.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ggml_core.backend.interfaces import Backend, Device
from ggml_core.testing._case import Case
from ggml_core.testing._runner import CaseResult, Status, auto_reference, check_support, measure, run_case
from ggml_core.testing._suite import resolve_reference
from ggml_core.testing.cases import all_cases

__all__ = ["MODES", "Progress", "run_many"]

MODES = ("test", "perf", "support")

#: one result as it crosses a process boundary: (index, status, message, error, time_us, n_runs, bytes)
_Packed = tuple[int, str, str, float | None, float | None, int | None, int]


def _run_one(
    case: Case,
    device: Device,
    backend: Backend,
    mode: str,
    reference: Any,
    perf_seconds: float,
    ref_backend: Backend | None = None,
) -> CaseResult:
    if mode == "support":
        return check_support(case, device)
    if mode == "perf":
        return measure(case, device, backend, perf_seconds)
    return run_case(case, device, backend, reference=reference, ref_backend=ref_backend)


def _reference_backend(reference: Any) -> Backend | None:
    """One backend of the reference device for a whole run (None when the reference is numpy)."""
    dev = reference[0] if isinstance(reference, tuple) else reference
    return dev.init_backend() if isinstance(dev, Device) else None


def run_many(
    cases: Sequence[Case],
    device: Device,
    mode: str = "test",
    *,
    reference: str = "auto",
    jobs: int = 1,
    perf_seconds: float = 0.25,
    on_result: Callable[[CaseResult], None] | None = None,
) -> list[CaseResult]:
    """Run ``cases`` on ``device`` in ``mode`` (test, perf or support); results in case order.

    :param reference: ``auto``, ``numpy``, ``cpu`` or ``both`` (test mode)
    :param jobs: worker processes (perf mode always runs serially: parallel timings are meaningless)
    :param on_result: called with every result as it arrives (progress, streaming output)
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if jobs > 1 and mode != "perf" and len(cases) > 1:
        return _run_parallel(cases, device, mode, reference, jobs, perf_seconds, on_result)
    backend = device.init_backend() if mode != "support" else None
    ref = resolve_reference(device, reference)
    if ref == "auto":
        ref = auto_reference(device)
    ref_backend = _reference_backend(ref) if mode == "test" else None
    out = []
    try:
        for case in cases:
            r = _run_one(case, device, backend, mode, ref, perf_seconds, ref_backend)  # type: ignore[arg-type]
            out.append(r)
            if on_result is not None:
                on_result(r)
    finally:
        for be in (backend, ref_backend):
            if be is not None:
                be.free()
    return out


# ------------------------------------------------------------------------------------------------ workers

_worker_state: dict[str, Any] = {}


def _worker_run(device_name: str, mode: str, reference: str, perf_seconds: float, indices: list[int]) -> list[_Packed]:
    from ggml_core.backend.registry import get_registry

    key = f"{device_name}|{reference}"
    if _worker_state.get("key") != key:
        dev = get_registry().get_device(device_name)
        ref = resolve_reference(dev, reference)
        if ref == "auto":
            ref = auto_reference(dev)
        ref_backend = _reference_backend(ref) if mode == "test" else None
        _worker_state.update(key=key, dev=dev, backend=dev.init_backend(), ref=ref, ref_backend=ref_backend)
    dev, backend, ref = _worker_state["dev"], _worker_state["backend"], _worker_state["ref"]
    pool = all_cases(perf=True)
    out: list[_Packed] = []
    for i in indices:
        r = _run_one(pool[i], dev, backend, mode, ref, perf_seconds, _worker_state["ref_backend"])
        out.append((i, r.status.name, r.message, r.error, r.time_us, r.n_runs, r.bytes))
    return out


def _run_parallel(
    cases: Sequence[Case],
    device: Device,
    mode: str,
    reference: str,
    jobs: int,
    perf_seconds: float,
    on_result: Callable[[CaseResult], None] | None,
) -> list[CaseResult]:
    pool = all_cases(perf=True)
    index = {c.name: i for i, c in enumerate(pool)}
    wanted = [index[c.name] for c in cases]
    chunk = max(1, min(32, len(wanted) // (jobs * 8) or 1))
    chunks = [wanted[i : i + chunk] for i in range(0, len(wanted), chunk)]
    results: dict[int, CaseResult] = {}
    ctx = multiprocessing.get_context("spawn")  # plugins may hold driver state that must not be forked
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
        futures = [ex.submit(_worker_run, device.name, mode, reference, perf_seconds, c) for c in chunks]
        for fut in cf.as_completed(futures):
            for i, status, message, error, time_us, n_runs, nbytes in fut.result():
                case = pool[i]
                r = CaseResult(
                    case,
                    device.name,
                    mode,
                    Status[status],
                    message,
                    error,
                    time_us,
                    n_runs,
                    case.flops if mode == "perf" else 0,
                    nbytes,
                )
                results[i] = r
                if on_result is not None:
                    on_result(r)
    return [results[i] for i in wanted]


# ------------------------------------------------------------------------------------------------ progress


class Progress:
    """A one-line progress bar on a terminal stream: ``[#####.....] 120/1046 CPU 3 failed``."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.done = 0
        self.failed = 0
        self._last = 0.0

    def update(self, result: CaseResult) -> None:
        """Count one result and redraw (at most 20 times a second)."""
        self.done += 1
        if result.status == Status.FAIL:
            self.failed += 1
        now = time.monotonic()
        if now - self._last >= 0.05 or self.done == self.total:
            self._last = now
            fill = self.width * self.done // self.total
            bar = "#" * fill + "." * (self.width - fill)
            tail = f" {self.failed} failed" if self.failed else ""
            self.stream.write(f"\r[{bar}] {self.done}/{self.total} {self.label}{tail}")
            self.stream.flush()

    def close(self) -> None:
        """End the bar's line."""
        self.stream.write("\r" + " " * (self.width + len(self.label) + 40) + "\r")
        self.stream.flush()
