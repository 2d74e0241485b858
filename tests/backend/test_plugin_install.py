"""Real installation: the docs' example plugin and a deliberately broken plugin, installed with pip into a folder.

This is the end-to-end check of discovery: entry points come from real ``*.dist-info`` metadata, and the CLI runs
in a fresh interpreter, as a user's would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_packages import EXAMPLE, pip_install, plugin_package


def _broken_package(where: Path) -> Path:
    return plugin_package(where, "broken", 'raise ImportError("libbroken.so.1: cannot open shared object")\n')


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("plugins")
    target = tmp / "site"
    pip_install(target, EXAMPLE, _broken_package(tmp))
    return target


def _cli(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    env.pop("GGML_BACKENDS", None)
    env.pop("GGML_STRICT_PLUGINS", None)
    return subprocess.run(
        [sys.executable, "-m", "ggml_core.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_plugins_lists_the_example_and_the_broken_plugin(site: Path) -> None:
    proc = _cli(site, "plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    plugins = {p["name"]: p for p in json.loads(proc.stdout)}
    assert plugins["example"]["status"] == "loaded"
    assert plugins["example"]["distribution"] == "ggml-example-plugin"
    assert "ggml_register_backends" in plugins["example"]["hooks"]
    assert plugins["broken"]["status"] == "error"
    assert "libbroken.so.1" in plugins["broken"]["error"]
    assert plugins["cpu"]["status"] == "loaded"


def test_devices_check_passes_on_every_device_despite_the_broken_plugin(site: Path) -> None:
    proc = _cli(site, "devices", "--check", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    devices = {d["name"]: d for d in json.loads(proc.stdout)["devices"]}
    names = list(devices)  # other installed plugins (OpenCL...) may add devices too
    assert names.index("Example0") < names.index("CPU") == len(names) - 1  # accelerator types first, the CPU last
    assert devices["Example0"]["check"]["passed"], devices["Example0"]["check"]
    assert devices["CPU"]["check"]["passed"], devices["CPU"]["check"]
    text = _cli(site, "devices")
    assert "1 plugin(s) failed to load: broken" in text.stdout


def test_strict_mode_turns_the_broken_plugin_into_an_error(site: Path) -> None:
    env_proc = subprocess.run(
        [sys.executable, "-c", "import ggml_core; ggml_core.devices()"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site), "GGML_STRICT_PLUGINS": "1"},
        timeout=300,
    )
    assert env_proc.returncode != 0
    assert "PluginError" in env_proc.stderr and "libbroken.so.1" in env_proc.stderr


def test_ggml_backends_hides_the_example(site: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(site), "GGML_BACKENDS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-m", "ggml_core.cli", "devices", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert [d["name"] for d in json.loads(proc.stdout)["devices"]] == ["CPU"]
