"""The compile notice: before a kernel compiles, stderr names what it is for (a weight type or an op) and about how
long it takes, from that kernel's last compile recorded in the cache (a fixed guess when none is); nothing is said
when it loads from the cache, and loading skips numba's target refresh, which only compiling needs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ggml_cpu.jit import _jit

#: builds one small row kernel (GEGLU's) in a fresh process; prints whether numba's lowering registries (which
#: compiling needs, loading does not) were imported
_CHILD = r"""
import sys
from ggml_cpu.jit import _jit
assert _jit.enabled()
from ggml_cpu.ops import _glu_kernels
fn = _jit.get(_glu_kernels.GEGLU_SPEC)
assert fn is not None
print("numba.np.linalg" in sys.modules)
"""

_NAME = "_glu_kernels._geglu"


def _child(cache: Path, *, registries: bool) -> str:
    """Standard error of :data:`_CHILD` with numba's cache in ``cache``; checks whether it loaded numba's lowering
    registries (``registries``: it compiled)."""
    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_NUMBA"}
    env["NUMBA_CACHE_DIR"] = str(cache)
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == str(registries)
    return proc.stderr


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("kquants._dot_q4_k", "q4_K"),
        ("kquants._dot_q6_k_serial", "q6_K"),
        ("legacy._dot_q5_0_serial", "q5_0"),
        ("dequant._deq_q8_0", "q8_0"),
        ("_row_kernels._rms_norm", "rms_norm"),
        ("_row_kernels._half_dot_serial", "half_dot"),
        ("_act_kernels.q8_32_rows_par", "q8_32_rows"),
    ],
)
def test_a_kernel_is_named_by_its_weight_type_or_op(name: str, label: str) -> None:
    assert _jit.kernel_label(name) == label


def test_compiling_says_what_and_how_long_and_loading_says_nothing_nor_refreshes_numba(tmp_path: Path) -> None:
    if not _jit.enabled():
        pytest.skip(f"no compiled kernels: {_jit.disabled_reason()}")
    root = tmp_path / "ggml-cpu"
    cold = _child(tmp_path, registries=True)
    # none recorded yet: a one-thread kernel's fixed guess
    want = f"ggml-cpu: compiling CPU kernels for geglu (once, ~1.0 s; later runs load them from {root})"
    assert want in cold, cold
    assert "ggml-cpu: compiled 1 CPU kernels in " in cold and "(for geglu)" in cold, cold
    recorded = json.loads((root / "compile-seconds.json").read_text())
    assert set(recorded) == {_NAME} and recorded[_NAME] > 0

    # loaded from the cache: silent, and without numba's target refresh (its typing and lowering registries)
    warm = _child(tmp_path, registries=False)
    assert "compil" not in warm, warm

    # the compiled code gone, the record kept (edited): the next compile's estimate is the recorded one
    for folder in root.glob("numba-*"):
        shutil.rmtree(folder)
    (root / "compile-seconds.json").write_text(json.dumps({_NAME: 42.0}))
    again = _child(tmp_path, registries=True)
    assert "ggml-cpu: compiling CPU kernels for geglu (once, ~42.0 s;" in again, again
    assert json.loads((root / "compile-seconds.json").read_text())[_NAME] < 42.0


#: names Q8_0 and Q4_0 for compiling ahead, builds Q8_0's kernels (a worker starts, Q4_0 first), waits until the
#: worker recorded Q4_0's one-thread kernel (its last), then asks for Q4_0's: prints whether each came from the cache
_AHEAD = r"""
import json, os, sys, time
from pathlib import Path
from ggml_core import GGMLType
from ggml_cpu import quant
quant.compile_ahead(["Q8_0", "Q4_0"])
assert quant.block_kernels_ready(GGMLType.Q8_0)
record = Path(os.environ["NUMBA_CACHE_DIR"], "ggml-cpu", "compile-seconds.json")
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    if record.is_file() and "legacy._dot_q4_0_serial" in json.loads(record.read_text() or "{}"):
        break
    time.sleep(0.2)
assert quant.block_kernels_ready(GGMLType.Q4_0)
print(json.dumps({e["name"]: e["cached"] for e in quant.compile_log()}))
"""


def test_a_worker_compiles_the_named_types_from_the_other_end(tmp_path: Path) -> None:
    """numba compiles one function at a time in a process: the weight types named ahead are compiled by a worker
    process too, last type first, into the shared cache, and this process loads what the worker finished."""
    if not _jit.enabled():
        pytest.skip(f"no compiled kernels: {_jit.disabled_reason()}")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: no worker")
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_CPU_NUMBA", "GGML_CPU_COMPILE_WORKER")}
    env["NUMBA_CACHE_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _AHEAD], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cached = json.loads(proc.stdout.strip().splitlines()[-1])
    assert cached["legacy._dot_q8_0"] is False and cached["legacy._dot_q8_0_serial"] is False  # compiled here
    assert cached["legacy._dot_q4_0"] is True and cached["legacy._dot_q4_0_serial"] is True  # by the worker
    assert "compiling CPU kernels for q4_0" not in proc.stderr
