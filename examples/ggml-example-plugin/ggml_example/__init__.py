"""A complete, minimal ggml-core backend plugin (the walk-through of docs/plugins.md, where every line is shown).

One device, ``Example0``, with memory of its own (a bytearray the host cannot address directly, so the scheduler
must copy inputs in and results out) and three f32 ops on any strides: ADD, MUL (with ggml's broadcasting) and
SCALE. It reads top to bottom like every plugin: checks → kernels → buffers → backend → device → registration.
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
    ComputeError,
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
#: ops that compute nothing: the node is a window on its source's memory
VIEW_OPS = {GGMLOp.NONE, GGMLOp.VIEW, GGMLOp.RESHAPE, GGMLOp.PERMUTE, GGMLOp.TRANSPOSE}


def supports(node: Tensor) -> bool:
    """What the kernels below compute: f32 tensors of any strides; for ADD and MUL, src1 repeats into src0."""
    if node.op in VIEW_OPS:
        return True
    a, b = node.src[0], node.src[1]
    if node.op not in SUPPORTED or node.type != GGMLType.F32 or a is None or a.type != GGMLType.F32:
        return False
    return node.op == GGMLOp.SCALE or (b is not None and b.type == GGMLType.F32 and b.can_repeat_to(a))


# ---------------------------------------------------------------------------------------------- kernels


def _array(t: Tensor) -> np.ndarray:
    """A tensor of this device as a writable numpy view of its bytes: shape (ne3, ne2, ne1, ne0), ggml's strides."""
    if not isinstance(t.buffer, ExampleBuffer) or t.data_offset is None:
        raise ComputeError(t, "Example0", f"the tensor is not in Example0 memory (buffer {t.buffer!r})")
    shape = (t.ne[3], t.ne[2], t.ne[1], t.ne[0])
    strides = (t.nb[3], t.nb[2], t.nb[1], t.nb[0])
    return np.ndarray(shape, np.float32, buffer=t.buffer.mem, offset=t.data_offset, strides=strides)


def _compute(node: Tensor) -> None:
    a = _array(node.src[0])  # type: ignore[arg-type]
    if node.op == GGMLOp.SCALE:  # op params: f32 slot 0 = scale, slot 1 = bias
        out = a * np.float32(node.op_param_f32(0)) + np.float32(node.op_param_f32(1))
    else:
        b = _array(node.src[1])  # type: ignore[arg-type]
        b = np.tile(b, tuple(n // m for n, m in zip(a.shape, b.shape, strict=True)))  # ggml's broadcasting
        out = a + b if node.op == GGMLOp.ADD else a * b
    _array(node)[...] = out  # at the node's own offset and strides


# ---------------------------------------------------------------------------------------------- buffers


class ExampleBuffer(Buffer):
    """Device memory: a private bytearray (never exposed as host memory)."""

    def __init__(self, buffer_type: BufferType, size: int) -> None:
        super().__init__(buffer_type, size)
        self.mem = bytearray(size)

    def _write(self, offset: int, data: memoryview) -> None:
        self.mem[offset : offset + data.nbytes] = data

    def _read(self, offset: int, out: memoryview) -> None:
        out[:] = self.mem[offset : offset + out.nbytes]


class ExampleBufferType(BufferType):
    """``Example0``: the device's own memory."""

    def _alloc(self, size: int) -> Buffer:
        return ExampleBuffer(self, size)


# ---------------------------------------------------------------------------------------------- backend


class ExampleBackend(Backend):
    """A synchronous stream: computes the graph's nodes in order."""

    def graph_compute_async(self, graph: Graph) -> None:
        for node in graph.nodes:
            if node.op in VIEW_OPS or node.is_empty or not node.flags & TensorFlag.COMPUTE:
                continue  # views alias their source; empty tensors hold nothing; no COMPUTE flag: not asked for
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
        return supports(op)


# ---------------------------------------------------------------------------------------------- registration


@hookimpl
def ggml_api_version() -> int:
    return API_VERSION


@hookimpl
def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
    register(BackendReg("Example", [ExampleDevice()], description="the docs/plugins.md example"))
