"""Plugin commands (the ``ggml_register_commands`` hook): listed by ``--help``, run, and isolated when broken."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ggml_core import API_VERSION, BackendReg, PluginError, hookimpl
from ggml_core.backend.registry import Registry, reset_registry
from ggml_core.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def _adder(help: str = "a plugin command") -> Callable[[Any, str], None]:
    def add_parser(sub: Any, name: str) -> None:
        p = sub.add_parser(name, help=help)
        p.add_argument("--times", type=int, default=1)

    return add_parser


def _hello(args: argparse.Namespace) -> int:
    print("hello " * args.times)
    return 7


class _Plugin:
    """A minimal plugin whose ``ggml_register_commands`` runs ``body(register)``."""

    def __init__(self, body: Callable[[Callable[..., None]], None]) -> None:
        self.body = body

    @hookimpl
    def ggml_api_version(self) -> int:
        return API_VERSION

    @hookimpl
    def ggml_register_backends(self, register: Callable[[BackendReg], None]) -> None:
        register(BackendReg(f"Cmd{id(self)}", []))

    @hookimpl
    def ggml_register_commands(self, register: Callable[..., None]) -> None:
        self.body(register)


@pytest.fixture
def registry() -> Iterator[Registry]:
    reg = Registry(entry_points=lambda: [], environ={})
    reset_registry(reg)
    yield reg
    reset_registry()


def _warnings(reg: Registry, plugin: str) -> list[str]:
    return next(p.warnings for p in reg.plugins if p.name == plugin)


def test_a_plugin_command_is_listed_and_runs(registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    registry.register_plugin(_Plugin(lambda r: r("hello", _adder("say hello"), _hello)), "greeter")
    assert "say hello" in build_parser().format_help()
    assert main(["hello", "--times", "2"]) == 7
    assert capsys.readouterr().out.strip() == "hello hello"


def test_an_unknown_option_of_a_plugin_command_is_one_line(
    registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    registry.register_plugin(_Plugin(lambda r: r("hello", _adder(), _hello)), "greeter")
    with pytest.raises(SystemExit) as exc:
        main(["hello", "--tims", "2"])
    assert exc.value.code == 2
    assert "did you mean '--times'" in capsys.readouterr().err


def _raise(register: Callable[..., None]) -> None:
    raise RuntimeError("commands exploded")


def _bad_add(sub: Any, name: str) -> None:
    sub.add_parser(name, help="half-made")
    raise ValueError("add_parser exploded")


def _extra_add(sub: Any, name: str) -> None:
    sub.add_parser(name, help="ok")
    sub.add_parser("stowaway", help="not registered")


@pytest.mark.parametrize(
    ("body", "expect", "absent"),
    [
        (_raise, "hook ggml_register_commands raised RuntimeError: commands exploded", []),
        (lambda r: r("Bad Name", _adder(), _hello), "is not a command name", ["Bad Name"]),
        (lambda r: r(None, _adder(), _hello), "None is not a command name", []),
        (lambda r: r("devices", _adder("impostor"), _hello), "already taken by ggml-core", []),
        (lambda r: r("tool", "not callable", _hello), "not a callable add_parser", ["tool"]),
        (lambda r: r("tool", _adder(), None), "not a callable run", ["tool"]),
        (lambda r: r("tool", _bad_add, _hello), "add_parser raised ValueError: add_parser exploded", ["tool"]),
        (lambda r: r("tool", lambda sub, name: None, _hello), "did not add a parser named 'tool'", ["tool"]),
        (lambda r: r("tool", _extra_add, _hello), "added other commands too ('stowaway')", ["tool", "stowaway"]),
    ],
)
def test_a_broken_command_is_isolated(
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
    body: Callable[[Callable[..., None]], None],
    expect: str,
    absent: list[str],
) -> None:
    registry.register_plugin(_Plugin(body), "broken")
    registry.register_plugin(_Plugin(lambda r: r("hello", _adder(), _hello)), "greeter")
    text = build_parser().format_help()
    assert "hello" in text and "devices" in text  # the good plugin's and the core's commands stay
    assert "impostor" not in text and all(f"\n    {name} " not in text for name in absent)
    assert any(expect in w for w in _warnings(registry, "broken")), _warnings(registry, "broken")
    assert main(["hello"]) == 7  # the CLI goes on
    assert main(["plugins"]) == 0
    assert expect in capsys.readouterr().out  # the problem is shown by `ggml-core plugins`


def _interrupt(register: Callable[..., None]) -> None:
    raise KeyboardInterrupt  # raised by plugin code, not a Ctrl-C: the plugin's failure


def _hang(register: Callable[..., None]) -> None:
    import time

    time.sleep(30)


@pytest.mark.parametrize(
    ("body", "expect"),
    [(_interrupt, "raised KeyboardInterrupt"), (_hang, "hook ggml_register_commands hung")],
)
def test_a_command_hook_runs_under_the_plugin_deadline(
    body: Callable[[Callable[..., None]], None], expect: str
) -> None:
    reg = Registry(entry_points=lambda: [], environ={"GGML_PLUGIN_TIMEOUT": "0.5"})
    reset_registry(reg)
    try:
        reg.register_plugin(_Plugin(body), "bad")
        reg.register_plugin(_Plugin(lambda r: r("hello", _adder(), _hello)), "greeter")
        assert "hello" in build_parser().format_help()
        assert any(expect in w for w in _warnings(reg, "bad")), _warnings(reg, "bad")
        assert main(["hello"]) == 7
    finally:
        reset_registry()


def test_a_second_plugin_cannot_take_a_command_name(registry: Registry) -> None:
    registry.register_plugin(_Plugin(lambda r: r("hello", _adder(), _hello)), "first")
    registry.register_plugin(_Plugin(lambda r: r("hello", _adder(), lambda a: 0)), "second")
    build_parser()
    assert any("already taken by plugin 'first'" in w for w in _warnings(registry, "second"))
    assert main(["hello"]) == 7


def test_a_failing_run_is_one_line_exit_2(registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    def boom(args: argparse.Namespace) -> int:
        raise OSError("disk on fire")

    registry.register_plugin(_Plugin(lambda r: r("boom", _adder(), boom)), "boomer")
    registry.register_plugin(_Plugin(lambda r: r("odd", _adder(), lambda a: "yes")), "odd")
    assert main(["boom"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plugin 'boomer'" in err and "OSError: disk on fire" in err
    assert main(["odd"]) == 2
    assert "returned 'yes', not an exit code" in capsys.readouterr().err


def test_strict_mode_raises() -> None:
    reg = Registry(entry_points=lambda: [], environ={"GGML_STRICT_PLUGINS": "1"})
    reg.register_plugin(_Plugin(_raise), "broken")
    reset_registry(reg)
    try:
        with pytest.raises(PluginError, match=r"broken.*commands exploded"):
            build_parser()
    finally:
        reset_registry()


def test_the_core_imports_no_plugin() -> None:
    """No module of ggml_core imports a plugin package (first-party or not): plugins come in through entry points."""
    plugins = {p.name.replace("-", "_") for p in (ROOT / "plugins").iterdir() if p.is_dir()} | {"ggml_example"}
    offenders = []
    for path in (ROOT / "ggml_core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in plugins]
    assert not offenders
    assert "rpc-server" not in COMMANDS


def test_help_imports_no_plugin_internals() -> None:
    """``ggml-core --help`` asks the plugins for their commands but imports no kernel, driver or server module."""
    code = (
        "import sys; from ggml_core.cli import build_parser; build_parser().format_help(); "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('ggml_rpc.server', 'numba', 'pyopencl', "
        "'pycuda', 'gguf')))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_strict_mode_is_one_line_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    """With GGML_STRICT_PLUGINS=1 a plugin's problem stops the CLI, with one line and exit code 2 (no traceback)."""
    reg = Registry(entry_points=lambda: [], environ={"GGML_STRICT_PLUGINS": "1"})
    reg.register_plugin(_Plugin(_raise), "broken")
    reset_registry(reg)
    try:
        assert main(["devices"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "plugin 'broken'" in err and "commands exploded" in err
    finally:
        reset_registry()
