"""ggml-core's conformance suite on every CUDA device present, compared node by node with the CPU plugin.

Cases a CUDA device does not support skip with the reason (the scheduler runs those ops on the CPU); without a
CUDA device every case skips, saying why.
"""

from __future__ import annotations

from cuda_helpers import real_cuda_device

from ggml_core.testing import conformance_suite

test_conformance = conformance_suite("CUDA0")

if real_cuda_device() is not None:  # further devices, when the machine has them
    import ggml_core as g
    from ggml_cuda._device import CUDADevice

    for _dev in [d for d in g.devices() if isinstance(d, CUDADevice)][1:]:
        globals()[f"test_conformance_{_dev.name.lower()}"] = conformance_suite(_dev.name)
