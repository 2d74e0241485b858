"""Scheduler placement and split rules on small graphs, each count predicted by hand from ggml's rules.

Devices: the CPU plugin and ``Sub0`` (tests/sched_plugin): MUL_MAT, ADD, MUL, RMS_NORM in private memory the CPU
cannot read. Every graph is also computed and compared with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from sched_plugin import SubsetDevice

import ggml_core as gc
from ggml_core import AllocationError, BufferUsage, ComputeError, GGMLOp, Tensor, UnsupportedOpError, ops
from ggml_core.alloc import alloc_ctx_tensors
from ggml_core.sched import MAX_SPLIT_INPUTS, PlacementError, Scheduler

RNG = np.random.default_rng(7)


@pytest.fixture
def cpu() -> gc.Backend:
    return gc.init_backend("cpu")


@pytest.fixture
def dev() -> SubsetDevice:
    return SubsetDevice("Sub0")


@pytest.fixture
def sub(dev: SubsetDevice) -> gc.Backend:
    return dev.init_backend()


def weights(target: gc.Backend, *tensors: Tensor) -> dict[str, np.ndarray]:
    """Allocate ``tensors`` as WEIGHTS on ``target`` and fill them with random values."""
    alloc_ctx_tensors(list(tensors), target).set_usage(BufferUsage.WEIGHTS)
    vals = {}
    for t in tensors:
        v = RNG.standard_normal((t.ne[1], t.ne[0]) if t.ne[1] > 1 else (t.ne[0],)).astype(np.float32)
        t.set_data(v)
        vals[t.name] = v
    return vals


def mul_mat_graph(
    weights_on: gc.Backend, n_tokens: int = 4
) -> tuple[Tensor, Tensor, Tensor, gc.Graph, dict[str, np.ndarray]]:
    """``y = mul_mat(w, x)``: random 16×8 weights ``w`` uploaded to ``weights_on``, an input ``x`` of ``n_tokens``
    columns; (w, x, y, the graph, the weights' values)."""
    ctx = gc.Context()
    w = ctx.new_tensor("f32", [16, 8], "w")
    vals = weights(weights_on, w)
    x = ctx.new_tensor("f32", [16, n_tokens], "x").set_input()
    y = ops.mul_mat(w, x).set_name("y")
    return w, x, y, gc.build_graph(y), vals


def rms(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def names(sched: Scheduler, *tensors: Tensor) -> list[str | None]:
    out = []
    for t in tensors:
        be = sched.get_tensor_backend(t)
        out.append(be.name if be is not None else None)
    return out


def causes(sched: Scheduler, *tensors: Tensor) -> list[str]:
    plan = sched.plan()
    return [plan.causes[t.id] for t in tensors]


# ------------------------------------------------------------------------------------------------ pass 1


def test_ops_follow_their_weights_and_inputs_start_on_the_cpu(cpu: gc.Backend, sub: gc.Backend) -> None:
    w, x, y, g, vals = mul_mat_graph(sub)
    sched = Scheduler([sub, cpu])
    sched.alloc_graph(g)
    assert names(sched, y, x, w) == ["Sub0", "CPU", "Sub0"]
    assert causes(sched, y, x, w) == ["1.wgt0", "1.inp", "1.dst"]
    plan = sched.plan()
    assert (plan.n_splits, plan.n_copies) == (1, 1) == (sched.n_splits, sched.n_input_copies)
    (c,) = plan.splits[0].inputs
    assert (c.name, c.from_backend, c.to_backend, c.nbytes, c.copy_name) == ("x", "CPU", "Sub0", 256, "Sub0#x#0")
    xv = RNG.standard_normal((4, 16)).astype(np.float32)
    x.set_data(xv)
    sched.graph_compute(g)
    np.testing.assert_allclose(y.to_numpy()[0, 0], xv @ vals["w"].T, rtol=1e-5, atol=1e-5)
    assert y.src[1] is x  # the graph is given back its operands after the compute


@pytest.mark.parametrize(
    ("n_tokens", "op_offload", "expect", "n_copies"),
    [(32, True, "Sub0", 2), (32, False, "CPU", 0), (4, True, "CPU", 0)],
)
def test_op_offload_takes_large_batches_with_host_weights(
    cpu: gc.Backend, sub: gc.Backend, n_tokens: int, op_offload: bool, expect: str, n_copies: int
) -> None:
    _, x, y, g, vals = mul_mat_graph(cpu, n_tokens)  # host memory: the CPU's unless an accelerator asks for the op
    sched = Scheduler([sub, cpu], op_offload=op_offload)
    sched.alloc_graph(g)
    assert names(sched, y) == [expect]
    assert causes(sched, y) == ["1.off" if expect == "Sub0" else "1.wgt0"]
    plan = sched.plan()
    assert (plan.n_splits, plan.n_copies) == (1, n_copies)
    if n_copies:
        assert sorted(c.name for c in plan.splits[0].inputs) == ["w", "x"]
    xv = RNG.standard_normal((n_tokens, 16)).astype(np.float32)
    x.set_data(xv)
    sched.graph_compute(g)
    np.testing.assert_allclose(y.to_numpy()[0, 0], xv @ vals["w"].T, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------ passes 2-4


def test_expansion_carries_a_device_to_neighbours_it_supports(cpu: gc.Backend, sub: gc.Backend) -> None:
    ctx = gc.Context()
    nw = ctx.new_tensor("f32", [8], "nw")
    vals = weights(sub, nw)
    x = ctx.new_tensor("f32", [8, 4], "x").set_input()
    a = ops.rms_norm(x, 1e-6).set_name("a")
    b = ops.mul(a, nw).set_name("b")  # the weight's device
    c = ops.soft_max(b).set_name("c")  # Sub0 has no SOFT_MAX
    d = ops.add(c, c).set_name("d")
    g = gc.build_graph(d)
    sched = Scheduler([sub, cpu])
    sched.alloc_graph(g)
    # down from b: c unsupported (left), d taken; up from d/b: a taken; c: the only backend supporting it
    assert names(sched, a, b, c, d) == ["Sub0", "Sub0", "CPU", "Sub0"]
    assert causes(sched, a, b, c, d) == ["2.sup", "1.wgt1", "3.best", "2.sup"]
    plan = sched.plan()
    assert [s.backend for s in plan.splits] == ["Sub0", "CPU", "Sub0"]
    assert [[c.name for c in s.inputs] for s in plan.splits] == [["x"], ["b"], ["c"]]
    xv = RNG.standard_normal((4, 8)).astype(np.float32)
    x.set_data(xv)
    sched.graph_compute(g)
    np.testing.assert_allclose(d.to_numpy()[0, 0], 2 * softmax(rms(xv) * vals["nw"]), rtol=1e-5, atol=1e-6)


def test_the_cpu_stops_the_accelerator_sweep_downwards(cpu: gc.Backend, sub: gc.Backend) -> None:
    ctx = gc.Context()
    w_cpu, w_sub = ctx.new_tensor("f32", [8], "w_cpu"), ctx.new_tensor("f32", [8], "w_sub")
    vals = {**weights(cpu, w_cpu), **weights(sub, w_sub)}
    x = ctx.new_tensor("f32", [8, 4], "x").set_input()
    a = ops.rms_norm(x, 1e-6).set_name("a")
    b = ops.mul(a, w_cpu).set_name("b")  # CPU weight, batch 4 < 32: stays on the CPU
    c = ops.add(b, b).set_name("c")
    d = ops.mul(c, w_sub).set_name("d")
    e = ops.rms_norm(d, 1e-6).set_name("e")
    g = gc.build_graph(e)
    sched = Scheduler([sub, cpu])
    sched.alloc_graph(g)
    # accelerator down: b (CPU) stops the carry, d carries to e; accelerator up: d carries to c, b stops it;
    # any-backend down/up: a gets the CPU from b
    assert names(sched, a, b, c, d, e) == ["CPU", "CPU", "Sub0", "Sub0", "Sub0"]
    assert causes(sched, a, b, c, d, e) == ["2.sup", "1.wgt1", "2.sup", "1.wgt1", "2.sup"]
    plan = sched.plan()
    assert [(s.backend, [c.name for c in s.inputs]) for s in plan.splits] == [("CPU", []), ("Sub0", ["b"])]
    xv = RNG.standard_normal((4, 8)).astype(np.float32)
    x.set_data(xv)
    sched.graph_compute(g)
    np.testing.assert_allclose(e.to_numpy()[0, 0], rms(2 * rms(xv) * vals["w_cpu"] * vals["w_sub"]), rtol=1e-5)


def test_views_follow_their_source(cpu: gc.Backend, sub: gc.Backend) -> None:
    ctx = gc.Context()
    w = ctx.new_tensor("f32", [8, 8], "w")
    vals = weights(sub, w)
    x = ctx.new_tensor("f32", [8, 4], "x").set_input()
    a = ops.mul_mat(w, x).set_name("a")
    r = ops.reshape_2d(a, 16, 2).set_name("r")
    c = ops.soft_max(r).set_name("c")
    g = gc.build_graph(c)
    sched = Scheduler([sub, cpu])
    sched.alloc_graph(g)
    assert names(sched, a, r, c) == ["Sub0", "Sub0", "CPU"]
    assert causes(sched, r) == ["4.vsrc"]
    plan = sched.plan()
    assert [[(c.name, c.from_backend, c.to_backend) for c in s.inputs] for s in plan.splits] == [
        [("x", "CPU", "Sub0")],
        [("r", "Sub0", "CPU")],  # the view is what the CPU op reads, so the view is copied
    ]
    xv = RNG.standard_normal((4, 8)).astype(np.float32)
    x.set_data(xv)
    sched.graph_compute(g)
    np.testing.assert_allclose(c.to_numpy()[0, 0], softmax((xv @ vals["w"].T).reshape(2, 16)), rtol=1e-5, atol=1e-6)


def test_a_user_assignment_always_wins(cpu: gc.Backend, sub: gc.Backend) -> None:
    _, x, y, g, vals = mul_mat_graph(sub)
    sched = Scheduler([sub, cpu])
    sched.set_tensor_backend(y, cpu)
    xv = RNG.standard_normal((4, 16)).astype(np.float32)
    sched.alloc_graph(g)
    x.set_data(xv)
    sched.graph_compute(g)  # the assignment survives graph_compute's automatic reset
    sched.graph_compute(g)
    assert names(sched, y) == ["CPU"] and causes(sched, y) == ["usr"]
    assert [(c.name, c.from_backend) for c in sched.plan().splits[0].inputs] == [("w", "Sub0")]
    np.testing.assert_allclose(y.to_numpy()[0, 0], xv @ vals["w"].T, rtol=1e-5, atol=1e-5)
    sched.reset()  # an explicit reset forgets it, as in ggml
    sched.alloc_graph(g)
    assert names(sched, y) == ["Sub0"]


def test_upgrade_to_a_higher_priority_backend_of_the_same_buffer_type(cpu: gc.Backend) -> None:
    cpu_dev = cpu.device
    hi, lo = cpu_dev.init_backend(), cpu_dev.init_backend()
    ctx = gc.Context()
    x = ctx.new_tensor("f32", [8], "x").set_input()
    a = ops.sqr(x).set_name("a")
    b = ops.sqr(a).set_name("b")
    c = ops.sqr(b).set_name("c")
    g = gc.build_graph(c)
    sched = Scheduler([hi, lo])
    sched.set_tensor_backend(b, lo)
    sched.alloc_graph(g)
    # the any-backend sweeps carry lo (the last backend) from b to a and c; pass 3 moves them up to hi (same
    # buffer type); b keeps the user's choice
    assert [sched.get_tensor_backend(t) for t in (a, b, c)] == [hi, lo, hi]
    assert causes(sched, a, b, c) == ["3.upg", "usr", "3.upg"]
    assert sched.n_splits == 3 and sched.n_input_copies == 0  # same memory: nothing to copy
    xv = np.linspace(0.5, 1.5, 8, dtype=np.float32)
    x.set_data(xv)
    sched.graph_compute(g)
    np.testing.assert_allclose(c.to_numpy().ravel(), xv**8, rtol=1e-5)


# ------------------------------------------------------------------------------------------------ pass 5


def test_a_full_split_starts_a_new_one(cpu: gc.Backend, sub: gc.Backend) -> None:
    ctx = gc.Context()
    w = ctx.new_tensor("f32", [8, 8], "w")
    vals = weights(sub, w)
    xs = [ctx.new_tensor("f32", [8, 2], f"x{i}").set_input() for i in range(35)]
    acc = ops.mul_mat(w, xs[0])
    for x in xs[1:]:
        acc = ops.add(acc, x)
    g = gc.build_graph(acc)
    sched = Scheduler([sub, cpu])
    sched.alloc_graph(g)
    plan = sched.plan()
    assert [s.backend for s in plan.splits] == ["Sub0", "Sub0"]
    assert [len(s.inputs) for s in plan.splits] == [MAX_SPLIT_INPUTS, 35 - MAX_SPLIT_INPUTS]
    xv = [RNG.standard_normal((2, 8)).astype(np.float32) for _ in xs]
    for x, v in zip(xs, xv, strict=True):
        x.set_data(v)
    sched.graph_compute(g)
    np.testing.assert_allclose(acc.to_numpy()[0, 0], xv[0] @ vals["w"].T + sum(xv[1:]), rtol=1e-5, atol=1e-5)


def test_a_weight_the_split_cannot_read_starts_a_new_split(cpu: gc.Backend, sub: gc.Backend) -> None:
    ctx = gc.Context()
    w1, w2 = ctx.new_tensor("f32", [8, 8], "w1"), ctx.new_tensor("f32", [8, 8], "w2")
    vals = {**weights(sub, w1), **weights(cpu, w2)}
    x = ctx.new_tensor("f32", [8, 32], "x").set_input()
    a = ops.mul_mat(w1, x).set_name("a")
    b = ops.mul_mat(w2, a).set_name("b")  # host weight, batch 32: offloaded to Sub0
    g = gc.build_graph(b)
    sched = Scheduler([sub, cpu])
    sched.alloc_graph(g)
    assert names(sched, a, b) == ["Sub0", "Sub0"] and causes(sched, b) == ["1.off"]
    plan = sched.plan()
    assert [(s.backend, [c.name for c in s.inputs]) for s in plan.splits] == [("Sub0", ["x"]), ("Sub0", ["w2"])]
    xv = RNG.standard_normal((32, 8)).astype(np.float32)
    x.set_data(xv)
    sched.graph_compute(g)
    np.testing.assert_allclose(b.to_numpy()[0, 0], xv @ vals["w1"].T @ vals["w2"].T, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------------ errors


def test_an_op_no_backend_supports_names_node_op_and_devices(cpu: gc.Backend, sub: gc.Backend) -> None:
    ctx = gc.Context()
    x = ctx.new_tensor("f32", [8, 4], "x").set_input()
    odd = ctx.new_tensor("f32", [8, 4], "odd_node")
    odd.op = GGMLOp.CONV_TRANSPOSE_1D  # no kernel anywhere
    odd.src[0] = x
    g = gc.build_graph(ops.sqr(odd))
    sched = Scheduler([sub, cpu])
    with pytest.raises(UnsupportedOpError) as err:
        sched.alloc_graph(g)
    msg = str(err.value)
    assert "'odd_node'" in msg and "CONV_TRANSPOSE_1D" in msg and "Sub0" in msg and "CPU" in msg


def test_a_tensor_in_memory_no_scheduler_backend_can_use_is_named(cpu: gc.Backend, sub: gc.Backend) -> None:
    other = SubsetDevice("Sub1").init_backend()
    ctx = gc.Context()
    w = ctx.new_tensor("f32", [8, 8], "w_on_sub1")
    weights(other, w)
    x = ctx.new_tensor("f32", [8, 2], "x").set_input()
    g = gc.build_graph(ops.mul_mat(w, x))
    with pytest.raises(PlacementError) as err:
        Scheduler([sub, cpu]).alloc_graph(g)
    assert isinstance(err.value, UnsupportedOpError)
    assert "'w_on_sub1'" in str(err.value) and "Sub1 buffer" in str(err.value) and "Sub0, CPU" in str(err.value)


def test_the_last_backend_must_be_the_cpu(cpu: gc.Backend, sub: gc.Backend) -> None:
    with pytest.raises(ValueError, match="last backend must be the CPU"):
        Scheduler([cpu, sub])
    with pytest.raises(ValueError, match="not one of this scheduler's"):
        Scheduler([cpu]).set_tensor_backend(gc.Context().new_tensor("f32", [1]), sub)


def test_a_device_out_of_memory_names_device_and_peak_node(cpu: gc.Backend) -> None:
    dev = SubsetDevice("Sub0", capacity=4096 + 1024)
    sub = dev.init_backend()
    ctx = gc.Context()
    w = ctx.new_tensor("f32", [32, 32], "w")  # 4 KiB of weights fit
    weights(sub, w)
    x = ctx.new_tensor("f32", [32, 64], "x").set_input()  # 8 KiB of input copy and 8 KiB result do not
    g = gc.build_graph(ops.mul_mat(w, x).set_name("proj"))
    with pytest.raises(AllocationError) as err:
        Scheduler([sub, cpu]).alloc_graph(g)
    msg = str(err.value)
    assert "Sub0" in msg and "out of device memory" in msg and "'proj'" in msg and "MUL_MAT" in msg


def test_a_compute_buffer_type_too_small_for_one_tensor_is_named(cpu: gc.Backend) -> None:
    dev = SubsetDevice("Sub0", max_size=1024)
    sub = dev.init_backend()
    ctx = gc.Context()
    w = ctx.new_tensor("f32", [16, 16], "w")
    weights(sub, w)
    x = ctx.new_tensor("f32", [16, 64], "x").set_input()
    g = gc.build_graph(ops.mul_mat(w, x).set_name("proj"))
    with pytest.raises(AllocationError, match=r"larger than the buffer type's maximum of 1024 bytes"):
        Scheduler([sub, cpu]).alloc_graph(g)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_failure_mid_compute_leaves_no_stale_results(cpu: gc.Backend, asynchronous: bool) -> None:
    dev = SubsetDevice("Sub0", asynchronous=asynchronous)
    sub = dev.init_backend()
    ctx = gc.Context()
    w = ctx.new_tensor("f32", [8, 8], "w")
    vals = weights(sub, w)
    x = ctx.new_tensor("f32", [8, 4], "x").set_input()
    h = ops.mul_mat(w, x).set_name("h")
    s = ops.soft_max(h).set_name("s")  # CPU
    out = ops.add(s, s).set_name("out").set_output()  # Sub0
    g = gc.build_graph(out)
    sched = Scheduler([sub, cpu])
    xv = RNG.standard_normal((4, 8)).astype(np.float32)
    sched.alloc_graph(g)
    x.set_data(xv)
    sched.graph_compute(g)
    good = 2 * softmax(xv @ vals["w"].T)
    np.testing.assert_allclose(out.to_numpy()[0, 0], good, rtol=1e-5, atol=1e-6)

    dev.fail_on = {"out"}
    sched.alloc_graph(g)
    x.set_data(xv)
    with pytest.raises(ComputeError, match=r"Sub0.*'out'.*injected device fault"):
        sched.graph_compute(g)
    assert np.isnan(out.to_numpy()).all()  # not the previous, valid-looking values
    assert h.src[1] is x  # operands given back

    dev.fail_on = set()
    sched.alloc_graph(g)
    x.set_data(xv)
    sched.graph_compute(g)
    np.testing.assert_allclose(out.to_numpy()[0, 0], good, rtol=1e-5, atol=1e-6)


def test_graph_optimize_runs_once_per_split_and_its_order_is_kept(cpu: gc.Backend, sub: gc.Backend) -> None:
    ctx = gc.Context()
    w1, w2 = ctx.new_tensor("f32", [8], "w1"), ctx.new_tensor("f32", [8], "w2")
    vals = weights(sub, w1, w2)
    x = ctx.new_tensor("f32", [8, 4], "x").set_input()
    a = ops.mul(x, w1).set_name("a")
    b = ops.mul(x, w2).set_name("b")
    out = ops.soft_max(ops.add(a, b).set_name("s")).set_name("out")
    g = gc.build_graph(out)
    seen: list[list[str]] = []

    def optimize(graph: gc.Graph) -> None:  # swap the two independent products
        seen.append([t.name for t in graph.nodes])
        if [t.name for t in graph.nodes[:2]] == ["a", "b"]:
            graph.nodes[0], graph.nodes[1] = graph.nodes[1], graph.nodes[0]

    sub.graph_optimize = optimize  # type: ignore[method-assign]
    sched = Scheduler([sub, cpu])
    sched.alloc_graph(g)
    assert seen == [["a", "b", "s"]]  # Sub0 has one split; the CPU's hook (a no-op) ran for the other
    assert sched.plan().splits[0].nodes == ("b", "a", "s")
    xv = RNG.standard_normal((4, 8)).astype(np.float32)
    x.set_data(xv)
    sched.graph_compute(g)
    np.testing.assert_allclose(out.to_numpy()[0, 0], softmax(xv * vals["w1"] + xv * vals["w2"]), rtol=1e-5)


def test_sched_debug_realloc_reports_an_unexpected_re_plan(
    cpu: gc.Backend, sub: gc.Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = gc.Context()
    w = ctx.new_tensor("f32", [8, 8], "w")
    weights(sub, w)
    x = ctx.new_tensor("f32", [8, 4], "x").set_input()
    g = gc.build_graph(ops.soft_max(ops.mul_mat(w, x)))
    y = ctx.new_tensor("f32", [8, 64], "y").set_input()
    bigger = gc.build_graph(ops.soft_max(ops.mul_mat(w, y)))  # same counts, larger tensors: needs new memory
    monkeypatch.setenv("GGML_SCHED_DEBUG_REALLOC", "1")
    sched = Scheduler([sub, cpu])
    sched.alloc_graph(g)  # the first allocation is expected
    sched.alloc_graph(g)
    with pytest.raises(gc.GraphError, match="unexpected graph reallocation"):
        sched.alloc_graph(bigger)
