"""The ``ggml-core`` command line: one module per command, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "main"]

#: command name → module (in this package) defining ``add_parser(subparsers)`` and ``run(args) -> int``
COMMANDS: dict[str, str] = {
    "devices": "devices",
    "plugins": "plugins",
    "test-ops": "test_ops",
    "run": "run",
    "plan": "plan",
    "rpc-server": "rpc_server",
}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
    parser = _Parser(prog="ggml-core", description="ggml's backend system in Python: devices, plugins, ops, models")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module in COMMANDS.items():
        mod = importlib.import_module(f"ggml_core.cli.{module}")
        mod.add_parser(sub, name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ggml-core`` script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        import ggml_core

        print(f"ggml-core {ggml_core.__version__}")
        return 0
    if not args.command:
        parser.print_help()
        return 2
    from ggml_core._errors import GGMLError

    try:
        return int(args.func(args) or 0)
    except GGMLError as exc:
        print(f"ggml-core {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
