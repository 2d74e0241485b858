"""`ggml-core plan` (not implemented yet)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(name, help="(not implemented yet)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Say that the command does not exist yet."""
    print(f"ggml-core {args.command}: not implemented yet", file=sys.stderr)
    return 2
