"""The files ``ggml-core new-plugin`` writes: a plugin package in the shape of every device plugin, its packaging,
its tests.

The package reads top to bottom as checks → kernels → buffers → device → registration: ``_platform.py`` (what the
platform offers), ``ops/`` (``KERNELS``, a :class:`ggml_core.backend.KernelTable`, in ``ops/_arrays.py`` with the
kernels' plumbing, and one module per op family), ``_buffers.py``, ``_device.py`` (the device and its backend) and
``plugin.py`` (the registry and its hooks through :class:`ggml_core.backend.PluginHooks`; the entry point names
it). The family modules are assembled from :data:`OP_SNIPPETS`.

Placeholders are ``@@NAME@@`` (``Toy``), ``@@LOWER@@`` (``toy``), ``@@OPS@@`` (``ADD,MUL,SCALE``), ``@@OPS_LIST@@``
(a list literal), ``@@OPS_WRAPPED@@``, ``@@FAMILIES@@`` (the family modules, comma-separated) and, in a family
module, ``@@DOC@@``, ``@@IMPORTS@@`` and ``@@KERNELS@@``.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BUFFERS",
    "DEVICE",
    "FAMILY",
    "FAMILY_DOCS",
    "INIT",
    "OPS_ARRAYS",
    "OPS_INIT",
    "OP_SNIPPETS",
    "PLATFORM",
    "PLUGIN",
    "PYPROJECT",
    "README",
    "TEST_CONFORMANCE",
    "TEST_DEVICE",
]

#: op → (its family's module; exactly when the device computes it, a condition on ``node``, ``a`` = src[0] and
#: ``b`` = src[1]; the kernel's body, returning the result as an array of the node's shape)
OP_SNIPPETS: Final[dict[str, tuple[str, str, str]]] = {
    "ADD": (
        "elementwise",
        "f32(node, a, b) and b.can_repeat_to(a)",
        "return values(node.src[0]) + repeat(node.src[1], node.src[0])",
    ),
    "SUB": (
        "elementwise",
        "f32(node, a, b) and b.can_repeat_to(a)",
        "return values(node.src[0]) - repeat(node.src[1], node.src[0])",
    ),
    "MUL": (
        "elementwise",
        "f32(node, a, b) and b.can_repeat_to(a)",
        "return values(node.src[0]) * repeat(node.src[1], node.src[0])",
    ),
    "DIV": (
        "elementwise",
        "f32(node, a, b) and b.can_repeat_to(a)",
        "return values(node.src[0]) / repeat(node.src[1], node.src[0])",
    ),
    "SCALE": ("elementwise", "f32(node, a)", "return values(node.src[0]) * param(node, 0) + param(node, 1)"),
    "SQR": ("elementwise", "f32(node, a)", "return np.square(values(node.src[0]))"),
    "SQRT": ("elementwise", "f32(node, a)", "return np.sqrt(values(node.src[0]))"),
    "LOG": ("elementwise", "f32(node, a)", "return np.log(values(node.src[0]))"),
    "SIN": ("elementwise", "f32(node, a)", "return np.sin(values(node.src[0]))"),
    "COS": ("elementwise", "f32(node, a)", "return np.cos(values(node.src[0]))"),
    "SUM_ROWS": ("reduce", "f32(node, a)", "return values(node.src[0]).sum(axis=-1, keepdims=True, dtype=np.float64)"),
    "MUL_MAT": (
        "matmul",
        "f32(node, a, b) and b.ne[2] % a.ne[2] == 0 and b.ne[3] % a.ne[3] == 0",
        "x, y = values(node.src[0]), values(node.src[1])\n"
        "x = np.repeat(np.repeat(x, y.shape[0] // x.shape[0], axis=0), y.shape[1] // x.shape[1], axis=1)\n"
        "return y @ x.swapaxes(-1, -2)",
    ),
    "SOFT_MAX": (
        "attention",
        "f32(node, a) and node.src[1] is None and node.src[2] is None and node.op_param_f32(1) == 0.0",
        "x = values(node.src[0]) * param(node, 0)\n"
        "e = np.exp(x - x.max(axis=-1, keepdims=True))\n"
        "return e / e.sum(axis=-1, keepdims=True)",
    ),
    "CPY": ("movement", "f32(node, a, b)", "return np.reshape(values(node.src[0]), shape(node))"),
    "DUP": ("movement", "f32(node, a)", "return np.reshape(values(node.src[0]), shape(node))"),
    "CONT": ("movement", "f32(node, a)", "return np.reshape(values(node.src[0]), shape(node))"),
}

#: the docstring of each op family's module
FAMILY_DOCS: Final = {
    "elementwise": "Elementwise ops in f32: binary ops with ggml's broadcasting, scaling, unary maps.",
    "reduce": "Reductions in f32: sums along ne[0] (accumulated in f64).",
    "matmul": "ggml's MUL_MAT: dst[.., m, n] = sum_k src0[.., n, k] * src1[.., m, k]; src0 repeats over dims 2 and 3.",
    "attention": "SOFT_MAX (ext) without mask, sinks or ALiBi: softmax(a * scale) along ne[0].",
    "movement": "Copies into the node's layout: CPY, DUP, CONT.",
}

INIT: Final = '''"""@@NAME@@: a ggml-core backend plugin (written by ``ggml-core new-plugin``; now it is yours).

One device, ``@@NAME@@0``, with memory of its own: each buffer is a numpy byte array that the host cannot address,
so the scheduler copies inputs in and results out, as for a discrete GPU. It computes its ops in f32, on numpy
views of that memory that follow ggml's byte strides (so views, permutes and transposes need no copy):
@@OPS_WRAPPED@@.

It has the shape of every ggml-core device plugin. Read it top to bottom, as checks -> kernels -> buffers ->
device -> registration; a module imports only the ones above it:

    _platform.py     checks: what the platform offers (here: one device and its memory)
    ops/__init__.py  KERNELS and the import of every op family (importing ops registers all kernels)
    ops/_arrays.py   the kernels' plumbing: the kernel table, numpy views of the device's memory
    ops/<family>.py  one op family per module: @@FAMILIES@@
    _buffers.py      the buffer type and its buffers
    _device.py       the device and its backend
    plugin.py        registration: the registry and its two hooks (the ``ggml.backends`` entry point names it)

To add an op: a kernel in its family's module (a new module in ops/ for a new family, imported by
ops/__init__.py) registered with ``@KERNELS.kernel(GGMLOp.X, supports=...)``, and the op in
tests/test_conformance.py.
"""

from ggml_@@LOWER@@._device import @@NAME@@Backend, @@NAME@@Device
from ggml_@@LOWER@@.plugin import @@NAME@@Reg, @@LOWER@@_reg

__all__ = ["@@NAME@@Backend", "@@NAME@@Device", "@@NAME@@Reg", "@@LOWER@@_reg"]
'''

PLATFORM: Final = '''"""Checks: what the platform offers (here numpy memory stands in: one device, 1 GiB).

A plugin for real hardware probes it here (imports its driver, lists its devices, reads their limits) and, when
there is nothing to use, says why: ``ggml-core devices`` shows the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceInfo", "probe"]


@dataclass(frozen=True)
class DeviceInfo:
    """What the platform reports about one device."""

    index: int
    memory: int


def probe() -> tuple[list[DeviceInfo], str | None]:
    """The devices found, or none and why."""
    return [DeviceInfo(0, 1 << 30)], None
'''

OPS_INIT: Final = '''"""Graph node -> numpy kernel, one module per op family.

Importing this package registers every family's kernels in KERNELS: the device asks ``KERNELS.supports(node)``,
the backend computes a node with ``KERNELS.get(node)(node)``.
"""

from ggml_@@LOWER@@.ops import @@FAMILIES@@  # noqa: F401 - registers the kernels
from ggml_@@LOWER@@.ops._arrays import KERNELS, Kernel, values

__all__ = ["KERNELS", "Kernel", "values"]
'''

OPS_ARRAYS: Final = '''"""The kernels' plumbing: the kernel table, and numpy views of the device's memory.

The views follow ggml's byte strides, so views, permutes and transposes need no copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ggml_core import ComputeError, GGMLType, Tensor
from ggml_core.backend import KernelTable

__all__ = ["KERNELS", "Kernel", "f32", "operands", "param", "repeat", "shape", "values"]

#: a kernel: the node's result as an array of the node's shape (the backend writes it into the node's memory)
Kernel = Callable[[Tensor], np.ndarray]

#: op -> kernel; each family's module registers with ``@KERNELS.kernel(op, supports=predicate)``, where
#: ``predicate(node)`` says exactly when the kernel computes the node correctly
KERNELS: KernelTable[Kernel] = KernelTable("@@NAME@@")


def f32(*tensors: Tensor | None) -> bool:
    """True when every tensor is there and f32 (the one type these kernels read and write)."""
    return all(t is not None and t.type == GGMLType.F32 for t in tensors)


def operands(node: Tensor) -> tuple[Any, Any]:
    """The node's first two operands for a support check (None where the op has fewer: test them with f32)."""
    return node.src[0], node.src[1]


def shape(t: Tensor) -> tuple[int, int, int, int]:
    """numpy's shape of a tensor: (ne3, ne2, ne1, ne0), ne[0] fastest."""
    return (t.ne[3], t.ne[2], t.ne[1], t.ne[0])


def values(t: Tensor | None) -> np.ndarray:
    """A tensor's f32 elements as a numpy view of the device's memory (writable; ggml's byte strides)."""
    if t is None:
        raise ComputeError(None, "@@NAME@@0", "an operand of the node is missing")
    mem = getattr(t.buffer, "mem", None)
    if not isinstance(mem, np.ndarray) or t.data_offset is None:
        raise ComputeError(t, "@@NAME@@0", f"the tensor is not in @@NAME@@0 memory (buffer {t.buffer!r})")
    strides = (t.nb[3], t.nb[2], t.nb[1], t.nb[0])
    return np.ndarray(shape(t), np.float32, buffer=mem, offset=t.data_offset, strides=strides)


def repeat(b: Tensor | None, like: Tensor | None) -> np.ndarray:
    """ggml's broadcasting: b tiles ``like`` an integer number of times along every dimension."""
    x, y = values(b), values(like)
    return np.tile(x, tuple(n // m for n, m in zip(y.shape, x.shape, strict=True)))


def param(node: Tensor, i: int) -> np.float32:
    """Float op parameter i (ggml stores op params as 16 int32; floats are bit-cast)."""
    return np.float32(node.op_param_f32(i))
'''

FAMILY: Final = '''"""@@DOC@@"""

from __future__ import annotations

import numpy as np

from ggml_core import GGMLOp, Tensor
from ggml_@@LOWER@@.ops._arrays import @@IMPORTS@@
@@KERNELS@@'''

BUFFERS: Final = '''"""Buffers: the device's own memory, a private numpy byte array per buffer (never host memory)."""

from __future__ import annotations

import numpy as np

from ggml_core import Buffer, BufferType

__all__ = ["NumpyBuffer", "NumpyBufferType"]


class NumpyBuffer(Buffer):
    """Device memory: a private numpy byte array, ``mem``."""

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
'''

DEVICE: Final = '''"""The device and its backend: ``@@NAME@@<i>``, its memory and ops; a synchronous stream."""

from __future__ import annotations

from ggml_core import Backend, BufferType, Device, DeviceType, Graph, Tensor, TensorFlag
from ggml_core.backend import EMPTY_OPS
from ggml_@@LOWER@@._buffers import NumpyBufferType
from ggml_@@LOWER@@._platform import DeviceInfo
from ggml_@@LOWER@@.ops import KERNELS, values

__all__ = ["@@NAME@@Backend", "@@NAME@@Device"]


class @@NAME@@Backend(Backend):
    """A synchronous stream: computes the graph's nodes in order."""

    def graph_compute_async(self, graph: Graph) -> None:
        for node in graph.nodes:
            if node.op in EMPTY_OPS or node.is_empty or not node.flags & TensorFlag.COMPUTE:
                continue  # views alias their source; empty tensors hold nothing; no COMPUTE flag: not asked for
            values(node)[...] = KERNELS.get(node)(node)


class @@NAME@@Device(Device):
    """``@@NAME@@<i>``: numpy memory of its own."""

    type = DeviceType.GPU

    def __init__(self, info: DeviceInfo) -> None:
        name = f"@@NAME@@{info.index}"
        super().__init__(name, "@@NAME@@ device (numpy behind a private buffer; ggml-core new-plugin)")
        self.info = info
        self._buft = NumpyBufferType(name, self, alignment=32)

    def memory(self) -> tuple[int, int]:
        return self.info.memory, self.info.memory

    def buffer_type(self) -> BufferType:
        return self._buft

    def init_backend(self, params: str | None = None) -> Backend:
        return @@NAME@@Backend(self)

    def supports_op(self, op: Tensor) -> bool:
        return KERNELS.supports(op)
'''

PLUGIN: Final = '''"""Registration: the ``@@NAME@@`` registry and the two hooks the entry point finds here."""

from __future__ import annotations

from ggml_core import BackendReg, Device
from ggml_core.backend import PluginHooks
from ggml_@@LOWER@@._device import @@NAME@@Device
from ggml_@@LOWER@@._platform import probe

__all__ = ["HOOKS", "@@NAME@@Reg", "@@LOWER@@_reg"]


class @@NAME@@Reg(BackendReg):
    """The ``@@NAME@@`` registry: the devices that ``_platform.probe`` finds."""

    def __init__(self) -> None:
        super().__init__("@@NAME@@", description="@@NAME@@ (ggml-core new-plugin)")

    def enumerate_devices(self) -> list[Device]:
        found, reason = probe()
        if not found:
            self.unavailable_reason = reason or "no @@NAME@@ device found"
        return [@@NAME@@Device(info) for info in found]


HOOKS = PluginHooks(@@NAME@@Reg)
#: the process-wide @@NAME@@ registry
@@LOWER@@_reg = HOOKS.reg
ggml_api_version = HOOKS.ggml_api_version
ggml_register_backends = HOOKS.ggml_register_backends
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
@@LOWER@@ = "ggml_@@LOWER@@.plugin"

[tool.setuptools]
packages = ["ggml_@@LOWER@@", "ggml_@@LOWER@@.ops"]
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
