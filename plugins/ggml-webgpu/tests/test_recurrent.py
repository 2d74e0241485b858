"""The recurrent kernels' state handling: two scans chained in one graph (the second reading the state the first
wrote, through a view of its result) give the numpy reference of one scan over all the tokens, and a bad state
row in SSM_SCAN is reported by the dispatch that loads the states."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

import ggml_core as g
from ggml_core import GGMLType, ops
from ggml_core.testing.reference import recurrent as ref
from ggml_webgpu import WebGPUDevice

F32, I32 = GGMLType.F32, GGMLType.I32

#: one scan call: its token operands (numpy order), its state tensor, the op applied to (state, operands)
Call = Callable[[g.Tensor, list[g.Tensor]], g.Tensor]


def _chained(
    dev: WebGPUDevice, halves: Sequence[Sequence[np.ndarray]], types: Sequence[GGMLType], state: np.ndarray, call: Call
) -> np.ndarray:
    """``call`` over the first then the second operand set of ``halves`` in one graph, the second starting from
    the state the first left; the outputs of both (per call, flat) then the final state."""
    ctx = g.Context("chain")
    n_state = state.size
    st = ctx.new_tensor(F32, list(reversed(state.shape)), "state")
    leafs: list[tuple[g.Tensor, np.ndarray]] = [(st, state)]
    results = []
    for half in halves:
        ts = [
            ctx.new_tensor(t, list(reversed(a.shape)), f"x{i}")
            for i, (a, t) in enumerate(zip(half, types, strict=True))
        ]
        leafs += zip(ts, half, strict=True)
        out = call(st, ts)
        results.append(out)
        n_out = out.nelements - n_state
        st = ops.reshape_4d(ops.view_1d(out, n_state, 4 * n_out), *reversed(state.shape))
    graph = g.build_graph(results[-1])
    for r in results[:-1]:
        graph.build_forward_expand(r)
    buf = g.alloc_ctx_tensors(ctx, dev.buffer_type())
    be = dev.init_backend()
    try:
        for t, a in leafs:
            t.set_data(a)
        be.graph_compute(graph)
        flat = [r.to_numpy().reshape(-1) for r in results]
    finally:
        be.free()
        buf.free()
    return np.concatenate([*(f[: f.size - n_state] for f in flat), flat[-1][flat[-1].size - n_state :]])


def _per_seq(want: np.ndarray, n_state: int, n_s: int, cut: int, n_t: int) -> np.ndarray:
    """The whole-prompt reference rearranged as the chained calls write it: outputs of tokens [0, cut) of every
    sequence, then of [cut, n_t), then the state."""
    y = want[: want.size - n_state].reshape(n_s, n_t, -1)
    return np.concatenate([y[:, :cut].reshape(-1), y[:, cut:].reshape(-1), want[want.size - n_state :]])


def _unit(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.uniform(-1.0, 1.0, shape)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def test_gated_delta_net_chained(wdev: WebGPUDevice) -> None:
    rng = np.random.default_rng(1)
    n_s, n_t, heads, size, cut = 2, 7, 2, 16, 3
    q, k = _unit(rng, (n_s, n_t, heads, size)), _unit(rng, (n_s, n_t, heads, size))
    v = rng.uniform(-1, 1, (n_s, n_t, heads, size)).astype(np.float32)
    gate = rng.uniform(-2, 0, (n_s, n_t, heads, 1)).astype(np.float32)
    beta = rng.uniform(0, 1, (n_s, n_t, heads, 1)).astype(np.float32)
    state = rng.uniform(-1, 1, (n_s, heads, size, size)).astype(np.float32)
    want = _per_seq(ref.gated_delta_net(q, k, v, gate, beta, state), state.size, n_s, cut, n_t)
    halves = [[t[:, p] for t in (q, k, v, gate, beta)] for p in (slice(0, cut), slice(cut, n_t))]
    got = _chained(wdev, halves, [F32] * 5, state, lambda st, ts: ops.gated_delta_net(*ts, st))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_ssm_scan_chained_from_permuted_rows(wdev: WebGPUDevice) -> None:
    """The first scan reads state rows through permuted ids; the second the rows the first wrote, in order."""
    rng = np.random.default_rng(2)
    n_s, n_t, n_head, head_dim, d_state, n_group, cut = 3, 5, 4, 8, 16, 2, 2
    s = rng.uniform(-1, 1, (n_s, n_head, head_dim, d_state)).astype(np.float32)
    x = rng.uniform(-1, 1, (n_s, n_t, n_head, head_dim)).astype(np.float32)
    dt = rng.uniform(-3, 1, (1, n_s, n_t, n_head)).astype(np.float32)
    a = rng.uniform(-1, -0.5, (1, 1, n_head, 1)).astype(np.float32)
    b, c = (rng.uniform(-1, 1, (n_s, n_t, n_group, d_state)).astype(np.float32) for _ in range(2))
    ids = [np.array([2, 0, 1], np.int32), np.arange(n_s, dtype=np.int32)]
    want = _per_seq(ref.ssm_scan(s, x, dt, a, b, c, ids[0]), s.size, n_s, cut, n_t)
    parts = (slice(0, cut), slice(cut, n_t))
    halves = [[x[:, p], dt[:, :, p], a, b[:, p], c[:, p], rows] for p, rows in zip(parts, ids, strict=True)]
    got = _chained(wdev, halves, [F32] * 5 + [I32], s, lambda st, ts: ops.ssm_scan(st, *ts))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_rwkv_wkv7_chained(wdev: WebGPUDevice) -> None:
    rng = np.random.default_rng(3)
    n_s, per_seq, heads, size, cut = 2, 6, 2, 32, 4
    r, k, v = (rng.uniform(-1, 1, (1, n_s, per_seq, heads, size)).astype(np.float32) for _ in range(3))
    w = rng.uniform(0.5, 1.0, r.shape).astype(np.float32)
    a, b = _unit(rng, r.shape), _unit(rng, r.shape)
    state = rng.uniform(-1, 1, (1, 1, n_s, size * size * heads)).astype(np.float32)
    whole = ref.rwkv_wkv7(*(t.reshape(1, n_s * per_seq, heads, size) for t in (r, w, k, v, a, b)), state)
    want = _per_seq(whole, state.size, n_s, cut, per_seq)
    halves = [
        [t[:, :, p].reshape(1, -1, heads, size) for t in (r, w, k, v, a, b)] for p in (slice(0, cut), slice(cut, None))
    ]
    got = _chained(wdev, halves, [F32] * 6, state, lambda st, ts: ops.rwkv_wkv7(*ts, st))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_ssm_scan_bad_state_row_is_reported(wdev: WebGPUDevice) -> None:
    ctx = g.Context("bad")
    s = ctx.new_tensor(F32, [8, 4, 2, 2], "s")
    x = ctx.new_tensor(F32, [4, 2, 3, 2], "x")
    dt = ctx.new_tensor(F32, [2, 3, 2], "dt")
    a = ctx.new_tensor(F32, [1, 2], "A")
    bc = ctx.new_tensor(F32, [8, 1, 3, 2], "BC")
    ids = ctx.new_tensor(I32, [2], "ids")
    out = ops.ssm_scan(s, x, dt, a, bc, bc, ids)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, wdev.buffer_type())
    be = wdev.init_backend()
    try:
        for t in (s, x, dt, a, bc):
            t.set_data(np.full(t.nelements, -0.5, np.float32))
        ids.set_data(np.array([1, 2], np.int32))
        with pytest.raises(g.ComputeError, match="out of range"):
            be.graph_compute(graph)
        ids.set_data(np.array([1, 0], np.int32))
        be.graph_compute(graph)  # reported once, then cleared
        vals = [np.full(list(reversed(t.ne)), -0.5, np.float32) for t in (s, x, dt, a, bc)]
        want = ref.ssm_scan(*vals, vals[-1], np.array([1, 0]))
        np.testing.assert_allclose(out.to_numpy().reshape(-1), want, rtol=1e-4, atol=1e-5)
    finally:
        be.free()
        buf.free()


@pytest.mark.parametrize(("size", "supported"), [(256, True), (264, False)])
def test_state_rows_longer_than_the_private_row_are_left_to_the_cpu(
    wdev: WebGPUDevice, size: int, supported: bool
) -> None:
    """The scans hold one state row in private memory (256 values): longer rows are not claimed."""
    ctx = g.Context("rows")
    qkv = [ctx.new_tensor(F32, [size, 1, 2, 1], n) for n in "qkv"]
    gate, beta = ctx.new_tensor(F32, [1, 1, 2, 1], "g"), ctx.new_tensor(F32, [1, 1, 2, 1], "beta")
    gdn = ops.gated_delta_net(*qkv, gate, beta, ctx.new_tensor(F32, [size, size, 1, 1], "state"))
    s = ctx.new_tensor(F32, [size, 2, 1, 1], "s")
    x, dt = ctx.new_tensor(F32, [2, 1, 2, 1], "x"), ctx.new_tensor(F32, [1, 2, 1], "dt")
    bc = ctx.new_tensor(F32, [size, 1, 2, 1], "BC")
    scan = ops.ssm_scan(s, x, dt, ctx.new_tensor(F32, [1, 1], "A"), bc, bc, ctx.new_tensor(I32, [1], "ids"))
    assert wdev.supports_op(gdn) is supported
    assert wdev.supports_op(scan) is supported
