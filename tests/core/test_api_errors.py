"""The Python API refuses bad input with a GGMLError subclass naming the culprit: data a tensor's type cannot hold,
shapes beyond ggml's int64/size_t, operands that are not tensors, tensors whose buffer was freed, and a graph
computed by two threads at once; computes on one backend from several threads are serialized (and correct)."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ggml_core as g
from ggml_core import ops


@pytest.fixture
def cpu() -> g.Backend:
    return g.init_backend("CPU")


def _tensor(cpu: g.Backend, type_: str, n: int, name: str) -> g.Tensor:
    ctx = g.Context()
    t = ctx.new_tensor_1d(type_, n, name)
    g.alloc_ctx_tensors(ctx, cpu)
    return t


# ------------------------------------------------------------------------------------------------ set_data


@pytest.mark.parametrize(
    ("type_", "values", "dtype", "message"),
    [
        ("i32", [2**40, 1], np.int64, r"value 1099511627776 is outside i32's range -2147483648\.\.2147483647"),
        ("i8", [300, 1], np.int64, r"value 300 is outside i8's range -128\.\.127"),
        ("i8", [-129, 1], np.int64, r"value -129 is outside i8's range"),
        ("i16", [2**63, 0], np.uint64, r"value 9223372036854775808 is outside i16's range"),
        ("i64", [2**64 - 1, 0], np.uint64, r"value 18446744073709551615 is outside i64's range"),
        ("f32", [1e300, 0.0], np.float64, r"value 1e\+300 overflows f32"),
        ("f16", [1e5, 0.0], np.float32, r"value 100000 overflows f16 \(largest finite value 65504\)"),
        ("f16", [65520.0, 0.0], np.float32, r"value 65520 overflows f16"),  # the first value that rounds to inf
        ("f32", [-(2.0**128 - 2.0**103), 0.0], np.float64, r"overflows f32"),
        ("q8_0", [1e300] + [0.0] * 31, np.float64, r"value 1e\+300 overflows q8_0"),
    ],
)
def test_set_data_refuses_values_the_type_cannot_hold(
    cpu: g.Backend, type_: str, values: list[Any], dtype: Any, message: str
) -> None:
    t = _tensor(cpu, type_, len(values), "victim")
    before = t.get_bytes()
    with pytest.raises(g.TensorDataError, match=message) as info:
        t.set_data(np.array(values, dtype=dtype))
    assert "'victim'" in str(info.value) and info.value.tensor is t
    assert t.get_bytes() == before  # nothing was written


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (np.array([1, 2], dtype=object), "object"),
        (np.array(["1", "2"]), "<U1"),
        (np.array([1 + 2j, 0], dtype=np.complex64), "complex64"),
        ([[1, 2], [3]], "rectangular"),
    ],
)
def test_set_data_refuses_non_numeric_data(cpu: g.Backend, data: Any, kind: str) -> None:
    t = _tensor(cpu, "i32", 2, "ids")
    with pytest.raises(g.TensorDataError, match=kind) as info:
        t.set_data(data)
    assert "'ids'" in str(info.value)


def test_set_data_still_converts_what_fits(cpu: g.Backend) -> None:
    """Values in range convert exactly (the checks only refuse, they never change a value)."""
    i8 = _tensor(cpu, "i8", 4, "i8")
    i8.set_data(np.array([-128, 127, 0, 5], dtype=np.int64))
    assert i8.to_numpy().ravel().tolist() == [-128, 127, 0, 5]
    i32 = _tensor(cpu, "i32", 3, "i32")
    i32.set_data([2**31 - 1, -(2**31), True])
    assert i32.to_numpy().ravel().tolist() == [2**31 - 1, -(2**31), 1]
    f16 = _tensor(cpu, "f16", 4, "f16")
    f16.set_data(np.array([65519.0, -np.inf, np.nan, 1.5], dtype=np.float64))  # non-finite values stay as given
    got = f16.to_numpy().ravel()
    assert got[0] == 65504.0 and got[1] == -np.inf and np.isnan(got[2]) and got[3] == 1.5  # 65519 rounds to 65504
    f32 = _tensor(cpu, "f32", 1, "f32")
    f32.set_data(np.array([2.0**128 - 2.0**103 - 2.0**80]))  # just below the tie: rounds to float32's max
    assert f32.to_numpy().ravel()[0] == np.finfo(np.float32).max


# ------------------------------------------------------------------------------------------------ shapes


@pytest.mark.parametrize(
    ("ne", "message"),
    [
        ([2**63], r"outside ggml's int64 range"),
        ([2**62, 4], r"more than 2\^63-1 elements"),
        ([2**61, 2], r"needs 18446744073709551616 bytes, over the 2\^63-1"),
        ([2.5], r"must hold integers"),
        ([1, 1, 1, 1, 1], r"at most 4 dimensions"),
    ],
)
def test_tensor_shapes_are_bounded_as_ggml_bounds_them(ne: list[Any], message: str) -> None:
    with pytest.raises(g.TensorError, match=message) as info:
        g.Context().new_tensor("f32", ne, name="huge")
    assert "'huge'" in str(info.value)


def test_large_shapes_within_the_bounds_are_accepted() -> None:
    """A description is not an allocation: 2^62 elements of one byte are a valid ggml tensor."""
    t = g.Context().new_tensor("i8", [2**31, 2**31])
    assert t.nelements == 2**62 and t.nbytes == 2**62


@pytest.mark.parametrize(
    ("given", "message"),
    [("q9_0", "unknown ggml type 'q9_0'; known types: F32"), (99, "unknown ggml type id 99"), (1.5, "got float 1.5")],
)
def test_unknown_types_are_ggml_errors(given: Any, message: str) -> None:
    with pytest.raises(g.UnknownTypeError, match=message) as info:
        g.Context().new_tensor(given, [4])
    assert info.value.given == given and isinstance(info.value, ValueError)


# ------------------------------------------------------------------------------------------------ op operands


def _builders() -> list[tuple[str, Callable[..., Any], list[str]]]:
    out = []
    for name in ops.__all__:
        fn = getattr(ops, name)
        if not inspect.isfunction(fn):
            continue
        tensor_params = [
            p.name for p in inspect.signature(fn).parameters.values() if p.annotation in ("Tensor", "Tensor | None")
        ]
        if tensor_params:
            out.append((name, fn, tensor_params))
    return out


BUILDERS = _builders()


def test_every_builder_with_tensor_operands_is_covered() -> None:
    assert len(BUILDERS) > 100  # ggml has ~100 ops, most with several builders


@pytest.mark.parametrize(("name", "fn", "params"), BUILDERS, ids=[b[0] for b in BUILDERS])
def test_non_tensor_operands_raise_op_error_naming_builder_and_argument(
    name: str, fn: Callable[..., Any], params: list[str]
) -> None:
    ctx = g.Context()
    good = ctx.new_tensor_2d("f32", 4, 4, "x")
    sig = inspect.signature(fn)
    for bad_param in params:
        kwargs: dict[str, Any] = {}
        for p in sig.parameters.values():
            if p.name == bad_param:
                kwargs[p.name] = "not a tensor"
            elif p.name in params:
                kwargs[p.name] = good
            elif p.default is inspect.Parameter.empty:
                kwargs[p.name] = 0  # never reached: the operand check comes first
        with pytest.raises(g.OpError, match=rf"ops\.{name}: argument '{bad_param}' must be a Tensor") as info:
            fn(**kwargs)
        assert "str 'not a tensor'" in str(info.value)


def test_operands_given_positionally_are_checked_too() -> None:
    a = g.Context().new_tensor_1d("f32", 4, "a")
    with pytest.raises(g.OpError, match=r"ops\.add: argument 'b' must be a Tensor, got int 3"):
        ops.add(a, 3)  # type: ignore[arg-type]
    with pytest.raises(g.OpError, match=r"ops\.mul_mat: argument 'a' must be a Tensor, got ndarray"):
        ops.mul_mat(np.zeros(4), a)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ freed buffers


def _square_graph(cpu: g.Backend) -> tuple[g.Graph, g.Tensor, g.Tensor, g.Buffer]:
    ctx = g.Context()
    x = ctx.new_tensor_1d("f32", 8, "x")
    y = ops.sqr(x).set_name("y")
    buf = g.alloc_ctx_tensors(ctx, cpu)
    return g.build_graph(y), x, y, buf


def test_compute_after_buffer_free_names_the_tensor(cpu: g.Backend) -> None:
    graph, x, y, buf = _square_graph(cpu)
    x.set_data(np.arange(8, dtype=np.float32))
    cpu.graph_compute(graph)
    np.testing.assert_array_equal(y.to_numpy().ravel(), np.arange(8, dtype=np.float32) ** 2)
    buf.free()
    with pytest.raises(g.BufferFreedError, match=r"tensor 'x' .*: its CPU buffer was freed") as info:
        cpu.graph_compute(graph)
    assert info.value.tensor is x and info.value.buffer is buf
    with pytest.raises(g.BufferFreedError, match=r"tensor 'y' .*buffer was freed"):
        y.to_numpy()
    with pytest.raises(g.BufferFreedError, match=r"tensor 'x' .*buffer was freed"):
        x.set_data(np.zeros(8, dtype=np.float32))
    with pytest.raises(g.BufferFreedError, match=r"tensor 'x' .*buffer was freed"):
        x.numpy_view()


def test_a_freed_buffer_of_an_unhashable_class_is_still_found(cpu: g.Backend) -> None:
    """The check collects the graph's distinct buffers in a set; a plugin's buffer class that defines ``__eq__``
    without ``__hash__`` is walked tensor by tensor instead, and still named."""
    from ggml_core.backend.interfaces import check_graph_memory

    graph, x, _y, buf = _square_graph(cpu)

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]
        freed = True
        name = "Plugin"

    check_graph_memory(graph)  # nothing freed: passes
    real = x.buffer
    x.buffer = Unhashable()  # type: ignore[assignment]
    try:
        with pytest.raises(g.BufferFreedError, match="'x'"):
            check_graph_memory(graph)
    finally:
        x.buffer = real
    buf.free()
    with pytest.raises(g.BufferFreedError, match="'x'"):
        check_graph_memory(graph)


def test_the_scheduler_refuses_freed_weights_too(cpu: g.Backend) -> None:
    graph, _x, _y, buf = _square_graph(cpu)
    buf.free()
    with pytest.raises(g.BufferFreedError, match="'x'"):
        g.Scheduler([cpu]).graph_compute(graph)


# ------------------------------------------------------------------------------------------------ threads


def _mlp(
    cpu: g.Backend, rng: np.random.Generator, sched: g.Scheduler | None = None
) -> tuple[g.Graph, g.Tensor, g.Tensor, np.ndarray]:
    """y = softmax(W · sqr(x + x)) with x and the intermediates in a graph allocator's (or the scheduler's)
    reused memory."""
    ctx = g.Context()
    w = ctx.new_tensor_2d("f32", 32, 32, "w")
    x = ctx.new_tensor_2d("f32", 32, 4, "x").set_input()
    y = ops.soft_max(ops.mul_mat(w, ops.sqr(ops.add(x, x)))).set_name("y").set_output()
    graph = g.build_graph(y)
    g.alloc_ctx_tensors([w], cpu)
    if sched is not None:
        sched.alloc_graph(graph)
    else:
        g.GraphAllocator(cpu.default_buffer_type).alloc_graph(graph)
    wv = (rng.uniform(-1, 1, (32, 32)) / np.sqrt(32)).astype(np.float32)
    w.set_data(wv)
    return graph, x, y, wv


def _reference(wv: np.ndarray, xv: np.ndarray) -> np.ndarray:
    """The same function in float64 from the definitions."""
    h = (2.0 * xv.astype(np.float64)) ** 2
    z = h @ wv.astype(np.float64).T
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("via", ["backend", "scheduler"])
def test_two_threads_computing_on_one_backend_get_correct_results(cpu: g.Backend, via: str) -> None:
    """2 threads × 40 computes, each thread its own graph (and, via the scheduler, its own scheduler) and fresh
    inputs each time, on one shared backend; every result is checked against float64 numpy.

    Tolerance: the logits z are 32-term float32 dot products of terms below 16/sqrt(32) in size, so their error is
    below 32 · 2^-24 · 32 · 16/sqrt(32) ≈ 3e-4 absolute in the worst case (about 1e-5 typically); softmax turns
    an absolute error in z into a relative one in y, so y is compared with rtol=1e-3 (a wrong or torn result,
    inputs of the other thread, is off by O(1))."""
    n_iter, failures, errors = 40, [], []
    start = threading.Barrier(2)

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        sched = g.Scheduler([cpu]) if via == "scheduler" else None
        graph, x, y, wv = _mlp(cpu, rng, sched)
        start.wait()
        try:
            for i in range(n_iter):
                xv = rng.uniform(-1, 1, (4, 32)).astype(np.float32)
                x.set_data(xv)  # the graph allocator reuses x's memory: inputs are set before every compute
                if sched is not None:
                    sched.graph_compute(graph)
                else:
                    cpu.graph_compute(graph)
                got = y.to_numpy().reshape(4, 32)
                if not np.allclose(got, _reference(wv, xv), rtol=1e-3, atol=0):
                    failures.append((seed, i))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert not failures, f"{len(failures)} of {2 * n_iter} results differ from numpy: {failures[:5]}"


def test_a_graph_computed_by_another_thread_is_refused_and_other_graphs_wait(cpu: g.Backend) -> None:
    """Thread A is held inside a compute (its abort callback blocks); the same graph from another thread raises
    GraphInUseError at once, and another graph on the same backend waits for A (the backend lock)."""
    graph, x, y, _ = _square_graph(cpu)
    other, x2, y2, _ = _square_graph(cpu)
    x.set_data(np.arange(8, dtype=np.float32))
    x2.set_data(np.full(8, 3.0, dtype=np.float32))
    inside, release = threading.Event(), threading.Event()
    a_thread: list[threading.Thread] = []

    def abort() -> bool:
        if threading.current_thread() is a_thread[0]:
            inside.set()
            release.wait(30)
        return False

    cpu.abort_callback = abort
    a = threading.Thread(target=cpu.graph_compute, args=(graph,))
    a_thread.append(a)
    c = threading.Thread(target=cpu.graph_compute, args=(other,))
    a.start()
    try:
        assert inside.wait(30)
        with pytest.raises(g.GraphInUseError, match=r"CPU: Graph\(.*\) is being computed by another thread"):
            cpu.graph_compute(graph)
        c.start()
        c.join(0.5)
        assert c.is_alive()  # waits for the backend, held by A
    finally:
        release.set()
        a.join(30)
        if c.ident is not None:
            c.join(30)
    cpu.abort_callback = None
    np.testing.assert_array_equal(y.to_numpy().ravel(), np.arange(8, dtype=np.float32) ** 2)
    np.testing.assert_array_equal(y2.to_numpy().ravel(), np.full(8, 9.0, dtype=np.float32))
    cpu.graph_compute(graph)  # free again once A is done


def test_every_exception_is_public_and_named_as_imported() -> None:
    """Each GGMLError subclass of the core is ``ggml_core.X`` (tracebacks print that name, and it imports)."""
    import ggml_core
    from ggml_core import _errors

    classes = [c for c in vars(_errors).values() if isinstance(c, type) and issubclass(c, _errors.GGMLError)]
    assert len(classes) > 10
    for cls in classes:
        assert cls.__module__ == "ggml_core"
        assert getattr(ggml_core, cls.__name__) is cls
        assert cls.__name__ in ggml_core.__all__
