"""The recurrent kernels beyond the conformance cases: states carried from one call into the next give the result
of one call over all the tokens (numpy reference), and a bad state row in SSM_SCAN is reported, not read."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

import ggml_core as g
from ggml_core import GGMLType, ops
from ggml_core.testing.reference import recurrent as ref
from ggml_opencl import OpenCLDevice

F32, I32 = GGMLType.F32, GGMLType.I32


def _compute(
    dev: OpenCLDevice, op: Callable[..., g.Tensor], arrays: Sequence[np.ndarray], types: Sequence[GGMLType]
) -> np.ndarray:
    """``op`` over leafs holding ``arrays`` (numpy order) computed on ``dev``; the flat f32 result."""
    ctx = g.Context("recurrent")
    leafs = [
        ctx.new_tensor(t, list(reversed(a.shape)), f"x{i}") for i, (a, t) in enumerate(zip(arrays, types, strict=True))
    ]
    out = op(*leafs)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, dev.buffer_type())
    be = dev.init_backend()
    try:
        for leaf, a in zip(leafs, arrays, strict=True):
            leaf.set_data(a)
        be.graph_compute(graph)
        return out.to_numpy().reshape(-1)
    finally:
        be.free()
        buf.free()


def _unit(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.uniform(-1.0, 1.0, shape)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _check_carried(
    dev: OpenCLDevice,
    op: Callable[..., g.Tensor],
    calls: Sequence[Callable[[np.ndarray], list[np.ndarray]]],
    state: np.ndarray,
    types: Sequence[GGMLType],
    want: np.ndarray,
    seq_shape: tuple[int, ...],
) -> None:
    """Run ``op`` once per entry of ``calls`` (each makes its inputs from the state the previous call left) and
    compare the outputs, joined along the token axis of ``seq_shape`` (per sequence), and the final state with
    ``want`` (one call over all tokens)."""
    outs = []
    for inputs in calls:
        got = _compute(dev, op, inputs(state), types)
        n_out = got.size - state.size
        outs.append(got[:n_out].reshape(seq_shape[0], -1, *seq_shape[1:]))
        state = got[n_out:].reshape(state.shape)
    joined = np.concatenate(outs, axis=1).reshape(-1)
    np.testing.assert_allclose(joined, want[: joined.size], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state.reshape(-1), want[joined.size :], rtol=1e-4, atol=1e-5)


def test_gated_delta_net_state_carried_across_calls(ocl: OpenCLDevice) -> None:
    rng = np.random.default_rng(1)
    n_s, n_t, heads, size = 2, 7, 2, 16
    q, k = _unit(rng, (n_s, n_t, heads, size)), _unit(rng, (n_s, n_t, heads, size))
    v = rng.uniform(-1, 1, (n_s, n_t, heads, size)).astype(np.float32)
    gate = rng.uniform(-2, 0, (n_s, n_t, heads, 1)).astype(np.float32)
    beta = rng.uniform(0, 1, (n_s, n_t, heads, 1)).astype(np.float32)
    state = rng.uniform(-1, 1, (n_s, heads, size, size)).astype(np.float32)
    want = ref.gated_delta_net(q, k, v, gate, beta, state)
    calls = [
        lambda st, p=part: [t[:, p] for t in (q, k, v, gate, beta)] + [st] for part in (slice(0, 3), slice(3, n_t))
    ]
    _check_carried(ocl, ops.gated_delta_net, calls, state, [F32] * 6, want, (n_s, heads, size))


def test_ssm_scan_state_carried_across_calls(ocl: OpenCLDevice) -> None:
    """The first call reads permuted state rows; the second reads the states the first wrote, in sequence order."""
    rng = np.random.default_rng(2)
    n_s, n_t, n_head, head_dim, d_state, n_group = 3, 5, 4, 8, 16, 2
    s = rng.uniform(-1, 1, (n_s, n_head, head_dim, d_state)).astype(np.float32)
    x = rng.uniform(-1, 1, (n_s, n_t, n_head, head_dim)).astype(np.float32)
    dt = rng.uniform(-3, 1, (1, n_s, n_t, n_head)).astype(np.float32)
    a = rng.uniform(-1, -0.5, (1, 1, n_head, 1)).astype(np.float32)
    b, c = (rng.uniform(-1, 1, (n_s, n_t, n_group, d_state)).astype(np.float32) for _ in range(2))
    ids = np.array([2, 0, 1], np.int32)
    want = ref.ssm_scan(s, x, dt, a, b, c, ids)

    def call(part: slice, rows: np.ndarray) -> Callable[[np.ndarray], list[np.ndarray]]:
        return lambda st: [st, x[:, part], dt[:, :, part], a, b[:, part], c[:, part], rows]

    calls = [call(slice(0, 2), ids), call(slice(2, n_t), np.arange(n_s, dtype=np.int32))]
    _check_carried(ocl, ops.ssm_scan, calls, s, [F32] * 6 + [I32], want, (n_s, n_head, head_dim))


def test_rwkv_wkv7_state_carried_across_calls(ocl: OpenCLDevice) -> None:
    rng = np.random.default_rng(3)
    n_s, per_seq, heads, size = 2, 6, 2, 32
    r, k, v = (rng.uniform(-1, 1, (1, n_s, per_seq, heads, size)).astype(np.float32) for _ in range(3))
    w = rng.uniform(0.5, 1.0, r.shape).astype(np.float32)
    a, b = _unit(rng, r.shape), _unit(rng, r.shape)
    state = rng.uniform(-1, 1, (1, 1, n_s, size * size * heads)).astype(np.float32)
    want = ref.rwkv_wkv7(*(t.reshape(1, n_s * per_seq, heads, size) for t in (r, w, k, v, a, b)), state)
    calls = [
        lambda st, p=part: [t[:, :, p].reshape(1, -1, heads, size) for t in (r, w, k, v, a, b)] + [st]
        for part in (slice(0, 4), slice(4, per_seq))
    ]
    _check_carried(ocl, ops.rwkv_wkv7, calls, state, [F32] * 7, want, (n_s, heads, size))


def test_ssm_scan_bad_state_row_is_reported(ocl: OpenCLDevice) -> None:
    rng = np.random.default_rng(4)
    s = rng.uniform(-1, 1, (2, 2, 4, 8)).astype(np.float32)
    x = rng.uniform(-1, 1, (2, 3, 2, 4)).astype(np.float32)
    dt = rng.uniform(-1, 1, (1, 2, 3, 2)).astype(np.float32)
    a = np.full((1, 1, 2, 1), -0.5, np.float32)
    b = rng.uniform(-1, 1, (2, 3, 1, 8)).astype(np.float32)
    types = [F32] * 6 + [I32]
    with pytest.raises(g.ComputeError, match="out of range"):
        _compute(ocl, ops.ssm_scan, [s, x, dt, a, b, b, np.array([1, 2], np.int32)], types)
    good = _compute(ocl, ops.ssm_scan, [s, x, dt, a, b, b, np.array([1, 0], np.int32)], types)
    np.testing.assert_allclose(good, ref.ssm_scan(s, x, dt, a, b, b, np.array([1, 0])), rtol=1e-4, atol=1e-5)
