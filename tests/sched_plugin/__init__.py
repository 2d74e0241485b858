"""An in-test backend plugin for the scheduler: a device with memory of its own and only a few ops.

``SubsetDevice`` ("Sub0", "Sub1", ...) computes MUL_MAT, ADD, MUL and RMS_NORM (f32; f16 weights for MUL_MAT) with
numpy, but its buffers are private memory the host cannot address (``host_array()`` is None), so the CPU cannot
read them and the scheduler must really copy. Options make it exercise the other code paths:

- ``asynchronous=True``: work is *queued* and only runs at ``synchronize()`` or when an event is waited on, so a
  missing synchronisation in the scheduler shows up as wrong results; events (``caps.events``) are offered;
- ``capacity``: allocations above this many bytes in total fail with AllocationError;
- ``fail_on``: node names whose kernel raises (a device failing mid-compute);
- ``offload_min_batch``: ``offload_op`` says yes from this batch size on (ggml-cuda's rule, default 32).

Read top to bottom like a plugin: checks → kernels → buffers → backend/events → device.
"""

from sched_plugin._device import (
    DEFAULT_OPS,
    SubsetBackend,
    SubsetBuffer,
    SubsetBufferType,
    SubsetDevice,
    SubsetEvent,
    SubsetPlugin,
)

__all__ = [
    "DEFAULT_OPS",
    "SubsetBackend",
    "SubsetBuffer",
    "SubsetBufferType",
    "SubsetDevice",
    "SubsetEvent",
    "SubsetPlugin",
]
