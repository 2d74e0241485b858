"""MXFP4 expert products (gpt-oss) on the CPU plugin next to a numpy baseline timed alternately in the same run.

Usage: ``python benchmarks/bench_mxfp4.py [--threads N] [--repeat R] [--tokens 1,32] [--json PATH]``
(results as JSON in ``benchmarks/results/bench_mxfp4.json`` by default)

One MUL_MAT_ID of gpt-oss-20b's expert shape: 32 experts of [2880, 2880] MXFP4 weights, 4 chosen per token, for a
decode step (1 token) and a small batch. The baseline is the plainest numpy: per chosen expert, gguf-py-equivalent
dequantization (``ggml_core.quants.dequantize``) and ``w @ x`` in float32 (without ggml's Q8_0 activation rounding,
so it does a little less work than the plugin). Ratio = baseline / plugin (higher is better). Medians of
``--repeat`` runs on a possibly shared machine: compare ratios, rerun when the load average is high.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import Results, add_json_option, paired_ms

import ggml_core as gc
from ggml_core import ops
from ggml_core.quants import dequantize

N_EXPERT, M, K, N_USED = 32, 2880, 2880, 4


def _blocks(rng: np.random.Generator, rows: int) -> np.ndarray:
    """Random MXFP4 rows with realistic exponents (weights of magnitude ~1e-2..1)."""
    e = rng.integers(118, 126, (rows, K // 32, 1)).astype(np.uint8)
    qs = rng.integers(0, 256, (rows, K // 32, 16)).astype(np.uint8)
    return np.concatenate([e, qs], axis=2).reshape(rows, -1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tokens", default="1,32")
    add_json_option(ap, "bench_mxfp4")
    args = ap.parse_args()
    res = Results("bench_mxfp4", vars(args))
    print(f"{res.data['machine']['cpu']}, {args.threads} threads, load {res.data['machine']['load_average']}")
    rng = np.random.default_rng(0)
    raw = _blocks(rng, N_EXPERT * M)
    per_expert = raw.reshape(N_EXPERT, M, -1)
    be = gc.init_backend("CPU", f"n_threads={args.threads}")
    for n_tok in (int(t) for t in args.tokens.split(",")):
        x = rng.standard_normal((n_tok, 1, K)).astype(np.float32)
        ids = np.stack([rng.permutation(N_EXPERT)[:N_USED] for _ in range(n_tok)]).astype(np.int32)
        with gc.Context("bench") as ctx:
            w = ctx.new_tensor("mxfp4", [K, M, N_EXPERT])
            xt = ctx.new_tensor("f32", [K, 1, n_tok])
            it = ctx.new_tensor("i32", [N_USED, n_tok])
            out = ops.mul_mat_id(w, xt, it)
        gc.alloc_ctx_tensors(ctx, be)
        w.set_bytes(raw.tobytes())
        xt.set_data(x)
        it.set_data(ids)
        graph = gc.build_graph([out])

        def ours(graph: gc.Graph = graph) -> None:
            be.graph_compute(graph)

        def base(x: np.ndarray = x, ids: np.ndarray = ids) -> np.ndarray:
            o = np.empty((x.shape[0], N_USED, M), np.float32)
            for ex in np.unique(ids):
                wf = dequantize(per_expert[ex], "mxfp4").reshape(M, K)
                for t, s in zip(*np.nonzero(ids == ex), strict=True):
                    o[t, s] = wf @ x[t, 0]
            return o

        t_ours, t_base = paired_ms(ours, base, args.repeat)
        row = res.add("mul_mat_id", f"{n_tok} tokens", ours_ms=t_ours, numpy_ms=t_base, ratio=t_base / t_ours)
        print(f"MUL_MAT_ID MXFP4 {N_EXPERT}x[{K}, {M}], {N_USED} used, {n_tok} token(s): "
              f"{t_ours:.1f} ms, numpy {t_base:.1f} ms, ratio {row['ratio']:.1f}x")  # fmt: skip
    res.write_json(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
