"""Quantized products by route: block kernels, dequantized tiles + SGEMM, repacked weights, timed in turn in one run.

For each weight type and activation-row count, ``quant.qmatmul(route="block")``, ``"tile"`` and ``"packed"`` (the
repacked weights of ``quant.repack``; where they are not compiled it falls back to the tiles) on the same
arrays (512 × 512, 1536 × 512 and 512 × 1536 weights, the 512-wide bench model's shapes), one thread: medians of
the process's CPU time in ms (all its threads; time spent waiting for a busy core is not counted, so the routes
compare fairly on a shared machine) and the ratios tile / block and packed / block (above 1: the block kernels are
faster). This is the measurement behind ``quant.vec_rows_limit`` (the row count up to which a type takes the block
kernels). Prints the CPU model and load.

Usage: ``python benchmarks/bench_qroutes.py [--types q4_0,q8_0,q4_k] [--rows 1,13,128,512] [--repeat 9] [--json PATH]``;
the rows go to ``benchmarks/results/bench_qroutes.json`` as JSON.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
from _util import Results, add_json_option

from ggml_core import GGMLType
from ggml_core.quants import quantize

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the tile route's SGEMM on one thread, as the block kernels

SHAPES = [(512, 512), (1536, 512), (512, 1536)]


def paired_cpu_ms(*fns: Callable[[], object], repeat: int = 9) -> list[float]:
    """Medians of the process CPU time (ms) of each of ``fns``, called in turn after one warm-up each."""
    for fn in fns:
        fn()
    acc: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, times in zip(fns, acc, strict=True):
            t0 = time.process_time()
            fn()
            times.append((time.process_time() - t0) * 1e3)
    return [statistics.median(t) for t in acc]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", default="q4_0,q5_0,q8_0,q4_k,q6_k")
    ap.add_argument("--rows", default="1,13,128,512")
    ap.add_argument("--repeat", type=int, default=9)
    add_json_option(ap, "bench_qroutes")
    args = ap.parse_args(argv)
    results = Results("bench_qroutes", {k: v for k, v in vars(args).items() if k != "json"})
    from ggml_cpu import quant

    quant.set_threads(1)
    info = results.data["machine"]
    print(f"# CPU: {info['cpu']} ({info['cores']} cores), load average {info['load_average']}; one thread")
    print(
        f"{'type':6} {'rows':>5} {'shape':>10} {'block ms':>9} {'tile ms':>9} {'packed ms':>9} {'tile/block':>10}"
        f" {'packed/block':>12}  limit"
    )
    r = np.random.default_rng(0)
    for name in args.types.split(","):
        t = GGMLType[name.upper()]
        for m, k in SHAPES:
            w = np.asarray(quantize(r.standard_normal((m, k)).astype(np.float32), t)).reshape(m, -1)
            for n in (int(v) for v in args.rows.split(",")):
                x = r.standard_normal((n, k)).astype(np.float32)
                out = np.empty((n, m), np.float32)
                block, tile, packed = paired_cpu_ms(
                    lambda: quant.qmatmul(w, t, x, out, route="block"),  # noqa: B023 - called right here
                    lambda: quant.qmatmul(w, t, x, out, route="tile"),  # noqa: B023
                    lambda: quant.qmatmul(w, t, x, out, route="packed"),  # noqa: B023
                    repeat=args.repeat,
                )
                shape = f"{m}x{k}"
                limit = quant.vec_rows_limit(t)
                results.add(name, shape, rows=n, block_ms=block, tile_ms=tile, packed_ms=packed, rows_limit=limit)
                print(
                    f"{name:6} {n:5} {shape:>10} {block:9.3f} {tile:9.3f} {packed:9.3f} {tile / block:9.2f}x"
                    f" {packed / block:11.2f}x  {limit}"
                )
    results.write_json(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
