"""``ggml-core plugins``: every backend plugin, its version, entry point, hooks, and why it failed if it did.

The listing ends with one line per recorded problem. ``--isolated`` loads each plugin alone in a child process,
which diagnoses what the in-process boundary cannot (a plugin that exits the interpreter, crashes it or hangs
holding the GIL).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ggml_core.backend.registry import get_registry

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(name, help="list backend plugins and their load errors")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--verbose", "-v", action="store_true", help="show full tracebacks of failures")
    p.add_argument(
        "--isolated",
        action="store_true",
        help="also load each plugin alone in a child process and report crashes, exit codes and hangs",
    )
    p.add_argument("--timeout", type=float, default=30.0, metavar="S", help="--isolated: seconds per plugin (30)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the plugin table (or JSON), then the problems."""
    from ggml_core.cli.devices import print_problems

    if args.isolated:
        return _run_isolated(args)
    reg = get_registry()
    reg.devices()  # enumeration problems are problems of the plugins too
    plugins = reg.plugins
    if args.json:
        out = []
        for p in plugins:
            d = p.as_dict()
            d["backends"] = [
                {"name": r.name, "unavailable_reason": r.unavailable_reason, "features": reg.features(r)}
                for r in p.regs
            ]
            out.append(d)
        print(json.dumps(out, indent=2))
        return 0
    if not plugins:
        print("no backend plugins installed (pip install ggml-cpu)")
        return 0
    for p in plugins:
        dist = f"{p.distribution} {p.version}" if p.distribution else "(in-process)"
        print(f"{p.name}: {p.status}  [{dist}]  entry point {p.value}")
        if p.hooks:
            print(f"  hooks: {', '.join(sorted(p.hooks))}")
        for r in p.regs:
            line = f"  backend {r.name}"
            if r.unavailable_reason:
                line += f": no devices ({r.unavailable_reason})"
            print(line)
        if p.error:
            print(f"  error: {p.error}")
        if args.verbose and p.traceback:
            print("  " + p.traceback.replace("\n", "\n  "))
    print_problems(reg.problems())
    return 0


def _run_isolated(args: argparse.Namespace) -> int:
    """Nothing is loaded in this process: each entry point is probed alone in a child."""
    from ggml_core.cli._isolated import describe, entry_point_names, probe_all

    if args.timeout <= 0:
        print("ggml-core plugins: error: --timeout must be positive", file=sys.stderr)
        return 2
    results = probe_all(entry_point_names(), args.timeout)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{len(results)} plugin(s), each loaded alone in a child process (timeout {args.timeout:g} s):")
    for result in results:
        print(f"  {describe(result)}")
        for problem in result.get("problems", []):
            print(f"    problem: {problem}")
    return 0
