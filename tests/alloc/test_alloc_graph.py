"""The graph allocator: liveness, in-place reuse, best fit, alignment/padding, chunks, reserve vs alloc reuse.

Overlap is checked with memory itself: every tensor the allocator placed is stamped with its own value when it is
defined, and every consumer checks its operands still carry their stamps (inputs are stamped before anything runs,
outputs are checked at the end). The numeric check compares against a run where every tensor has memory of its own.
"""

from __future__ import annotations

import numpy as np
import pytest
from sched_plugin import llama_graph as L

import ggml_core as gc
from ggml_core import AllocationError, Buffer, BufferType, GGMLOp, HostBuffer, Tensor, TensorFlag, ops
from ggml_core.alloc import INPLACE_OPS, DynAllocator, GraphAllocator, alloc_ctx_tensors, pad


@pytest.fixture(scope="module")
def cpu() -> gc.Backend:
    return gc.init_backend("cpu")


class HostBufferType(BufferType):
    """Host memory with a chosen alignment, padding per tensor, maximum size and allocation failures."""

    def __init__(self, alignment: int = 64, padding: int = 0, max_size: int = 2**62, fail: bool = False) -> None:
        super().__init__(f"Host{alignment}p{padding}", None, alignment=alignment, max_size=max_size, is_host=True)
        self.padding = padding
        self.fail = fail
        self.allocs: list[int] = []

    def alloc_size(self, tensor: Tensor) -> int:
        return tensor.nbytes + self.padding

    def _alloc(self, size: int) -> Buffer:
        if self.fail:
            raise MemoryError("no memory left (test)")
        self.allocs.append(size)
        return HostBuffer.zeros(self, size)


def llama(cpu: gc.Backend, n_layers: int = 2, n_tokens: int = 8, seed: int = 0) -> tuple[L.LlamaGraph, dict]:
    lg = L.build_llama(n_layers=n_layers, n_tokens=n_tokens)
    vals = L.random_weights(lg, cpu, seed=seed)
    return lg, vals


def owned_tensors(ga: GraphAllocator, graph: gc.Graph) -> list[Tensor]:
    seen: dict[int, Tensor] = {}
    for t in (*graph.leafs, *graph.nodes):
        for x in (t, *(s for s in t.src if s is not None)):
            if x.view_src is None and ga.owns(x):
                seen[x.id] = x
    return list(seen.values())


def _span(t: Tensor, padded: bool = False) -> tuple[int, int]:
    assert t.data_offset is not None and t.buffer is not None
    size = t.buffer.buffer_type.alloc_size(t) if padded else t.nbytes
    return t.data_offset, t.data_offset + size


def check_liveness_by_stamps(ga: GraphAllocator, graph: gc.Graph, padded: bool = False) -> int:
    """Stamp and check as described in the module docstring; returns the number of checks made."""
    stamps: dict[int, np.ndarray] = {}
    stamp_no = iter(range(1, 1 << 30))

    def stamp(t: Tensor) -> None:
        lo, hi = _span(t, padded)
        value = np.array([next(stamp_no)], dtype=np.uint32).view(np.uint8)
        pattern = np.resize(value, hi - lo)
        t.buffer.host_array()[lo:hi] = pattern  # type: ignore[union-attr]
        stamps[t.id] = pattern

    def check(t: Tensor, where: str) -> None:
        lo, hi = _span(t, padded)
        got = t.buffer.host_array()[lo:hi]  # type: ignore[union-attr]
        assert np.array_equal(got, stamps[t.id]), f"{t.name} was overwritten while live ({where})"

    owned = {t.id for t in owned_tensors(ga, graph)}
    n = 0
    for t in graph.leafs:
        if t.id in owned:
            stamp(t)
    for node in graph.nodes:
        for s in node.src:
            if s is None:
                continue
            base = s.view_src if s.view_src is not None else s
            if base.id in owned:
                check(base, f"read by {node.name}")
                n += 1
        if node.view_src is None and node.id in owned:
            stamp(node)
    consumers = {s.id for t in graph.nodes for s in t.src if s is not None}
    for node in graph.nodes:
        if node.view_src is None and node.id in owned and (node.flags & TensorFlag.OUTPUT or node.id not in consumers):
            check(node, "at the end")
            n += 1
    return n


def naive_size(ga: GraphAllocator, graph: gc.Graph) -> int:
    buft = ga.bufts[0]
    return sum(pad(buft.alloc_size(t), buft.alignment) for t in owned_tensors(ga, graph))


# ------------------------------------------------------------------------------------------------ planning


def test_llama_plan_is_well_below_the_naive_sum_and_live_tensors_never_overlap(cpu: gc.Backend) -> None:
    lg, _ = llama(cpu, n_layers=3)
    ga = GraphAllocator(cpu.default_buffer_type)
    ga.reserve(lg.graph)
    assert ga.alloc_graph(lg.graph)
    planned, naive = ga.get_buffer_size(0), naive_size(ga, lg.graph)
    assert planned == ga.planned_sizes()["CPU"] == ga.buffer_sizes()["CPU"]
    assert 0 < planned < 0.35 * naive, f"planned {planned} bytes vs naive {naive}"
    assert check_liveness_by_stamps(ga, lg.graph) > 50


def test_inputs_survive_until_their_last_use_and_outputs_until_the_end(cpu: gc.Backend) -> None:
    ctx = gc.Context()
    x = ctx.new_tensor("f32", [256], "x").set_input()
    late = ctx.new_tensor("f32", [256], "late").set_input()  # read only by the very last node
    cur = ops.sqr(x)
    keep = ops.scale(cur, 3.0).set_name("keep").set_output()  # an early output nothing else reads
    cur = ops.add(cur, keep)
    for i in range(8):
        cur = ops.scale(ops.mul(cur, cur), 0.5).set_name(f"c{i}")  # mul reads cur twice: fresh memory each time
    out = ops.add(cur, late).set_name("out")
    g = gc.build_graph(out)
    ga = GraphAllocator(cpu.default_buffer_type)
    assert ga.alloc_graph(g)
    assert check_liveness_by_stamps(ga, g) >= 20
    # the chain reuses memory (in place and freed blocks), but never the input's or the output's
    spans = {t.name: _span(t) for t in owned_tensors(ga, g)}
    for name in ("late", "keep"):
        lo, hi = spans[name]
        assert not any(o_lo < hi and lo < o_hi for n, (o_lo, o_hi) in spans.items() if n != name), name
    assert ga.get_buffer_size(0) < 0.5 * naive_size(ga, g)


def test_in_place_reuse_happens_for_single_consumer_same_layout(cpu: gc.Backend) -> None:
    lg, _ = llama(cpu, n_layers=1)
    ga = GraphAllocator(cpu.default_buffer_type)
    assert ga.alloc_graph(lg.graph)
    g = lg.graph
    by_name = {t.name: t for t in g.nodes}
    # kq has a single consumer (SOFT_MAX, same layout): the soft max is computed in place
    assert by_name["kq_soft_max-0"].data_offset == by_name["kq-0"].data_offset
    # attn_norm's only consumer multiplies by the norm weight in place
    assert by_name["attn_normed-0"].data_offset == by_name["attn_norm-0"].data_offset
    # the input has two consumers (norm and residual): never reused in place
    assert by_name["attn_norm-0"].data_offset != lg.x.data_offset
    inplace = [
        t
        for t in g.nodes
        if t.op in INPLACE_OPS and any(s is not None and s.data_offset == t.data_offset for s in t.src)
    ]
    assert len(inplace) == ga.n_inplace >= 5


def test_results_equal_a_run_where_every_tensor_has_its_own_memory(cpu: gc.Backend) -> None:
    lg, vals = llama(cpu, n_layers=2, seed=3)
    ga = GraphAllocator(cpu.default_buffer_type)
    assert ga.alloc_graph(lg.graph)
    L.set_inputs(lg, vals)
    cpu.graph_compute(lg.graph)
    planned = lg.out.to_numpy()

    lg2, _ = llama(cpu, n_layers=2, seed=3)
    alloc_ctx_tensors([t for t in (*lg2.graph.leafs, *lg2.graph.nodes) if t.buffer is None], cpu)
    L.set_inputs(lg2, vals)
    cpu.graph_compute(lg2.graph)
    assert np.array_equal(planned, lg2.out.to_numpy())
    np.testing.assert_allclose(planned[0, 0], L.reference(lg, vals), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------------ reuse


def test_repeated_alloc_graph_does_not_plan_again(cpu: gc.Backend) -> None:
    lg, vals = llama(cpu, n_layers=2)
    ga = GraphAllocator(cpu.default_buffer_type)
    ga.reserve(lg.graph)
    assert ga.n_plans == 1 and ga.n_buffer_allocs == 1
    for _ in range(3):
        assert ga.alloc_graph(lg.graph)
        L.set_inputs(lg, vals)
        cpu.graph_compute(lg.graph)
    assert ga.n_plans == 1 and ga.n_buffer_allocs == 1
    np.testing.assert_allclose(lg.out.to_numpy()[0, 0], L.reference(lg, vals), rtol=1e-4, atol=1e-4)
    # a new graph object of the same shape reuses the plan (ggml's rule), bound to its own tensors
    lg2, vals2 = llama(cpu, n_layers=2, seed=1)
    assert ga.alloc_graph(lg2.graph)
    assert ga.n_plans == 1
    L.set_inputs(lg2, vals2)
    cpu.graph_compute(lg2.graph)
    np.testing.assert_allclose(lg2.out.to_numpy()[0, 0], L.reference(lg2, vals2), rtol=1e-4, atol=1e-4)
    # and the first graph again: its bindings are restored without planning
    assert ga.alloc_graph(lg.graph)
    assert ga.n_plans == 1
    assert check_liveness_by_stamps(ga, lg.graph) > 0


def test_worst_case_reservation_serves_smaller_batches(cpu: gc.Backend) -> None:
    big, _ = llama(cpu, n_layers=1, n_tokens=16)
    ga = GraphAllocator(cpu.default_buffer_type)
    ga.reserve(big.graph)
    size = ga.get_buffer_size(0)
    small, vals = llama(cpu, n_layers=1, n_tokens=4, seed=5)
    assert ga.alloc_graph(small.graph)
    assert ga.n_plans == 1 and ga.get_buffer_size(0) == size
    L.set_inputs(small, vals)
    cpu.graph_compute(small.graph)
    np.testing.assert_allclose(small.out.to_numpy()[0, 0], L.reference(small, vals), rtol=1e-4, atol=1e-4)
    assert check_liveness_by_stamps(ga, small.graph) > 0


def test_a_larger_graph_re_reserves_one_buffer_and_is_reported_with_several(cpu: gc.Backend) -> None:
    small, _ = llama(cpu, n_layers=1, n_tokens=4)
    big, vals = llama(cpu, n_layers=1, n_tokens=16)
    ga = GraphAllocator(cpu.default_buffer_type)
    ga.reserve(small.graph)
    before = ga.get_buffer_size(0)
    assert ga.alloc_graph(big.graph)  # one buffer type: plans again by itself
    assert ga.n_plans == 2 and ga.get_buffer_size(0) > before
    L.set_inputs(big, vals)
    cpu.graph_compute(big.graph)
    np.testing.assert_allclose(big.out.to_numpy()[0, 0], L.reference(big, vals), rtol=1e-4, atol=1e-4)

    a, b = HostBufferType(), HostBufferType(alignment=128)
    ga2 = GraphAllocator([a, b])
    ids = [i % 2 for i in range(len(small.graph.nodes))]
    ga2.reserve(small.graph, ids, [0] * len(small.graph.leafs))
    assert ga2.alloc_graph(small.graph)
    assert not ga2.alloc_graph(big.graph)  # several buffer types: the caller must reserve (as ggml)
    assert ga2.n_plans == 1


def test_a_different_structure_of_equal_size_is_not_trusted_to_the_old_plan(cpu: gc.Backend) -> None:
    # g2: sqr → add (reads the sqr and z) → mul (reads the add and the sqr); g3: same counts and sizes, other wiring
    ctx = gc.Context()
    y = ctx.new_tensor("f32", [64], "y").set_input()
    m0 = ops.sqr(y)
    m1 = ops.add(y, y)
    g3 = gc.build_graph(ops.mul(m1, m0))  # m0 stays live across m1
    ctx2 = gc.Context()
    z = ctx2.new_tensor("f32", [64], "z").set_input()
    k0 = ops.sqr(z)
    g2 = gc.build_graph(ops.mul(ops.add(k0, z), k0))
    assert (len(g2.nodes), len(g2.leafs)) == (len(g3.nodes), len(g3.leafs)) == (3, 1)
    ga = GraphAllocator(cpu.default_buffer_type)
    ga.reserve(g2)
    assert ga.alloc_graph(g3)
    assert ga.n_plans == 2  # ggml would reuse g2's plan (same counts and sizes) and clobber m0
    assert check_liveness_by_stamps(ga, g3) > 0
    y.set_data(np.linspace(-1, 1, 64, dtype=np.float32))
    cpu.graph_compute(g3)
    v = np.linspace(-1, 1, 64, dtype=np.float32)
    np.testing.assert_allclose(g3.nodes[-1].to_numpy().ravel(), (v + v) * v * v, rtol=1e-6)


# ------------------------------------------------------------------------------------------------ buffer types


def test_alignment_and_alloc_size_padding_are_respected(cpu: gc.Backend) -> None:
    lg, vals = llama(cpu, n_layers=1)
    buft = HostBufferType(alignment=256, padding=100)
    ga = GraphAllocator(buft)
    assert ga.alloc_graph(lg.graph)
    owned = owned_tensors(ga, lg.graph)
    assert owned and all(t.data_offset % 256 == 0 for t in owned)  # type: ignore[operator]
    assert check_liveness_by_stamps(ga, lg.graph, padded=True) > 0
    L.set_inputs(lg, vals)
    cpu.graph_compute(lg.graph)
    np.testing.assert_allclose(lg.out.to_numpy()[0, 0], L.reference(lg, vals), rtol=1e-4, atol=1e-4)


def test_chunks_split_memory_above_the_maximum_buffer_size(cpu: gc.Backend) -> None:
    lg, vals = llama(cpu, n_layers=2)
    buft = HostBufferType(max_size=8192)
    ga = GraphAllocator(buft)
    assert ga.alloc_graph(lg.graph)
    chunks = ga.buffers(0)
    assert len(chunks) > 1 and all(b.size <= 8192 for b in chunks)
    assert check_liveness_by_stamps(ga, lg.graph) > 0
    L.set_inputs(lg, vals)
    cpu.graph_compute(lg.graph)
    np.testing.assert_allclose(lg.out.to_numpy()[0, 0], L.reference(lg, vals), rtol=1e-4, atol=1e-4)


def test_a_tensor_larger_than_the_maximum_is_named(cpu: gc.Backend) -> None:
    ctx = gc.Context()
    x = ctx.new_tensor("f32", [4096], "x").set_input()
    g = gc.build_graph(ops.scale(x, 2.0).set_name("big_scale"))
    ga = GraphAllocator(HostBufferType(max_size=1024))
    with pytest.raises(AllocationError, match=r"maximum of 1024 bytes.*'x'|'x'.*maximum of 1024"):
        ga.reserve(g)


def test_a_failed_device_allocation_names_device_size_and_peak_node() -> None:
    ctx = gc.Context()
    x = ctx.new_tensor("f32", [256], "x").set_input()
    g = gc.build_graph(ops.mul_mat(ctx.new_tensor("f32", [256, 64], "w").set_input(), x).set_name("proj"))
    ga = GraphAllocator(HostBufferType(fail=True))
    with pytest.raises(AllocationError) as err:
        ga.reserve(g)
    msg = str(err.value)
    assert "cannot allocate" in msg and "Host64p0" in msg and "MemoryError" in msg
    assert "'proj'" in msg and "MUL_MAT" in msg


def test_reserve_size_is_a_dry_run(cpu: gc.Backend) -> None:
    lg, _ = llama(cpu, n_layers=1)
    ga = GraphAllocator(cpu.default_buffer_type)
    sizes = ga.reserve_size(lg.graph)
    assert sizes[0] > 0 and ga.n_buffer_allocs == 0 and ga.get_buffer_size(0) == 0
    ga.reserve(lg.graph)
    assert ga.get_buffer_size(0) == sizes[0]


def test_repeated_buffer_types_share_one_buffer() -> None:
    buft = HostBufferType()
    ctx = gc.Context()
    x = ctx.new_tensor("f32", [32]).set_input()
    g = gc.build_graph(ops.sqr(ops.add(x, x)))
    ga = GraphAllocator([buft, buft])
    ga.reserve(g, [0, 1], [1])
    assert ga.get_buffer_size(0) > 0 and ga.get_buffer_size(1) == 0  # counted once, as ggml
    assert len(buft.allocs) == 1


# ------------------------------------------------------------------------------------------------ dynamic allocator


def test_dyn_allocator_best_fit_merging_and_alignment() -> None:
    d = DynAllocator(alignment=32, max_chunk_size=2**62)
    a = d.alloc(100)  # padded to 128
    b = d.alloc(64)
    c = d.alloc(256)
    assert a == (0, 0) and b == (0, 128) and c == (0, 192)
    d.free(0, 0, 100)
    d.free(0, 192, 256)
    # free blocks: [0,128) and the tail from 192; 100 bytes fit best in the 128-byte hole
    assert d.alloc(100) == (0, 0)
    d.free(0, 0, 100)
    d.free(0, 128, 64)  # merges with [0,128) and with the tail
    assert d.chunks[0].free == [[0, 2**62]]
    assert d.chunks[0].max_size == 448


def test_dyn_allocator_opens_new_chunks_at_the_maximum() -> None:
    d = DynAllocator(alignment=16, max_chunk_size=1000)
    first = d.alloc(800)
    second = d.alloc(800)
    assert first == (0, 0) and second == (1, 0)
    big = d.alloc(5000)  # larger than a chunk: a chunk of its own size
    assert big == (2, 0) and d.chunks[2].max_size == 5008  # padded to the alignment


def test_views_are_bound_to_their_sources_and_follow_rebinding(cpu: gc.Backend) -> None:
    ctx = gc.Context()
    x = ctx.new_tensor("f32", [8, 4], "x").set_input()
    r = ops.reshape_2d(ops.sqr(x), 4, 8)
    g = gc.build_graph(ops.cont(ops.transpose(r)))
    ga = GraphAllocator(cpu.default_buffer_type)
    assert ga.alloc_graph(g)
    views = [t for t in g.nodes if t.op in (GGMLOp.RESHAPE, GGMLOp.TRANSPOSE)]
    assert views and all(v.buffer is v.view_src.buffer for v in views)  # type: ignore[union-attr]
    assert all(v.data_offset == v.view_src.data_offset + v.view_offs for v in views)  # type: ignore[union-attr,operator]
    big = gc.build_graph(ops.sqr(ctx.new_tensor("f32", [4096]).set_input()))
    assert ga.alloc_graph(big)  # grows the buffer: the first graph's tensors point at freed memory now
    assert ga.alloc_graph(g)  # and are bound again, views included
    assert all(v.buffer is v.view_src.buffer and not v.buffer.freed for v in views)  # type: ignore[union-attr]
    x.set_data(np.arange(32, dtype=np.float32).reshape(4, 8))
    cpu.graph_compute(g)
    np.testing.assert_array_equal(g.nodes[-1].to_numpy()[0, 0], (np.arange(32.0) ** 2).reshape(8, 4).T)
