"""Plugin packages for pip to install in tests: the example plugin and one-module plugin source trees."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ggml-example-plugin"


def pip_install(target: Path, *packages: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target)]
    proc = subprocess.run([*cmd, *map(str, packages)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"pip install failed:\n{proc.stdout}\n{proc.stderr}")


def plugin_package(where: Path, name: str, init_source: str, entry: str | None = None) -> Path:
    """A one-module plugin source tree ``ggml-NAME`` (entry point ``ENTRY``, by default ``NAME``, in
    ``ggml.backends``) for pip to install."""
    pkg = where / f"ggml-{name}"
    (pkg / f"ggml_{name}").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "ggml-{name}"
            version = "0.0.1"

            [project.entry-points."ggml.backends"]
            {entry or name} = "ggml_{name}"

            [tool.setuptools]
            packages = ["ggml_{name}"]
            """
        )
    )
    (pkg / f"ggml_{name}" / "__init__.py").write_text(init_source)
    return pkg
