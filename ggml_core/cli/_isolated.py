"""``ggml-core plugins --isolated``: each plugin loaded and enumerated alone, in its own child process.

This diagnoses what in-process isolation cannot survive or name: a plugin that calls ``os._exit``, crashes the
interpreter (a segfault in a C extension), holds the GIL forever, or breaks the core for everyone by patching it at
import. The child runs with ``GGML_BACKENDS`` set to the one plugin and no in-process deadline; the parent waits
``--timeout`` seconds and reports the exit code, the signal or the hang.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["MARK", "child_main", "describe", "entry_point_names", "probe_all"]

#: prefix of the child's answer line (anything a plugin prints is ignored)
MARK = "GGML-PROBE "


def child_main(name: str) -> None:
    """In the child: load the one selected plugin, enumerate its devices, print the summary line."""
    from ggml_core.backend.registry import Registry

    reg = Registry().load()
    devices = [d.name for d in reg.devices()]
    info = next((p for p in reg.plugins if p.name == name), None)
    answer = {
        "status": info.status if info else "missing",
        "error": info.error if info else f"no entry point named {name!r}",
        "devices": devices,
        "problems": [str(p) for p in reg.problems()],
    }
    sys.stdout.flush()
    sys.__stdout__.write(MARK + json.dumps(answer) + "\n")  # type: ignore[union-attr]
    sys.__stdout__.flush()  # type: ignore[union-attr]


def entry_point_names() -> list[str]:
    """The installed plugins' entry-point names, sorted, without importing any of them."""
    import importlib.metadata

    from ggml_core.backend.hookspecs import ENTRY_POINT_GROUP

    try:
        return sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})
    except Exception:  # noqa: BLE001 - broken metadata: the child processes would fail the same way
        return []


def _probe(name: str, timeout: float) -> dict[str, Any]:
    env = dict(os.environ, GGML_BACKENDS=name, GGML_PLUGIN_TIMEOUT="0")
    env.pop("GGML_STRICT_PLUGINS", None)
    code = "import sys; from ggml_core.cli._isolated import child_main; child_main(sys.argv[1])"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, name],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        if any(line.startswith(MARK) for line in partial.splitlines()):
            detail = f"loaded, but the process did not exit within {timeout:g} s (a non-daemon thread?); killed"
        else:
            detail = f"no answer within {timeout:g} s (killed)"
        return {"name": name, "outcome": "hung", "detail": detail}
    answers = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode == 0 and answers:
        found = json.loads(answers[-1][len(MARK) :])
        ok = found["status"] in ("loaded", "disabled", "skipped") and not found["problems"]
        return {"name": name, "outcome": "ok" if ok else "problems", **found}
    if proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = str(-proc.returncode)
        detail = f"killed by signal {sig}"
    else:
        detail = f"exit code {proc.returncode} before answering (os._exit, sys.exit in a thread, a crash?)"
    tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    return {"name": name, "outcome": "crashed", "detail": detail + (f"; last stderr line: {tail}" if tail else "")}


def probe_all(names: list[str], timeout: float) -> list[dict[str, Any]]:
    """Probe each plugin in its own child process, a few at a time; one result per name, in order."""
    with ThreadPoolExecutor(max_workers=max(1, min(4, len(names)))) as pool:
        return list(pool.map(lambda n: _probe(n, timeout), names))


def describe(result: dict[str, Any]) -> str:
    """One line for the text output."""
    name, outcome = result["name"], result["outcome"]
    if outcome in ("hung", "crashed"):
        return f"{name}: {outcome.upper()} in a child process: {result['detail']}"
    devs = ", ".join(result["devices"]) or "no devices"
    line = f"{name}: {result['status']} in a child process ({devs})"
    if result.get("error") and result["status"] != "loaded":
        line += f": {result['error']}"
    return line
