"""The Python examples of docs/models.md and docs/scheduler.md run as written.

A block fenced as ``python example`` runs as a script in a fresh interpreter (only the CPU plugin loaded, a cache
directory of its own); the ``text output`` block right after it is what its output must begin with.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("models.md", "scheduler.md")

_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)


def _examples(doc: str) -> list[tuple[str, str, int]]:
    """(code, expected output, line) of every ``python example`` block of a doc."""
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    blocks = [(m.group(1).split(), m.group(2), text.count("\n", 0, m.start()) + 1) for m in _FENCE.finditer(text)]
    out = []
    for i, (info, code, line) in enumerate(blocks):
        if info == ["python", "example"]:
            after = blocks[i + 1] if i + 1 < len(blocks) else None
            assert after is not None and after[0] == ["text", "output"], f"{doc}:{line}: no 'text output' block after"
            out.append((code, after[1], line))
    return out


def test_each_doc_has_an_example() -> None:
    assert all(_examples(doc) for doc in DOCS)


@pytest.mark.parametrize("doc, index", [(d, i) for d in DOCS for i in range(len(_examples(d)))])
def test_example_prints_what_the_doc_says(doc: str, index: int, tmp_path: Path) -> None:
    code, expected, line = _examples(doc)[index]
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ, GGML_BACKENDS="cpu", GGML_CORE_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, f"docs/{doc}:{line} failed:\n{proc.stderr[-3000:]}"
    assert proc.stdout.startswith(expected), f"docs/{doc}:{line} printed:\n{proc.stdout}\nthe doc says:\n{expected}"
