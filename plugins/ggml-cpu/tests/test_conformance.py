"""The CPU plugin against ggml-core's conformance suite: every case, judged against the numpy references.

The CPU device is the reference for every other device, so it is never compared with itself. Cases the CPU does
not support, or whose op builder does not exist yet, skip with the reason.
"""

from ggml_core.testing import conformance_suite

test_conformance = conformance_suite("CPU", reference="numpy")
