"""Quantized products by route: the block kernels against dequantized tiles + SGEMM, timed alternately in one run.

For each weight type and activation-row count, ``qdot.qmatmul(route="block")`` and ``route="tile"`` on the same
arrays (512 × 512, 1536 × 512 and 512 × 1536 weights, the 512-wide bench model's shapes), one thread: medians of
the process's CPU time in ms (all its threads; time spent waiting for a busy core is not counted, so the routes
compare fairly on a shared machine) and the ratio tile / block (above 1: the block kernels are faster). This is
the measurement behind ``qdot.vec_rows_limit`` (the row count up to which a type takes the block kernels). Prints
the CPU model and load.

Usage: ``python benchmarks/bench_qroutes.py [--types q4_0,q8_0,q4_k] [--rows 1,13,128,512] [--repeat 9]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
from _util import machine

from ggml_core import GGMLType
from ggml_core.quants import quantize

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the tile route's SGEMM on one thread, as the block kernels

SHAPES = [(512, 512), (1536, 512), (512, 1536)]


def paired_cpu_ms(a: Callable[[], object], b: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Medians of the process CPU time (ms) of ``a`` and ``b``, called alternately after one warm-up each."""
    a(), b()
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(repeat):
        for fn, acc in ((a, ta), (b, tb)):
            t0 = time.process_time()
            fn()
            acc.append((time.process_time() - t0) * 1e3)
    return statistics.median(ta), statistics.median(tb)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", default="q4_0,q5_0,q8_0,q4_k,q6_k")
    ap.add_argument("--rows", default="1,13,128,512")
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args(argv)
    from ggml_cpu.kernels import qdot

    qdot.set_threads(1)
    info = machine()
    print(f"# CPU: {info['cpu']} ({info['cores']} cores), load average {info['load_average']}; one thread")
    print(f"{'type':6} {'rows':>5} {'shape':>10} {'block ms':>9} {'tile ms':>9} {'tile/block':>10}  limit")
    r = np.random.default_rng(0)
    for name in args.types.split(","):
        t = GGMLType[name.upper()]
        for m, k in SHAPES:
            w = np.asarray(quantize(r.standard_normal((m, k)).astype(np.float32), t)).reshape(m, -1)
            for n in (int(v) for v in args.rows.split(",")):
                x = r.standard_normal((n, k)).astype(np.float32)
                out = np.empty((n, m), np.float32)
                block, tile = paired_cpu_ms(
                    lambda: qdot.qmatmul(w, t, x, out, route="block"),  # noqa: B023 - called right here
                    lambda: qdot.qmatmul(w, t, x, out, route="tile"),  # noqa: B023
                    args.repeat,
                )
                shape = f"{m}x{k}"
                limit = qdot.vec_rows_limit(t)
                print(f"{name:6} {n:5} {shape:>10} {block:9.3f} {tile:9.3f} {tile / block:9.2f}x  {limit}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
