"""The meta device (tensor parallelism): weights split over devices, per-device graphs, all-reduces.

A LLaMA-shaped graph (``tests/sched_plugin/llama_graph.py``) split column-/row-parallel over CPU + OpenCL0 must give
the single-device result and the float64 numpy reference; an MLP block over two test devices (always available)
checks the generic all-reduce and a plugin's ``ggml_build_all_reduce``; shards hold exactly the numpy slices.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from opencl_device import opencl_backend
from sched_plugin import SubsetDevice, SubsetPlugin
from sched_plugin import llama_graph as L

import ggml_core as gc
from ggml_core import Context, Device, Graph, Tensor, hookimpl, ops
from ggml_core.alloc import alloc_ctx_tensors
from ggml_core.backend import get_registry, reset_registry
from ggml_core.sched import (
    MetaDevice,
    Scheduler,
    SplitError,
    SplitKind,
    SplitState,
    TensorParallelGraph,
    llama_split_states,
    shard_sizes,
)
from ggml_core.sched._meta import overlap_order


@pytest.fixture(scope="module")
def cpu() -> gc.Backend:
    return gc.init_backend("cpu")


@pytest.fixture(scope="module")
def opencl() -> gc.Backend:
    return opencl_backend()


def _single_device(cpu: gc.Backend, vals: dict[str, np.ndarray], **shape: Any) -> np.ndarray:
    lg = L.build_llama(**shape)
    L.alloc_weights(lg, cpu)
    L.alloc_caches(lg, cpu)
    L.set_weights(lg, vals)
    sched = Scheduler([cpu])
    return L.compute(sched, lg, vals)


def _tensor_parallel(
    backends: Sequence[gc.Backend], proportions: Sequence[float], vals: dict[str, np.ndarray], **shape: Any
) -> tuple[np.ndarray, TensorParallelGraph, L.LlamaGraph]:
    lg = L.build_llama(**shape)
    hd = lg.n_embd // lg.n_head
    states = llama_split_states(proportions, n_head=lg.n_head, n_head_kv=lg.n_head, head_dim=hd, n_ff=lg.n_ff)
    tp = MetaDevice(backends).split_graph(lg.graph, states)
    tp.alloc_weights()
    for t in lg.weight_tensors():
        tp.set_weight(t, vals[t.name])
    tp.alloc()
    L.set_inputs(lg, vals)
    assert tp.compute()
    return tp.tensor(lg.out).to_numpy()[0, 0], tp, lg


@pytest.mark.parametrize(
    ("proportions", "n_head", "heads"),
    [((1, 1), 4, (2, 2)), ((3, 1), 4, (3, 1)), ((1, 1), 5, (3, 2))],
    ids=["even", "uneven-tensor-split", "heads-not-divisible"],
)
def test_llama_over_cpu_and_opencl_matches_one_device(
    cpu: gc.Backend, opencl: gc.Backend, proportions: tuple[int, int], n_head: int, heads: tuple[int, int]
) -> None:
    shape: dict[str, Any] = {"n_layers": 2, "n_embd": 16 * n_head, "n_head": n_head, "n_ff": 96, "n_tokens": 6}
    vals = L.random_values(L.build_llama(**shape), seed=3)
    want = _single_device(cpu, vals, **shape)
    got, tp, lg = _tensor_parallel([cpu, opencl], proportions, vals, **shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, L.reference(lg, vals), rtol=1e-3, atol=1e-3)
    assert tp.n_all_reduces == 2 * shape["n_layers"]  # after attn_output and after ffn_down
    wq = lg.weights[0]["wq"]
    assert tp.state(wq) == SplitState.split(1, tuple(16 * h for h in heads))
    assert tp.state(lg.weights[0]["wo"]).axis == 0 and tp.state(lg.weights[0]["attn_norm"]).kind is SplitKind.MIRRORED
    text = tp.describe()
    assert f"blk.0.attn_q: split(axis 1: {16 * heads[0]}+{16 * heads[1]})" in text
    assert f"{2 * shape['n_layers']} all-reduces per compute" in text
    for d, be in enumerate((cpu, opencl)):
        shard_bytes = sum(tp.shard(t, d).nbytes for t in lg.weight_tensors() if tp.state(t).kind is SplitKind.SPLIT)
        assert f"  {be.name}: {shard_bytes} bytes of shards" in text
    for d, be in enumerate((cpu, opencl)):  # each device computes its own heads
        assert tp.scheduler.get_tensor_backend(tp.shard(wq, d)) is be
        q_rope = next(n for n in lg.graph.nodes if n.name == "q_rope-1")
        assert tp.scheduler.get_tensor_backend(tp.shard(q_rope, d)) is be
        assert tp.shard(q_rope, d).ne[1] == heads[d]


@pytest.mark.parametrize("proportions", [(1, 1), (1, 3)], ids=["even", "uneven"])
def test_llama_with_kv_cache_split_by_heads(cpu: gc.Backend, opencl: gc.Backend, proportions: tuple[int, int]) -> None:
    shape: dict[str, Any] = {"n_layers": 2, "n_embd": 64, "n_head": 4, "n_ff": 96, "n_tokens": 6, "kv_cache": True}
    vals = L.random_values(L.build_llama(**shape), seed=7)
    got, tp, lg = _tensor_parallel([cpu, opencl], proportions, vals, **shape)
    np.testing.assert_allclose(got, _single_device(cpu, vals, **shape), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, L.reference(lg, vals), rtol=1e-3, atol=1e-3)
    assert [c.name for c in tp.caches] == ["cache_k_l0", "cache_v_l0", "cache_k_l1", "cache_v_l1"]
    heads = shard_sizes(4, proportions)
    cells = vals["kv_idx"]
    for c in tp.caches:  # each device's cache holds its heads' K (or V) rows at the cells written
        whole = np.concatenate([tp.shard(c, d).to_numpy()[0, 0] for d in range(2)], axis=1)
        assert [tp.shard(c, d).ne[0] for d in range(2)] == [16 * h for h in heads]
        assert np.count_nonzero(whole[cells]) == whole.size


@pytest.fixture()
def rpc_backend() -> Iterator[gc.Backend]:
    """A device of an RPC server on 127.0.0.1 (ggml-rpc's own server, serving the CPU)."""
    rpc = pytest.importorskip("ggml_rpc", reason="CPU + RPC needs the ggml-rpc plugin")
    from ggml_rpc.server import RPCServer

    srv = RPCServer([gc.get_device("CPU")], "127.0.0.1", 0).start()
    try:
        yield rpc.RPCReg(srv.address).devices[0].init_backend()
    finally:
        rpc.disconnect_all()
        srv.shutdown()


@pytest.mark.parametrize("proportions", [(1, 1), (2, 1)], ids=["even", "uneven"])
def test_llama_over_cpu_and_rpc_matches_one_device(
    cpu: gc.Backend, rpc_backend: gc.Backend, proportions: tuple[int, int]
) -> None:
    shape: dict[str, Any] = {"n_layers": 2, "n_embd": 48, "n_head": 3, "n_ff": 64, "n_tokens": 5, "kv_cache": True}
    vals = L.random_values(L.build_llama(**shape), seed=13)
    got, tp, lg = _tensor_parallel([cpu, rpc_backend], proportions, vals, **shape)
    np.testing.assert_allclose(got, _single_device(cpu, vals, **shape), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, L.reference(lg, vals), rtol=1e-3, atol=1e-3)
    assert tp.n_all_reduces == 4
    buf = tp.shard(lg.weights[1]["wq"], 1).buffer
    assert buf is not None and buf.buffer_type.device is rpc_backend.device


def _gqa_attention(n_head: int, n_head_kv: int, hd: int, t: int) -> tuple[Graph, Tensor, dict[str, Tensor]]:
    """One attention block with grouped KV heads (query head h reads KV head h // group), no rope."""
    ctx = Context("gqa")
    e, ekv = n_head * hd, n_head_kv * hd
    x = ctx.new_tensor("f32", [e, t], "x").set_input()
    mask = ctx.new_tensor("f32", [t, t], "kq_mask").set_input()
    w = {
        "wq": ctx.new_tensor("f32", [e, e], "blk.0.attn_q"),
        "wk": ctx.new_tensor("f32", [e, ekv], "blk.0.attn_k"),
        "wv": ctx.new_tensor("f32", [e, ekv], "blk.0.attn_v"),
        "wo": ctx.new_tensor("f32", [e, e], "blk.0.attn_output"),
    }
    q = ops.permute(ops.reshape_3d(ops.mul_mat(w["wq"], x), hd, n_head, t), 0, 2, 1, 3)
    k = ops.permute(ops.reshape_3d(ops.mul_mat(w["wk"], x), hd, n_head_kv, t), 0, 2, 1, 3)
    v = ops.reshape_3d(ops.mul_mat(w["wv"], x), hd, n_head_kv, t)
    kq = ops.soft_max_ext(ops.mul_mat(k, q), mask, 1.0 / float(np.sqrt(hd)), 0.0)
    kqv = ops.mul_mat(ops.cont(ops.permute(v, 1, 2, 0, 3)), kq)
    out = ops.mul_mat(w["wo"], ops.cont_2d(ops.permute(kqv, 0, 2, 1, 3), e, t)).set_name("attn_out").set_output()
    g = Graph()
    g.build_forward_expand(out)
    return g, out, w | {"x": x, "kq_mask": mask}


def test_grouped_kv_heads_stay_with_their_query_heads(cpu: gc.Backend, opencl: gc.Backend) -> None:
    n_head, n_head_kv, hd, t = 6, 3, 8, 5
    g, out, w = _gqa_attention(n_head, n_head_kv, hd, t)
    rng = np.random.default_rng(2)
    e = n_head * hd
    v = {k: (rng.standard_normal((w[k].ne[1], e)) / np.sqrt(e)).astype(np.float32) for k in ("wq", "wk", "wv", "wo")}
    x = rng.standard_normal((t, e)).astype(np.float32)
    mask = np.triu(np.full((t, t), -np.inf, np.float32), 1)
    states = llama_split_states((1, 1), n_head=n_head, n_head_kv=n_head_kv, head_dim=hd, n_ff=32)
    tp = MetaDevice([cpu, opencl]).split_graph(g, states)
    assert tp.state(w["wk"]).sizes == (16, 8) and tp.state(w["wq"]).sizes == (32, 16)  # 2+1 KV heads, 4+2 heads
    tp.alloc_weights()
    for k in v:
        tp.set_weight(w[k], v[k])
    tp.alloc()
    w["x"].set_data(x)
    w["kq_mask"].set_data(mask)
    assert tp.compute()
    # numpy, from the definition
    x64 = x.astype(np.float64)
    q, k, vv = (x64 @ v[n].T.astype(np.float64) for n in ("wq", "wk", "wv"))
    heads = []
    for h in range(n_head):
        kv = h // (n_head // n_head_kv)
        s = q[:, h * hd : (h + 1) * hd] @ k[:, kv * hd : (kv + 1) * hd].T / np.sqrt(hd) + mask
        p = np.exp(s - s.max(axis=1, keepdims=True))
        heads.append((p / p.sum(axis=1, keepdims=True)) @ vv[:, kv * hd : (kv + 1) * hd])
    want = np.concatenate(heads, axis=1) @ v["wo"].T.astype(np.float64)
    np.testing.assert_allclose(tp.tensor(out).to_numpy()[0, 0], want, rtol=1e-4, atol=1e-4)


def test_shards_hold_the_numpy_slices(cpu: gc.Backend, opencl: gc.Backend) -> None:
    shape: dict[str, Any] = {"n_layers": 1, "n_embd": 64, "n_head": 4, "n_ff": 96, "n_tokens": 4}
    lg = L.build_llama(**shape)
    vals = L.random_values(lg, seed=5)
    states = llama_split_states((1, 2), n_head=4, n_head_kv=4, head_dim=16, n_ff=96)
    tp = MetaDevice([cpu, opencl]).split_graph(lg.graph, states)
    tp.alloc_weights()
    for t in lg.weight_tensors():
        tp.set_weight(t, vals[t.name])
    for key, axis in (("wq", 1), ("w_up", 1), ("wo", 0), ("w_down", 0)):
        t = lg.weights[0][key]
        full = vals[t.name]  # numpy shape (ne1, ne0)
        st = tp.state(t)
        for d, (start, size) in enumerate(zip(st.starts(), st.sizes, strict=True)):
            want = full[start : start + size] if axis == 1 else full[:, start : start + size]
            np.testing.assert_array_equal(tp.shard(t, d).to_numpy()[0, 0], want)


def test_more_devices_than_heads_is_a_clear_error() -> None:
    with pytest.raises(SplitError, match="cannot split 2 KV heads over 3 devices"):
        llama_split_states((1, 1, 1), n_head=4, n_head_kv=2, head_dim=16, n_ff=96)


def test_shard_sizes_follow_proportions() -> None:
    assert shard_sizes(8, (1, 1)) == (4, 4)
    assert shard_sizes(8, (3, 1)) == (6, 2)
    assert shard_sizes(5, (1, 1)) == (3, 2)
    assert shard_sizes(4, (100, 1)) == (3, 1)  # every device keeps one unit
    assert sum(shard_sizes(97, (0.3, 0.5, 0.2))) == 97
    for bad in ((), (1, float("nan")), (0, 0), (-1, 2)):
        with pytest.raises(SplitError, match="proportions must be finite, non-negative, with a positive sum"):
            shard_sizes(8, bad)


# ---------------------------------------------------------------------------------------------- MLP on test devices

E, FF, T = 32, 96, 5


def _mlp(wtype: str = "f32") -> tuple[Graph, Tensor, dict[str, Tensor]]:
    """x + W_down · (up ⊙ up) with up = W_up · (rms_norm(x) ⊙ g): only ops the test devices compute."""
    ctx = Context("mlp")
    x = ctx.new_tensor("f32", [E, T], "x").set_input()
    w = {
        "norm": ctx.new_tensor("f32", [E], "blk.0.ffn_norm"),
        "up": ctx.new_tensor(wtype, [E, FF], "blk.0.ffn_up"),
        "down": ctx.new_tensor(wtype, [FF, E], "blk.0.ffn_down"),
    }
    h = ops.mul(ops.rms_norm(x, 1e-5), w["norm"])
    up = ops.mul_mat(w["up"], h).set_name("up")
    out = ops.add(ops.mul_mat(w["down"], ops.mul(up, up)), x).set_name("out").set_output()
    g = Graph()
    g.build_forward_expand(out)
    return g, out, w | {"x": x}


def _mlp_reference(v: dict[str, np.ndarray]) -> np.ndarray:
    x = v["x"].astype(np.float64)
    h = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * v["norm"]
    up = h @ v["up"].T.astype(np.float64)
    return x + (up * up) @ v["down"].T.astype(np.float64)


def _mlp_values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {
        "x": rng.standard_normal((T, E)).astype(np.float32),
        "norm": (1 + 0.1 * rng.standard_normal(E)).astype(np.float32),
        "up": (rng.standard_normal((FF, E)) / np.sqrt(E)).astype(np.float32),
        "down": (rng.standard_normal((E, FF)) / np.sqrt(FF)).astype(np.float32),
    }


def _run_mlp(backends: Sequence[gc.Backend], proportions: Sequence[float]) -> tuple[np.ndarray, TensorParallelGraph]:
    g, out, w = _mlp()
    v = _mlp_values()
    ff = shard_sizes(FF, proportions)

    def state_of(t: Tensor) -> SplitState | None:
        return {"blk.0.ffn_up": SplitState.split(1, ff), "blk.0.ffn_down": SplitState.split(0, ff)}.get(t.name)

    tp = MetaDevice(backends).split_graph(g, state_of)
    tp.alloc_weights()
    for key in ("norm", "up", "down"):
        tp.set_weight(w[key], v[key])
    tp.alloc()
    w["x"].set_data(v["x"])
    assert tp.compute()
    got = tp.tensor(out).to_numpy()[0, 0]
    np.testing.assert_allclose(got, _mlp_reference(v), rtol=1e-4, atol=1e-4)
    return got, tp


@pytest.mark.parametrize("proportions", [(1, 1), (1, 2)], ids=["even", "uneven"])
def test_q8_0_weights_split_at_block_boundaries(
    cpu: gc.Backend, opencl: gc.Backend, proportions: tuple[int, int]
) -> None:
    v = _mlp_values()
    g1, out1, w1 = _mlp("q8_0")  # one device: the reference for the same quantized weights
    alloc_ctx_tensors([w1[k] for k in ("norm", "up", "down")], cpu).set_usage(gc.BufferUsage.WEIGHTS)
    for key in ("norm", "up", "down"):
        w1[key].set_data(v[key])
    sched = Scheduler([cpu])
    sched.alloc_graph(g1)
    w1["x"].set_data(v["x"])
    sched.graph_compute(g1)
    want = out1.to_numpy()[0, 0]

    g, out, w = _mlp("q8_0")
    ff = tuple(32 * u for u in shard_sizes(FF // 32, proportions, "blocks"))
    states = {w["up"].id: SplitState.split(1, ff), w["down"].id: SplitState.split(0, ff)}
    tp = MetaDevice([cpu, opencl]).split_graph(g, lambda t: states.get(t.id))
    assert tp.n_all_reduces == 1
    tp.alloc_weights()
    for key in ("norm", "up", "down"):
        tp.set_weight(w[key], v[key])
    raw = {key: w1[key].get_bytes() for key in ("up", "down")}
    row = w1["down"].nb[1]  # ffn_down's rows split at 34-byte q8_0 blocks: shard d holds bytes [a, b) of each row
    lo = ff[0] // 32 * 34
    assert tp.shard(w["down"], 0).get_bytes() == b"".join(raw["down"][r * row : r * row + lo] for r in range(E))
    assert tp.shard(w["up"], 1).get_bytes() == raw["up"][ff[0] * w1["up"].nb[1] :]
    tp.alloc()
    w["x"].set_data(v["x"])
    assert tp.compute()
    np.testing.assert_allclose(tp.tensor(out).to_numpy()[0, 0], want, rtol=1e-3, atol=1e-3)
    with pytest.raises(SplitError, match="block boundaries"):
        MetaDevice([cpu, opencl]).split_graph(
            _mlp("q8_0")[0], lambda t: SplitState.split(0, (48, 48)) if t.name == "blk.0.ffn_down" else None
        )


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async-events"])
def test_mlp_generic_all_reduce_sums_on_the_first_device(asynchronous: bool) -> None:
    devs = [SubsetDevice("Sub0", asynchronous=asynchronous), SubsetDevice("Sub1", asynchronous=asynchronous)]
    backends = [d.init_backend() for d in devs]
    _, tp = _run_mlp(backends, (2, 1))
    if asynchronous:  # the partial crossed devices on the asynchronous path
        assert devs[0].stats["async_copies"] + devs[0].stats["d2d_copies"] >= 1
    assert tp.n_all_reduces == 1
    reduce_adds = [n for n in tp.graph.nodes if "allreduce" in n.name]
    assert len(reduce_adds) == 1 and tp.scheduler.get_tensor_backend(reduce_adds[0]) is backends[0]
    assert devs[0].computed.count("up") == devs[1].computed.count("up") == 1  # each device ran its rows


class _ReducingPlugin(SubsetPlugin):
    """Test devices whose plugin sums partials itself: on the last device, last partial first."""

    calls = 0

    @hookimpl
    def ggml_build_all_reduce(
        self, partials: Sequence[Tensor], devices: Sequence[Device], place: Callable[[Tensor, Device], None]
    ) -> Tensor | None:
        _ReducingPlugin.calls += 1
        acc = partials[-1]
        for p in reversed(partials[:-1]):
            acc = ops.add(acc, p).set_name(f"{p.name}-plugin-sum")
            place(acc, devices[-1])
        return acc


@pytest.fixture()
def reducing_devices() -> Iterator[list[SubsetDevice]]:
    reset_registry()
    devs = [SubsetDevice("Red0"), SubsetDevice("Red1")]
    get_registry().register_plugin(_ReducingPlugin(devs, "devices with their own all-reduce"), "reducing")
    assert [d.name for d in get_registry().devices() if d.name.startswith("Red")] == ["Red0", "Red1"]
    yield devs
    reset_registry()


def test_a_plugins_all_reduce_hook_builds_the_reduction(reducing_devices: list[SubsetDevice]) -> None:
    _ReducingPlugin.calls = 0
    backends = [d.init_backend() for d in reducing_devices]
    _, tp = _run_mlp(backends, (1, 1))
    assert _ReducingPlugin.calls == 1
    sums = [n for n in tp.graph.nodes if n.name.endswith("-plugin-sum")]
    assert len(sums) == 1 and tp.scheduler.get_tensor_backend(sums[0]) is backends[1]
    assert not [n for n in tp.graph.nodes if "allreduce" in n.name]
    generic = MetaDevice(backends, use_plugin_all_reduce=False).split_graph(
        _mlp()[0],
        lambda t: (
            SplitState.split(1 if "up" in t.name else 0, (48, 48))
            if "ffn_" in t.name and "norm" not in t.name
            else None
        ),
    )
    assert [n for n in generic.graph.nodes if "allreduce" in n.name]


def test_an_op_without_a_rule_names_node_and_states() -> None:
    ctx = Context("bad")
    x = ctx.new_tensor("f32", [E, T], "x").set_input()
    w = ctx.new_tensor("f32", [E, FF], "blk.0.ffn_up")
    y = ops.rms_norm(ops.mul_mat(w, x).set_name("up"), 1e-5).set_name("norm_of_split")
    g = Graph()
    g.build_forward_expand(y)
    backends = [SubsetDevice("Sub0").init_backend(), SubsetDevice("Sub1").init_backend()]
    with pytest.raises(SplitError, match=r"norm_of_split.*RMS_NORM normalises whole rows"):
        MetaDevice(backends).split_graph(g, lambda t: SplitState.split(1, (48, 48)) if t is w else None)
    with pytest.raises(SplitError, match=r"returned 'rows', not a SplitState"):
        MetaDevice(backends).split_graph(g, lambda t: "rows" if t is w else None)  # type: ignore[arg-type,return-value]
    with pytest.raises(SplitError, match=r"does not cover its 96 indices"):
        MetaDevice(backends).split_graph(g, lambda t: SplitState.split(1, (48, 40)) if t is w else None)


@pytest.fixture()
def two_rpc() -> Iterator[list[gc.Backend]]:
    """Devices of two RPC servers on 127.0.0.1 (ggml-rpc's own server, serving the CPU)."""
    rpc = pytest.importorskip("ggml_rpc", reason="needs the ggml-rpc plugin")
    from ggml_rpc.server import RPCServer

    servers = [RPCServer([gc.get_device("CPU")], "127.0.0.1", 0).start() for _ in range(2)]
    try:
        yield [rpc.RPCReg(s.address).devices[0].init_backend() for s in servers]
    finally:
        rpc.disconnect_all()
        for s in servers:
            s.shutdown()


def test_parts_run_in_splits_apart_from_the_reduction(cpu: gc.Backend, two_rpc: list[gc.Backend]) -> None:
    """Devices compute side by side: between two all-reduces the second device's part is sent first, the first
    device's part runs in a split apart from the reduction that waits for the second's partial."""
    shape: dict[str, Any] = {"n_layers": 2, "n_embd": 64, "n_head": 4, "n_ff": 96, "n_tokens": 5, "kv_cache": True}
    vals = L.random_values(L.build_llama(**shape), seed=11)
    got, tp, _ = _tensor_parallel(two_rpc, (1, 1), vals, **shape)
    np.testing.assert_allclose(got, _single_device(cpu, vals, **shape), rtol=1e-4, atol=1e-4)
    plan = tp.scheduler.plan()
    split_of = {i: s for s in plan.splits for i in s.node_ids}
    reductions = [n for n in tp.graph.nodes if n.name.endswith("-allreduce1")]
    assert len(reductions) == tp.n_all_reduces == 4
    rpc0, rpc1 = (be.name for be in two_rpc)
    for r in reductions:
        p0, p1 = r.src[0], r.src[1]
        assert p0 is not None and p1 is not None
        s_r, s_0, s_1 = split_of[r.id], split_of[p0.id], split_of[p1.id]
        assert (s_r.backend, s_0.backend, s_1.backend) == (rpc0, rpc0, rpc1)
        # the first device computes its part without waiting for the second's: not in the reduction's split, and
        # sent after the second device's part
        assert s_0.index < s_r.index
        assert s_1.index < s_0.index
    # one split per device between two all-reduces, one more for the reduction (and the input embedding's)
    assert plan.n_splits <= 3 * (tp.n_all_reduces + 1) + 1


def test_order_is_topological_and_keeps_cache_writes_before_reads() -> None:
    ctx = Context("overlap")
    cache = ctx.new_tensor("f32", [4, 8], "cache")
    x = ctx.new_tensor("f32", [4, 2], "x").set_input()
    idx = ctx.new_tensor("i64", [2], "idx").set_input()
    a = ops.scale(x, 2.0).set_name("a")  # device 0
    w = ops.set_rows(cache, a, idx).set_name("write")  # device 0, writes the cache
    view = ops.view_2d(cache, 4, 8, cache.nb[1], 0).set_name("read-view")
    r = ops.scale(view, 3.0).set_name("read")  # device 0, reads the cache: must stay after the write
    b = ops.scale(x, 5.0).set_name("b")  # device 1, independent, last in the original order
    g = Graph()
    for t in (w, r, b):
        g.build_forward_expand(t)
    before = [n.name for n in g.nodes]
    overlap_order(g, [(a, 0), (w, 0), (r, 0), (b, 1)])
    after = [n.name for n in g.nodes]
    assert sorted(after) == sorted(before)
    pos = {name: i for i, name in enumerate(after)}
    assert pos["b"] == 0  # the other device's part goes first
    assert pos["a"] < pos["write"] < pos["read"]  # operands first; the cache read after its write
    assert pos["read-view"] < pos["read"]
