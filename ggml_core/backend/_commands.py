"""Plugin commands: every loaded plugin's ``ggml_register_commands`` becomes subcommands of ``ggml-core``.

Each command is isolated like any hook: one whose hook raises, whose name is malformed or taken (a core command or
another plugin's), or whose ``add_parser`` raises or adds no parser, is left out and recorded as a warning on its
plugin (``ggml-core plugins`` shows it; ``GGML_STRICT_PLUGINS=1`` raises instead); the other commands stay. Only
loaded plugins are asked, so a plugin disabled by ``GGML_BACKENDS`` or failing to load contributes no command.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ggml_core._errors import GGMLError, PluginError

__all__ = ["FIRST_PARTY_COMMANDS", "CommandSet", "PluginCommand", "add_plugin_commands", "missing_command_hint"]

#: what a command name may look like: lower-case words joined by single hyphens (``rpc-server``)
_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*\Z")

#: commands of first-party plugins → their distribution, only to say what to install when one is absent
FIRST_PARTY_COMMANDS: dict[str, str] = {"rpc-server": "ggml-rpc"}

RunFn = Callable[[argparse.Namespace], "int | None"]


@dataclass(frozen=True)
class PluginCommand:
    """One subcommand contributed by a plugin."""

    name: str
    plugin: str
    run: RunFn


@dataclass
class CommandSet:
    """What :func:`add_plugin_commands` did: the commands added and, by name, why others were refused."""

    added: dict[str, PluginCommand] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)


def add_plugin_commands(subparsers: Any, registry: Any, reserved: Iterable[str]) -> CommandSet:
    """Ask every loaded plugin of ``registry`` for its commands and add them to ``subparsers``.

    :param subparsers: the ``add_subparsers()`` action of the ``ggml-core`` parser
    :param registry: the :class:`~ggml_core.backend.registry.Registry` whose plugins are asked
    :param reserved: the core's command names, which no plugin may take
    """
    registry.load()
    taken = {name: "ggml-core" for name in reserved}
    result = CommandSet()
    for impl in registry.pm.hook.ggml_register_commands.get_hookimpls():
        plugin = impl.plugin_name
        wanted: list[tuple[Any, Any, Any]] = []

        def register(name: Any, add_parser: Any, run: Any, _into: list[tuple[Any, Any, Any]] = wanted) -> None:
            _into.append((name, add_parser, run))

        # under the registry's deadline, like every hook: a hang, an exception, SystemExit or a KeyboardInterrupt
        # raised by the plugin's code is that plugin's failure (a real Ctrl-C still interrupts the wait)
        out = registry._call_impl(impl, {"register": register})
        if out.hung:
            _record(registry, plugin, f"hook ggml_register_commands hung (over {registry.timeout} s)", None)
            continue
        if out.exc is not None:
            exc = out.exc
            _record(registry, plugin, f"hook ggml_register_commands raised {type(exc).__name__}: {exc}", exc)
            continue
        for name, add_parser, run in wanted:
            problem = _check(name, add_parser, run, taken)
            if problem is None:
                problem = _add(subparsers, name, add_parser)
            if problem is not None:
                label = name if isinstance(name, str) else repr(name)
                result.refused.setdefault(label, f"plugin {plugin!r}: {problem}")
                _record(registry, plugin, f"command {label!r} refused: {problem}", None)
                continue
            taken[name] = f"plugin {plugin!r}"
            command = PluginCommand(name, plugin, run)
            result.added[name] = command
            subparsers.choices[name].set_defaults(func=_runner(command, registry.strict))
    return result


def missing_command_hint(name: str, registry: Any | None = None) -> str | None:
    """Why ``name`` is not a command when a first-party plugin would provide it (None otherwise)."""
    dist = FIRST_PARTY_COMMANDS.get(name)
    if dist is None:
        return None
    if registry is not None:
        for info in registry.plugins:
            if (info.distribution or "").lower() == dist and info.status != "loaded":
                return f"'{name}' comes from the {dist} plugin, which is {info.status}: {info.error}"
    return f"'{name}' comes from the {dist} plugin, which is not installed: install {dist} (pip install {dist})"


def _check(name: Any, add_parser: Any, run: Any, taken: dict[str, str]) -> str | None:
    if not isinstance(name, str) or not _NAME.match(name):
        return f"the name {name!r} is not a command name (lower-case words joined by '-', e.g. 'my-tool')"
    if name in taken:
        return f"the name {name!r} is already taken by {taken[name]}"
    if not callable(add_parser):
        return f"add_parser is {add_parser!r}, not a callable add_parser(subparsers, name)"
    if not callable(run):
        return f"run is {run!r}, not a callable run(args) -> int"
    return None


def _add(subparsers: Any, name: str, add_parser: Callable[[Any, str], Any]) -> str | None:
    """Call ``add_parser``; on any failure undo what it added and say why."""
    choices = dict(subparsers.choices)
    helps = list(subparsers._choices_actions)
    try:
        add_parser(subparsers, name)
        problem = None if name in subparsers.choices else f"add_parser did not add a parser named {name!r}"
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - argparse conflicts, plugin bugs: all isolated
        problem = f"add_parser raised {type(exc).__name__}: {exc}"
    extra = [n for n in subparsers.choices if n not in choices and n != name]
    if problem is None and extra:
        problem = f"add_parser added other commands too ({', '.join(map(repr, extra))}); register each one"
    if problem is not None:
        subparsers.choices.clear()
        subparsers.choices.update(choices)
        subparsers._choices_actions[:] = helps
    return problem


def _runner(command: PluginCommand, strict: bool) -> Callable[[argparse.Namespace], int]:
    """``command.run`` with its failures turned into one line and exit code 2, as the core's commands do."""

    def run(args: argparse.Namespace) -> int:
        try:
            rc = command.run(args)
        except (GGMLError, KeyboardInterrupt):
            raise
        except Exception as exc:
            if strict:
                raise
            print(
                f"ggml-core {command.name}: error: the command of plugin {command.plugin!r} failed: "
                f"{type(exc).__name__}: {exc} (GGML_STRICT_PLUGINS=1 shows the traceback)",
                file=sys.stderr,
            )
            return 2
        if rc is None:
            return 0
        if isinstance(rc, int) and not isinstance(rc, bool):
            return rc
        print(
            f"ggml-core {command.name}: error: plugin {command.plugin!r}'s run returned {rc!r}, not an exit code",
            file=sys.stderr,
        )
        return 2

    return run


def _record(registry: Any, plugin: str, message: str, exc: BaseException | None) -> None:
    """A problem of ``plugin``'s commands, recorded as every plugin problem is: shown by ``devices`` and ``plugins``
    (and their ``--json``), raised under ``GGML_STRICT_PLUGINS=1``. The plugin itself stays loaded."""
    for info in registry.plugins:
        if info.name == plugin:
            registry._record(info, "commands", "ggml_register_commands", message, "refused", exc)
            return
    if registry.strict:
        raise PluginError(plugin, message) from exc
