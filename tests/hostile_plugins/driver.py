"""Run ggml-core commands in this (fresh) interpreter, each with a freshly loaded registry, and save what happened.

    python driver.py COMMANDS.json RESULTS.json

COMMANDS.json is a list of argv lists. Each command runs through ``ggml_core.cli.main`` with its stdout and stderr
captured; an exception escaping ``main`` (which the CLI must never let happen) is saved as its traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from typing import Any


def run_one(argv: list[str]) -> dict[str, Any]:
    from ggml_core.backend.registry import reset_registry
    from ggml_core.cli import main

    reset_registry(None)  # what a new process would see
    out, err = io.StringIO(), io.StringIO()
    rc: Any = None
    exc = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
        except BaseException:  # noqa: BLE001 - recorded: the test fails on it
            exc = traceback.format_exc()
    return {"argv": argv, "rc": rc, "out": out.getvalue(), "err": err.getvalue(), "exc": exc}


def main() -> None:
    with open(sys.argv[1]) as f:
        commands = json.load(f)
    results = [run_one(argv) for argv in commands]
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
