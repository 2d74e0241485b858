"""The core's host-memory buffer (``ggml_core.HostBuffer``): every hook over one numpy array, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from ggml_core import Buffer, BufferType, HostBuffer, TensorError


class _Type(BufferType):
    def __init__(self, name: str = "Host") -> None:
        super().__init__(name, None, alignment=16, is_host=True)

    def _alloc(self, size: int) -> Buffer:
        return HostBuffer.zeros(self, size)


class _DeviceMemory(Buffer):
    """Memory with no host view: a host buffer must decline a direct copy from it."""

    def _write(self, offset: int, data: memoryview) -> None:
        raise AssertionError("not used")

    def _read(self, offset: int, out: memoryview) -> None:
        raise AssertionError("not used")


def test_write_read_fill_match_numpy() -> None:
    buf = _Type().alloc_buffer(64)
    ref = np.zeros(64, np.uint8)
    data = np.arange(1, 21, dtype=np.uint8)
    buf.write(5, data.tobytes())
    ref[5:25] = data
    buf.clear(0)
    ref[:] = 0
    buf.write(30, data.tobytes())
    ref[30:50] = data
    buf._fill(40, 4, 0xAB)  # the hook the public memset and clear end in
    ref[40:44] = 0xAB
    assert buf.read(0, 64) == ref.tobytes()
    assert buf.host_array() is not None and buf.host_array().tobytes() == ref.tobytes()


def test_copy_from_host_and_declines_device_memory() -> None:
    bt = _Type()
    a, b = bt.alloc_buffer(32), bt.alloc_buffer(32)
    a.write(0, bytes(range(32)))
    assert b._copy_from(a, 8, 4, 10)
    assert b.read(0, 32) == bytes(4) + bytes(range(8, 18)) + bytes(18)
    dev = _DeviceMemory(bt, 32)
    assert not b._copy_from(dev, 0, 0, 8)


def test_read_only_memory_names_the_buffer() -> None:
    mem = np.arange(16, dtype=np.uint8)
    mem.flags.writeable = False
    buf = HostBuffer(_Type("Mapped"), mem)
    assert buf.read(2, 3) == bytes([2, 3, 4])
    for attempt in (lambda: buf.write(0, b"x"), lambda: buf.clear(1)):
        with pytest.raises(TensorError, match=r"Mapped.*read-only"):
            attempt()
    assert mem.tolist() == list(range(16))


def test_rejects_memory_of_another_shape_or_type() -> None:
    with pytest.raises(TypeError, match="1-d uint8"):
        HostBuffer(_Type(), np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="1-d uint8"):
        HostBuffer(_Type(), np.zeros((2, 2), np.uint8))


def test_free_releases_and_later_access_raises() -> None:
    buf = _Type().alloc_buffer(8)
    buf.free()
    assert buf.host_array().size == 0
    with pytest.raises(TensorError, match="freed"):
        buf.read(0, 1)
