"""Conformance testing of backends (ggml's test-backend-ops in Python)."""

__all__: list[str] = []
