"""Every compiled kernel a model uses loads from numba's cache in a new process: none is compiled again.

A kernel numba cannot cache — a driver whose closure holds an intrinsic, which pickles differently in every process,
so its cache key never matches — compiles again in every process: seconds before a model's first token, on every run
(the repacked-weight drivers once cost 3.6 s that way). Two fresh processes run the same products; the second must
find every kernel in the cache (numba's own per-dispatcher counters: ``stats.cache_misses``), not measure a time.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ggml_cpu import quant
from ggml_cpu.jit import _jit

_CHILD = r"""
import json, numpy as np
from ggml_core import GGMLType
from ggml_core.quants import quantize
from ggml_cpu import quant
from ggml_cpu.jit import _jit
from ggml_cpu.quant import repack
rng = np.random.default_rng(0)
for t in (GGMLType.Q4_0, GGMLType.Q5_0, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K):
    k = 2 * t.block_size
    w = np.ascontiguousarray(quantize(rng.standard_normal((40, k)).astype(np.float32), t).reshape(40, -1))
    repack.packed_ready(t)
    for n in (1, 3, quant.vec_rows_limit(t) + 3):  # decode, a short prompt, a prompt batch
        for threads in (1, 2):
            _jit.set_threads(threads)
            quant.qmatmul(w, t, rng.standard_normal((n, k)).astype(np.float32), np.empty((n, 40), np.float32))
print(json.dumps({name: int(sum(fn.stats.cache_misses.values())) for name, fn in _jit._compiled.items()
                  if fn is not None and hasattr(fn, "stats")}))
"""


def _run() -> dict[str, int]:
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_a_second_process_compiles_nothing() -> None:
    if not _jit.enabled():
        pytest.skip(f"no compiled kernels: {quant.disabled_reason()}")
    if _jit.cache_dir() is None:
        pytest.skip("no writable location for numba's cache: every process compiles (nothing to check)")
    _run()  # fills the cache (a no-op when an earlier run did)
    misses = _run()
    assert misses, "the child loaded no compiled kernel"
    assert {name: n for name, n in misses.items() if n} == {}, "compiled again instead of loaded from the cache"
