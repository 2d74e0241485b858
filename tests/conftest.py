"""Fixtures shared by the core's tests."""

from __future__ import annotations

import pytest

from ggml_core.testing import llama_cpp


@pytest.fixture(scope="session")
def llama_cpp_harness() -> None:
    """llama.cpp built on this machine (``ggml_core.testing.llama_cpp``), or the test skipped with the reason."""
    try:
        llama_cpp.harness()
    except llama_cpp.Unavailable as exc:
        pytest.skip(f"llama.cpp cannot be built here: {exc}")
