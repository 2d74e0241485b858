"""One-row (decode) quantized products on the CPU: one thread, the plugin's row split, numba's thread pool.

For each weight type and shape (the bench model's 512 × 512, 1536 × 512, 512 × 1536, 4096 × 512; Gemma 3's
2048 × 640 and its 262,144 × 640 output projection with ``--big``) the three variants of
``ggml_cpu.quant.product.BlockProduct`` are timed alternately in the same run (``rounds`` × a median of
``calls`` calls; the best round is printed) with the weights' GB/s, next to numpy reading the same bytes
(``u64.sum()``) for the big shape. Every variant's result is checked equal to one thread's first.

Usage: ``python benchmarks/bench_rowsplit.py [--types q4_0,q8_0,q4_k,q6_k] [--threads 2] [--big] [--json PATH]``;
the rows go to ``benchmarks/results/bench_rowsplit.json`` as JSON.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _util import Results, add_json_option, times_ms

import ggml_core as gc
from ggml_core.quants import quantize

SHAPES = [(512, 512), (1536, 512), (512, 1536), (4096, 512), (2048, 640)]
BIG = (262144, 640)


def main() -> int:
    """Time the variants for every (type, shape) and print one row each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="q4_0,q8_0,q4_k,q6_k")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--big", action="store_true", help="also the 262,144 × 640 output projection")
    add_json_option(ap, "bench_rowsplit")
    args = ap.parse_args()
    results = Results("bench_rowsplit", {k: v for k, v in vars(args).items() if k != "json"})
    from ggml_cpu.jit import _jit, _spin
    from ggml_cpu.quant import product

    if not _jit.enabled():
        print(f"compiled kernels are off: {_jit.disabled_reason()}", file=sys.stderr)
        return 2
    _jit.set_threads(args.threads)
    print(f"# {results.data['machine']['cpu']}, {args.threads} threads, load average {os.getloadavg()[0]:.2f}")
    rng = np.random.default_rng(0)
    for name in args.types.split(","):
        t = gc.as_type(name)
        for m, k in SHAPES + ([BIG] if args.big else []):
            if k % t.block_size:
                continue
            tile = min(m, 16384)  # the big matrix repeats one block of rows (quantizing 168 M values takes minutes)
            w1 = quantize(rng.standard_normal((tile, k), dtype=np.float32), t)
            w = np.ascontiguousarray(np.concatenate([w1] * (m // tile))).reshape(m, -1)
            x = rng.standard_normal((1, k), dtype=np.float32)
            out = np.empty((1, m), np.float32)
            bp = product.block_product(w, t, x, out)
            assert bp is not None
            parallel, serial = bp._faster._fns
            jobs = _spin.block_jobs(serial, t.name.lower())
            assert jobs is not None
            split = product._SplitProduct(serial, jobs, bp._args, args.threads)
            variants = {"1 thread": serial, "split": split, "numba prange": parallel}
            serial(*bp._args)
            ref = out.copy()
            for fn in variants.values():
                out[...] = np.nan
                fn(*bp._args)
                assert np.array_equal(out, ref), name
            calls = max(3, args.calls * 4096 // m)
            best: dict[str, float] = {}
            for _ in range(args.rounds):
                for label, fn in variants.items():
                    ms = statistics.median(times_ms(functools.partial(fn, *bp._args), calls))
                    best[label] = min(best.get(label, ms), ms)
            if (m, k) == BIG:
                u = w.reshape(-1).view(np.uint64)
                best["numpy read"] = min(statistics.median(times_ms(u.sum, 5)) for _ in range(args.rounds))
            cells = "  ".join(f"{label} {v * 1e3:9.1f} µs {w.nbytes / v / 1e6:5.1f} GB/s" for label, v in best.items())
            print(f"{t.name:5} {m:6} x {k:4}  {cells}", flush=True)
            results.add(t.name, f"{m}x{k}", **{f"{label} ms": v for label, v in best.items()})
    print(f"# load average at the end {os.getloadavg()[0]:.2f}")
    results.write_json(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
