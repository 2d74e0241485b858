"""Shared benchmark helpers: medians of repeated runs, paired with a same-run baseline, and JSON results.

Numbers on a shared machine are noisy: every measurement here is a median, and a measurement that has a baseline
is timed alternately with it (``paired_ms``) so both see the same load; compare the ratios. Every benchmark writes
its results as JSON to ``benchmarks/results/<benchmark>.json`` unless told otherwise (``add_json_option``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np

__all__ = ["RESULTS_DIR", "Results", "add_json_option", "machine", "median_ms", "paired_ms", "times_ms", "write_json"]

RESULTS_DIR: Final = Path(__file__).resolve().parent / "results"


def times_ms(
    fn: Callable[[], object], repeat: int, warmup: int = 1, setup: Callable[[], object] | None = None
) -> list[float]:
    """Wall times of ``repeat`` calls in milliseconds, after ``warmup`` untimed calls (garbage collector off: a
    collection of earlier garbage is not the call's cost); ``setup`` runs untimed before each timed call."""
    for _ in range(warmup):
        fn()
    enabled = gc.isenabled()
    gc.disable()
    try:
        out = []
        for _ in range(repeat):
            if setup is not None:
                setup()
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    finally:
        if enabled:
            gc.enable()


def median_ms(fn: Callable[[], object], repeat: int, warmup: int = 1) -> float:
    """Median wall time of ``fn`` in milliseconds."""
    return statistics.median(times_ms(fn, repeat, warmup))


def paired_ms(
    ours: Callable[[], object], base: Callable[[], object], repeat: int, warmup: int = 1
) -> tuple[float, float]:
    """Medians (ms) of two functions timed alternately, so that both see the same machine load."""
    for _ in range(warmup):
        ours()
        base()
    ta: list[float] = []
    tb: list[float] = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            for fn, acc in ((ours, ta), (base, tb)):
                t0 = time.perf_counter()
                fn()
                acc.append((time.perf_counter() - t0) * 1e3)
    finally:
        if enabled:
            gc.enable()
    return statistics.median(ta), statistics.median(tb)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average": [round(v, 2) for v in load],
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


class Results:
    """Rows of one benchmark run, printed as they come and written as JSON at the end."""

    def __init__(self, benchmark: str, settings: dict[str, Any]) -> None:
        self.data: dict[str, Any] = {"benchmark": benchmark, "machine": machine(), "settings": settings, "rows": []}

    def add(self, section: str, name: str, **fields: Any) -> dict[str, Any]:
        """Record one measurement (floats rounded for readability)."""
        row = {"section": section, "name": name}
        row.update({k: round(v, 6) if isinstance(v, float) else v for k, v in fields.items()})
        self.data["rows"].append(row)
        return row

    def write_json(self, path: str) -> None:
        """Write everything to ``path`` (see ``write_json``)."""
        write_json(self.data, path)


def add_json_option(ap: argparse.ArgumentParser, benchmark: str) -> None:
    """``--json PATH``, by default ``benchmarks/results/<benchmark>.json``; a bare ``--json`` or ``--json -`` prints
    the JSON to standard output instead, ``--json none`` writes nothing."""
    ap.add_argument(
        "--json",
        metavar="PATH",
        nargs="?",
        const="-",
        default=str(RESULTS_DIR / f"{benchmark}.json"),
        help=f"write the results as JSON here (default: benchmarks/results/{benchmark}.json; - for standard output, "
        "none for nowhere)",
    )


def write_json(data: Any, path: str) -> None:
    """Write ``data`` as JSON to ``path``: ``-`` is standard output, ``none`` nothing; a file's folder is created."""
    if path == "none":
        return
    text = json.dumps(data, indent=2)
    if path == "-":
        print(text)
        return
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n", encoding="utf-8")
    print(f"# results written to {out}", file=sys.stderr)
