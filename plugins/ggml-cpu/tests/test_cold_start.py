"""The first run after an install: compiled kernels build for the graph at hand only, say so on stderr, and a
default install has them (numba is a dependency); without them, the numpy path says so and how to get the fast one.

The f32 embedded model once compiled, before its first token, one helper loop that inlined every repacked layout,
activation quantizer and row kernel (over 200 CPU seconds); the helpers now call each job's part function through
its address, compiled when a job first needs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ggml_cpu.jit import _jit

_PLUGIN = Path(__file__).resolve().parents[1]

#: runs ``ggml-core ARGS`` and prints, last, the CPU plugin's compile log (name and whether it came from the cache)
_DRIVER = r"""
import json, sys
from ggml_core.cli import main
rc = main(sys.argv[1:])
q = sys.modules.get("ggml_cpu.quant")
log = [] if q is None else [{"name": e["name"], "cached": e["cached"]} for e in q.compile_log()]
print(json.dumps({"rc": rc, "log": log}))
"""

#: kernels of quantized weights and activations: an f32 model needs none of them
_QUANTIZED = ("_dot_q", "_deq_", "lanes", "quantize", "q8_", "_decode")


def _cli(args: list[str], cache: Path, *, block_numba: bool = False) -> tuple[dict[str, object], str, str]:
    """``ggml-core ARGS`` in a new process with numba's cache in ``cache``: (compile log, standard output before
    it, standard error)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_CPU_NUMBA", "GGML_BACKENDS")}
    env["NUMBA_CACHE_DIR"] = str(cache)
    code = ("import sys; sys.modules['numba'] = None\n" if block_numba else "") + _DRIVER
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=1200, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    *lines, last = proc.stdout.strip().splitlines()
    return json.loads(last), "\n".join(lines), proc.stderr


def _needs_numba() -> None:
    if not _jit.enabled():
        pytest.skip(f"no compiled kernels: {_jit.disabled_reason()}")


def test_the_helpers_loop_holds_no_kernel() -> None:
    """The helpers' loop and the caller's run are synchronisation only: a few KiB of machine code each in numba's
    cache (the loop that inlined every part's kernel was hundreds of KiB, and minutes of compiling)."""
    _needs_numba()
    from ggml_cpu.quant import _packed_split

    fns = _packed_split.jobs()
    if fns is None:
        pytest.skip("no spinning helpers here (Linux x86-64 only)")
    if _jit.cache_dir() is None:
        pytest.skip("no writable location for numba's cache: nothing to measure")
    for fn in fns:
        files = list(Path(fn.stats.cache_path).glob(f"*.{fn.__name__}-*.nbc"))  # numba's machine code, cached
        assert files, f"{fn.__name__} is not in numba's cache"
        sizes = [f.stat().st_size for f in files]
        assert max(sizes) < 64 * 1024, f"{fn.__name__}: {sizes} bytes of cached machine code"


def test_a_first_run_compiles_the_graphs_kernels_and_says_so(tmp_path: Path) -> None:
    """An empty cache: the f32 embedded model compiles no kernel of quantized types, says on stderr that it is
    compiling (and at exit what); the second run loads every kernel from the cache (cfuncs included), silently,
    and prints the same tokens."""
    _needs_numba()
    args = ["run", "-n", "4", "--temp", "0", "--seed", "1"]
    cold, cold_out, cold_err = _cli(args, tmp_path)
    names = [str(e["name"]) for e in cold["log"]]  # type: ignore[union-attr]
    assert names, "the run compiled no kernel"
    assert [n for n in names if any(q in n for q in _QUANTIZED)] == []
    assert "ggml-cpu: compiling CPU kernels" in cold_err
    assert f"ggml-cpu: compiled {len(names)} CPU kernels in " in cold_err
    warm, warm_out, warm_err = _cli(args, tmp_path)
    assert [e for e in warm["log"] if not e["cached"]] == []  # type: ignore[union-attr]
    assert "compil" not in warm_err
    assert _text(warm_out) == _text(cold_out)


def _text(out: str) -> list[str]:
    """A run's standard output without its speed line."""
    return [line for line in out.splitlines() if "tokens/s" not in line]


def test_a_kernels_cache_key_covers_what_it_inlines_and_nothing_else() -> None:
    """A row kernel's cache folder is keyed on the modules it compiles from (its own, the helpers it imports), not
    on the quantized products' modules: editing those (or adding a new kernel file) keeps its compiled code."""
    _needs_numba()
    from ggml_cpu.jit import _kernel_cache

    names = {p.name for p in _kernel_cache.sources("ggml_cpu.ops._matmul_kernels")}
    assert {"_matmul_kernels.py", "_jit.py", "_half_kernels.py"} <= names
    assert names.isdisjoint({"legacy.py", "kquants.py", "repack.py", "product.py", "__init__.py"}), names
    assert "_simd.py" in {p.name for p in _kernel_cache.sources("ggml_cpu.quant.legacy")}


def test_the_cache_is_shared_by_environments_with_the_same_sources() -> None:
    """numba names a cache sub-folder after the source folder's absolute path; ours after the package-relative one,
    so a second virtual environment (another path, the same sources) loads the first one's kernels."""
    _needs_numba()
    from ggml_cpu.jit import _kernel_cache

    here = str(Path(_kernel_cache.__file__).parents[1] / "quant" / "legacy.py")
    for path in (here, "/opt/a/lib/python3.11/site-packages/ggml_cpu/quant/legacy.py", "/u/b/ggml_cpu/x.py"):
        want = "ggml_cpu_quant" if "quant" in path else "ggml_cpu"
        assert _kernel_cache.PackageLocator.get_suitable_cache_subpath(path) == want


def test_numba_is_a_dependency() -> None:
    """A plain ``pip install ggml-cpu`` gets the compiled kernels; the old ``jit`` extra still resolves (empty)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((_PLUGIN / "pyproject.toml").read_text())["project"]
    assert any(dep.split(">")[0].split("=")[0].strip() == "numba" for dep in meta["dependencies"])
    assert meta["optional-dependencies"]["jit"] == []


def test_without_numba_devices_and_run_name_the_numpy_path_and_the_fix(tmp_path: Path) -> None:
    """numba missing: ``devices`` shows the numpy path and the command that fixes it; ``run`` warns on stderr."""
    _, listing, _ = _cli(["devices"], tmp_path, block_numba=True)
    assert "numpy only (numba is not installed: pip install numba)" in listing, listing
    _, _, run_err = _cli(["run", "-n", "2", "--temp", "0"], tmp_path, block_numba=True)
    assert "compiled kernels off: numba is not installed" in run_err, run_err
    assert "pip install numba" in run_err
