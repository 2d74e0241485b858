"""The plugin kit: the op → kernel table and the registration hooks every device plugin shares."""

from __future__ import annotations

import pytest

from ggml_core import Context, GGMLType, Tensor, UnsupportedOpError
from ggml_core.backend import EMPTY_OPS, BackendReg, Device, KernelTable, LazyReg, PluginHooks, Registry
from ggml_core.ops import GGMLOp, add, mul, reshape_2d


def _nodes() -> tuple[Tensor, Tensor, Tensor]:
    ctx = Context()
    a = ctx.new_tensor_1d(GGMLType.F32, 8)
    b = ctx.new_tensor_1d(GGMLType.F16, 8)
    return add(a, a), mul(a, b), reshape_2d(a, 4, 2)


def test_a_kernel_is_found_for_its_ops_and_its_predicate_decides_support() -> None:
    table: KernelTable[str] = KernelTable("Toy")
    table.kernel(GGMLOp.ADD, supports=lambda limit, node: node.ne[0] <= limit)("add-kernel")
    node_add, node_mul, node_view = _nodes()
    assert table.get(node_add) == "add-kernel"
    assert table.supports(node_add, 8) and not table.supports(node_add, 4)
    assert not table.supports(node_mul, 8)
    assert table.supports(node_view, 0)  # views compute nothing: always supported
    assert GGMLOp.ADD in table and GGMLOp.MUL not in table and list(table) == [GGMLOp.ADD] and len(table) == 1
    assert GGMLOp.VIEW in EMPTY_OPS


def test_a_missing_kernel_names_the_node_and_the_device() -> None:
    table: KernelTable[str] = KernelTable("Toy")
    _, node_mul, _ = _nodes()
    with pytest.raises(UnsupportedOpError, match=r"MUL.*Toy"):
        table.get(node_mul)


def test_a_predicate_that_raises_means_unsupported() -> None:
    table: KernelTable[str] = KernelTable("Toy")

    def broken(node: object) -> bool:
        raise KeyError("no such field")

    table.add(GGMLOp.ADD, "k", broken)
    node_add, _, _ = _nodes()
    assert not table.supports(node_add)


def test_two_kernels_for_one_op_is_an_error() -> None:
    table: KernelTable[str] = KernelTable("Toy")
    table.add(GGMLOp.ADD, "first", lambda node: True)
    with pytest.raises(ValueError, match="ADD has two kernels"):
        table.add(GGMLOp.ADD, "second", lambda node: True)
    with pytest.raises(ValueError, match="at least one op"):
        table.kernel(supports=lambda node: True)


def test_plugin_hooks_register_one_registry_made_on_first_use() -> None:
    made: list[BackendReg] = []

    def make() -> BackendReg:
        made.append(BackendReg("Toy", [], description="toy"))
        return made[-1]

    hooks = PluginHooks(make)
    assert made == []
    reg = Registry(entry_points=lambda: [], environ={})
    reg.register_plugin(hooks, "toy")
    assert [r.name for r in reg.regs if r.name == "Toy"] == ["Toy"]
    assert hooks.reg() is made[0] and len(made) == 1


def test_a_lazy_registry_enumerates_when_asked_why_it_has_no_devices() -> None:
    calls: list[str] = []

    class NoDriver(LazyReg):
        def enumerate_devices(self) -> list[Device]:
            calls.append("enumerated")
            self.unavailable_reason = "libtoy.so.1 is not installed"
            return []

    class Broken(LazyReg):
        def enumerate_devices(self) -> list[Device]:
            raise OSError("the driver hung up")

    reg = NoDriver("Toy", description="toy")
    assert calls == []  # nothing is probed when the registry is made
    assert reg.unavailable_reason == "libtoy.so.1 is not installed" and calls == ["enumerated"]
    assert reg.devices == [] and calls == ["enumerated"]  # once
    assert Broken("Broken").unavailable_reason == "device enumeration failed: OSError: the driver hung up"
