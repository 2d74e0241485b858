"""ggml-core's conformance suite on Example0's ops, against the CPU device."""

from ggml_core.testing import conformance_suite

test_conformance = conformance_suite("Example0", ops="ADD,MUL,SCALE")
