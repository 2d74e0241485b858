"""docs/plugins.md runs as written: every ``python``, ``toml`` and ``sh`` block, in order, in a fresh directory.

Blocks whose first line is ``# file: PATH`` are written to PATH (later blocks for the same PATH are appended after
one blank line; blank lines right after the marker add more); put together they must be byte for byte the files
of examples/ggml-example-plugin, so the example can never drift from the page. Other ``python`` blocks run as
scripts and ``sh`` blocks with bash (``set -euo pipefail``), each in a fresh interpreter. ``pip install``
installs into a target folder on PYTHONPATH (``--no-deps --no-build-isolation``: nothing is downloaded), and
``ggml-core`` / ``pytest`` are this interpreter's. ``text`` blocks (sample output) are not run.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "plugins.md"
EXAMPLE = ROOT / "examples" / "ggml-example-plugin"
RUN = ("python", "toml", "sh")

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
_MARKER = re.compile(r"# file: (\S+)\n")

_SHIMS = {
    "pip": 'if [ "$1" = install ]; then shift; exec "$PY" -m pip install -q --no-deps --no-build-isolation '
    '--upgrade --target "$SITE" "$@"; fi\nexec "$PY" -m pip "$@"',
    "ggml-core": 'exec "$PY" -m ggml_core.cli "$@"',
    "pytest": 'exec "$PY" -m pytest -p no:cacheprovider "$@"',
}


def _blocks() -> list[tuple[str, str, int]]:
    """(language, text, line number in the doc) of every fenced block."""
    text = DOC.read_text()
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in _FENCE.finditer(text)]


def _files() -> dict[str, str]:
    files: dict[str, str] = {}
    for lang, text, _ in _blocks():
        m = _MARKER.match(text)
        if lang in RUN and m:
            body = text[m.end() :]
            files[m.group(1)] = files[m.group(1)] + "\n" + body if m.group(1) in files else body
    return files


def test_the_doc_has_runnable_blocks() -> None:
    langs = [lang for lang, _, _ in _blocks()]
    assert not [lang for lang in langs if lang == ""], "every block names its language (python, toml, sh, text)"
    assert {"python", "toml", "sh"} <= set(langs)


def test_the_blocks_are_the_example_plugin() -> None:
    files = _files()
    prefix = "ggml-example-plugin/"
    assert all(path.startswith(prefix) for path in files), list(files)
    shown = {path.removeprefix(prefix) for path in files}
    tracked = {
        str(p.relative_to(EXAMPLE))
        for p in EXAMPLE.rglob("*")
        if p.is_file()
        and not {"__pycache__", "build"} & set(p.relative_to(EXAMPLE).parts)
        and ".egg-info" not in str(p)
    }
    assert shown == tracked, f"the doc shows {sorted(shown)}, the example has {sorted(tracked)}"
    for path, text in files.items():
        real = (EXAMPLE / path.removeprefix(prefix)).read_text()
        assert text == real, f"{path}: docs/plugins.md and {EXAMPLE.name} differ; update one from the other"


def test_every_block_runs(tmp_path: Path) -> None:
    work, site, bin_dir = tmp_path / "work", tmp_path / "site", tmp_path / "bin"
    for d in (work, site, bin_dir):
        d.mkdir()
    for name, body in _SHIMS.items():
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\n{body}\n")
        shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_BACKENDS", "GGML_STRICT_PLUGINS", "PYTHONPATH")}
    env |= {"PY": sys.executable, "SITE": str(site), "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    ran = 0
    for index, (lang, text, line) in enumerate(_blocks()):
        if lang not in RUN:
            continue
        m = _MARKER.match(text)
        if m:
            path = work / m.group(1)
            path.parent.mkdir(parents=True, exist_ok=True)
            body = text[m.end() :]
            path.write_text(path.read_text() + "\n" + body if path.exists() else body)
            continue
        assert lang != "toml", f"docs/plugins.md line {line}: a toml block must be a file (# file: PATH), pip reads it"
        if lang == "python":
            script = tmp_path / f"block_{index}.py"
            script.write_text(text)
            cmd = [sys.executable, str(script)]
        else:
            cmd = ["bash", "-euo", "pipefail", "-c", text]
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            pytest.fail(
                f"docs/plugins.md line {line} ({lang} block) failed with exit code {proc.returncode}:\n{text}\n"
                f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}",
                pytrace=False,
            )
        ran += 1
    assert ran >= 8
