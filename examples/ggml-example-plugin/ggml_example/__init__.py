"""A complete, minimal ggml-core backend plugin (the example of docs/plugins.md).

One device, ``Example0``, with memory of its own (a bytearray the host cannot address directly, so the scheduler
must copy inputs in and results out) and three f32 ops: ADD, MUL (with ggml's broadcasting) and SCALE. It reads top
to bottom like every plugin: checks → kernels → buffers → backend → device → registration.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ggml_core import (
    API_VERSION,
    Backend,
    BackendReg,
    Buffer,
    BufferType,
    Device,
    DeviceType,
    GGMLOp,
    GGMLType,
    Graph,
    Tensor,
    TensorFlag,
    hookimpl,
)

# ---------------------------------------------------------------------------------------------- checks

#: ops this device computes, all in f32
SUPPORTED = {GGMLOp.ADD, GGMLOp.MUL, GGMLOp.SCALE}


def _all_f32_contiguous(t: Tensor) -> bool:
    return all(s.type == GGMLType.F32 and s.is_contiguous for s in [t, *(x for x in t.src if x is not None)])


# ---------------------------------------------------------------------------------------------- kernels


def _load(t: Tensor) -> np.ndarray:
    """Read a tensor of this device into a numpy array of its numpy shape (ne3, ne2, ne1, ne0)."""
    raw = np.frombuffer(t.get_bytes(), dtype=np.float32)
    return raw.reshape(t.ne[3], t.ne[2], t.ne[1], t.ne[0])


def _repeat(b: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """ggml's broadcasting: b repeats an integer number of times along every dimension."""
    return np.tile(b, tuple(n // m for n, m in zip(shape, b.shape, strict=True)))


def _compute(node: Tensor) -> None:
    a = _load(node.src[0])  # type: ignore[arg-type]
    if node.op == GGMLOp.SCALE:
        out = a * np.float32(node.op_param_f32(0)) + np.float32(node.op_param_f32(1))
    else:
        b = _repeat(_load(node.src[1]), a.shape)  # type: ignore[arg-type]
        out = a + b if node.op == GGMLOp.ADD else a * b
    node.set_bytes(out.astype(np.float32).tobytes())


# ---------------------------------------------------------------------------------------------- buffers


class ExampleBuffer(Buffer):
    """Device memory: a private bytearray (never exposed as host memory)."""

    def __init__(self, buffer_type: BufferType, size: int) -> None:
        super().__init__(buffer_type, size)
        self._mem = bytearray(size)

    def _write(self, offset: int, data: memoryview) -> None:
        self._mem[offset : offset + data.nbytes] = data

    def _read(self, offset: int, out: memoryview) -> None:
        out[:] = self._mem[offset : offset + out.nbytes]


class ExampleBufferType(BufferType):
    """``Example0``: the device's own memory."""

    def _alloc(self, size: int) -> Buffer:
        return ExampleBuffer(self, size)


# ---------------------------------------------------------------------------------------------- backend


class ExampleBackend(Backend):
    """A synchronous stream: computes nodes one by one."""

    def graph_compute_async(self, graph: Graph) -> None:
        for node in graph.nodes:
            if node.flags & TensorFlag.COMPUTE and node.op in SUPPORTED:
                _compute(node)


# ---------------------------------------------------------------------------------------------- device


class ExampleDevice(Device):
    """One device with 64 MiB of its own memory."""

    type = DeviceType.GPU

    def __init__(self) -> None:
        super().__init__("Example0", "ggml-core example device (numpy behind a private buffer)")
        self._buft = ExampleBufferType("Example0", self, alignment=32)

    def memory(self) -> tuple[int, int]:
        return 64 << 20, 64 << 20

    def buffer_type(self) -> BufferType:
        return self._buft

    def init_backend(self, params: str | None = None) -> Backend:
        return ExampleBackend(self)

    def supports_op(self, op: Tensor) -> bool:
        if op.op in (GGMLOp.NONE, GGMLOp.VIEW, GGMLOp.RESHAPE, GGMLOp.PERMUTE, GGMLOp.TRANSPOSE):
            return True
        return op.op in SUPPORTED and _all_f32_contiguous(op)


# ---------------------------------------------------------------------------------------------- registration


@hookimpl
def ggml_api_version() -> int:
    return API_VERSION


@hookimpl
def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
    register(BackendReg("Example", [ExampleDevice()], description="the docs/plugins.md example"))
