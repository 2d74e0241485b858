"""The conformance method itself: NMSE, NaN/inf rules, set and exact checks, guard bytes, and fake devices that
misbehave (a stray byte past the output, a write into an input, a wrong result) and must be caught."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

import ggml_core as g
from ggml_core import ops
from ggml_core.backend import Backend, Buffer, BufferType, Device, DeviceType, HostBuffer
from ggml_core.testing import (
    Built,
    Case,
    Check,
    GuardedBuffer,
    Status,
    compare,
    jaccard_distance,
    nmse,
    run_case,
    select,
)
from ggml_core.testing._case import builder

# ------------------------------------------------------------------------------------------------ the comparison


def test_nmse_is_sum_of_squared_differences_over_sum_of_squares() -> None:
    a = np.array([1.0, 2.0, -2.0])
    b = np.array([1.0, 2.5, -2.0])
    assert nmse(a, b) == pytest.approx(0.25 / 9.0)
    assert nmse(a, a) == 0.0
    assert nmse(np.zeros(3), np.zeros(3)) == 0.0
    assert nmse(np.zeros(3), np.ones(3)) == float("inf")


def test_nmse_threshold_decides() -> None:
    a = np.ones(1000)
    b = a.copy()
    b[0] = 1.0 + 1e-2  # error 1e-4 / 1000 = 1e-7
    assert compare(a, b, Check.nmse(1.01e-7)).passed
    res = compare(a, b, Check.nmse(0.99e-7))
    assert not res.passed and "NMSE" in res.message and res.error == pytest.approx(1e-7, rel=1e-6)


def test_nan_fails_on_either_side() -> None:
    a = np.ones(4, np.float32)
    b = a.copy()
    b[2] = np.nan
    res = compare(a, b, Check.nmse(1.0))
    assert not res.passed and "NaN" in res.message and "[2]" in res.message
    assert not compare(b, a, Check.nmse(1.0)).passed


def test_infinities_must_match_in_sign() -> None:
    a = np.array([1.0, -np.inf, np.inf, 2.0], np.float32)
    assert compare(a, a.copy(), Check.nmse()).passed
    flipped = a.copy()
    flipped[1] = np.inf
    res = compare(a, flipped, Check.nmse(1.0))
    assert not res.passed and "inf" in res.message
    finite = a.copy()
    finite[2] = 3.0
    assert not compare(a, finite, Check.nmse(1.0)).passed
    # FLT_MAX counts as infinite, as in test-backend-ops
    big = a.copy()
    big[2] = np.finfo(np.float32).max
    assert compare(a, big, Check.nmse()).passed


def test_exact_check_reports_the_first_difference() -> None:
    a = np.arange(12, dtype=np.int32).reshape(1, 1, 3, 4)
    b = a.copy()
    assert compare(a, b, Check.exact()).passed
    b[0, 0, 1, 2] = 99
    res = compare(a, b, Check.exact())
    assert not res.passed and "[2,1,0,0]" in res.message and "99" in res.message


def test_row_sets_ignore_order_but_not_content() -> None:
    a = np.array([[3, 1, 2], [0, 5, 4]])
    assert compare(a, a[:, ::-1].copy(), Check.row_sets()).passed
    b = a.copy()
    b[1, 0] = 7
    assert not compare(a, b, Check.row_sets()).passed
    assert jaccard_distance(np.array([1, 2]), np.array([3, 4])) == 1.0
    assert jaccard_distance(np.array([1, 2]), np.array([2, 1])) == 0.0


# ------------------------------------------------------------------------------------------------ a fake device

Fault = Callable[[np.ndarray, g.Tensor], None]


class _HostBufferType(BufferType):
    def _alloc(self, size: int) -> Buffer:
        return HostBuffer.zeros(self, size)


class _FakeBackend(Backend):
    def __init__(self, device: _FakeDevice) -> None:
        super().__init__(device)
        self.fault = device.fault

    def graph_compute_async(self, graph: g.Graph) -> None:
        for node in graph.nodes:
            if node.op == g.GGMLOp.CPY:
                src = node.src[0]
                assert src is not None
                node.numpy_view()[...] = src.numpy_view().reshape(node.numpy_view().shape)
                if self.fault is not None:
                    self.fault(node.buffer.host_array(), node)  # type: ignore[union-attr]
                continue
            if node.op != g.GGMLOp.ADD:
                continue
            a, b = node.src[0], node.src[1]
            assert a is not None and b is not None
            mem = node.buffer.host_array()  # type: ignore[union-attr]
            out = node.numpy_view()
            reps = tuple(x // y for x, y in zip(a.ne[::-1], b.ne[::-1], strict=True))
            out[...] = a.numpy_view() + np.tile(b.numpy_view(), reps)
            if self.fault is not None:
                self.fault(mem, node)


class _FakeDevice(Device):
    """Computes f32 ADD with numpy; ``fault`` damages memory afterwards."""

    type = DeviceType.GPU

    def __init__(self, fault: Fault | None = None) -> None:
        super().__init__("Fake0", "a deliberately misbehaving test device")
        self.fault = fault
        self._bt = _HostBufferType("Fake0", self, alignment=32, is_host=True)

    def memory(self) -> tuple[int, int]:
        return 1 << 30, 1 << 30

    def buffer_type(self) -> BufferType:
        return self._bt

    def init_backend(self, params: str | None = None) -> Backend:
        return _FakeBackend(self)

    def supports_op(self, op: g.Tensor) -> bool:
        srcs = [s for s in op.src if s is not None]
        kinds = (g.GGMLOp.NONE, g.GGMLOp.ADD, g.GGMLOp.CPY, g.GGMLOp.VIEW)
        return op.op in kinds and all(s.type == g.GGMLType.F32 for s in [op, *srcs])


def _add_case(ne: tuple[int, ...] = (10, 5, 4, 3)) -> Case:
    def build(ctx: g.Context) -> Built:
        a = ctx.new_tensor("f32", ne, "a")
        b = ctx.new_tensor("f32", ne, "b")
        return Built(ops.add(a, b), [a, b])

    return Case("ADD", {"type": g.GGMLType.F32, "ne": list(ne)}, build, lambda a, b: a + b)


def _end_of(t: g.Tensor) -> int:
    assert t.data_offset is not None
    return t.data_offset + t.nbytes


def test_a_correct_fake_device_passes() -> None:
    res = run_case(_add_case(), _FakeDevice(), reference="numpy")
    assert res.status == Status.OK, res.message


def test_one_byte_past_the_output_is_caught() -> None:
    def past_end(mem: np.ndarray, node: g.Tensor) -> None:
        mem[_end_of(node)] ^= 0xFF

    res = run_case(_add_case(), _FakeDevice(past_end), reference="numpy")
    assert res.status == Status.FAIL
    assert "outside the output" in res.message and "byte 0 after the end" in res.message


def test_one_byte_before_the_output_is_caught() -> None:
    def before(mem: np.ndarray, node: g.Tensor) -> None:
        assert node.data_offset is not None
        mem[node.data_offset - 1] ^= 0x01

    res = run_case(_add_case(), _FakeDevice(before), reference="numpy")
    assert res.status == Status.FAIL and "before the start" in res.message


def test_a_write_into_an_input_is_caught() -> None:
    def into_input(mem: np.ndarray, node: g.Tensor) -> None:
        a = node.src[0]
        assert a is not None and a.data_offset is not None
        mem[a.data_offset + 5] ^= 0x10

    res = run_case(_add_case(), _FakeDevice(into_input), reference="numpy")
    assert res.status == Status.FAIL and "inside tensor" in res.message


def test_a_write_into_the_gap_of_a_strided_output_is_caught() -> None:
    case = select(ops="CPY", pattern=r"type_src=f32,type_dst=f32,.*dst_rows_apart=2")[0]
    assert run_case(case, _FakeDevice(), reference="numpy").status == Status.OK

    def gap(mem: np.ndarray, node: g.Tensor) -> None:
        assert node.data_offset is not None
        mem[node.data_offset + node.ne[0] * 4] ^= 0x01  # the first byte between row 0 and row 1

    res = run_case(case, _FakeDevice(gap), reference="numpy")
    assert res.status == Status.FAIL and "outside the output" in res.message


def test_a_wrong_result_fails() -> None:
    def wrong(mem: np.ndarray, node: g.Tensor) -> None:
        node.numpy_view()[0, 0, 0, 0] += 0.5

    res = run_case(_add_case(), _FakeDevice(wrong), reference="numpy")
    assert res.status == Status.FAIL and "NMSE" in res.message and res.error is not None and res.error > 1e-7


def test_a_nan_result_fails() -> None:
    def nan(mem: np.ndarray, node: g.Tensor) -> None:
        node.numpy_view()[0, 1, 2, 3] = np.nan

    res = run_case(_add_case(), _FakeDevice(nan), reference="numpy")
    assert res.status == Status.FAIL and "NaN" in res.message


def test_an_unwritten_output_fails() -> None:
    def forget(mem: np.ndarray, node: g.Tensor) -> None:
        assert node.data_offset is not None
        mem[node.data_offset : node.data_offset + 8] = 0xFF  # as if the kernel skipped two elements: NaN bytes

    res = run_case(_add_case(), _FakeDevice(forget), reference="numpy")
    assert res.status == Status.FAIL


def test_unsupported_ops_are_reported_not_failed() -> None:
    case = select(ops="MUL_MAT")[0]
    res = run_case(case, _FakeDevice(), reference="numpy")
    assert res.status == Status.NOT_SUPPORTED and "MUL_MAT" in res.message


def test_a_missing_builder_skips_with_the_name() -> None:
    def build(ctx: g.Context) -> Built:
        a = ctx.new_tensor("f32", (4,), "a")
        return Built(builder("no_such_op_builder")(a), [a])

    case = Case("NO_SUCH_OP", {}, build, lambda a: a)
    res = run_case(case, _FakeDevice(), reference="numpy")
    assert res.status == Status.SKIPPED and "no builder ggml_core.ops.no_such_op_builder" in res.message


def test_a_crashing_builder_fails_with_its_error() -> None:
    def build(ctx: g.Context) -> Built:
        a = ctx.new_tensor("f32", (4, 3), "a")
        b = ctx.new_tensor("f32", (3, 4), "b")
        return Built(ops.add(a, b), [a, b])

    res = run_case(Case("ADD", {"bad": 1}, build, lambda a, b: a), _FakeDevice(), reference="numpy")
    assert res.status == Status.FAIL and "building the graph failed" in res.message


def test_guarded_buffer_places_guards_around_every_tensor() -> None:
    ctx = g.Context()
    a = ctx.new_tensor("f32", (7,), "a")
    b = ctx.new_tensor("f32", (3,), "b")
    dev = _FakeDevice()
    gb = GuardedBuffer.allocate(ctx, dev.buffer_type(), seed=1, guard=64)
    try:
        assert a.data_offset is not None and b.data_offset is not None
        assert a.data_offset >= 64 and b.data_offset >= a.data_offset + a.nbytes + 64
        assert gb.buffer.size >= b.data_offset + b.nbytes + 64
    finally:
        gb.free()


def test_names_are_unique_and_every_case_names_its_op() -> None:
    cases = select()
    names = [c.name for c in cases]
    assert len(names) == len(set(names)) > 500
    assert all(c.name.startswith(c.op + "(") for c in cases)


def test_against_another_device_compares_node_by_node() -> None:
    cpu = pytest.importorskip("ggml_cpu.plugin")
    ref_dev = cpu.CPUDevice()

    def wrong(mem: np.ndarray, node: g.Tensor) -> None:
        node.numpy_view()[...] *= 1.01

    case = _add_case()
    assert run_case(case, _FakeDevice(), reference=ref_dev).status == Status.OK
    res = run_case(case, _FakeDevice(wrong), reference=ref_dev)
    assert res.status == Status.FAIL and "vs CPU" in res.message
    # a case without a numpy reference still runs against the reference device
    no_numpy = dataclasses.replace(case, reference=None)
    assert run_case(no_numpy, _FakeDevice(), reference=ref_dev).status == Status.OK
