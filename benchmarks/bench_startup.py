"""Start-up time of the CLI and of ``import ggml_core``, against ``python -c "import numpy"`` in the same run.

Usage: ``python benchmarks/bench_startup.py [--repeat 15] [--json out.json] [--importtime]``.

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
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import Results, machine

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15, help="runs of each command (round-robin; default 15)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON (- for stdout)")
    ap.add_argument("--importtime", action="store_true", help="print the slowest imports of devices --json")
    args = ap.parse_args()

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
