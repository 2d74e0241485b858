"""2-D tensor reads and writes (ggml's ``set_tensor_2d`` / ``get_tensor_2d`` and their async forms).

Every region is checked against numpy slicing of the same bytes: rows of ``size`` bytes at ``offset + i *
stride_tensor`` in the tensor, ``i * stride_data`` on the host side. The core's generic path (one 1-D write per row)
is checked on a device buffer without a 2-D hook, an override on one with it, and the CPU and OpenCL0 buffers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from opencl_device import opencl_backend

import ggml_core as gc
from ggml_core import Buffer, BufferType, Context, OutOfBoundsError, TensorError
from ggml_core.alloc import alloc_ctx_tensors

#: (offset, size, n_copies, stride_tensor, stride_data) over a 16×12-byte tensor (192 bytes)
REGIONS = [
    (0, 192, 1, 0, 0),  # the whole tensor as one row
    (0, 12, 16, 12, 12),  # every row, packed on both sides
    (4, 8, 16, 12, 8),  # a column band, packed on the host
    (24, 6, 5, 24, 10),  # every other row from row 2, padded on the host
    (190, 2, 1, 0, 0),  # the last two bytes
    (7, 0, 9, 3, 1),  # empty rows: nothing moves
    (12, 4, 0, 0, 0),  # no rows
]


class _DeviceType(BufferType):
    def __init__(self, buffer_class: type[Buffer]) -> None:
        super().__init__("Dev2D", None, alignment=16)
        self.buffer_class = buffer_class

    def _alloc(self, size: int) -> Buffer:
        return self.buffer_class(self, size)


class _DeviceMemory(Buffer):
    """Device memory with only the 1-D hooks (no host view): the core's generic 2-D path runs."""

    def __init__(self, buffer_type: BufferType, size: int) -> None:
        super().__init__(buffer_type, size)
        self.mem = bytearray(size)
        self.calls: list[str] = []

    def _write(self, offset: int, data: memoryview) -> None:
        self.calls.append("write")
        self.mem[offset : offset + data.nbytes] = data

    def _read(self, offset: int, out: memoryview) -> None:
        self.calls.append("read")
        out[:] = self.mem[offset : offset + out.nbytes]


class _Memory2D(_DeviceMemory):
    """A plugin that overrides the 2-D hooks: one call per region."""

    def _write_2d(
        self, offset: int, data: memoryview, size: int, n_copies: int, stride_buffer: int, stride_data: int
    ) -> None:
        self.calls.append("write_2d")
        dst = np.frombuffer(self.mem, np.uint8)
        src = np.frombuffer(data, np.uint8)
        for i in range(n_copies):
            dst[offset + i * stride_buffer : offset + i * stride_buffer + size] = src[
                i * stride_data : i * stride_data + size
            ]

    def _read_2d(
        self, offset: int, out: memoryview, size: int, n_copies: int, stride_buffer: int, stride_data: int
    ) -> None:
        self.calls.append("read_2d")
        src = np.frombuffer(self.mem, np.uint8)
        dst = np.frombuffer(out, np.uint8)
        for i in range(n_copies):
            dst[i * stride_data : i * stride_data + size] = src[
                offset + i * stride_buffer : offset + i * stride_buffer + size
            ]


def _tensor_on(where: Callable[[], gc.Backend | BufferType]) -> gc.Tensor:
    ctx = Context("t2d")
    ctx.new_tensor("i8", [24])  # the tensor under test sits at a non-zero buffer offset
    t = ctx.new_tensor("i8", [12, 16], "t2d")
    alloc_ctx_tensors(ctx, where())
    return t


def _cpu() -> gc.Backend:
    return gc.init_backend("cpu")


PLACES: dict[str, Callable[[], gc.Backend | BufferType]] = {
    "generic": lambda: _DeviceType(_DeviceMemory),
    "override": lambda: _DeviceType(_Memory2D),
    "CPU": _cpu,
    "OpenCL0": opencl_backend,
}


def _expected_after_set(
    before: np.ndarray, host: np.ndarray, offset: int, size: int, n: int, st: int, sd: int
) -> np.ndarray:
    out = before.copy()
    for i in range(n):
        out[offset + i * st : offset + i * st + size] = host[i * sd : i * sd + size]
    return out


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("region", REGIONS, ids=lambda r: "-".join(map(str, r)))
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_2d_set_get_match_numpy(place: str, region: tuple[int, int, int, int, int], asynchronous: bool) -> None:
    t = _tensor_on(PLACES[place])
    offset, size, n, st, sd = region
    rng = np.random.default_rng(sum(region))
    base = rng.integers(0, 256, 192, dtype=np.uint8)
    t.set_bytes(base)
    host = rng.integers(0, 256, max((n - 1) * sd + size, 1), dtype=np.uint8)
    assert t.buffer is not None
    backend = gc.init_backend("cpu")
    if asynchronous:
        backend.set_tensor_2d_async(t, host.data, offset, size, n, st, sd)
        backend.synchronize()
    else:
        t.buffer.set_tensor_2d(t, host.data, offset, size, n, st, sd)
    want = _expected_after_set(base, host, offset, size, n, st, sd)
    np.testing.assert_array_equal(np.frombuffer(t.get_bytes(), np.uint8), want)

    out = np.full(host.size, 0xEE, np.uint8)
    if asynchronous:
        backend.get_tensor_2d_async(t, out.data, offset, size, n, st, sd)
        backend.synchronize()
    else:
        t.buffer.get_tensor_2d(t, out.data, offset, size, n, st, sd)
    want_out = np.full(host.size, 0xEE, np.uint8)
    for i in range(n):
        want_out[i * sd : i * sd + size] = want[offset + i * st : offset + i * st + size]
    np.testing.assert_array_equal(out, want_out)


def test_generic_path_goes_row_by_row_and_override_is_one_call() -> None:
    generic = _tensor_on(PLACES["generic"])
    override = _tensor_on(PLACES["override"])
    host = memoryview(bytes(range(40)))
    for t in (generic, override):
        assert isinstance(t.buffer, _DeviceMemory)
        t.buffer.calls.clear()
        t.buffer.set_tensor_2d(t, host, 0, 8, 5, 24, 8)
    assert isinstance(generic.buffer, _DeviceMemory) and isinstance(override.buffer, _DeviceMemory)
    assert generic.buffer.calls == ["write"] * 5
    assert override.buffer.calls == ["write_2d"]


@pytest.mark.parametrize(
    ("region", "host_bytes", "culprit"),
    [
        ((0, 12, 17, 12, 12), 204, "17 rows of 12 bytes every 12 bytes from offset 0"),  # one row past the end
        ((181, 12, 1, 0, 0), 12, "1 rows of 12 bytes every 0 bytes from offset 181"),  # one byte past the end
        ((0, 12, 16, 12, 12), 191, "host data for tensor"),  # the host side is short
    ],
)
def test_out_of_bounds_names_tensor_and_region(
    region: tuple[int, int, int, int, int], host_bytes: int, culprit: str
) -> None:
    t = _tensor_on(PLACES["generic"])
    assert isinstance(t.buffer, _DeviceMemory)
    before = bytes(t.buffer.mem)
    for call in (t.buffer.set_tensor_2d, t.buffer.get_tensor_2d):
        with pytest.raises(OutOfBoundsError) as info:
            call(t, memoryview(bytearray(host_bytes)), *region)
        msg = str(info.value)
        assert "t2d" in msg and culprit in msg
    assert bytes(t.buffer.mem) == before  # nothing was written before the check


def test_bad_arguments_are_named() -> None:
    t = _tensor_on(PLACES["generic"])
    assert t.buffer is not None
    with pytest.raises(TensorError, match="stride_tensor must be a non-negative integer"):
        t.buffer.set_tensor_2d(t, b"\0" * 16, 0, 4, 2, -4, 4)
    with pytest.raises(TensorError, match="read-only"):
        t.buffer.get_tensor_2d(t, memoryview(b"\0" * 16), 0, 4, 2, 4, 4)
    ctx = Context("unbound")
    loose = ctx.new_tensor("i8", [8])
    with pytest.raises(TensorError, match="no memory"):
        gc.init_backend("cpu").set_tensor_2d_async(loose, b"\0" * 8, 0, 4, 2, 4, 4)
