"""``ggml-core plugins``: every backend plugin, its version, entry point, hooks, and why it failed if it did."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ggml_core.backend.registry import get_registry

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(name, help="list backend plugins and their load errors")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--verbose", "-v", action="store_true", help="show full tracebacks of failures")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the plugin table (or JSON)."""
    reg = get_registry()
    plugins = reg.plugins
    if args.json:
        out = []
        for p in plugins:
            d = p.as_dict()
            d["backends"] = [
                {"name": r.name, "unavailable_reason": r.unavailable_reason, "features": _features(r)} for r in p.regs
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
        for w in p.warnings:
            print(f"  warning: {w}")
        if args.verbose and p.traceback:
            print("  " + p.traceback.replace("\n", "\n  "))
    return 0


def _features(r: Any) -> dict[str, str]:
    try:
        return dict(r.features())
    except Exception as exc:  # noqa: BLE001 - shown, never fatal
        return {"error": repr(exc)}
