"""LLaMA-shaped layers through the scheduler on mixed devices: equal to the CPU alone and to numpy, with the split
and copy counts the placement rules predict, no re-planning on reuse, pipeline copies, events, eval callbacks.

Devices: the CPU plugin, the in-test ``Sub0`` (tests/sched_plugin; synchronous, or asynchronous with events where
queued work only runs when the scheduler synchronises), and ``OpenCL0`` when the OpenCL plugin finds a device.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from opencl_device import opencl_backend
from sched_plugin import SubsetDevice
from sched_plugin import llama_graph as L

import ggml_core as gc
from ggml_core import GGMLOp, Tensor
from ggml_core.ops import VIEW_OPS
from ggml_core.sched import Scheduler

TOL = {"rtol": 1e-4, "atol": 1e-4}


@pytest.fixture(scope="module")
def cpu() -> gc.Backend:
    return gc.init_backend("cpu")


ACCELERATORS: dict[str, Callable[[], gc.Backend]] = {
    "Sub0": lambda: SubsetDevice("Sub0").init_backend(),
    "Sub0-async": lambda: SubsetDevice("Sub0", asynchronous=True).init_backend(),
    "OpenCL0": opencl_backend,
}


def cpu_result(cpu: gc.Backend, n_layers: int, vals: dict[str, np.ndarray], n_tokens: int = 8) -> np.ndarray:
    lg = L.build_llama(n_layers=n_layers, n_tokens=n_tokens)
    L.alloc_weights(lg, cpu)
    L.set_weights(lg, vals)
    sched = Scheduler([cpu])
    out = L.compute(sched, lg, vals)
    assert sched.n_splits == 1 and sched.n_input_copies == 0
    return out


def check_plan_consistency(sched: Scheduler, graph: gc.Graph) -> None:
    """Every split's kernels are supported where they run; every operand its backend cannot read is a listed copy."""
    plan = sched.plan()
    backends = {b.name: b for b in sched.backends}
    by_id = {t.id: t for t in (*graph.leafs, *graph.nodes)}
    expected_copies: set[tuple[int, str]] = set()
    for s in plan.splits:
        be = backends[s.backend]
        for nid in s.node_ids:
            node = by_id[nid]
            if node.op in VIEW_OPS:
                continue
            assert be.supports_op(node), f"{node.name} ({node.op_desc}) runs on {be.name}, which does not support it"
            for src in node.src:
                if src is None:
                    continue
                src_be = backends[plan.assignments[src.id]]
                base = src.view_src if src.view_src is not None else src
                buft = base.buffer.buffer_type if base.buffer is not None and not sched.allocator.owns(base) else None
                buft = buft or sched.get_buffer_type(src_be)
                if src_be is not be and not be.supports_buft(buft):
                    expected_copies.add((src.id, s.backend))
    listed = {(c.tensor_id, s.backend) for s in plan.splits for c in s.inputs}
    assert listed == expected_copies
    assert plan.n_copies == len(listed) and plan.n_splits == sched.n_splits == len(plan.splits)
    assert sum(len(s.nodes) for s in plan.splits) == len(graph.nodes)


# ------------------------------------------------------------------------------------------------ results and counts


@pytest.mark.parametrize("acc", list(ACCELERATORS))
@pytest.mark.parametrize("n_layers", [1, 2])
def test_llama_on_mixed_devices_equals_the_cpu_alone(cpu: gc.Backend, acc: str, n_layers: int) -> None:
    accel = ACCELERATORS[acc]()
    lg = L.build_llama(n_layers=n_layers)
    vals = L.random_weights(lg, accel, seed=n_layers)
    sched = Scheduler([accel, cpu])
    got = L.compute(sched, lg, vals)
    np.testing.assert_allclose(got, cpu_result(cpu, n_layers, vals), **TOL)
    np.testing.assert_allclose(got, L.reference(lg, vals), **TOL)
    check_plan_consistency(sched, lg.graph)
    if acc.startswith("Sub0"):
        # Sub0 runs MUL_MAT/ADD/MUL/RMS_NORM: per layer ROPE (q, k), SOFT_MAX, the two CONTs and the SwiGLU go to the
        # CPU, each a split of its own with its operands copied over and its result copied back; layer l+1's first
        # ops join layer l's last Sub0 split, and its residual reads layer l's output already on Sub0 (see the
        # derivation in docs/scheduler.md)
        assert (sched.n_splits, sched.n_input_copies) == (1 + 12 * n_layers, 1 + 13 * n_layers)
        plan = sched.plan()
        assert [s.backend for s in plan.splits[:4]] == ["Sub0", "CPU", "Sub0", "CPU"]
        assert [c.name for c in plan.splits[0].inputs] == ["inp_embd"]
        cpu_ops = {by_op for s in plan.splits if s.backend == "CPU" for by_op in s.ops if by_op not in {"PERMUTE"}}
        assert cpu_ops == {"CONT", "ROPE", "SOFT_MAX", "SWIGLU"}


@pytest.mark.parametrize("acc", list(ACCELERATORS))
def test_llama_with_a_kv_cache_on_the_cpu(cpu: gc.Backend, acc: str) -> None:
    """SET_ROWS into host caches (pre-allocated: they stay on the CPU), attention reading views of them."""
    accel = ACCELERATORS[acc]()
    lg = L.build_llama(n_layers=2, kv_cache=True)
    L.alloc_weights(lg, accel)
    L.alloc_caches(lg, cpu)
    vals = L.random_values(lg, seed=12)
    L.set_weights(lg, vals)
    sched = Scheduler([accel, cpu])
    np.testing.assert_allclose(L.compute(sched, lg, vals), L.reference(lg, vals), **TOL)
    check_plan_consistency(sched, lg.graph)
    set_rows = [t for t in lg.graph.nodes if t.op == GGMLOp.SET_ROWS]
    assert len(set_rows) == 4 and all(sched.get_tensor_backend(t) is cpu for t in set_rows)
    # the caches hold the rows written: cell kv_idx[i] of layer 0's V cache is token i's V projection
    x = vals["inp_embd"].astype(np.float64)
    a = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + L.EPS) * vals["blk.0.attn_norm"]
    v0 = a @ vals["blk.0.attn_v"].T.astype(np.float64)
    np.testing.assert_allclose(lg.caches[1].to_numpy()[0, 0][vals["kv_idx"]], v0, **TOL)


def test_llama_split_over_three_devices(cpu: gc.Backend) -> None:
    """Layer 0's weights on Sub0, layer 1's on Sub1 (MUL_MAT only): three devices, copies between accelerators."""
    sub0 = SubsetDevice("Sub0").init_backend()
    dev1 = SubsetDevice("Sub1", ops={GGMLOp.MUL_MAT}, asynchronous=True)
    sub1 = dev1.init_backend()
    lg = L.build_llama(n_layers=2)
    vals = L.random_weights(lg, lambda il, name: sub0 if il == 0 else sub1, seed=11)
    sched = Scheduler([sub0, sub1, cpu])
    np.testing.assert_allclose(L.compute(sched, lg, vals), cpu_result(cpu, 2, vals), **TOL)
    check_plan_consistency(sched, lg.graph)
    plan = sched.plan()
    assert {s.backend for s in plan.splits} == {"Sub0", "Sub1", "CPU"}
    copies = [(c.from_backend, c.to_backend) for s in plan.splits for c in s.inputs]
    between = [pair for pair in copies if "CPU" not in pair]
    assert ("Sub0", "Sub1") in between
    assert dev1.stats["async_copies"] == between.count(("Sub0", "Sub1"))  # device to device: cpy_tensor_async


# ------------------------------------------------------------------------------------------------ reuse


def test_repeated_alloc_graph_does_not_plan_again(cpu: gc.Backend) -> None:
    dev = SubsetDevice("Sub0")
    sub = dev.init_backend()
    lg = L.build_llama(n_layers=2)
    vals = L.random_weights(lg, sub, seed=4)
    sched = Scheduler([sub, cpu])
    sched.reserve(lg.graph)
    sizes = sched.buffer_sizes()
    rng = np.random.default_rng(9)
    for _ in range(3):
        vals.update(L.input_values(lg, rng))
        assert sched.alloc_graph(lg.graph)
        L.set_inputs(lg, vals)
        sched.graph_compute(lg.graph)
        np.testing.assert_allclose(lg.out.to_numpy()[0, 0], L.reference(lg, vals), **TOL)
    assert sched.allocator.n_plans == 1 and sched.n_placements == 1
    assert sched.buffer_sizes() == sizes and sched.get_buffer_size(sub) == sizes["Sub0"] > 0
    # compute again without alloc_graph: the same allocation is used
    sched.graph_compute(lg.graph)
    assert sched.allocator.n_plans == 1


def test_a_smaller_graph_of_the_same_shape_reuses_the_worst_case_reservation(cpu: gc.Backend) -> None:
    sub = SubsetDevice("Sub0").init_backend()
    big = L.build_llama(n_layers=1, n_tokens=16)
    L.alloc_weights(big, sub)
    sched = Scheduler([sub, cpu])
    sched.reserve(big.graph)
    small = L.build_llama(n_layers=1, n_tokens=4)  # a new graph object, as llama.cpp builds one per batch
    L.alloc_weights(small, sub)
    vals = L.random_values(small, seed=2)
    L.set_weights(small, vals)
    sched.alloc_graph(small.graph)
    assert sched.allocator.n_plans == 1 and sched.n_placements == 2
    L.set_inputs(small, vals)
    sched.graph_compute(small.graph)
    np.testing.assert_allclose(small.out.to_numpy()[0, 0], L.reference(small, vals), **TOL)


def test_pipeline_copies_rotate_and_events_order_them(cpu: gc.Backend) -> None:
    dev = SubsetDevice("Sub0", asynchronous=True)
    sub = dev.init_backend()
    lg = L.build_llama(n_layers=1)
    vals = L.random_weights(lg, sub, seed=6)
    sched = Scheduler([sub, cpu], parallel=True)
    assert sched.n_copies == 4 and dev.stats["events"] == 4  # one event per copy on the device that has events
    rng = np.random.default_rng(1)
    slots = []
    for _ in range(6):
        sched.alloc_graph(lg.graph)
        vals.update(L.input_values(lg, rng))
        L.set_inputs(lg, vals)
        sched.graph_compute_async(lg.graph)
        sched.synchronize()
        np.testing.assert_allclose(lg.out.to_numpy()[0, 0], L.reference(lg, vals), **TOL)
        slots.append(lg.x.data_offset)
    assert len(set(slots[:4])) == 4 and slots[4:] == slots[:2]  # the user's input moves through 4 slots
    assert sched.allocator.n_plans == 1  # the four rotations share one reservation
    assert dev.stats["event_records"] > 0 and dev.stats["event_waits"] > 0
    assert sched.plan().pipeline_copies == 4


# ------------------------------------------------------------------------------------------------ eval callback


def collect(names: set[str] | None = None) -> tuple[Callable[[Tensor, bool], bool], dict[str, np.ndarray], list]:
    seen: dict[str, np.ndarray] = {}
    asked: list[str] = []

    def cb(t: Tensor, ask: bool) -> bool:
        if ask:
            asked.append(t.name)
            return t.op == GGMLOp.MUL_MAT and (names is None or t.name in names)
        seen[t.name] = t.to_numpy()
        return True

    return cb, seen, asked


def test_eval_callback_asks_per_node_and_sees_each_wanted_result(cpu: gc.Backend) -> None:
    sub = SubsetDevice("Sub0", asynchronous=True).init_backend()
    lg = L.build_llama(n_layers=1)
    vals = L.random_weights(lg, sub, seed=8)
    sched = Scheduler([sub, cpu])
    cb, seen, asked = collect()
    sched.set_eval_callback(cb)
    sched.alloc_graph(lg.graph)
    L.set_inputs(lg, vals)
    assert sched.graph_compute(lg.graph)
    assert asked == [t.name for t in lg.graph.nodes]
    mul_mats = [t.name for t in lg.graph.nodes if t.op == GGMLOp.MUL_MAT]
    assert sorted(seen) == sorted(mul_mats) and len(seen) == 9

    ref = L.build_llama(n_layers=1)
    L.alloc_weights(ref, cpu)
    L.set_weights(ref, vals)
    cpu_sched = Scheduler([cpu])
    cb2, seen_cpu, _ = collect()
    cpu_sched.set_eval_callback(cb2)
    cpu_sched.alloc_graph(ref.graph)
    L.set_inputs(ref, vals)
    cpu_sched.graph_compute(ref.graph)
    for name in mul_mats:
        np.testing.assert_allclose(seen[name], seen_cpu[name], **TOL)
    np.testing.assert_allclose(lg.out.to_numpy(), ref.out.to_numpy(), **TOL)


def test_eval_callback_cancelling_stops_the_graph_and_poisons_the_rest(cpu: gc.Backend) -> None:
    dev = SubsetDevice("Sub0")
    sub = dev.init_backend()
    lg = L.build_llama(n_layers=1)
    vals = L.random_weights(lg, sub, seed=8)
    sched = Scheduler([sub, cpu])
    assert np.isfinite(L.compute(sched, lg, vals)).all()

    def cb(t: Tensor, ask: bool) -> bool:
        return t.name == "kq-0" if ask else False  # look at kq, then cancel

    sched.set_eval_callback(cb)
    dev.computed.clear()
    sched.alloc_graph(lg.graph)
    L.set_inputs(lg, vals)
    assert sched.graph_compute(lg.graph) is False
    assert dev.computed[-1] == "kq-0" and "kqv-0" not in dev.computed
    assert np.isnan(lg.out.to_numpy()).all()  # no stale result from the previous run


# ------------------------------------------------------------------------------------------------ debug output


def test_ggml_sched_debug_prints_splits_and_nodes(cpu: gc.Backend, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    sub = SubsetDevice("Sub0").init_backend()
    lg = L.build_llama(n_layers=1)
    L.alloc_weights(lg, sub)
    monkeypatch.setenv("GGML_SCHED_DEBUG", "1")
    Scheduler([sub, cpu]).alloc_graph(lg.graph)
    err = capsys.readouterr().err
    assert "\n## SPLIT #0: Sub0 # 1 inputs: [inp_embd (   2K)] \n" in err
    assert "## SPLIT #1: CPU # 1 inputs: [v-0 (reshaped) (permuted) (   2K)] \n" in err
    assert err.count("## SPLIT #") == 13 and "node #" not in err
    monkeypatch.setenv("GGML_SCHED_DEBUG", "2")
    Scheduler([sub, cpu]).alloc_graph(lg.graph)
    err = capsys.readouterr().err
    assert "node #  0 (  RMS_NORM):          attn_norm-0 (   2K) [ Sub0    2.sup] use=1,c=1:" in err
    assert "use=1,c=1:      Sub0#inp_embd#0 (   2K) [ NULL         ]\n" in err
