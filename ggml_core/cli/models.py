"""``ggml-core models``: the model families ``ggml-core run`` can load (the registry in ggml_core/models/arch/)."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(name, help="list the supported model families (GGUF general.architecture)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print one line per family."""
    from ggml_core.models.arch import ARCHITECTURES
    from ggml_core.ops import ROPE_TYPE_NEOX

    rows = [
        {
            "name": a.name,
            "description": a.description,
            "rope": "neox" if a.rope_type == ROPE_TYPE_NEOX else "normal",
            "moe": a.moe,
        }
        for a in ARCHITECTURES.values()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(a) for a in ARCHITECTURES)
    for a in ARCHITECTURES.values():
        print(f"{a.name:<{width}}  {a.description}")
    return 0
