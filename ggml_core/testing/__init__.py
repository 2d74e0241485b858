"""Conformance testing of backends: ggml's test-backend-ops in Python.

- :func:`all_cases` / :func:`select`: the case list (op, types, shapes, params) for the whole op set
- :func:`run_case`: run one case on a device inside guard bytes and judge it against numpy (CPU devices) or the
  CPU device (every other device), with test-backend-ops' comparison (:func:`compare`)
- :func:`check_support`, :func:`measure`: ``support`` and ``perf`` modes
- :func:`conformance_suite`: one line gives a plugin's test suite a parametrized test per case
- :mod:`ggml_core.testing.reference`: the numpy references

Names load on first use: the pytest plugin (``ggml_core.testing.pytest_plugin``) is imported by every pytest
session and must stay cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DEFAULT_NMSE",
    "GUARD_BYTES",
    "Built",
    "Case",
    "CaseResult",
    "CaseUnavailable",
    "Check",
    "CheckKind",
    "Comparison",
    "GuardedBuffer",
    "MissingBuilder",
    "Status",
    "all_cases",
    "all_op_names",
    "check_support",
    "compare",
    "conformance_suite",
    "jaccard_distance",
    "measure",
    "nmse",
    "prepare",
    "run_case",
    "select",
]

_WHERE = {
    **dict.fromkeys(
        ["DEFAULT_NMSE", "Built", "Case", "CaseUnavailable", "Check", "CheckKind", "MissingBuilder"], "_case"
    ),
    **dict.fromkeys(["Comparison", "compare", "jaccard_distance", "nmse"], "_compare"),
    **dict.fromkeys(["GUARD_BYTES", "GuardedBuffer"], "_guard"),
    **dict.fromkeys(["CaseResult", "Status", "check_support", "measure", "prepare", "run_case"], "_runner"),
    "conformance_suite": "_suite",
    **dict.fromkeys(["all_cases", "all_op_names", "select"], "cases"),
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ggml_core.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ggml_core.testing.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
