"""Start-up time of the CLI and of ``import ggml_core``, against ``python -c "import numpy"`` in the same run.

Usage: ``python benchmarks/bench_startup.py [--repeat 15] [--json out.json] [--importtime]``, or
``python benchmarks/bench_startup.py --cold [--model GGUF ...] [--json out.json]`` for the first run after an install.

Each command runs in a fresh interpreter (``sys.executable``), all of them round-robin ``--repeat`` times so
that they see the same machine load; the medians are printed with their ratio to ``import numpy`` (which every
plugin needs) and what they cost on top of it. Measured:

- ``python -c pass``: the interpreter alone (site, and the editable-install finders if any);
- ``import numpy``: the baseline;
- ``import ggml_core``: the package's own start-up (its names load on first use);
- ``ggml-core --help``: the parser, with every loaded plugin asked for its commands (no device enumeration);
- ``ggml-core devices --json``: every plugin loaded and every device enumerated (OpenCL's through pyopencl,
  which also builds, or loads from PoCL's cache, the device's kernels, as ggml's OpenCL backend does);
- ``numpy+pyopencl listing`` (with pyopencl installed): numpy, pyopencl and the OpenCL device list alone, the
  floor under ``devices --json``.

Bytecode caches are on (``PYTHONDONTWRITEBYTECODE`` is dropped; the warm-up run writes them), as in a user's
install. ``--importtime`` also prints the slowest imports of ``devices --json`` (``python -X importtime``). The plugins
installed (``ggml-core plugins``) and whether ggml-core is an editable install (its import hook costs some
milliseconds per process) are printed with the results.

``--cold`` measures instead the first ``ggml-core run`` after an install: ``run -n 4 --temp 0`` (the embedded
model; ``run GGUF --tokens 2 -n 1`` for each ``--model``) with an empty numba cache (``NUMBA_CACHE_DIR`` a new
folder), then the same command again on the cache it filled. It prints every compiled CPU kernel (the CPU plugin's
:func:`ggml_cpu.quant.compile_log`): when it was built (the phase: import, enumeration, model load, graph
planning or the first graph compute, from its callers; and seconds after the process started), how long it took,
and whether it came from the cache; then wall time, numba's import, the sum of compile times and peak RSS of each
run. Results go to ``benchmarks/results/startup_cold.json`` unless ``--json`` says otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import RESULTS_DIR, Results, machine

COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "import numpy": ["-c", "import numpy"],
    "import ggml_core": ["-c", "import ggml_core"],
    "ggml-core --help": ["-m", "ggml_core.cli", "--help"],
    "ggml-core devices --json": ["-m", "ggml_core.cli", "devices", "--json"],
}
#: what listing OpenCL devices costs by itself (numpy, pyopencl, platforms and devices; no kernel build), when
#: pyopencl is installed: the part of ``devices --json`` no plugin code can remove
OPENCL_FLOOR = (
    "numpy+pyopencl listing",
    ["-c", "import numpy, pyopencl as cl; [p.get_devices() for p in cl.get_platforms()]"],
)
BASELINE = "import numpy"


def _env() -> dict[str, str]:
    """The environment of every run: all plugins, and bytecode caches on (as a user's install has them; with
    PYTHONDONTWRITEBYTECODE set, each run would compile every module of the source tree again)."""
    drop = ("GGML_BACKENDS", "GGML_STRICT_PLUGINS", "PYTHONDONTWRITEBYTECODE")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run_ms(args: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, env=_env(), check=False)
    ms = (time.perf_counter() - t0) * 1e3
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return ms


def _editable() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        text = distribution("ggml-core").read_text("direct_url.json") or "{}"
    except PackageNotFoundError:
        return False
    return bool(json.loads(text).get("dir_info", {}).get("editable"))


def _plugins() -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "ggml_core.cli", "plugins", "--json"], capture_output=True, text=True, env=_env()
    )
    try:
        return [f"{p['name']} ({p['status']})" for p in json.loads(proc.stdout)]
    except (ValueError, KeyError):
        return [f"? ({proc.stderr.strip()[-200:]})"]


def _importtime(top: int = 15) -> None:
    args = [sys.executable, "-X", "importtime", "-m", "ggml_core.cli", "devices", "--json"]
    proc = subprocess.run(args, capture_output=True, text=True, env=_env())
    rows = []
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    print(f"\nslowest imports of devices --json (cumulative us; python -X importtime), top {top}:")
    for us, name in sorted(rows, reverse=True)[:top]:
        print(f"  {us:>9,}  {name}")


#: runs ``ggml_core.cli.main(argv)`` and writes, even when it fails, the CPU plugin's compile log, numba's import
#: time, the process's wall time and peak RSS as JSON to the file named by the first argument
_COLD_DRIVER = """
import json, resource, sys, time
t0 = time.perf_counter()
rc = 1
try:
    from ggml_core.cli import main
    rc = main(sys.argv[2:])
finally:
    q = sys.modules.get("ggml_cpu.quant")
    log = q.compile_log() if q is not None else []
    for e in log:
        e["start"] -= t0
    info = {"rc": rc, "wall_s": time.perf_counter() - t0, "log": log,
            "numba_import_s": q.import_seconds() if q is not None else 0.0,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "cpu_s": time.process_time()}
    with open(sys.argv[1], "w") as f:
        json.dump(info, f)
sys.exit(rc)
"""

#: (phase, a caller that puts a kernel's build in it), tried from the outermost caller inwards
_PHASES = (
    ("enumeration", (".enumerate_devices", ".features", ".describe", ".init_backend")),
    ("model load", ("ggml_core.models.", ".load_weights", ".set_tensor", "ggml_core.gguf")),
    ("graph planning", (".supports_op", ".reserve", ".plan", "._bind", ".bind_")),
    ("graph compute", (".compute", ".graph_compute")),
)


def _phase(stack: list[str]) -> str:
    """The phase of a kernel build from its callers (innermost first): the innermost recognised one, or import
    when a module's top level comes first."""
    for frame in stack:
        if frame.endswith(".<module>") and frame.startswith("ggml_cpu."):
            return "import"
        for phase, marks in reversed(_PHASES):
            if any(m in frame for m in marks):
                return phase
    return "other"


def _cold_run(argv: list[str], cache: str) -> dict[str, Any]:
    env = {k: v for k, v in _env().items() if k not in ("GGML_CPU_NUMBA", "GGML_CPU_NO_JIT")}
    env["NUMBA_CACHE_DIR"] = cache
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", _COLD_DRIVER, out.name, *argv], capture_output=True, text=True, env=env
        )
        wall = time.perf_counter() - t0
        text = Path(out.name).read_text()
    if proc.returncode != 0 or not text:
        raise SystemExit(f"ggml-core {' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-800:]}")
    info: dict[str, Any] = json.loads(text)
    info["process_wall_s"] = wall
    info["stderr"] = [ln for ln in proc.stderr.splitlines() if "compil" in ln.lower()]
    return info


def _print_cold(label: str, cold: dict[str, Any], warm: dict[str, Any]) -> None:
    print(f"\n== {label}")
    print(f"{'kernel':<44}{'phase':<16}{'at s':>8}{'cold s':>9}{'cpu s':>8}{'warm s':>9}")
    warm_s = {e["name"]: e["seconds"] for e in warm["log"]}
    for e in cold["log"]:
        cached = " (cache)" if e["cached"] else ""
        print(
            f"{e['name'] + cached:<44}{_phase(e['stack']):<16}{e['start']:>8.2f}{e['seconds']:>9.3f}"
            f"{e['cpu_seconds']:>8.3f}{warm_s.get(e['name'], float('nan')):>9.3f}"
        )
    for name, run in (("cold", cold), ("warm", warm)):
        total = sum(e["seconds"] for e in run["log"])
        print(
            f"{name}: wall {run['process_wall_s']:.2f} s (CPU {run['cpu_s']:.2f} s), kernels {len(run['log'])} in "
            f"{total:.2f} s, numba import {run['numba_import_s']:.2f} s, peak RSS {run['peak_rss_mb']:.0f} MB"
        )
    for line in cold["stderr"]:
        print(f"  stderr: {line}")


def cold_main(args: argparse.Namespace) -> int:
    info = machine()
    print(f"CPU: {info['cpu']} ({info['cores']} cores), load average {info['load_average']}, python {info['python']}")
    runs = [("embedded model", ["run", "-n", "4", "--temp", "0"])]
    runs += [(Path(m).name, ["run", m, "--tokens", "2", "-n", "1"]) for m in args.model]
    results = Results("startup_cold", {"commands": {label: argv for label, argv in runs}})
    for label, argv in runs:
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
            cold = _cold_run(argv, cache)
            warm = _cold_run(argv, cache)
        _print_cold(label, cold, warm)
        for e in cold["log"]:
            results.add(label, e["name"], phase=_phase(e["stack"]), at_s=e["start"], cold_s=e["seconds"],
                        cpu_s=e["cpu_seconds"], cached=e["cached"])  # fmt: skip
        for name, run in (("cold", cold), ("warm", warm)):
            results.add(
                label, f"{name} run", wall_s=run["process_wall_s"], cpu_s=run["cpu_s"], kernels=len(run["log"]),
                compile_s=sum(e["seconds"] for e in run["log"]), numba_import_s=run["numba_import_s"],
                peak_rss_mb=run["peak_rss_mb"], stderr=run["stderr"],
            )  # fmt: skip
    results.write_json(args.json or str(RESULTS_DIR / "startup_cold.json"))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15, help="runs of each command (round-robin; default 15)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON (- for stdout)")
    ap.add_argument("--importtime", action="store_true", help="print the slowest imports of devices --json")
    ap.add_argument("--cold", action="store_true", help="the first ggml-core run after an install (see above)")
    ap.add_argument("--model", action="append", default=[], help="with --cold: also this GGUF (repeatable)")
    args = ap.parse_args()
    if args.cold:
        return cold_main(args)

    info = machine()
    print(f"CPU: {info['cpu']} ({info['cores']} cores), load average {info['load_average']}, python {info['python']}")
    print(f"ggml-core install: {'editable' if _editable() else 'regular'}; plugins: {', '.join(_plugins())}")
    results = Results("startup", {"repeat": args.repeat, "editable": _editable()})
    commands = dict(COMMANDS)
    if importlib.util.find_spec("pyopencl") is not None:
        commands[OPENCL_FLOOR[0]] = OPENCL_FLOOR[1]
    times: dict[str, list[float]] = {name: [] for name in commands}
    for cmd in commands.values():  # warm the file and bytecode caches
        _run_ms(cmd)
    for _ in range(args.repeat):
        for name, cmd in commands.items():
            times[name].append(_run_ms(cmd))
    base = statistics.median(times[BASELINE])
    print(f"\n{'command':<28}{'median ms':>10}{'min ms':>9}{'/ numpy':>9}{'- numpy ms':>12}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<28}{med:>10.1f}{min(ts):>9.1f}{med / base:>9.2f}{med - base:>12.1f}")
        results.add("startup", name, median_ms=med, min_ms=min(ts), ratio_to_numpy=med / base)
    if args.importtime:
        _importtime()
    if args.json:
        results.write_json(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
