"""The conformance suite as a pytest module: ``pytest --ggml-device OpenCL0`` adds it to the collection.

The device comes from ``--ggml-device``; ``--ggml-op``, ``--ggml-pattern`` and ``--ggml-reference`` narrow and
direct it (see :mod:`ggml_core.testing.pytest_plugin`).
"""

from __future__ import annotations

from ggml_core.testing._suite import conformance_suite

test_conformance = conformance_suite()
