"""ggml-core's conformance suite on every OpenCL device present, compared node by node with the CPU plugin.

Cases an OpenCL device does not support skip with the reason (the scheduler runs those ops on the CPU);
without an OpenCL device every case skips, saying why.
"""

from __future__ import annotations

from ocl_helpers import opencl_devices

from ggml_core.testing import conformance_suite

test_conformance = conformance_suite("OpenCL0")

for _dev in opencl_devices()[1:]:  # further devices, when the machine has them
    globals()[f"test_conformance_{_dev.name.lower()}"] = conformance_suite(_dev.name)
