"""pytest plugin shipped by ggml-core (registered through the ``pytest11`` entry point).

Options:

- ``--ggml-device NAME``: run the whole conformance suite on that device (the suite module
  :mod:`ggml_core.testing.suite` joins the collection), and make ``conformance_suite()`` tests that name no
  device use it
- ``--ggml-op OP[,OP]`` / ``--ggml-pattern REGEX``: only those cases of every conformance suite collected
- ``--ggml-reference auto|numpy|cpu|both``: what the device is compared with

This module is imported by every pytest session on a machine with ggml-core installed: it imports nothing heavy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["pytest_addoption", "pytest_collection_modifyitems", "pytest_configure"]


def pytest_addoption(parser: Any) -> None:
    """Register the ``--ggml-*`` options."""
    group = parser.getgroup("ggml", "ggml-core conformance suite")
    group.addoption(
        "--ggml-device",
        dest="ggml_device",
        default=None,
        metavar="NAME",
        help="run ggml-core's op conformance suite on this device (e.g. CPU, OpenCL0)",
    )
    group.addoption("--ggml-op", dest="ggml_op", default=None, metavar="OP[,OP]", help="only cases of these ops")
    group.addoption(
        "--ggml-pattern", dest="ggml_pattern", default=None, metavar="REGEX", help="only cases whose name matches"
    )
    group.addoption(
        "--ggml-reference",
        dest="ggml_reference",
        default=None,
        choices=("auto", "numpy", "cpu", "both"),
        help="compare with numpy, the CPU device, or both (auto: numpy for CPU devices, the CPU device otherwise)",
    )


def pytest_configure(config: Any) -> None:
    """With ``--ggml-device``, add the packaged suite module to what pytest collects."""
    if config.getoption("ggml_device", None):
        suite = str(Path(__file__).with_name("suite.py"))
        if suite not in config.args:
            config.args.append(suite)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Deselect conformance cases that ``--ggml-op`` / ``--ggml-pattern`` exclude."""
    ops = config.getoption("ggml_op", None)
    pattern = config.getoption("ggml_pattern", None)
    if not ops and not pattern:
        return
    from ggml_core.testing.cases import select

    keep: list[Any] = []
    dropped: list[Any] = []
    wanted: set[str] | None = None
    for item in items:
        fn = getattr(item, "function", None)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if not getattr(fn, "ggml_conformance", False) or "ggml_case" not in params:
            keep.append(item)
            continue
        if wanted is None:
            wanted = {c.name for c in select(ops=ops, pattern=pattern)}
        (keep if params["ggml_case"] in wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
