"""The files ``ggml-core new-plugin`` writes: a plugin module assembled from per-op snippets, its packaging, tests.

Placeholders are ``@@NAME@@`` (``Toy``), ``@@LOWER@@`` (``toy``), ``@@OPS@@`` (``ADD,MUL,SCALE``), ``@@OPS_LIST@@``
(a list literal), ``@@OPS_WRAPPED@@`` and, in the module, ``@@CHECKS@@`` / ``@@KERNELS@@`` (the tables built
from :data:`OP_SNIPPETS`).
"""

from __future__ import annotations

from typing import Final

__all__ = ["MODULE", "OP_SNIPPETS", "PYPROJECT", "README", "TEST_CONFORMANCE", "TEST_DEVICE"]

#: op → (supports_op condition on ``node``, ``a`` = src[0], ``b`` = src[1]; kernel returning the result array)
OP_SNIPPETS: Final[dict[str, tuple[str, str]]] = {
    "ADD": ("_f32(node, a, b) and b.can_repeat_to(a)", "_array(node.src[0]) + _repeat(node.src[1], node.src[0])"),
    "SUB": ("_f32(node, a, b) and b.can_repeat_to(a)", "_array(node.src[0]) - _repeat(node.src[1], node.src[0])"),
    "MUL": ("_f32(node, a, b) and b.can_repeat_to(a)", "_array(node.src[0]) * _repeat(node.src[1], node.src[0])"),
    "DIV": ("_f32(node, a, b) and b.can_repeat_to(a)", "_array(node.src[0]) / _repeat(node.src[1], node.src[0])"),
    "SCALE": ("_f32(node, a)", "_array(node.src[0]) * _f(node, 0) + _f(node, 1)"),
    "SQR": ("_f32(node, a)", "np.square(_array(node.src[0]))"),
    "SQRT": ("_f32(node, a)", "np.sqrt(_array(node.src[0]))"),
    "LOG": ("_f32(node, a)", "np.log(_array(node.src[0]))"),
    "SIN": ("_f32(node, a)", "np.sin(_array(node.src[0]))"),
    "COS": ("_f32(node, a)", "np.cos(_array(node.src[0]))"),
    "SUM_ROWS": ("_f32(node, a)", "_array(node.src[0]).sum(axis=-1, keepdims=True, dtype=np.float64)"),
    "MUL_MAT": (
        "_f32(node, a, b) and b.ne[2] % a.ne[2] == 0 and b.ne[3] % a.ne[3] == 0",
        "_mul_mat(node)",
    ),
    "SOFT_MAX": (
        "_f32(node, a) and node.src[1] is None and node.src[2] is None and node.op_param_f32(1) == 0.0",
        "_soft_max(node)",
    ),
    "CPY": ("_f32(node, a, b)", "np.reshape(_array(node.src[0]), _shape(node))"),
    "DUP": ("_f32(node, a)", "np.reshape(_array(node.src[0]), _shape(node))"),
    "CONT": ("_f32(node, a)", "np.reshape(_array(node.src[0]), _shape(node))"),
}

MODULE: Final = '''"""@@NAME@@: a ggml-core backend plugin (written by ``ggml-core new-plugin``; now it is yours).

One device, ``@@NAME@@0``, with memory of its own: each buffer is a numpy byte array that the host cannot address,
so the scheduler copies inputs in and results out, as for a discrete GPU. It computes its ops (CHECKS) in f32, on
numpy views of that memory that follow ggml's byte strides (so views, permutes and transposes need no copy):
@@OPS_WRAPPED@@.

Read it top to bottom, as every plugin: checks -> kernels -> buffers -> backend -> device -> registration.
To add an op: a condition in CHECKS, a kernel in KERNELS, and the op in tests/test_conformance.py.
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

#: ops that compute nothing: the node is a window on its source's memory (ggml_op_is_empty)
VIEW_OPS = frozenset({GGMLOp.NONE, GGMLOp.VIEW, GGMLOp.RESHAPE, GGMLOp.PERMUTE, GGMLOp.TRANSPOSE})


def _f32(*tensors: Tensor | None) -> bool:
    return all(t is not None and t.type == GGMLType.F32 for t in tensors)


#: op -> exactly when this device computes it correctly (node = the op's output, a/b = its first two operands)
CHECKS: dict[GGMLOp, Callable[[Tensor, Tensor, Tensor], bool]] = {
@@CHECKS@@
}

# ---------------------------------------------------------------------------------------------- kernels


def _shape(t: Tensor) -> tuple[int, int, int, int]:
    """numpy's shape of a tensor: (ne3, ne2, ne1, ne0), ne[0] fastest."""
    return (t.ne[3], t.ne[2], t.ne[1], t.ne[0])


def _array(t: Tensor) -> np.ndarray:
    """A tensor's f32 elements as a numpy view of this device's memory (writable; ggml's byte strides)."""
    buf = t.buffer
    if not isinstance(buf, NumpyBuffer) or t.data_offset is None:
        raise ComputeError(t, "@@NAME@@0", f"the tensor is not in @@NAME@@0 memory (buffer {buf!r})")
    strides = (t.nb[3], t.nb[2], t.nb[1], t.nb[0])
    return np.ndarray(_shape(t), np.float32, buffer=buf.mem, offset=t.data_offset, strides=strides)


def _repeat(b: Tensor, like: Tensor) -> np.ndarray:
    """ggml's broadcasting: b tiles ``like`` an integer number of times along every dimension."""
    return np.tile(_array(b), tuple(n // m for n, m in zip(_shape(like), _shape(b), strict=True)))


def _f(node: Tensor, i: int) -> np.float32:
    """Float op parameter i (ggml stores op params as 16 int32; floats are bit-cast)."""
    return np.float32(node.op_param_f32(i))


def _mul_mat(node: Tensor) -> np.ndarray:
    """ggml's mul_mat: dst[.., m, n] = sum_k src0[.., n, k] * src1[.., m, k]; src0 repeats over dims 2 and 3."""
    a, b = _array(node.src[0]), _array(node.src[1])  # type: ignore[arg-type]
    a = np.repeat(np.repeat(a, b.shape[0] // a.shape[0], axis=0), b.shape[1] // a.shape[1], axis=1)
    return b @ a.swapaxes(-1, -2)


def _soft_max(node: Tensor) -> np.ndarray:
    """soft_max_ext without mask, sinks or ALiBi: softmax(a * scale) along ne[0]."""
    x = _array(node.src[0]) * _f(node, 0)  # type: ignore[arg-type]
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


#: op -> the result as an array of the node's shape (written into the node's memory by _compute)
KERNELS: dict[GGMLOp, Callable[[Tensor], np.ndarray]] = {
@@KERNELS@@
}


def _compute(node: Tensor) -> None:
    _array(node)[...] = KERNELS[node.op](node)


# ---------------------------------------------------------------------------------------------- buffers


class NumpyBuffer(Buffer):
    """Device memory: a private numpy byte array (never handed out as host memory)."""

    def __init__(self, buffer_type: BufferType, size: int) -> None:
        super().__init__(buffer_type, size)
        self.mem = np.zeros(size, dtype=np.uint8)

    def _write(self, offset: int, data: memoryview) -> None:
        self.mem[offset : offset + data.nbytes] = np.frombuffer(data, dtype=np.uint8)

    def _read(self, offset: int, out: memoryview) -> None:
        out[:] = self.mem.data[offset : offset + out.nbytes]


class NumpyBufferType(BufferType):
    """The device's own memory."""

    def _alloc(self, size: int) -> Buffer:
        return NumpyBuffer(self, size)


# ---------------------------------------------------------------------------------------------- backend


class @@NAME@@Backend(Backend):
    """A synchronous stream: computes the graph's nodes in order."""

    def graph_compute_async(self, graph: Graph) -> None:
        for node in graph.nodes:
            if node.op in VIEW_OPS or node.is_empty or not node.flags & TensorFlag.COMPUTE:
                continue  # views alias their source; empty tensors hold nothing; no COMPUTE flag: not asked for
            _compute(node)


# ---------------------------------------------------------------------------------------------- device


class @@NAME@@Device(Device):
    """``@@NAME@@0``: 1 GiB of numpy memory."""

    type = DeviceType.GPU

    def __init__(self) -> None:
        super().__init__("@@NAME@@0", "@@NAME@@ device (numpy behind a private buffer; ggml-core new-plugin)")
        self._buft = NumpyBufferType("@@NAME@@0", self, alignment=32)

    def memory(self) -> tuple[int, int]:
        return 1 << 30, 1 << 30

    def buffer_type(self) -> BufferType:
        return self._buft

    def init_backend(self, params: str | None = None) -> Backend:
        return @@NAME@@Backend(self)

    def supports_op(self, op: Tensor) -> bool:
        if op.op in VIEW_OPS:
            return True
        check = CHECKS.get(op.op)
        return check is not None and check(op, op.src[0], op.src[1])  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- registration


@hookimpl
def ggml_api_version() -> int:
    return API_VERSION


@hookimpl
def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
    register(BackendReg("@@NAME@@", [@@NAME@@Device()], description="@@NAME@@ (ggml-core new-plugin)"))
'''

PYPROJECT: Final = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "ggml-@@LOWER@@"
version = "0.1.0"
description = "ggml-core backend plugin: the @@NAME@@0 device (@@OPS@@)"
requires-python = ">=3.10"
dependencies = ["ggml-core", "numpy"]

[project.optional-dependencies]
test = ["pytest>=7"]

[project.entry-points."ggml.backends"]
@@LOWER@@ = "ggml_@@LOWER@@"

[tool.setuptools]
packages = ["ggml_@@LOWER@@"]
"""

README: Final = """# ggml-@@LOWER@@

A ggml-core backend plugin: the device `@@NAME@@0`, computing @@OPS@@ in f32 with numpy.
Written by `ggml-core new-plugin @@NAME@@`; see ggml-core's docs/plugins.md for what each part does.

```sh
pip install -e .                     # the device appears in `ggml-core devices`
ggml-core devices --check            # @@NAME@@0: check: PASS
ggml-core test-ops -b @@NAME@@0 -o @@OPS@@
pytest tests                         # the conformance suite on the declared ops
```
"""

TEST_CONFORMANCE: Final = '''"""ggml-core's conformance suite (ggml's test-backend-ops) on @@NAME@@0's ops."""

from ggml_core.testing import conformance_suite

#: the ops the device declares
OPS = @@OPS_LIST@@

#: one test per case: test_conformance[OP(params)]; cases the device does not support are skipped with the reason
test_conformance = conformance_suite("@@NAME@@0", ops=OPS)
'''

TEST_DEVICE: Final = '''"""@@NAME@@0 is listed, passes ``devices --check``, really computes each op it declares."""

import ggml_core
from ggml_core.cli.devices import check_device
from ggml_core.testing import Status, run_case, select

OPS = @@OPS_LIST@@


def test_the_device_is_listed_and_passes_the_check() -> None:
    dev = ggml_core.get_device("@@NAME@@0")
    ok, reason, _ = check_device(dev)
    assert ok, reason


def test_every_declared_op_passes_some_case() -> None:
    """A suite that only skips proves nothing: each declared op must pass at least one case here."""
    dev = ggml_core.get_device("@@NAME@@0")
    backend = dev.init_backend()
    passed = {op: 0 for op in OPS}
    for case in select(ops=OPS):
        if run_case(case, dev, backend).status == Status.OK:
            passed[case.op] += 1
    assert all(passed.values()), passed
'''
