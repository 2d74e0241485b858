"""The ``ggml-core`` command line: one module per command, each with ``add_parser`` and ``run``.

Plugins add commands of their own through the ``ggml_register_commands`` hook (:mod:`ggml_core.backend._commands`).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["COMMANDS", "main"]

#: command name → module (in this package) defining ``add_parser(subparsers)`` and ``run(args) -> int``
COMMANDS: dict[str, str] = {
    "devices": "devices",
    "plugins": "plugins",
    "test-ops": "test_ops",
    "run": "run",
    "plan": "plan",
    "new-plugin": "new_plugin",
    "models": "models",
    "tokenize": "tokenize",
    "chat": "chat",
    "bench": "bench",
    "perplexity": "perplexity",
}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors, exit code 2 and no prefix matching: llama.cpp's flags (``-m``, ``-no-cnv``,
    ``--model``) must never be read as abbreviations of longer ones. Every subcommand's parser, a plugin's too, is
    of this class (``add_subparsers(parser_class=_Parser)``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if match:
            choices = re.findall(r"'([^']*)'", match.group(2)) or [c.strip() for c in match.group(2).split(",")]
            close = difflib.get_close_matches(match.group(1), choices, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"choose from {', '.join(choices)}"
            if self.prog == "ggml-core":
                hint = _plugin_hint(match.group(1)) or hint
            message = f"unknown {'command' if self.prog == 'ggml-core' else 'choice'} '{match.group(1)}'; {hint}"
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser(plugin_commands: bool = True) -> argparse.ArgumentParser:
    """The full argument parser; with ``plugin_commands`` (the default) the plugins are loaded for their commands."""
    parser = _Parser(prog="ggml-core", description="ggml's backend system in Python: devices, plugins, ops, models")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module in COMMANDS.items():
        mod = importlib.import_module(f"ggml_core.cli.{module}")
        mod.add_parser(sub, name)
    if not plugin_commands:
        return parser
    from ggml_core.backend._commands import add_plugin_commands
    from ggml_core.backend.registry import get_registry

    add_plugin_commands(sub, get_registry(), COMMANDS)
    return parser


def _loads_nothing(argv: Sequence[str]) -> bool:
    """``plugins --isolated`` probes each plugin in a child process: loading them here first would defeat it (a
    plugin calling os._exit at import would end this process before any probe)."""
    words = [a for a in argv if not a.startswith("-")]
    return bool(words) and words[0] == "plugins" and "--isolated" in argv


def _plugin_hint(command: str) -> str | None:
    """Why a command is missing when a plugin would provide it."""
    from ggml_core.backend._commands import missing_command_hint
    from ggml_core.backend.registry import get_registry

    return missing_command_hint(command, get_registry())


def _unknown_options(parser: argparse.ArgumentParser, command: str | None, extra: list[str]) -> str:
    """One line naming the unknown arguments, with the closest known option when there is one."""
    known: list[str] = []
    for action in parser._actions:  # the subcommand's own options
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            known = [o for a in action.choices[command]._actions for o in a.option_strings]
    parts = []
    for arg in extra:
        close = difflib.get_close_matches(arg.split("=")[0], known, n=1) if arg.startswith("-") else []
        parts.append(f"'{arg}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    return f"unrecognized arguments: {', '.join(parts)}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ggml-core`` script; returns the exit code."""
    from ggml_core._errors import GGMLError

    args_in = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(not _loads_nothing(args_in))  # loads the plugins: they may add commands
    except GGMLError as exc:  # GGML_STRICT_PLUGINS=1 makes a plugin's recorded problem an error
        print(f"ggml-core: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    args, extra = parser.parse_known_args(args_in)
    if extra:
        parser.error(_unknown_options(parser, args.command, extra))
    if args.version:
        import ggml_core

        print(f"ggml-core {ggml_core.__version__}")
        return 0
    if not args.command:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except GGMLError as exc:
        print(f"ggml-core {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away ('| head'): stop quietly
        _silence_stdout()
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what is still buffered does not fail on
    the closed pipe too (the handling CPython's documentation of SIGPIPE recommends)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (an embedding program's stream): nothing to do
        pass


if __name__ == "__main__":
    sys.exit(main())
