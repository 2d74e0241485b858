"""``ggml-core new-plugin``: the package it writes installs with pip, passes ``devices --check``, ``test-ops`` and
its own tests (the shared conformance suite) on the ops it declares, in a fresh interpreter as a user's would."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ggml_core.cli import main
from ggml_core.cli._plugin_template import OP_SNIPPETS

#: one plugin with every op the generator offers, one with a single op (checked by a single-op graph)
PLUGINS = {"Toy": list(OP_SNIPPETS), "Solo": ["ADD"]}


def _run(args: list[str], site: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_BACKENDS", "GGML_STRICT_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout, cwd=site.parent)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("new_plugin")
    packages = []
    for name, ops in PLUGINS.items():
        assert main(["new-plugin", name, "--dir", str(tmp), "--ops", ",".join(ops)]) == 0
        packages.append(str(tmp / f"ggml-{name.lower()}"))
    target = tmp / "site"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target)]
    proc = subprocess.run([*cmd, *packages], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return target


def test_devices_check_passes(site: Path) -> None:
    proc = _run([sys.executable, "-m", "ggml_core.cli", "devices", "--check", "--json"], site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    devices = {d["name"]: d for d in json.loads(proc.stdout)["devices"]}
    assert devices["Toy0"]["check"]["passed"] and "mul_mat, add, soft_max" in devices["Toy0"]["check"]["reason"]
    assert devices["Solo0"]["check"]["passed"] and "add of same-shape" in devices["Solo0"]["check"]["reason"]
    assert devices["CPU"]["check"]["passed"]  # the first-party CPU is still there, and last


@pytest.mark.parametrize("name", list(PLUGINS))
def test_test_ops_passes_every_declared_op(site: Path, name: str) -> None:
    ops = ",".join(PLUGINS[name])
    cmd = [sys.executable, "-m", "ggml_core.cli", "test-ops", "-b", f"{name}0", "-o", ops, "--output", "json"]
    proc = _run(cmd, site)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [r for r in json.loads(proc.stdout) if r.get("supported") and r.get("test_mode") == "test"]
    passed = collections.Counter(r["op_name"] for r in rows if r["passed"])
    assert not [r for r in rows if not r["passed"]]
    assert set(passed) == set(PLUGINS[name]), passed  # every declared op ran and passed at least one case


def test_the_generated_tests_pass(site: Path) -> None:
    """The package's own tests/: the conformance suite on its ops and the every-op-passes check."""
    tests = site.parent / "ggml-solo" / "tests"
    proc = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)], site)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["new-plugin", "9lives"], "must be a letter"),
        (["new-plugin", "cpu"], "first-party backend's name"),
        (["new-plugin", "Toy", "--ops", "ADD,FROB"], "FROB not available; choose from ADD"),
        (["new-plugin", "Toy", "--ops", ","], "none given not available"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main([*args, "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_an_existing_package_is_not_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-plugin", "Toy", "--dir", str(tmp_path)]) == 0
    module = tmp_path / "ggml-toy" / "ggml_toy" / "__init__.py"
    module.write_text("# my work\n")
    assert main(["new-plugin", "Toy", "--dir", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert module.read_text() == "# my work\n"
