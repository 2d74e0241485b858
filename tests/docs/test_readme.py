"""The README's claims, checked: its Python example runs and prints what its comments say, its error example is the
error the code raises, and every ``ggml-core`` command line it shows names a real command with real options."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


def test_the_two_commands_open_the_readme() -> None:
    first = _blocks("sh")[0].splitlines()
    assert first[0].startswith("scripts/setup.sh && .venv/bin/ggml-core run")
    assert first[1].startswith("scripts/test.sh")
    ci = (README.parent / ".ci" / "run").read_text()
    assert "scripts/test.sh" in ci


def test_python_example_prints_what_it_says() -> None:
    (example,) = [b for b in _blocks("python") if "graph_compute" in b]
    proc = _run(example)
    assert proc.returncode == 0, proc.stderr
    printed = re.search(r"print\(.*\)\s*# (\(.*?\))", example)
    assert printed is not None
    assert proc.stdout.strip() == printed.group(1)


def test_error_example_is_the_real_error() -> None:
    (example,) = [b for b in _blocks("python") if "graph_compute" in b]
    (shown,) = [b for b in _blocks("text") if "OpError" in b]
    setup = example.split("y = ")[0].replace('new_tensor_2d("f32", 256, 4, "x")', 'new_tensor_2d("f32", 128, 4, "x")')
    proc = _run(setup + "ops.mul_mat(w, x)\n")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert " ".join(shown.split()) == " ".join(last.split())


def _help(args: list[str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "ggml_core.cli", *args, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"ggml-core {' '.join(args)} --help: {proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize(
    "line",
    [ln.split("#")[0].strip() for b in _blocks("sh") for ln in b.splitlines() if ln.startswith("ggml-core ")],
)
def test_every_command_line_is_real(line: str) -> None:
    words = shlex.split(line)[1:]
    text = _help(words[:1])
    for opt in (w.split("=")[0] for w in words[1:] if w.startswith("-")):
        assert re.search(rf"(^|[\s,\[]){re.escape(opt)}([\s,=\]]|$)", text, re.M), f"{words[0]} has no option {opt}"
