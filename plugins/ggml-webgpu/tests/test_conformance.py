"""ggml-core's conformance suite on every WebGPU device present, compared node by node with the CPU plugin.

Cases a WebGPU device does not support skip with the reason (the scheduler runs those ops on the CPU);
without a WebGPU adapter every case skips, saying why.
"""

from __future__ import annotations

from wgpu_helpers import webgpu_devices

from ggml_core.testing import conformance_suite

test_conformance = conformance_suite("WebGPU0")

for _dev in webgpu_devices()[1:]:  # further adapters, when the machine has them
    globals()[f"test_conformance_{_dev.name.lower()}"] = conformance_suite(_dev.name)
