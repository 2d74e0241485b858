"""Time ``ggml_core.quants`` quantize + dequantize of a 4096×4096 float32 matrix per type, next to ``gguf.quants``.

Usage: ``python benchmarks/bench_quants.py [--size N] [--types Q4_0,Q4_K,...] [--repeat R] [--json PATH]``.
Prints the best of ``R`` runs in milliseconds for quantize and dequantize, and the ratio ``ggml_core / gguf`` where
gguf supports the type (gguf-py quantizes only F16/BF16/Q4_0..Q8_0 plus a few others, and dequantizes most types).
The rows also go to ``benchmarks/results/bench_quants.json`` as JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ggml_core import GGMLType
from ggml_core.quants import dequantize, quantizable_types, quantize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import Results, add_json_option

gguf: Any
gguf_quants: Any
try:
    import gguf
    from gguf import quants as gguf_quants
except ImportError:  # pragma: no cover - gguf is a dependency, but keep the benchmark usable without it
    gguf = gguf_quants = None


def _best_ms(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def _gguf_type(t: GGMLType) -> Any:
    if gguf is None:
        return None
    try:
        return gguf.GGMLQuantizationType[t.name]
    except KeyError:
        return None


def _gguf_times(t: GGMLType, x: np.ndarray, repeat: int) -> tuple[float | None, float | None]:
    gt = _gguf_type(t)
    if gt is None or gguf_quants is None or t == GGMLType.F32:  # gguf returns F32 data as a view: nothing to time
        return None, None
    try:
        qbytes = gguf_quants.quantize(x, gt)
        tq: float | None = _best_ms(lambda: gguf_quants.quantize(x, gt), repeat)
    except (NotImplementedError, gguf_quants.QuantError):
        qbytes, tq = quantize(x, t), None
    try:
        td: float | None = _best_ms(lambda: gguf_quants.dequantize(qbytes, gt), repeat)
    except NotImplementedError:
        td = None
    return tq, td


def _fmt(ms: float | None) -> str:
    return f"{ms:9.1f}" if ms is not None else "        -"


def _ratio(ours: float, theirs: float | None) -> str:
    return f"{ours / theirs:6.2f}x" if theirs else "      -"


def main() -> None:
    """Run the benchmark and print one line per type."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096, help="matrix is size×size float32 (multiple of 256)")
    ap.add_argument("--types", default="", help="comma-separated type names (default: every quantizable type)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement (best is reported)")
    ap.add_argument("--no-gguf", action="store_true", help="skip the gguf.quants comparison")
    add_json_option(ap, "bench_quants")
    args = ap.parse_args()
    results = Results("bench_quants", {k: v for k, v in vars(args).items() if k != "json"})

    types = [GGMLType[n.strip().upper()] for n in args.types.split(",") if n.strip()] or list(quantizable_types())
    x = np.random.default_rng(0).standard_normal((args.size, args.size)).astype(np.float32)
    print(f"{args.size}x{args.size} float32, best of {args.repeat}; times in ms; ratio = ggml_core / gguf")
    print(f"{'type':6} {'quant':>9} {'dequant':>9} | {'gguf q':>9} {'gguf dq':>9} | {'q ratio':>7} {'dq ratio':>7}")
    for t in types:
        q = quantize(x, t)
        tq = _best_ms(lambda: quantize(x, t), args.repeat)  # noqa: B023 - called before t changes
        td = _best_ms(lambda: dequantize(q, t), args.repeat)  # noqa: B023
        gq, gd = (None, None) if args.no_gguf else _gguf_times(t, x, args.repeat)
        print(f"{t.name:6} {_fmt(tq)} {_fmt(td)} | {_fmt(gq)} {_fmt(gd)} | {_ratio(tq, gq)} {_ratio(td, gd)}")
        results.add("quants", t.name, quantize_ms=tq, dequantize_ms=td, gguf_quantize_ms=gq, gguf_dequantize_ms=gd)
    results.write_json(args.json)


if __name__ == "__main__":
    main()
